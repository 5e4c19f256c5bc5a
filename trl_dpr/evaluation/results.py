"""Evaluation results: win rate with ties counted 0.5 and its bootstrap CI, answer lengths, exact-answer accuracy,
and the report (`results.json`, and `results.md` in the paper's Table 1 layout).

    judgements ─► summarize_pairwise ─► WinRate ─┐
    answers    ─► length_stats, accuracy ────────┴► EvaluationReport ─► results_markdown / write()
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .judges import MTBenchScore, PairJudgement, candidate_outcome
from .prompt_sets import PROMPT_SETS

OUTCOME_SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


@dataclass
class WinRate:
    """Win rate `value` = (wins + 0.5·ties) / n of a candidate against a baseline, with its percentile bootstrap
    interval over prompts (`confidence`, 0.95 by default)."""

    value: float
    ci_low: float
    ci_high: float
    wins: int
    ties: int
    losses: int
    confidence: float = 0.95

    @property
    def n(self) -> int:
        return self.wins + self.ties + self.losses

    def as_dict(self) -> dict:
        return {
            "win_rate": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence": self.confidence,
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "n": self.n,
        }


def bootstrap_mean_ci(
    values, confidence: float = 0.95, num_resamples: int = 2000, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Percentile bootstrap interval of the mean over units (prompts), for each row of `values` (`[L, P]` or `[P]`).

    The same resamples serve every row, so rows paired by unit can be compared; returns `(low, high)`, each `[L]`.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    values = torch.as_tensor(values, dtype=torch.float64)
    if values.dim() == 1:
        values = values.unsqueeze(0)
    num_units = values.size(1)
    if num_units == 0:
        raise ValueError("No units to resample: the bootstrap needs at least one value per row.")
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randint(num_units, (num_resamples, num_units), generator=generator)
    means = values[:, indices].mean(dim=2)  # [L, num_resamples]
    tail = (1.0 - confidence) / 2.0
    return torch.quantile(means, tail, dim=1), torch.quantile(means, 1.0 - tail, dim=1)


def unit_means(scores: Sequence[float], groups: Sequence | None) -> torch.Tensor:
    """The mean score of each group (e.g. the answers sampled for one prompt), in order of first appearance; the scores
    themselves when `groups` is None. Bootstrapping these resamples prompts, not correlated answers of one prompt.
    """
    scores = torch.as_tensor(list(scores), dtype=torch.float64)
    if groups is None:
        return scores
    groups = list(groups)
    if len(groups) != len(scores):
        raise ValueError(f"Got {len(groups)} group labels for {len(scores)} scores; give one per score.")
    index = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    ids = torch.tensor([index[g] for g in groups])
    return torch.zeros(len(index), dtype=torch.float64).index_add_(0, ids, scores) / torch.bincount(ids).double()


def win_rate(
    outcomes: list[str],
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
    groups: Sequence | None = None,
) -> WinRate:
    """Win rate of `outcomes` ("win" / "tie" / "loss" for the candidate), ties = 0.5, with a bootstrap CI.

    `groups` (e.g. the prompt id of each outcome) makes the bootstrap resample prompts, not correlated answers.
    """
    unknown = set(outcomes) - set(OUTCOME_SCORE)
    if unknown:
        raise ValueError(f"Outcomes must be 'win', 'tie' or 'loss'; got {sorted(unknown)}.")
    if not outcomes:
        raise ValueError("No judged pairs: cannot compute a win rate from zero outcomes.")
    scores = [OUTCOME_SCORE[o] for o in outcomes]
    low, high = bootstrap_mean_ci(unit_means(scores, groups), confidence, num_resamples, seed)
    return WinRate(
        value=sum(scores) / len(scores),
        ci_low=float(low[0]),
        ci_high=float(high[0]),
        wins=outcomes.count("win"),
        ties=outcomes.count("tie"),
        losses=outcomes.count("loss"),
        confidence=confidence,
    )


@dataclass(frozen=True)
class AccuracyResult:
    """Share of one model's answers that give the exact expected answer, on a benchmark that has exact answers (the
    embedded task), with a bootstrap CI over prompts and the accuracy per category (the task's kinds).
    """

    benchmark: str
    method: str
    accuracy: float
    ci_low: float
    ci_high: float
    correct: int
    n: int
    by_category: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def exact_accuracy(
    benchmark: str,
    method: str,
    correct: Sequence[bool],
    groups: Sequence,
    categories: Sequence[str | None],
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
) -> AccuracyResult:
    """Accuracy of answers already checked against their exact answers (`correct`), bootstrapped over `groups`."""
    if not correct:
        raise ValueError(f"No answers of {method} on {benchmark} to score.")
    scores = [float(c) for c in correct]
    low, high = bootstrap_mean_ci(unit_means(scores, groups), confidence, num_resamples, seed)
    by_category: dict[str, list[float]] = {}
    for category, score in zip(categories, scores, strict=True):
        by_category.setdefault(category or "all", []).append(score)
    return AccuracyResult(
        benchmark=benchmark,
        method=method,
        accuracy=sum(scores) / len(scores),
        ci_low=float(low[0]),
        ci_high=float(high[0]),
        correct=int(sum(scores)),
        n=len(scores),
        by_category={k: sum(v) / len(v) for k, v in sorted(by_category.items())},
    )


# ---- answer lengths: LLM judges favour longer answers, so a win rate is read next to the lengths behind it -------
@dataclass(frozen=True)
class LengthStats:
    """Mean and median answer length in words (whitespace-separated) and, with a tokenizer, in tokens."""

    n: int
    mean_words: float
    median_words: float
    mean_tokens: float | None = None
    median_tokens: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def length_stats(answers: Sequence[str], tokenizer=None) -> LengthStats:
    """Length statistics of `answers` (tokens counted without special tokens)."""
    if not answers:
        raise ValueError("No answers to measure.")
    words = [len(answer.split()) for answer in answers]
    tokens = None
    if tokenizer is not None:
        tokens = [len(ids) for ids in tokenizer(list(answers), add_special_tokens=False)["input_ids"]]
    return LengthStats(
        n=len(answers),
        mean_words=statistics.fmean(words),
        median_words=statistics.median(words),
        mean_tokens=statistics.fmean(tokens) if tokens is not None else None,
        median_tokens=statistics.median(tokens) if tokens is not None else None,
    )


# ---- results of a run ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairwiseResult:
    """One method against the baseline on one benchmark: `win_rate` over the parsed pairs (None when none parsed), the
    `unparseable` count and `position_disagreements` (None for judges of one order)."""

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
    judgements: Sequence[PairJudgement],
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
    groups: Sequence | None = None,
) -> tuple[WinRate | None, int, int | None]:
    """(win rate over the parseable pairs or None, unparseable count, position disagreements) of judgements.

    Disagreements: both orders parsed, different outcomes; None when no judgement has two orders.
    """
    parsed = [i for i, j in enumerate(judgements) if j.outcome is not None]
    outcomes = [judgements[i].outcome for i in parsed]
    parsed_groups = None if groups is None else [list(groups)[i] for i in parsed]
    both_orders = [j.verdicts for j in judgements if len(j.verdicts) == 2 and None not in j.verdicts]
    disagreements = sum(candidate_outcome(a, "A") != candidate_outcome(b, "B") for a, b in both_orders)
    if not any(len(j.verdicts) == 2 for j in judgements):
        disagreements = None
    rate = (
        win_rate(outcomes, confidence=confidence, num_resamples=num_resamples, seed=seed, groups=parsed_groups)
        if outcomes
        else None
    )
    return rate, len(judgements) - len(outcomes), disagreements


@dataclass
class EvaluationReport:
    """Everything one evaluation run measured, in the order the table shows it."""

    baseline: str
    methods: list[str]
    benchmarks: list[str]
    pairwise: list[PairwiseResult] = field(default_factory=list)
    mt_bench: list[MTBenchResult] = field(default_factory=list)
    accuracy: list[AccuracyResult] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def pairwise_result(self, benchmark: str, method: str) -> PairwiseResult | None:
        return next((r for r in self.pairwise if r.benchmark == benchmark and r.method == method), None)

    def mt_bench_result(self, method: str) -> MTBenchResult | None:
        return next((r for r in self.mt_bench if r.method == method), None)

    def accuracy_result(self, benchmark: str, method: str) -> AccuracyResult | None:
        return next((r for r in self.accuracy if r.benchmark == benchmark and r.method == method), None)

    def as_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "methods": self.methods,
            "benchmarks": self.benchmarks,
            "pairwise": [r.as_dict() for r in self.pairwise],
            "mt_bench": [r.as_dict() for r in self.mt_bench],
            "accuracy": [r.as_dict() for r in self.accuracy],
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


# ---- the paper's Table 1 as markdown -------------------------------------------------------------------------------


def _display(benchmark: str) -> str:
    return PROMPT_SETS[benchmark].display_name if benchmark in PROMPT_SETS else benchmark


def _win_rate_cell(result) -> str:
    if result is None:
        return "—"
    if result.win_rate is None:
        return f"n/a ({result.unparseable} unparseable)"
    rate = result.win_rate
    return f"{100 * rate.value:.1f} ({100 * rate.ci_low:.1f}–{100 * rate.ci_high:.1f})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def results_markdown(report: EvaluationReport) -> str:
    """Markdown of a report: Table 1 (win rate vs the baseline, MT-Bench), lengths, unparseable verdicts."""
    pairwise_benchmarks = [b for b in report.benchmarks if b != "mt_bench"]
    has_mt_bench = "mt_bench" in report.benchmarks
    models = [report.baseline, *report.methods]
    ci = f"{100 * report.settings.get('confidence', 0.95):g}% CI"  # the intervals' own level (`confidence`)

    header = ["Method"] + [f"{_display(b)} win rate vs {report.baseline} % ({ci})" for b in pairwise_benchmarks]
    if has_mt_bench:
        header.append("MT-Bench (1–10)")
    rows = []
    for model in models:
        row = [model] + [_win_rate_cell(report.pairwise_result(b, model)) for b in pairwise_benchmarks]
        if has_mt_bench:
            result = report.mt_bench_result(model)
            row.append(f"{result.score.score:.2f}" if result and result.score.score is not None else "—")
        rows.append(row)
    lines = _table(header, rows)

    accuracy_benchmarks = list(dict.fromkeys(r.benchmark for r in report.accuracy))
    for benchmark in accuracy_benchmarks:
        categories = list(dict.fromkeys(c for r in report.accuracy if r.benchmark == benchmark for c in r.by_category))
        accuracy_header = ["Method", f"accuracy % ({ci})", *categories]
        accuracy_rows = []
        for model in models:
            result = report.accuracy_result(benchmark, model)
            if result is None:
                continue
            cells = [f"{100 * result.accuracy:.1f} ({100 * result.ci_low:.1f}–{100 * result.ci_high:.1f})"]
            cells += [f"{100 * result.by_category[c]:.1f}" if c in result.by_category else "—" for c in categories]
            accuracy_rows.append([model, *cells])
        lines += [
            "",
            f"{_display(benchmark)}: exact-answer accuracy (%):",
            "",
            *_table(accuracy_header, accuracy_rows),
        ]

    length_header = ["Method"] + [f"{_display(b)} words mean / median" for b in report.benchmarks]
    length_rows = []
    for model in models:
        cells = [model]
        for benchmark in report.benchmarks:
            stats = _lengths(report, benchmark, model)
            cells.append(f"{stats.mean_words:.1f} / {stats.median_words:g}" if stats else "—")
        length_rows.append(cells)
    lines += ["", "Answer lengths (words):", "", *_table(length_header, length_rows)]

    notes = []
    for result in report.pairwise:
        judged = result.total - result.unparseable
        note = (
            f"- {_display(result.benchmark)}, {result.method} vs {result.baseline} ({result.judge}): {judged} of "
            f"{result.total} pairs judged, {result.unparseable} unparseable (left out)"
        )
        if result.position_disagreements is not None:
            note += f", {result.position_disagreements} with the two orders disagreeing"
        notes.append(note)
    for result in report.mt_bench:
        notes.append(
            f"- MT-Bench, {result.method} ({result.judge}): {result.score.graded} answers graded, "
            f"{result.score.unparseable} unparseable (left out)"
        )
    if notes:
        lines += ["", "Verdicts:", "", *notes]
    return "\n".join(lines)


def _lengths(report: EvaluationReport, benchmark: str, model: str):
    if benchmark == "mt_bench":
        result = report.mt_bench_result(model)
        return result.lengths if result else None
    if model == report.baseline:
        result = next((r for r in report.pairwise if r.benchmark == benchmark), None)
        return result.baseline_lengths if result else None
    result = report.pairwise_result(benchmark, model)
    return result.method_lengths if result else None
