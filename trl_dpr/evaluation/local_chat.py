"""`LocalChatModel`: a Hugging Face causal LM in this process as a judge backend (greedy, batched, chat template).

For judging without an API (an open judge such as a Llama or Qwen instruct model), and for testing the judge
plumbing offline. A judge that does not follow the verdict format produces unparseable verdicts, which are counted.
"""

from __future__ import annotations

from .chat_model import Message
from .generation import generate_answers

__all__ = ["LocalChatModel"]


class LocalChatModel:
    """Greedy replies from a local causal LM through its chat template.

    Args:
        model: a transformers causal LM.
        tokenizer: its tokenizer; it must have a chat template (instruction-tuned judges do).
        max_new_tokens: the longest reply (explanation + verdict).
        batch_size: conversations generated at once.
        name: how the judge is named in reports (default: the model's `name_or_path`).

    Example:
        >>> from trl_dpr.tiny_lm import build_tiny_causal_lm, build_tokenizer
        >>> tok = build_tokenizer(["judge this"])
        >>> judge = LocalChatModel(build_tiny_causal_lm(tok), tok, max_new_tokens=4, name="tiny")
        >>> len(judge.complete_batch([[{"role": "user", "content": "Which is better?"}]]))
        1
    """

    def __init__(self, model, tokenizer, max_new_tokens: int = 512, batch_size: int = 8, name: str | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"The local judge's tokenizer ({getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)}) has no "
                "chat template, so the judge prompt cannot be rendered. Use an instruction-tuned judge model, or set "
                "tokenizer.chat_template."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.name = f"local:{name or getattr(model.config, 'name_or_path', '') or type(model).__name__}"

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "auto", **kwargs) -> LocalChatModel:
        """Load a judge model and its tokenizer from a folder or Hub id (on GPU when there is one).

        Example:
            >>> judge = LocalChatModel.from_pretrained("Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16")  # doctest: +SKIP
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        model.to("cuda" if torch.cuda.is_available() else "cpu")
        return cls(model, tokenizer, name=path, **kwargs)

    def complete_batch(self, conversations: list[list[Message]]) -> list[str]:
        """Greedy replies, `batch_size` conversations at a time, in order."""
        if not conversations:
            return []
        return generate_answers(
            self.model,
            self.tokenizer,
            conversations,
            temperature=0.0,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            show_progress=False,
        )
