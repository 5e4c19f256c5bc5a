"""The tilt DPR converges to, read off samples of π_SFT: importance weights per prompt, and the quality, KL and
effective sample size of π_λ ∝ π_SFT·exp(R/λ) (the preview's math, `trl_dpr.analysis.preview`).

    samples ─► R(y_i) ─► w_i ∝ exp(R(y_i)/λ) within the prompt ─► Σ_i w_i q(y_i)   (quality of π_λ)
                                                               ─► Σ_i w_i log(N w_i)   (KL(π_λ ‖ π_SFT))
                                                               ─► 1 / Σ_i w_i²      (effective sample size)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def tilt_weights(rewards: torch.Tensor, lam: float) -> torch.Tensor:
    r"""Self-normalised importance weights of π_λ for samples of π_SFT, per prompt (row).

        w_{p,i} = exp(R_{p,i} / λ) / Σ_j exp(R_{p,j} / λ)          (λ > 0, computed as a softmax: no overflow)
        λ = ∞:  w_{p,i} = 1 / N                                   (π_∞ = π_SFT)
        λ = 0:  w_{p,i} = 1[R_{p,i} = max_j R_{p,j}] / #argmax     (best-of-N under R, ties split evenly)

    `rewards` is `[P, N]`; rows of the float64 result sum to 1. Consistent only for samples of π_SFT itself
    (temperature 1, no top-k / top-p).
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
    """Per-prompt `quality`, `kl` and `ess` of `tilted_quality`, each `[L, P]` (rows follow `lambdas`)."""

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

    `rewards` and `quality` are `[P, N]`; λ = ∞ gives π_SFT (KL 0, ESS N), λ = 0 best-of-N (KL log N − log #argmax).
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
