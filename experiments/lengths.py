"""KL to π_SFT and dense reward per response, binned by response length (paper Fig. 4a).

Responses are sampled with their exact token ids (`trl_dpr.evaluation.sampling`) and scored on those ids; `response_stats` sums
the per-token values per response:

    KL(π_θ ‖ π_SFT) of a response ≈ Σ_t log π_θ(a_t|s_t) − log π_SFT(a_t|s_t)    (unbiased when sampled from π_θ at T=1)
    dense reward of a response     = Σ_t r̂_t

`length_bin_edges` and `bin_by_length` turn per-response values into "mean value vs response length" (paper Fig. 4a).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trl_dpr.evaluation.sampling import Sample, policy_logprobs, score_samples
from trl_dpr.reward_model import CheckpointRewardModel

__all__ = ["LengthBin", "bin_by_length", "length_bin_edges", "response_stats"]


def response_stats(
    policy, reward_model: CheckpointRewardModel, samples: list[Sample], batch_size: int = 32
) -> list[dict]:
    """Per response: `length` (tokens), `kl` = Σ_t log π_θ − log π_SFT, `reward` = Σ_t r̂_t.

    Example:
        >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
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
    return [{"length": s.length, "kl": float(kl[i]), "reward": float(reward[i])} for i, s in enumerate(samples)]


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
