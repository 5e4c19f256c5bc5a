"""The DPR preview: what Dense-Path REINFORCE can reach on your data, estimated from π_SFT's own samples before any RL.

With γ = 1 and λ = `kl_coef`, DPR maximises E_π[R(y)] − λ·KL(π ‖ π_SFT), R(y) = Σ_t r̂_t, whose optimum is

    π_λ(y | x) = π_SFT(y | x) · exp(R(y) / λ) / Z_λ(x)

and a run moves along this family; its quality is read off N samples of π_SFT per prompt (docs/preview.md):

    samples ─► R(y_i) ─► w_i ∝ exp(R(y_i)/λ) within the prompt ─► Σ_i w_i q(y_i)   (quality of π_λ)
                                                               ─► Σ_i w_i log(N w_i)   (KL(π_λ ‖ π_SFT))
                                                               ─► 1 / Σ_i w_i²      (effective sample size)
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..evaluation.results import bootstrap_mean_ci
from ..field_checks import LEGACY_REWARD_KEYS

# ---- the weighting ---------------------------------------------------------------------------------------------------


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


# ---- from per-sample numbers to the preview -------------------------------------------------------------------------


@dataclass(frozen=True)
class PreviewPoint:
    """One λ of one reward variant: the estimated quality of π_λ, its gain over π_SFT and how far π_λ is from π_SFT.

    `kl` is in nats per response; intervals are bootstrap over prompts, `delta`'s paired. `trusted` is `ess` ≥
    `min_ess`: below, the point reads as a best-of-few of π_SFT's samples more than as π_λ.
    """

    variant: str
    lam: float
    quality: float
    ci_low: float
    ci_high: float
    delta: float
    delta_ci_low: float
    delta_ci_high: float
    kl: float
    ess: float
    trusted: bool


def preview_points(
    rewards: dict[str, torch.Tensor],
    quality: torch.Tensor,
    lambdas: Sequence[float],
    *,
    min_ess: float = 4.0,
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
) -> list[PreviewPoint]:
    """The preview of every reward variant at every λ, from per-sample rewards and qualities.

    `rewards` is `{variant: [P, N]}`; ∞ and 0 join the λ grid. The same prompt resamples serve every variant and λ,
    so `delta` has a paired interval.
    """
    grid = [math.inf] + sorted({float(lam) for lam in lambdas if not math.isinf(lam) and lam > 0}, reverse=True) + [0.0]
    points = []
    for variant, variant_rewards in rewards.items():
        tilted = tilted_quality(variant_rewards, quality, grid)
        low, high = bootstrap_mean_ci(tilted.quality, confidence, num_resamples, seed)
        gains = tilted.quality - tilted.quality[0]  # paired with π_SFT (λ = ∞) prompt by prompt
        gain_low, gain_high = bootstrap_mean_ci(gains, confidence, num_resamples, seed)
        for i, lam in enumerate(grid):
            ess = float(tilted.ess[i].mean())
            points.append(
                PreviewPoint(
                    variant=variant,
                    lam=lam,
                    quality=float(tilted.quality[i].mean()),
                    ci_low=float(low[i]),
                    ci_high=float(high[i]),
                    delta=float(gains[i].mean()),
                    delta_ci_low=float(gain_low[i]),
                    delta_ci_high=float(gain_high[i]),
                    kl=float(tilted.kl[i].mean()),
                    ess=ess,
                    trusted=lam == 0.0 or ess >= min_ess,
                )
            )
    return points


@dataclass(frozen=True)
class PolicyPoint:
    """A trained policy placed on the preview plot: its own quality and its KL to π_SFT, from its own samples.

    `kl` = mean of Σ_t log π_θ(a_t|s_t) − log π_SFT(a_t|s_t) over its samples (unbiased at temperature 1).
    """

    name: str
    path: str
    quality: float
    ci_low: float
    ci_high: float
    delta: float
    delta_ci_low: float
    delta_ci_high: float
    kl: float
    kl_ci_low: float
    kl_ci_high: float


@dataclass
class PreviewReport:
    """What `run_preview` measured: one `PreviewPoint` per (variant, λ), π_SFT's level, the pass@N ceiling (no
    reweighting of these samples can do better), and the trained policies on the same axes.
    """

    quality_name: str
    num_prompts: int
    samples_per_prompt: int
    points: list[PreviewPoint]
    sft_quality: float
    pass_at_n: float
    policies: list[PolicyPoint] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def variant_points(self, variant: str) -> list[PreviewPoint]:
        return [p for p in self.points if p.variant == variant]

    def best(self, variant: str) -> PreviewPoint:
        """The trusted point of `variant` with the highest estimated quality (λ = ∞ when nothing beats π_SFT)."""
        return max((p for p in self.variant_points(variant) if p.trusted), key=lambda p: p.quality)

    def slope(self, variant: str) -> float:
        """Quality gained per nat of KL at the largest finite λ of the grid: the direction DPR starts out in."""
        finite = [p for p in self.variant_points(variant) if 0 < p.lam < math.inf]
        if not finite:
            return math.nan
        first = max(finite, key=lambda p: p.lam)
        return first.delta / first.kl if first.kl > 0 else math.nan

    def summary_rows(self) -> list[dict]:
        """One row per variant: slope near λ = ∞ and the best trusted point with its gain and interval."""
        rows = []
        for variant in dict.fromkeys(p.variant for p in self.points):
            best = self.best(variant)
            rows.append({
                "variant": variant, "slope_per_nat": self.slope(variant), "best_lambda": best.lam,
                "best_quality": best.quality, "best_delta": best.delta, "best_delta_ci_low": best.delta_ci_low,
                "best_delta_ci_high": best.delta_ci_high, "best_kl": best.kl,
                "helps": best.delta_ci_low > 0,
            })
        return rows

    def markdown(self) -> str:
        """The preview as markdown: one row per variant × λ, then the summary."""
        lines = [
            f"DPR preview: quality = {self.quality_name}, {self.num_prompts} prompts × {self.samples_per_prompt} samples "
            f"of π_SFT; π_SFT {self.sft_quality:.3f}, pass@{self.samples_per_prompt} ceiling {self.pass_at_n:.3f}",
            "",
            "| reward | λ | quality (95% CI) | gain vs π_SFT (95% CI) | KL(π_λ‖π_SFT) | ESS | trusted |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in self.points:
            lam = "∞ (π_SFT)" if math.isinf(p.lam) else "0 (best-of-N)" if p.lam == 0 else f"{p.lam:g}"
            lines.append(
                f"| {p.variant} | {lam} | {p.quality:.3f} ({p.ci_low:.3f}–{p.ci_high:.3f}) | {p.delta:+.3f} "
                f"({p.delta_ci_low:+.3f}–{p.delta_ci_high:+.3f}) | {p.kl:.3f} | {p.ess:.1f} | {'yes' if p.trusted else 'no'} |"
            )
        lines += ["", "| reward | gain per nat near λ = ∞ | best λ | best gain (95% CI) | helps |", "|---|---|---|---|---|"]
        for row in self.summary_rows():
            lines.append(
                f"| {row['variant']} | {row['slope_per_nat']:+.3f} | {row['best_lambda']:g} | {row['best_delta']:+.3f} "
                f"({row['best_delta_ci_low']:+.3f}–{row['best_delta_ci_high']:+.3f}) | {'yes' if row['helps'] else 'no'} |"
            )
        for policy in self.policies:
            lines.append(
                f"\nTrained policy {policy.name}: quality {policy.quality:.3f} ({policy.ci_low:.3f}–{policy.ci_high:.3f}), "
                f"gain vs π_SFT {policy.delta:+.3f} ({policy.delta_ci_low:+.3f}–{policy.delta_ci_high:+.3f}), "
                f"KL to π_SFT {policy.kl:.3f} ({policy.kl_ci_low:.3f}–{policy.kl_ci_high:.3f})"
            )
        return "\n".join(lines)

    @classmethod
    def read(cls, path: str | Path) -> PreviewReport:
        """The report a preview wrote (`preview.json`), e.g. to plot it again or compare two runs."""
        payload = json.loads(Path(path).read_text())
        return cls(
            payload["quality_name"], payload["num_prompts"], payload["samples_per_prompt"],
            [PreviewPoint(**p) for p in payload["points"]], payload["sft_quality"], payload["pass_at_n"],
            [PolicyPoint(**p) for p in payload["policies"]], payload.get("settings", {}),
        )

    def write(self, output_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        """`preview.csv` (every point), `preview.json` (everything), `preview.md` and, with `plot`, `preview.png`."""
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        paths = {"csv": output_dir / "preview.csv", "json": output_dir / "preview.json", "md": output_dir / "preview.md"}
        with open(paths["csv"], "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(asdict(self.points[0])))
            writer.writeheader()
            writer.writerows(asdict(p) for p in self.points)
        payload = {
            "quality_name": self.quality_name, "num_prompts": self.num_prompts,
            "samples_per_prompt": self.samples_per_prompt, "sft_quality": self.sft_quality,
            "pass_at_n": self.pass_at_n, "points": [asdict(p) for p in self.points],
            "summary": self.summary_rows(), "policies": [asdict(p) for p in self.policies], "settings": self.settings,
        }
        paths["json"].write_text(json.dumps(payload, indent=2, default=str) + "\n")
        paths["md"].write_text(self.markdown() + "\n")
        if plot:
            paths["png"] = plot_preview(self, output_dir / "preview.png")
        return paths


def plot_preview(report: PreviewReport, path: str | Path) -> Path:
    """Gain in quality of π_λ over π_SFT against KL(π_λ ‖ π_SFT), one curve per reward variant with its paired 95%
    band; π_SFT at 0, the pass@N ceiling dotted; points below `min_ess` hollow; trained policies as labelled crosses
    with their own intervals. Needs matplotlib (`pip install "trl_dpr[plots]"`).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError('The preview plot needs matplotlib: pip install "trl_dpr[plots]".', name="matplotlib") from None
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for index, variant in enumerate(dict.fromkeys(p.variant for p in report.points)):
        points = sorted(report.variant_points(variant), key=lambda p: p.kl)
        colour = f"C{index}"
        kls = [p.kl for p in points]
        axes.fill_between(kls, [p.delta_ci_low for p in points], [p.delta_ci_high for p in points], color=colour,
                          alpha=0.15)
        axes.plot(kls, [p.delta for p in points], color=colour, label=variant)
        for p in points:
            axes.scatter([p.kl], [p.delta], color=colour if p.trusted else "white", edgecolors=colour, zorder=3, s=28)
    axes.axhline(0.0, color="black", linestyle="--", linewidth=1, label=f"π_SFT ({report.sft_quality:.3f})")
    axes.axhline(report.pass_at_n - report.sft_quality, color="grey", linestyle=":", linewidth=1,
                 label=f"pass@{report.samples_per_prompt} ({report.pass_at_n:.3f})")
    for policy in report.policies:
        axes.errorbar([policy.kl], [policy.delta],
                      yerr=[[policy.delta - policy.delta_ci_low], [policy.delta_ci_high - policy.delta]],
                      xerr=[[policy.kl - policy.kl_ci_low], [policy.kl_ci_high - policy.kl]], fmt="x", color="black",
                      capsize=3)
    for index, policy in enumerate(sorted(report.policies, key=lambda p: p.kl)):  # staggered: nearby labels stay legible
        axes.annotate(policy.name, (policy.kl, policy.delta), textcoords="offset points", xytext=(6, 6 - 12 * (index % 3)),
                      fontsize=8)
    axes.set_xlabel("KL(π_λ ‖ π_SFT), nats per response")
    axes.set_ylabel(f"{report.quality_name} quality − π_SFT's (paired 95% CI)")
    axes.set_title(f"DPR preview: {report.num_prompts} prompts × {report.samples_per_prompt} samples of π_SFT "
                   "(hollow: low ESS)", fontsize=10)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


# ---- the whole preview: sample, score, judge ---------------------------------------------------------------------------

QUALITIES = ("exact", "demonstration", "pairwise")


@dataclass
class PreviewConfig:
    """Settings of a preview (`trl-dpr preview`): which SFT output, prompts, reward variants, λ
    grid and quality. The SFT output itself is `model_name_or_path` of TRL's `ModelConfig`, as in the other recipes.
    """

    output_dir: str = field(default="runs/preview", metadata={"help": "Where preview.csv, .json, .md and .png go."})
    dataset_name: str = field(
        default="trl_dpr/embedded-demo",
        metadata={"help": "Prompts (and, for exact / demonstration quality, their answers): a dataset `trl-dpr dpr` loads."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset's configuration name."})
    dataset_split: str = field(default="test", metadata={"help": "Split to take prompts from (held-out prompts)."})
    dataset_format: str = field(default="auto", metadata={"help": "auto | openorca | messages | prompt_completion."})
    num_prompts: int = field(default=200, metadata={"help": "Prompts to preview on."})
    samples_per_prompt: int = field(default=16, metadata={"help": "N samples of π_SFT per prompt (temperature 1)."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest sampled response (DPR's max_completion_length)."})
    batch_size: int = field(default=64, metadata={"help": "Prompts per generate call and per scoring forward."})
    lambdas: list[float] = field(
        default_factory=lambda: [math.inf, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.0],
        metadata={"help": "λ grid (DPR's kl_coef): inf = π_SFT, 0 = best-of-N under the reward."},
    )
    variants: dict = field(
        default_factory=lambda: {"DPR": {}, "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}},
        metadata={
            "help": "Reward variants to compare, name → settings: {} is DPR with the recorded π_ref; "
            "ref_model_name_or_path: another π_ref (another α); dense_reward: trl_dpr.rewards:SFTLogProb (wo/Baseline, "
            "R = Σ log π_SFT) or any module:Class; oracle: true (R = the quality itself, when it is per-sample)."
        },
    )
    quality: str = field(
        default="exact",
        metadata={
            "help": "exact: the final answer equals the `answer` column (embedded task). demonstration: the response "
            "equals the demonstration (`completion` column), i.e. is what the expert wrote. pairwise: win (1) / tie "
            "(0.5) / loss (0) against an independent π_SFT sample, judged in both orders by the judge of "
            "`evaluation_config`.",
            "choices": list(QUALITIES),
        },
    )
    evaluation_config: str | None = field(
        default=None, metadata={"help": "quality: pairwise: the `trl-dpr evaluate` recipe whose judge settings are used."}
    )
    policies: list[str] = field(
        default_factory=list,
        metadata={"help": "NAME=PATH of trained policies to place on the plot (own samples: quality and KL to π_SFT)."},
    )
    policy_samples_per_prompt: int = field(default=4, metadata={"help": "Samples per prompt of each trained policy."})
    min_ess: float = field(default=4.0, metadata={"help": "Points whose mean ESS per prompt is lower are flagged."})
    confidence: float = field(default=0.95, metadata={"help": "Level of the bootstrap intervals (over prompts)."})
    bootstrap_resamples: int = field(default=2000, metadata={"help": "Bootstrap resamples."})
    seed: int = field(default=0, metadata={"help": "Sampling seed and the held-out split's seed."})
    plot: bool = field(default=True, metadata={"help": "Write preview.png (needs matplotlib)."})

    def __post_init__(self):
        if self.quality not in QUALITIES:
            raise ValueError(f"quality must be one of {QUALITIES}, got {self.quality!r}.")
        if self.quality == "pairwise" and not self.evaluation_config:
            raise ValueError("quality: pairwise needs evaluation_config, the `trl-dpr evaluate` recipe of the judge.")
        for name, value in (("num_prompts", self.num_prompts), ("samples_per_prompt", self.samples_per_prompt),
                            ("max_new_tokens", self.max_new_tokens), ("batch_size", self.batch_size),
                            ("policy_samples_per_prompt", self.policy_samples_per_prompt)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}.")
        if self.samples_per_prompt < 2:
            raise ValueError("samples_per_prompt must be >= 2: the tilt reweights several samples of one prompt.")
        if any(lam < 0 or math.isnan(lam) for lam in self.lambdas):
            raise ValueError(f"Every λ must be >= 0 (0 = best-of-N, inf = π_SFT), got {self.lambdas}.")
        if not self.variants:
            raise ValueError("Give at least one reward variant (e.g. variants: {DPR: {}}).")
        allowed = {"ref_model_name_or_path", "oracle", "dense_reward", "dense_reward_kwargs", "dense_reward_models"}
        for name, settings in self.variants.items():
            unknown = set(settings or {}) - allowed - set(LEGACY_REWARD_KEYS)  # those: reward_from_settings says what to write
            if unknown:
                raise ValueError(f"Variant {name!r}: unknown setting(s) {sorted(unknown)}; allowed: {sorted(allowed)}.")
            if (settings or {}).get("oracle") and self.quality == "pairwise":
                raise ValueError(f"Variant {name!r}: the oracle reward is the per-sample quality; use it with exact or demonstration.")
            if not (settings or {}).get("oracle"):
                from ..rewards import reward_from_settings

                reward_from_settings(dict(settings or {}))  # a removed key or an unimportable reward: before any model loads
        for spec in self.policies:
            name, sep, path = spec.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"policies entries must be NAME=PATH, got {spec!r}.")


def _held_out_rows(config: PreviewConfig):
    """Prompts (and answers / demonstrations) to preview on, as a `datasets.Dataset`."""
    from ..data import load_demonstrations
    from ..embedded.task import EMBEDDED_DATASET, held_out_split

    if config.dataset_name == EMBEDDED_DATASET:
        return held_out_split(config.num_prompts, config.seed)
    return load_demonstrations(
        config.dataset_name, config.dataset_config, split=config.dataset_split, num_samples=config.num_prompts,
        seed=config.seed, dataset_format=config.dataset_format,
    )


def _quality_function(config: PreviewConfig, rows) -> Callable[[list, list[str]], list[float]]:
    """`quality(prompt_indices, responses) -> scores`, for the configured quality."""
    from ..embedded.task import is_correct

    columns = set(rows.column_names)
    if config.quality == "exact":
        if "answer" not in columns:
            raise ValueError(f"quality: exact needs an `answer` column; {config.dataset_name} has {sorted(columns)}.")
        answers = rows["answer"]
        return lambda indices, responses: [float(is_correct(r, answers[i])) for i, r in zip(indices, responses)]
    if config.quality == "demonstration":
        if "completion" not in columns:
            raise ValueError(f"quality: demonstration needs a `completion` column; {config.dataset_name} has {sorted(columns)}.")
        expert = [" ".join((c[-1]["content"] if isinstance(c, list) else c).split()) for c in rows["completion"]]
        return lambda indices, responses: [float(" ".join(r.split()) == expert[i]) for i, r in zip(indices, responses)]
    raise ValueError(f"No per-sample quality function for {config.quality!r}.")


def _question(prompt) -> str:
    return prompt if isinstance(prompt, str) else next(m["content"] for m in reversed(prompt) if m["role"] == "user")


def run_preview(
    config: PreviewConfig, sft_model_name_or_path: str, model_init_kwargs: dict | None = None, show_progress: bool = True
) -> PreviewReport:
    """Sample π_SFT, score every sample with every reward variant, judge it, and estimate π_λ along the λ grid.

    What can be checked cheaply (config, SFT output, prompts, policies, matplotlib, the judge's key) is checked before
    a model loads. Writes the report into `config.output_dir`.
    """
    from ..reference_manifest import check_model_source, resolve_reference
    from ..reward_model import CheckpointRewardModel
    from ..rewards import SFTLogProb, check_models_given, reward_from_settings
    from .sampling import policy_logprobs, sample_completions, score_samples

    if config.plot:
        plot_check = __import__("importlib").util.find_spec("matplotlib")
        if plot_check is None:
            raise ImportError('The preview plot needs matplotlib: pip install "trl_dpr[plots]", or plot: false.',
                              name="matplotlib")
    model_init_kwargs = dict(model_init_kwargs or {})
    check_model_source(sft_model_name_or_path, "The SFT output")
    needs_manifest = False
    for settings in (dict(s or {}) for s in config.variants.values() if not (s or {}).get("oracle")):
        reward = reward_from_settings(settings)  # conflicting keys or an unimportable reward fail before any model loads
        check_models_given(reward, settings.get("dense_reward_models") or {})
        needs_manifest |= "ref" in reward.model_names and not settings.get("ref_model_name_or_path")
    if needs_manifest:
        resolve_reference(sft_model_name_or_path)  # a missing manifest is an error that says how to make one
    named_policies = [spec.partition("=")[::2] for spec in config.policies]
    for name, path in named_policies:
        check_model_source(path.strip(), f"Policy {name.strip()}")
    rows = _held_out_rows(config)
    if config.quality == "pairwise":
        from ..evaluation.config import load_evaluation_config
        from ..evaluation.runner import judge_from_config

        judge = judge_from_config(load_evaluation_config(config.evaluation_config))  # checks the judge's key now
    else:
        quality_of = _quality_function(config, rows)

    base = CheckpointRewardModel.from_pretrained(sft_model_name_or_path, reward=SFTLogProb(), **model_init_kwargs)
    tokenizer = base.processing_class
    prompts = list(rows["prompt"])
    n = config.samples_per_prompt
    repeated = [p for p in prompts for _ in range(n)]
    indices = [i for i in range(len(prompts)) for _ in range(n)]

    def sample(model, adapter, prompt_list, count, seed):
        from trl.trainer.utils import use_adapter

        with use_adapter(model, adapter_name=adapter) if adapter else contextlib.nullcontext():
            return sample_completions(model, tokenizer, prompt_list, temperature=1.0, max_new_tokens=config.max_new_tokens,
                                      batch_size=config.batch_size, seed=seed, desc=f"Sampling ({count} per prompt)",
                                      show_progress=show_progress)

    samples = sample(base.sft_model, base.sft_adapter, repeated, n, config.seed)
    responses = [s.text for s in samples]
    if config.quality == "pairwise":
        from ..evaluation.judges import PairToJudge

        baselines = sample(base.sft_model, base.sft_adapter, prompts, 1, config.seed + 1)  # independent π_SFT answers
        judgements = _judged(judge, "samples", [PairToJudge(_question(prompts[i]), r, baselines[i].text)
                                                for i, r in zip(indices, responses)], config.output_dir)
        score = {"win": 1.0, "tie": 0.5, "loss": 0.0}
        scores = [score.get(j.outcome, math.nan) for j in judgements]
    else:
        scores = quality_of(indices, responses)
    quality = torch.tensor(scores, dtype=torch.float64).view(len(prompts), n)
    if torch.isnan(quality).any():  # unparseable verdicts: scored as ties, and said so
        quality = torch.nan_to_num(quality, nan=0.5)

    rewards = {}
    for name, settings in config.variants.items():
        settings = dict(settings or {})
        if settings.get("oracle"):
            rewards[name] = quality.clone()
            continue
        scorer = _scorer(base, sft_model_name_or_path, settings, model_init_kwargs)
        scored, mask = score_samples(scorer, samples, batch_size=config.batch_size)
        rewards[name] = (scored.rewards.double() * mask).sum(dim=1).view(len(prompts), n)
        del scorer

    points = preview_points(rewards, quality, config.lambdas, min_ess=config.min_ess, confidence=config.confidence,
                            num_resamples=config.bootstrap_resamples, seed=config.seed)
    sft_points = [p for p in points if math.isinf(p.lam)]
    report = PreviewReport(
        quality_name=config.quality, num_prompts=len(prompts), samples_per_prompt=n, points=points,
        sft_quality=sft_points[0].quality, pass_at_n=float(quality.max(dim=1).values.mean()),
        settings={**asdict(config), "sft_model_name_or_path": sft_model_name_or_path},
    )

    for name, path in named_policies:
        from trl.trainer.utils import create_model_from_path

        policy = create_model_from_path(path.strip(), **model_init_kwargs).to(base.device)
        k = config.policy_samples_per_prompt
        policy_samples = sample(policy, None, [p for p in prompts for _ in range(k)], k, config.seed + 2)
        policy_indices = [i for i in range(len(prompts)) for _ in range(k)]
        if config.quality == "pairwise":
            judgements = _judged(judge, name.strip(), [PairToJudge(_question(prompts[i]), s.text, baselines[i].text)
                                                       for i, s in zip(policy_indices, policy_samples)], config.output_dir)
            policy_scores = [score.get(j.outcome, 0.5) for j in judgements]
        else:
            policy_scores = quality_of(policy_indices, [s.text for s in policy_samples])
        own = policy_logprobs(policy, tokenizer, policy_samples, batch_size=config.batch_size)
        scored, mask = score_samples(base, policy_samples, batch_size=config.batch_size)
        kl = ((own.double() - scored.sft_logps.double()) * mask).sum(dim=1).view(len(prompts), k).mean(dim=1)
        per_prompt = torch.tensor(policy_scores, dtype=torch.float64).view(len(prompts), k).mean(dim=1)
        gain = per_prompt - quality.mean(dim=1)  # against π_SFT's samples of the same prompt
        low, high = bootstrap_mean_ci(torch.stack([per_prompt, gain, kl]), config.confidence, config.bootstrap_resamples,
                                      config.seed)
        report.policies.append(PolicyPoint(
            name.strip(), path.strip(), float(per_prompt.mean()), float(low[0]), float(high[0]), float(gain.mean()),
            float(low[1]), float(high[1]), float(kl.mean()), float(low[2]), float(high[2]),
        ))
        del policy
    report.write(config.output_dir, plot=config.plot)
    return report


def _scorer(base, sft_model_name_or_path: str, settings: dict, model_init_kwargs: dict):
    """The reward model of one variant, sharing the already loaded π_SFT where it can (a full SFT model)."""
    from transformers import AutoTokenizer
    from trl.trainer.utils import create_model_from_path

    from ..reference_manifest import resolve_reference
    from ..reward_model import CheckpointRewardModel
    from ..rewards import reward_from_settings, same_reward

    reward = reward_from_settings(settings)  # the trainer's door from settings to a reward
    if same_reward(reward, base.reward):
        return base  # R = Σ log π_SFT: the base scorer is exactly that
    model_paths = dict(settings.get("dense_reward_models") or {})
    if base.sft_adapter is not None:  # adapters on one base: load the pair as the recipes do
        return CheckpointRewardModel.from_pretrained(
            sft_model_name_or_path, settings.get("ref_model_name_or_path"), reward=reward, model_paths=model_paths,
            **model_init_kwargs,
        )
    ref_model, ref_tokenizer = None, None
    if "ref" in reward.model_names:
        ref_path = settings.get("ref_model_name_or_path") or resolve_reference(sft_model_name_or_path)[1]
        ref_model = create_model_from_path(ref_path, **model_init_kwargs).to(base.device)
        with contextlib.suppress(OSError, ValueError):  # a π_ref saved without its tokenizer is checked by vocabulary
            ref_tokenizer = AutoTokenizer.from_pretrained(ref_path)
    return CheckpointRewardModel(
        base.sft_model, ref_model, processing_class=base.processing_class, ref_processing_class=ref_tokenizer,
        token_chunk_size=base.token_chunk_size, reward=reward,
        models={n: create_model_from_path(p, **model_init_kwargs).to(base.device) for n, p in model_paths.items()
                if n in reward.model_names},
    )


def _judged(judge, name: str, pairs: list, output_dir: str) -> list:
    """`judge.judge_pairs(pairs)` with every verdict cached in `<output_dir>/judgements/<name>.jsonl` (judge calls cost)."""
    import re

    from ..evaluation.judges import judge_pairs_cached

    path = Path(output_dir) / "judgements" / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}.jsonl"
    return judge_pairs_cached(judge, [str(i) for i in range(len(pairs))], pairs, path, show_progress=False)

