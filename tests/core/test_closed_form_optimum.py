"""DensePathTrainer reaches the closed-form optimum of its own objective, on a toy whose completions can all be listed.

With γ = 1 and λ = `kl_coef`, E_π[Σ_t r̂_t] − λ·KL(π ‖ π_SFT) is maximised by π_λ(y) ∝ π_SFT(y)·exp(R(y)/λ), R(y) =
log π_SFT(y) − log π_ref(y). One prompt, a vocabulary of 4 tokens and at most 2 completion tokens leave 13 possible
completions, so π_SFT, π_ref, π_λ and the trained policy are exact distributions over them. Reaching π_λ pins the
whole trainer to the theory: the reward's sign and shift, the masks, the KL term, the returns, the whitening.
"""

import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer

EOS, PROMPT = 0, 1
# Every completion of at most 2 tokens: EOS at once, a token then EOS, or two tokens cut at max_completion_length.
OUTCOMES = [(EOS,)] + [(x, EOS) for x in (1, 2, 3)] + [(x, y) for x in (1, 2, 3) for y in (1, 2, 3)]


def tiny_tokenizer():
    backend = Tokenizer(models.WordLevel({"<eos>": EOS, "p": PROMPT, "a": 2, "b": 3}, unk_token="<eos>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<eos>", padding_side="left")


def tiny_model(seed):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=4,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=8,
            pad_token_id=EOS,
            eos_token_id=EOS,
            bos_token_id=None,
            tie_word_embeddings=False,
        )
    )
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = EOS, EOS
    model.generation_config.bos_token_id = None
    return model


def sequence_logprobs(model) -> torch.Tensor:
    """log π(y) of each of the 13 completions after the prompt, by teacher forcing (a differentiable float32 tensor)."""
    ids = torch.tensor([[PROMPT, *y, EOS][:3] for y in OUTCOMES])
    log_probs = model(ids).logits.log_softmax(-1)
    first = log_probs[:, 0].gather(1, ids[:, 1:2]).squeeze(1)
    second = log_probs[:, 1].gather(1, ids[:, 2:3]).squeeze(1)
    has_second = torch.tensor([len(y) == 2 for y in OUTCOMES])
    return first + torch.where(has_second, second, torch.zeros_like(second))


def fitted(seed, target, steps=300):
    """A tiny LM whose completion distribution is close to `target` (cross-entropy over the 13 completions)."""
    model = tiny_model(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(steps):
        loss = -(target * sequence_logprobs(model)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def distribution(model) -> torch.Tensor:
    with torch.no_grad():
        return sequence_logprobs(model).double().exp()


def total_variation(p, q) -> float:
    return 0.5 * (p - q).abs().sum().item()


@pytest.mark.slow
def test_the_trainer_converges_to_the_tilted_policy_of_its_own_kl_coef(tmp_path):
    """λ = 2, and the optima of λ = 1 and λ = 4 as controls: a trainer that used another strength (a KL term dropped,
    doubled or halved) lands near one of those instead."""
    lam = 2.0
    dirichlet = torch.distributions.Dirichlet(torch.full((len(OUTCOMES),), 0.7))
    torch.manual_seed(0)
    sft, ref = fitted(0, dirichlet.sample()), fitted(1, dirichlet.sample())
    p_sft, p_ref = distribution(sft), distribution(ref)
    assert p_sft.sum().item() == pytest.approx(1.0, abs=1e-6)  # the 13 completions are the whole space

    # The closed form: π_λ ∝ π_SFT · exp(R/λ), R = log π_SFT − log π_ref; and argmax R, where λ → 0 would go.
    reward = p_sft.log() - p_ref.log()
    tilted, halved, doubled = (
        torch.softmax(p_sft.log() + reward / strength, dim=0) for strength in (lam, lam / 2, lam * 2)
    )
    argmax = torch.zeros_like(tilted)
    argmax[reward.argmax()] = 1.0

    policy = tiny_model(0)
    policy.load_state_dict(sft.state_dict())
    args = DensePathConfig(
        output_dir=str(tmp_path / "dpr"),
        per_device_train_batch_size=64,
        max_steps=200,
        max_completion_length=2,
        learning_rate=2e-2,
        kl_coef=lam,
        warmup_steps=0,
        logging_steps=50,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = DensePathTrainer(
        model=policy,
        reward_model=CheckpointRewardModel(sft, ref, processing_class=tiny_tokenizer()),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["p"] * 64}),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    trained = distribution(trainer.model)

    to_tilted = total_variation(trained, tilted)
    sft_to_tilted = total_variation(p_sft, tilted)
    argmax_to_tilted = total_variation(argmax, tilted)
    other_strengths = min(total_variation(halved, tilted), total_variation(doubled, tilted))
    message = (
        f"λ={lam}: TV(trained, π_λ)={to_tilted:.4f}, TV(π_SFT, π_λ)={sft_to_tilted:.4f}, "
        f"TV(argmax R, π_λ)={argmax_to_tilted:.4f}, TV(π_λ/2 or π_2λ, π_λ) ≥ {other_strengths:.4f}"
    )
    print(message)
    assert sft_to_tilted > 0.2 and argmax_to_tilted > 0.2, message  # the toy separates the three
    assert to_tilted < 0.25 * sft_to_tilted, message
    assert to_tilted < 0.25 * argmax_to_tilted, message
    assert to_tilted < 0.5 * other_strengths, message  # and λ's own optimum from those of λ/2 and 2λ
