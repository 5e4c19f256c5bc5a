"""Small causal LMs and tokenizers built offline, from a config and a corpus: the embedded default and the tests.

Every digit is its own token (arithmetic is learnable by a tiny model); assistant turns end with the EOS `<|end|>`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

SPECIAL_TOKENS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]

# `{% generation %}` marks the assistant tokens, so SFTTrainer's `assistant_only_loss` works with this template too.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{%- if message['role'] == 'assistant' -%}"
    "{% generation %}{{ message['content'] + '<|end|>' }}{% endgeneration %}"
    "{%- else -%}"
    "{{ message['content'] + '<|end|>' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `corpus` (offline) and wrap it for transformers/TRL.

    Special tokens `<|pad|>`, `<|end|>` (EOS) and the role markers; left padding, as GRPO wants for prompts.
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(corpus), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<|pad|>",
        eos_token="<|end|>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    architecture: str = "llama",
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 512,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised causal LM of `architecture` ("llama", "qwen2" or "gpt2"), sized for CPU tests and demos.

    GPT-2 uses learned absolute position embeddings, so it catches wrong position ids under left padding that
    rotary models (Llama, Qwen2) would hide.
    """
    special = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
    }
    if architecture in ("llama", "qwen2"):
        config_class, model_class = (
            (LlamaConfig, LlamaForCausalLM) if architecture == "llama" else (Qwen2Config, Qwen2ForCausalLM)
        )
        config = config_class(
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 2,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=max(1, num_heads // 2),
            max_position_embeddings=max_positions,
            tie_word_embeddings=False,
            **special,
        )
    elif architecture == "gpt2":
        model_class = GPT2LMHeadModel
        config = GPT2Config(
            n_embd=hidden_size, n_layer=num_layers, n_head=num_heads, n_positions=max_positions, **special
        )
    else:
        raise ValueError(f"architecture must be 'llama', 'qwen2' or 'gpt2', got {architecture!r}.")
    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model
