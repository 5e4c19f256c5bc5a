"""The preview's numbers and files: one `PreviewPoint` per (reward variant, λ) with paired bootstrap intervals over
prompts, trained policies as `PolicyPoint`s, the `PreviewReport` (markdown, CSV, JSON) and its plot."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..evaluation.results import bootstrap_mean_ci
from .tilt import tilted_quality


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
    grid = (
        [math.inf] + sorted({float(lam) for lam in lambdas if not math.isinf(lam) and lam > 0}, reverse=True) + [0.0]
    )
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


def _ess_text(ess: float) -> str:
    """ESS to two decimals, rounded down: an untrusted 3.996 reads 3.99, not 4.0 beside min_ess 4."""
    return f"{math.floor(ess * 100 + 1e-9) / 100:.2f}"


def helps_verdict(helps: bool | None) -> str:
    """A preview's `helps` in words; None is "cannot tell" (π_SFT was never right: `PreviewReport.undecided`)."""
    return "cannot tell" if helps is None else "yes" if helps else "no"


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

    @property
    def undecided(self) -> str | None:
        """Why the preview cannot say whether DPR helps, or None when it can: with no right sample among π_SFT's, every
        reweighting scores 0, which says nothing about what DPR's own samples could reach."""
        if self.pass_at_n > 0:
            return None
        return (
            f"π_SFT was right on none of its {self.num_prompts} × {self.samples_per_prompt} samples, so there is nothing "
            "to up-weight and the preview cannot tell whether DPR helps. Check the answer check on a few answers by hand "
            "(answer_check / answer_pattern), then preview with more samples_per_prompt or easier prompts."
        )

    def summary_rows(self) -> list[dict]:
        """One row per variant: slope near λ = ∞ and the best trusted point with its gain and interval; `helps` is None
        when the preview cannot tell (`undecided`)."""
        rows = []
        for variant in dict.fromkeys(p.variant for p in self.points):
            best = self.best(variant)
            rows.append(
                {
                    "variant": variant,
                    "slope_per_nat": self.slope(variant),
                    "best_kl_coef": best.lam,
                    "best_quality": best.quality,
                    "best_delta": best.delta,
                    "best_delta_ci_low": best.delta_ci_low,
                    "best_delta_ci_high": best.delta_ci_high,
                    "best_kl": best.kl,
                    "helps": None if self.undecided else best.delta_ci_low > 0,
                }
            )
        return rows

    def markdown(self) -> str:
        """The preview as markdown: one row per variant × λ, then the summary."""
        lines = [
            f"DPR preview: quality = {self.quality_name}, {self.num_prompts} prompts × {self.samples_per_prompt} samples "
            f"of π_SFT; π_SFT {self.sft_quality:.3f}, pass@{self.samples_per_prompt} ceiling {self.pass_at_n:.3f}",
            "",
            "| reward | kl_coef | quality (95% CI) | gain vs π_SFT (95% CI) | KL(π_λ‖π_SFT) | ESS | trusted |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in self.points:
            lam = "∞ (π_SFT)" if math.isinf(p.lam) else "0 (best-of-N)" if p.lam == 0 else f"{p.lam:g}"
            lines.append(
                f"| {p.variant} | {lam} | {p.quality:.3f} ({p.ci_low:.3f}–{p.ci_high:.3f}) | {p.delta:+.3f} "
                f"({p.delta_ci_low:+.3f}–{p.delta_ci_high:+.3f}) | {p.kl:.3f} | {_ess_text(p.ess)} | {'yes' if p.trusted else 'no'} |"
            )
        lines += [
            "",
            "| reward | gain per nat near kl_coef = ∞ | best kl_coef | best gain (95% CI) | helps |",
            "|---|---|---|---|---|",
        ]
        for row in self.summary_rows():
            slope = "n/a" if math.isnan(row["slope_per_nat"]) else f"{row['slope_per_nat']:+.3f}"
            helps = helps_verdict(row["helps"])
            lines.append(
                f"| {row['variant']} | {slope} | {row['best_kl_coef']:g} | {row['best_delta']:+.3f} "
                f"({row['best_delta_ci_low']:+.3f}–{row['best_delta_ci_high']:+.3f}) | {helps} |"
            )
        if self.undecided:
            lines += ["", f"Cannot tell: {self.undecided}"]
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
            payload["quality_name"],
            payload["num_prompts"],
            payload["samples_per_prompt"],
            [PreviewPoint(**p) for p in payload["points"]],
            payload["sft_quality"],
            payload["pass_at_n"],
            [PolicyPoint(**p) for p in payload["policies"]],
            payload.get("settings", {}),
        )

    def write(self, output_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        """`preview.csv` (every point), `preview.json` (everything), `preview.md` and, with `plot`, `preview.png`."""
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        paths = {
            "csv": output_dir / "preview.csv",
            "json": output_dir / "preview.json",
            "md": output_dir / "preview.md",
        }
        with open(paths["csv"], "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(asdict(self.points[0])))
            writer.writeheader()
            writer.writerows(asdict(p) for p in self.points)
        payload = {
            "quality_name": self.quality_name,
            "num_prompts": self.num_prompts,
            "samples_per_prompt": self.samples_per_prompt,
            "sft_quality": self.sft_quality,
            "pass_at_n": self.pass_at_n,
            "points": [asdict(p) for p in self.points],
            "summary": self.summary_rows(),
            "policies": [asdict(p) for p in self.policies],
            "settings": self.settings,
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
        raise ImportError(
            'The preview plot needs matplotlib: pip install "trl_dpr[plots]".', name="matplotlib"
        ) from None
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    for index, variant in enumerate(dict.fromkeys(p.variant for p in report.points)):
        points = sorted(report.variant_points(variant), key=lambda p: p.kl)
        colour = f"C{index}"
        kls = [p.kl for p in points]
        axes.fill_between(
            kls, [p.delta_ci_low for p in points], [p.delta_ci_high for p in points], color=colour, alpha=0.15
        )
        axes.plot(kls, [p.delta for p in points], color=colour, label=variant)
        for p in points:
            axes.scatter([p.kl], [p.delta], color=colour if p.trusted else "white", edgecolors=colour, zorder=3, s=28)
    axes.axhline(0.0, color="black", linestyle="--", linewidth=1, label=f"π_SFT ({report.sft_quality:.3f})")
    axes.axhline(
        report.pass_at_n - report.sft_quality,
        color="grey",
        linestyle=":",
        linewidth=1,
        label=f"pass@{report.samples_per_prompt} ({report.pass_at_n:.3f})",
    )
    for policy in report.policies:
        axes.errorbar(
            [policy.kl],
            [policy.delta],
            yerr=[[policy.delta - policy.delta_ci_low], [policy.delta_ci_high - policy.delta]],
            xerr=[[policy.kl - policy.kl_ci_low], [policy.kl_ci_high - policy.kl]],
            fmt="x",
            color="black",
            capsize=3,
        )
    for index, policy in enumerate(
        sorted(report.policies, key=lambda p: p.kl)
    ):  # staggered: nearby labels stay legible
        axes.annotate(
            policy.name,
            (policy.kl, policy.delta),
            textcoords="offset points",
            xytext=(6, 6 - 12 * (index % 3)),
            fontsize=8,
        )
    axes.set_xlabel("KL(π_λ ‖ π_SFT), nats per response")
    axes.set_ylabel(f"{report.quality_name} quality − π_SFT's (paired 95% CI)")
    axes.set_title(
        f"DPR preview: {report.num_prompts} prompts × {report.samples_per_prompt} samples of π_SFT (hollow: low ESS)",
        fontsize=10,
    )
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
