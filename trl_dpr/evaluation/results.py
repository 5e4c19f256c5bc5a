"""Evaluation results as dataclasses: win rate vs SFT per benchmark and method, MT-Bench scores, answer lengths.

`EvaluationReport.write(output_dir)` saves `results.json` (everything, machine-readable) and `results.md` (the
paper's Table 1 layout plus lengths and the unparseable-verdict counts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .length_stats import LengthStats
from .mt_bench import MTBenchScore
from .pairwise_judge import PairJudgement
from .verdicts import candidate_outcome
from .win_rate import WinRate, win_rate

__all__ = ["EvaluationReport", "MTBenchResult", "PairwiseResult", "summarize_pairwise"]


@dataclass(frozen=True)
class PairwiseResult:
    """One method against the baseline on one benchmark.

    Attributes:
        win_rate: over the pairs whose verdict parsed (ties 0.5, bootstrap CI); None when none parsed.
        unparseable: pairs left out because a verdict could not be parsed (reported, never hidden).
        position_disagreements: pairs whose two orders gave different outcomes (a measure of position bias); None
            for judges that do not judge in two orders (the exact-answer judge).
    """

    benchmark: str
    method: str
    baseline: str
    judge: str
    win_rate: WinRate | None
    total: int
    unparseable: int
    position_disagreements: int | None
    method_lengths: LengthStats
    baseline_lengths: LengthStats

    def as_dict(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "method": self.method,
            "baseline": self.baseline,
            "judge": self.judge,
            "win_rate": self.win_rate.as_dict() if self.win_rate else None,
            "total": self.total,
            "unparseable": self.unparseable,
            "position_disagreements": self.position_disagreements,
            "method_lengths": self.method_lengths.as_dict(),
            "baseline_lengths": self.baseline_lengths.as_dict(),
        }


@dataclass(frozen=True)
class MTBenchResult:
    """One model's MT-Bench grades, aggregated, with the lengths of its answers (both turns)."""

    method: str
    judge: str
    score: MTBenchScore
    lengths: LengthStats

    def as_dict(self) -> dict:
        return {"method": self.method, "judge": self.judge, **self.score.as_dict(), "lengths": self.lengths.as_dict()}


def summarize_pairwise(
    judgements: Sequence[PairJudgement], confidence: float = 0.95, num_resamples: int = 2000, seed: int = 0
) -> tuple[WinRate | None, int, int | None]:
    """(win rate over the parseable pairs or None, unparseable count, position disagreements) of judgements.

    Disagreements are pairs whose two orders were both parsed and gave different outcomes; None when no judgement
    has two orders.

    Example:
        >>> rate, unparseable, disagreements = summarize_pairwise(
        ...     [PairJudgement("win"), PairJudgement("tie", verdicts=("A>B", "A>B")), PairJudgement(None)])
        >>> rate.value, unparseable, disagreements
        (0.75, 1, 1)
    """
    outcomes = [j.outcome for j in judgements if j.outcome is not None]
    both_orders = [j.verdicts for j in judgements if len(j.verdicts) == 2 and None not in j.verdicts]
    disagreements = sum(candidate_outcome(a, "A") != candidate_outcome(b, "B") for a, b in both_orders)
    if not any(len(j.verdicts) == 2 for j in judgements):
        disagreements = None
    rate = win_rate(outcomes, confidence=confidence, num_resamples=num_resamples, seed=seed) if outcomes else None
    return rate, len(judgements) - len(outcomes), disagreements


@dataclass
class EvaluationReport:
    """Everything one evaluation run measured, in the order the table shows it."""

    baseline: str
    methods: list[str]
    benchmarks: list[str]
    pairwise: list[PairwiseResult] = field(default_factory=list)
    mt_bench: list[MTBenchResult] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def pairwise_result(self, benchmark: str, method: str) -> PairwiseResult | None:
        return next((r for r in self.pairwise if r.benchmark == benchmark and r.method == method), None)

    def mt_bench_result(self, method: str) -> MTBenchResult | None:
        return next((r for r in self.mt_bench if r.method == method), None)

    def as_dict(self) -> dict:
        from .results_table import results_markdown

        return {
            "baseline": self.baseline,
            "methods": self.methods,
            "benchmarks": self.benchmarks,
            "pairwise": [r.as_dict() for r in self.pairwise],
            "mt_bench": [r.as_dict() for r in self.mt_bench],
            "settings": self.settings,
            "table_markdown": results_markdown(self),
        }

    def write(self, output_dir: str | Path) -> tuple[Path, Path]:
        """Write `results.json` and `results.md` into `output_dir`; returns their paths."""
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        payload = self.as_dict()
        json_path, markdown_path = output_dir / "results.json", output_dir / "results.md"
        json_path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        markdown_path.write_text(payload["table_markdown"] + "\n", encoding="utf-8")
        return json_path, markdown_path
