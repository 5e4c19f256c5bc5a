"""Win rates against SFT for the experiments: the report of `recipes/evaluate.py`'s evaluation (`run_evaluation`,
configured with `experiments.overrides.evaluation_config`) as CSV rows.

Exact judge and accuracy on the embedded task (`benchmarks: [demo]`, `judge: exact`), GPT-4o or a local judge on
AlpacaEval / Arena-Hard / LIMA / MT-Bench. Answers and verdicts are cached under the evaluation's `output_dir`, so the
SFT answers are generated once for a whole sweep.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from trl_dpr.evaluation import EvaluationReport

__all__ = ["WIN_RATE_COLUMNS", "forget_cached_answers", "win_rate_rows"]

WIN_RATE_COLUMNS = (
    "method",
    "benchmark",
    "judge",
    "win_rate",
    "ci_low",
    "ci_high",
    "wins",
    "ties",
    "losses",
    "n",
    "unparseable",
    "mt_bench_score",
    "mean_words",
    "sft_mean_words",
    "accuracy",
    "sft_accuracy",
)


def _nan_if_none(value):
    return math.nan if value is None else value


def _accuracy(report: EvaluationReport, benchmark: str, method: str) -> float:
    result = report.accuracy_result(benchmark, method)
    return math.nan if result is None else result.accuracy


def win_rate_rows(report: EvaluationReport) -> list[dict]:
    """One row per (method, benchmark) of a report, with `WIN_RATE_COLUMNS`: the win rate vs the baseline and its
    CI for pairwise benchmarks (NaN when no verdict parsed), the MT-Bench score for `mt_bench`, mean answer lengths,
    and on benchmarks with exact answers the accuracy of the method and of the baseline (else NaN).

    Example:
        >>> from trl_dpr.evaluation import LengthStats, win_rate
        >>> from trl_dpr.evaluation.results import PairwiseResult
        >>> result = PairwiseResult("demo", "DPR", "SFT", "exact-answer", win_rate(["win", "tie"]), 2, 0, 0,
        ...                         LengthStats(2, 5.0, 5.0), LengthStats(2, 4.0, 4.0))
        >>> row = win_rate_rows(EvaluationReport("SFT", ["DPR"], ["demo"], pairwise=[result]))[0]
        >>> row["method"], row["win_rate"], row["n"]
        ('DPR', 0.75, 2)
    """
    rows = []
    for result in report.pairwise:
        rate = result.win_rate
        rows.append(
            {
                "method": result.method,
                "benchmark": result.benchmark,
                "judge": result.judge,
                "win_rate": _nan_if_none(rate and rate.value),
                "ci_low": _nan_if_none(rate and rate.ci_low),
                "ci_high": _nan_if_none(rate and rate.ci_high),
                "wins": rate.wins if rate else 0,
                "ties": rate.ties if rate else 0,
                "losses": rate.losses if rate else 0,
                "n": rate.n if rate else 0,
                "unparseable": result.unparseable,
                "mt_bench_score": None,
                "mean_words": result.method_lengths.mean_words,
                "sft_mean_words": result.baseline_lengths.mean_words,
                "accuracy": _accuracy(report, result.benchmark, result.method),
                "sft_accuracy": _accuracy(report, result.benchmark, report.baseline),
            }
        )
    for result in report.mt_bench:
        if result.method == report.baseline:
            continue
        rows.append(
            {
                "method": result.method,
                "benchmark": "mt_bench",
                "judge": result.judge,
                "win_rate": math.nan,
                "ci_low": math.nan,
                "ci_high": math.nan,
                "wins": 0,
                "ties": 0,
                "losses": 0,
                "n": result.score.graded,
                "unparseable": result.score.unparseable,
                "mt_bench_score": _nan_if_none(result.score.score),
                "mean_words": result.lengths.mean_words,
                "sft_mean_words": None,
                "accuracy": math.nan,
                "sft_accuracy": math.nan,
            }
        )
    return rows


def forget_cached_answers(evaluation_dir: str | Path, model_name: str) -> list[Path]:
    """Delete the cached answers, verdicts and grades of `model_name` under an evaluation `output_dir` (a retrained
    model must be answered again: the caches know the model's path, not its weights). Returns what was deleted.

    Example:
        >>> import tempfile
        >>> evaluation = Path(tempfile.mkdtemp())
        >>> (evaluation / "answers" / "demo").mkdir(parents=True)
        >>> _ = (evaluation / "answers" / "demo" / "gamma1.jsonl").write_text("{}")
        >>> [p.name for p in forget_cached_answers(evaluation, "gamma1")]
        ['gamma1.jsonl']
    """
    evaluation_dir = Path(evaluation_dir)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name)  # the evaluation's file-name rule
    deleted = []
    for pattern in (f"answers/*/{safe}.jsonl", f"judgements/*/{safe}_vs_*.jsonl", f"grades/*/{safe}.jsonl"):
        for path in evaluation_dir.glob(pattern):
            path.unlink()
            deleted.append(path)
    return deleted
