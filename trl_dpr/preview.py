"""The DPR preview: what Dense-Path REINFORCE can reach on your data, estimated from π_SFT's own samples before any RL.

With γ = 1 and λ = `kl_coef` > 0, DPR maximises E_π[R(y)] − λ·KL(π ‖ π_SFT) with R(y) = Σ_t r̂_t, whose optimum is the
tilted policy

    π_λ(y | x) = π_SFT(y | x) · exp(R(y) / λ) / Z_λ(x)

A DPR run moves along this family as λ or the training budget changes (a short run stays near π_SFT = π_∞, a long one
with a small λ approaches argmax R = π_0). So whether DPR can help is decided by the family, and its quality can be
read off N samples y_1..N ~ π_SFT(·|x) per prompt by self-normalised importance weighting:

    samples ─► R(y_i) ─► w_i ∝ exp(R(y_i)/λ) within the prompt ─► Σ_i w_i q(y_i)   (quality of π_λ)
                                                               ─► Σ_i w_i log(N w_i)   (KL(π_λ ‖ π_SFT))
                                                               ─► 1 / Σ_i w_i²      (effective sample size)

`tilted_quality` is that arithmetic, pure and on tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["TiltedQuality", "tilted_quality", "tilt_weights", "bootstrap_mean_ci"]


def tilt_weights(rewards: torch.Tensor, lam: float) -> torch.Tensor:
    r"""Self-normalised importance weights of π_λ for samples of π_SFT, per prompt (row).

        w_{p,i} = exp(R_{p,i} / λ) / Σ_j exp(R_{p,j} / λ)          (λ > 0, computed as a softmax: no overflow)
        λ = ∞:  w_{p,i} = 1 / N                                   (π_∞ = π_SFT)
        λ = 0:  w_{p,i} = 1[R_{p,i} = max_j R_{p,j}] / #argmax     (best-of-N under R, ties split evenly)

    The weights are exact for π_λ restricted to the N samples, and converge to π_λ's as N grows, provided the samples
    were drawn from π_SFT itself (temperature 1, no top-k / top-p).

    Args:
        rewards: `[P, N]` sequence rewards R of N samples for each of P prompts.
        lam: λ ≥ 0, or `math.inf`.

    Returns:
        `[P, N]` float64 weights; each row sums to 1.

    Example:
        >>> import math, torch
        >>> tilt_weights(torch.tensor([[0.0, math.log(3.0)]]), 1.0)
        tensor([[0.2500, 0.7500]], dtype=torch.float64)
        >>> tilt_weights(torch.tensor([[1.0, 2.0, 2.0]]), 0.0)
        tensor([[0.0000, 0.5000, 0.5000]], dtype=torch.float64)
    """
    rewards = rewards.double()
    if lam < 0 or math.isnan(lam):
        raise ValueError(f"λ must be >= 0 (0 = best-of-N, inf = π_SFT), got {lam}.")
    if math.isinf(lam):
        return torch.full_like(rewards, 1.0 / rewards.size(1))
    if lam == 0:
        best = rewards == rewards.max(dim=1, keepdim=True).values
        return best.double() / best.sum(dim=1, keepdim=True)
    return torch.softmax(rewards / lam, dim=1)


@dataclass
class TiltedQuality:
    """Per-prompt estimates for each λ of a grid (rows follow `lambdas`, columns are prompts).

    Attributes:
        lambdas: the λ grid.
        quality: `[L, P]` Σ_i w_i q_i, the expected quality of π_λ at each prompt.
        kl: `[L, P]` Σ_i w_i log(N w_i), the KL(π_λ ‖ π_SFT) estimate at each prompt (0 at λ = ∞).
        ess: `[L, P]` 1 / Σ_i w_i², the effective number of samples behind each estimate (N at λ = ∞, 1 at λ = 0
            with a unique best sample).
    """

    lambdas: list[float]
    quality: torch.Tensor
    kl: torch.Tensor
    ess: torch.Tensor

    @property
    def mean_quality(self) -> torch.Tensor:
        """`[L]` quality of π_λ averaged over prompts."""
        return self.quality.mean(dim=1)

    @property
    def mean_kl(self) -> torch.Tensor:
        """`[L]` KL(π_λ ‖ π_SFT) averaged over prompts (nats per response)."""
        return self.kl.mean(dim=1)


def tilted_quality(rewards: torch.Tensor, quality: torch.Tensor, lambdas: Sequence[float]) -> TiltedQuality:
    r"""Quality, KL(π_λ ‖ π_SFT) and effective sample size of the tilted policies π_λ ∝ π_SFT·exp(R/λ).

    For each prompt p with samples y_{p,1..N} ~ π_SFT(·|x_p), sequence rewards R_{p,i} and qualities q_{p,i}, and the
    weights w = `tilt_weights(R, λ)`:

        quality_p(λ) = Σ_i w_{p,i} q_{p,i}
        KL_p(λ)      = Σ_i w_{p,i} log(N w_{p,i})        (π_λ / π_SFT ≈ N w on the samples; 0 terms where w = 0)
        ESS_p(λ)     = 1 / Σ_i w_{p,i}²

    λ = ∞ gives π_SFT (mean quality, KL 0, ESS N); λ = 0 gives best-of-N under R (KL log N − log #argmax).

    Args:
        rewards: `[P, N]` R(y) of each sample (e.g. Σ_t r̂_t).
        quality: `[P, N]` q(y) of each sample (e.g. 1.0 for a correct answer, 0.0 otherwise; a win rate in [0, 1]).
        lambdas: the λ grid (`math.inf` and 0 allowed).

    Example:
        >>> import math, torch
        >>> out = tilted_quality(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 1.0]]), [math.inf, 1.0, 0.0])
        >>> [round(v, 4) for v in out.mean_quality.tolist()]
        [0.5, 0.75, 1.0]
        >>> [round(v, 4) for v in out.ess.squeeze(1).tolist()]  # 1 / (0.25² + 0.75²) = 1.6
        [2.0, 1.6, 1.0]
    """
    if rewards.dim() != 2 or rewards.shape != quality.shape:
        raise ValueError(
            f"rewards and quality must both be [prompts, samples_per_prompt]; got {tuple(rewards.shape)} and "
            f"{tuple(quality.shape)}."
        )
    if rewards.size(1) < 1:
        raise ValueError("Need at least one sample per prompt.")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite: a NaN or inf reward has no tilted weight.")
    num_samples = rewards.size(1)
    quality = quality.double()
    qualities, kls, esss = [], [], []
    for lam in lambdas:
        weights = tilt_weights(rewards, float(lam))
        qualities.append((weights * quality).sum(dim=1))
        # w log(N w) with the 0·log 0 = 0 convention (best-of-N puts zero weight on every non-best sample).
        log_ratio = torch.where(weights > 0, torch.log(num_samples * weights), torch.zeros_like(weights))
        kls.append((weights * log_ratio).sum(dim=1).clamp(min=0.0))
        esss.append(1.0 / (weights**2).sum(dim=1))
    return TiltedQuality(
        lambdas=[float(lam) for lam in lambdas],
        quality=torch.stack(qualities),
        kl=torch.stack(kls),
        ess=torch.stack(esss),
    )


def bootstrap_mean_ci(
    per_prompt: torch.Tensor, confidence: float = 0.95, num_resamples: int = 2000, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Percentile bootstrap interval of the mean over prompts, for each row of `per_prompt` (`[L, P]`).

    The same resampled prompt indices are used for every row, so intervals of differences between rows (a λ against
    λ = ∞) can be read off paired resamples too.

    Returns:
        `(low, high)`, each `[L]` float64.

    Example:
        >>> import torch
        >>> low, high = bootstrap_mean_ci(torch.tensor([[0.0, 1.0] * 50]))
        >>> bool(low[0] < 0.5 < high[0])
        True
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    per_prompt = per_prompt.double()
    if per_prompt.dim() == 1:
        per_prompt = per_prompt.unsqueeze(0)
    num_prompts = per_prompt.size(1)
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randint(num_prompts, (num_resamples, num_prompts), generator=generator)
    means = per_prompt[:, indices].mean(dim=2)  # [L, num_resamples]
    tail = (1.0 - confidence) / 2.0
    low = torch.quantile(means, tail, dim=1)
    high = torch.quantile(means, 1.0 - tail, dim=1)
    return low, high
