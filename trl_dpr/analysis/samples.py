"""Responses sampled with their exact token ids, scored token by token, and binned by length.

Decoding a sample and tokenizing the text again can give other tokens ("4", "6" → "46"), so the analyses score the
ids that were sampled: `sample_completions` keeps them, `score_samples` returns the dense reward r̂_t and log π_SFT
(and log π_ref) of every sampled token, `policy_logprobs` adds log π_θ, and `response_stats` sums them per response:

    KL(π_θ ‖ π_SFT) of a response ≈ Σ_t log π_θ(a_t|s_t) − log π_SFT(a_t|s_t)    (unbiased when sampled from π_θ at T=1)
    dense reward of a response     = Σ_t r̂_t

`length_bin_edges` and `bin_by_length` turn per-response values into "mean value vs response length" (paper Fig. 4a).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.utils import pad

from ..reward_model import CheckpointRewardModel, TokenRewardOutput, completion_logprobs

__all__ = [
    "Sample",
    "LengthBin",
    "sample_completions",
    "padded_batch",
    "score_samples",
    "policy_logprobs",
    "response_stats",
    "length_bin_edges",
    "bin_by_length",
]


@dataclass
class Sample:
    """One sampled response: the prompt (as given), its rendered token ids, the sampled completion ids (up to and
    including the first EOS; all of them when the length limit cut the response) and the decoded text.

    `prompt_index` is the position of the prompt in the list given to `sample_completions`.

    Example:
        >>> Sample(prompt_index=0, prompt="2+3=", prompt_ids=[5, 6], completion_ids=[7, 1], text="5").length
        2
    """

    prompt_index: int
    prompt: Any
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str

    @property
    def length(self) -> int:
        """Number of completion tokens (EOS included)."""
        return len(self.completion_ids)


def _eos_ids(model, tokenizer) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set([eos] if isinstance(eos, int) else list(eos or []))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _render(tokenizer, prompts: list) -> list[list[int]]:
    """Prompt token ids as the trainer and `generate_answers` build them (chat template for conversations)."""
    if isinstance(prompts[0], str):
        return tokenizer(prompts)["input_ids"]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    prompts: list,
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 32,
    seed: int = 0,
) -> list[Sample]:
    """Sample one completion per prompt (repeat prompts for several), keeping the sampled token ids.

    `temperature=0` decodes greedily; otherwise plain sampling (no top-k / top-p), as `generate_answers` does. The
    caller's random streams are left as they were.

    Example:
        >>> from trl_dpr.tiny_lm import build_tokenizer, build_tiny_causal_lm
        >>> tok = build_tokenizer(["hello there"])
        >>> samples = sample_completions(build_tiny_causal_lm(tok), tok, ["hello", "hello"], max_new_tokens=3)
        >>> len(samples), 1 <= samples[0].length <= 3
        (2, True)
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}.")
    if not prompts:
        return []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    sampling = {"do_sample": False}
    if temperature > 0:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    samples: list[Sample] = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        try:
            for start in range(0, len(prompts), batch_size):
                batch = prompts[start : start + batch_size]
                rows = _render(tokenizer, batch)
                input_ids = pad([torch.tensor(r) for r in rows], pad_id, "left").to(device)
                attention_mask = pad([torch.ones(len(r), dtype=torch.long) for r in rows], 0, "left").to(device)
                output = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **sampling,
                )
                for offset, generated in enumerate(output[:, input_ids.size(1) :].tolist()):
                    end = next((i + 1 for i, t in enumerate(generated) if t in eos_ids), len(generated))
                    completion = generated[:end]
                    samples.append(
                        Sample(
                            prompt_index=start + offset,
                            prompt=batch[offset],
                            prompt_ids=list(rows[offset]),
                            completion_ids=completion,
                            text=tokenizer.decode(completion, skip_special_tokens=True),
                        )
                    )
        finally:
            model.train(was_training)
    return samples


def padded_batch(samples: list[Sample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(prompt_ids, prompt_mask, completion_ids, completion_mask)`: prompts left-padded, completions right-padded.

    Example:
        >>> s = [Sample(0, "p", [5, 6], [7], "x"), Sample(1, "q", [5], [8, 9], "y")]
        >>> [t.tolist() for t in padded_batch(s, pad_id=0)]
        [[[5, 6], [0, 5]], [[1, 1], [0, 1]], [[7, 0], [8, 9]], [[1, 0], [1, 1]]]
    """
    prompt_ids = pad([torch.tensor(s.prompt_ids) for s in samples], pad_id, "left")
    prompt_mask = pad([torch.ones(len(s.prompt_ids), dtype=torch.long) for s in samples], 0, "left")
    completion_ids = pad([torch.tensor(s.completion_ids) for s in samples], pad_id, "right")
    completion_mask = pad([torch.ones(len(s.completion_ids), dtype=torch.long) for s in samples], 0, "right")
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def score_samples(
    reward_model: CheckpointRewardModel, samples: list[Sample], batch_size: int = 32
) -> tuple[TokenRewardOutput, torch.Tensor]:
    """The reward model's output on the sampled ids (`[N, T]` on CPU) and the completion mask.

    Example:
        >>> from trl_dpr.tiny_lm import build_tokenizer, build_tiny_causal_lm
        >>> tok = build_tokenizer(["hello there"])
        >>> rm = CheckpointRewardModel(build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1), processing_class=tok)
        >>> scored, mask = score_samples(rm, [Sample(0, "hi", [5, 6], [7, 8], "..")])
        >>> scored.rewards.shape, mask.tolist()
        (torch.Size([1, 2]), [[1, 1]])
    """
    prompt_ids, prompt_mask, completion_ids, completion_mask = padded_batch(samples, _pad_id(reward_model.processing_class))
    out = reward_model(prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=batch_size)
    cpu = TokenRewardOutput(
        rewards=out.rewards.cpu(),
        sft_logps=out.sft_logps.cpu(),
        ref_logps=None if out.ref_logps is None else out.ref_logps.cpu(),
    )
    return cpu, completion_mask


@torch.no_grad()
def policy_logprobs(policy, tokenizer, samples: list[Sample], batch_size: int = 32) -> torch.Tensor:
    """log π_θ(a_t|s_t) of every sampled token, `[N, T]` on CPU, 0 at padding.

    Example:
        >>> from trl_dpr.tiny_lm import build_tokenizer, build_tiny_causal_lm
        >>> tok = build_tokenizer(["hello there"])
        >>> logps = policy_logprobs(build_tiny_causal_lm(tok), tok, [Sample(0, "hi", [5, 6], [7, 8], ".."), Sample(1, "yo", [5], [7], ".")])
        >>> logps.shape, float(logps[1, 1])
        (torch.Size([2, 2]), 0.0)
    """
    was_training = policy.training
    policy.eval()
    device = next(policy.parameters()).device
    rows = []
    try:
        for start in range(0, len(samples), batch_size):
            chunk = padded_batch(samples[start : start + batch_size], _pad_id(tokenizer))
            logps, _, _ = completion_logprobs(policy, *(t.to(device) for t in chunk))
            rows.append(logps.cpu())
    finally:
        policy.train(was_training)
    width = max(r.size(1) for r in rows)
    return torch.cat([torch.nn.functional.pad(r, (0, width - r.size(1))) for r in rows])


def response_stats(policy, reward_model: CheckpointRewardModel, samples: list[Sample], batch_size: int = 32) -> list[dict]:
    """Per response: `length` (tokens), `kl` = Σ_t log π_θ − log π_SFT, `reward` = Σ_t r̂_t.

    Example:
        >>> from trl_dpr.tiny_lm import build_tokenizer, build_tiny_causal_lm
        >>> tok = build_tokenizer(["hello there"])
        >>> sft = build_tiny_causal_lm(tok, seed=0)
        >>> rm = CheckpointRewardModel(sft, build_tiny_causal_lm(tok, seed=1), processing_class=tok)
        >>> stats = response_stats(build_tiny_causal_lm(tok, seed=0), rm, [Sample(0, "hi", [5, 6], [7, 8], "..")])
        >>> stats[0]["length"], round(stats[0]["kl"], 6)   # the policy is π_SFT itself: no KL
        (2, 0.0)
    """
    scored, mask = score_samples(reward_model, samples, batch_size)
    logps = policy_logprobs(policy, reward_model.processing_class, samples, batch_size)
    mask = mask.bool()
    kl = ((logps - scored.sft_logps) * mask).sum(dim=1)
    reward = (scored.rewards * mask).sum(dim=1)
    return [
        {"length": s.length, "kl": float(kl[i]), "reward": float(reward[i])} for i, s in enumerate(samples)
    ]


@dataclass(frozen=True)
class LengthBin:
    """Responses whose length lies in `[low, high)` (the last bin includes `high`): how many, mean value, standard
    error of the mean (0 for a single response).

    Example:
        >>> LengthBin(low=10.0, high=20.0, count=2, mean=2.0, sem=1.0).count
        2
    """

    low: float
    high: float
    count: int
    mean: float
    sem: float


def length_bin_edges(lengths: list[int], num_bins: int) -> list[float]:
    """`num_bins` equal-width bins covering `[min(lengths), max(lengths)]` (one bin when all lengths are equal).

    Example:
        >>> length_bin_edges([10, 20, 30], num_bins=2)
        [10.0, 20.0, 30.0]
        >>> length_bin_edges([7, 7], num_bins=4)
        [7.0, 8.0]
    """
    if not lengths:
        raise ValueError("No responses: cannot bin an empty list of lengths.")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}.")
    low, high = float(min(lengths)), float(max(lengths))
    if high == low:
        return [low, low + 1.0]
    width = (high - low) / num_bins
    return [low + i * width for i in range(num_bins)] + [high]


def bin_by_length(lengths: list[int], values: list[float], edges: list[float]) -> list[LengthBin]:
    """Mean and standard error of `values` per length bin (`edges` from `length_bin_edges`); empty bins are kept
    with count 0 and NaN mean. Lengths outside `[edges[0], edges[-1]]` are an error.

    Example:
        >>> [(b.low, b.count, b.mean) for b in bin_by_length([10, 12, 25, 30], [1.0, 3.0, 5.0, 7.0], [10, 20, 30])]
        [(10, 2, 2.0), (20, 2, 6.0)]
    """
    if len(lengths) != len(values):
        raise ValueError(f"Got {len(lengths)} lengths and {len(values)} values; pass one value per response.")
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be at least two increasing numbers, got {edges}.")
    groups: list[list[float]] = [[] for _ in range(len(edges) - 1)]
    for length, value in zip(lengths, values):
        if not edges[0] <= length <= edges[-1]:
            raise ValueError(f"Length {length} is outside the bins [{edges[0]}, {edges[-1]}].")
        index = next((i for i in range(len(groups)) if length < edges[i + 1]), len(groups) - 1)
        groups[index].append(value)
    bins = []
    for i, group in enumerate(groups):
        n = len(group)
        mean = sum(group) / n if n else math.nan
        sem = math.sqrt(sum((v - mean) ** 2 for v in group) / (n - 1) / n) if n > 1 else (0.0 if n else math.nan)
        bins.append(LengthBin(low=edges[i], high=edges[i + 1], count=n, mean=mean, sem=sem))
    return bins
