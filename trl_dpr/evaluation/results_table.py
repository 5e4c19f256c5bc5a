"""The paper's Table 1 as markdown: rows = methods, columns = win rate vs SFT per benchmark and the MT-Bench score.

Win rates are percentages with their bootstrap 95% interval, e.g. `62.3 (58.9–65.7)`; the baseline's row shows "—"
where it would be compared with itself. A second table gives answer lengths, and a last section every unparseable
verdict count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .prompt_sets import PROMPT_SETS

if TYPE_CHECKING:
    from .results import EvaluationReport

__all__ = ["results_markdown"]


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
    """Markdown of a report: Table 1 (win rate vs the baseline, MT-Bench), lengths, unparseable verdicts.

    Example:
        >>> from trl_dpr.evaluation.results import EvaluationReport
        >>> print(results_markdown(EvaluationReport("SFT", ["DPR"], ["alpaca_eval"])).splitlines()[0])
        | Method | AlpacaEval win rate vs SFT % (95% CI) |
    """
    pairwise_benchmarks = [b for b in report.benchmarks if b != "mt_bench"]
    has_mt_bench = "mt_bench" in report.benchmarks
    models = [report.baseline, *report.methods]

    header = ["Method"] + [f"{_display(b)} win rate vs {report.baseline} % (95% CI)" for b in pairwise_benchmarks]
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
