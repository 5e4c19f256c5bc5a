"""Win rates against SFT for the analyses, two ways:

- `win_rate_rows`: the report of `recipes/evaluate.py`'s whole evaluation (`run_evaluation`, configured with
  `trl_dpr.analysis.configs.evaluation_config`) as CSV rows: exact judge on the embedded task (`benchmarks: [demo]`,
  `judge: exact`), GPT-4o or a local judge on AlpacaEval / Arena-Hard / LIMA / MT-Bench. Answers and verdicts are
  cached under its `output_dir`, so the SFT answers are generated once for a whole sweep.
- `HeldOutPrompts`, `exact_accuracy`, `exact_win_rate`: the embedded task in process (a policy already in memory,
  greedy and sampled accuracy), for the settings sweep.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..data import EMBEDDED_DATASET, load_demonstrations
from ..demo_task import is_correct
from ..evaluation import EvaluationReport, ExactAnswerJudge, WinRate, win_rate

__all__ = [
    "WIN_RATE_COLUMNS",
    "win_rate_rows",
    "forget_cached_answers",
    "HeldOutPrompts",
    "exact_accuracy",
    "exact_win_rate",
]

WIN_RATE_COLUMNS = (
    "method", "benchmark", "judge", "win_rate", "ci_low", "ci_high", "wins", "ties", "losses", "n", "unparseable",
    "mt_bench_score", "mean_words", "sft_mean_words",
)


def _nan_if_none(value):
    return math.nan if value is None else value


def win_rate_rows(report: EvaluationReport) -> list[dict]:
    """One row per (method, benchmark) of a report, with `WIN_RATE_COLUMNS`: the win rate vs the baseline and its
    CI for pairwise benchmarks (NaN when no verdict parsed), the MT-Bench score for `mt_bench`, mean answer lengths.

    Example:
        >>> from trl_dpr.evaluation import LengthStats
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
                "win_rate": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                "wins": 0, "ties": 0, "losses": 0, "n": result.score.graded, "unparseable": result.score.unparseable,
                "mt_bench_score": _nan_if_none(result.score.score),
                "mean_words": result.lengths.mean_words,
                "sft_mean_words": None,
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


@dataclass
class HeldOutPrompts:
    """Held-out prompts of the embedded task with their exact answers and kinds, each repeated `samples_per_prompt`
    times (consecutive copies) so that several answers per prompt are judged.

    Example:
        >>> held_out = HeldOutPrompts.embedded(num_prompts=3, samples_per_prompt=2)
        >>> len(held_out.prompts), held_out.answers[0] == held_out.answers[1]
        (6, True)
    """

    prompts: list
    answers: list[str]
    kinds: list[str]

    @classmethod
    def embedded(cls, num_prompts: int | None = None, samples_per_prompt: int = 1, seed: int = 0) -> HeldOutPrompts:
        rows = load_demonstrations(EMBEDDED_DATASET, split="test", num_samples=num_prompts, seed=seed)
        k = samples_per_prompt
        return cls(
            prompts=[p for p in rows["prompt"] for _ in range(k)],
            answers=[a for a in rows["answer"] for _ in range(k)],
            kinds=[c for c in rows["kind"] for _ in range(k)],
        )


def exact_accuracy(responses: list[str], held_out: HeldOutPrompts) -> float:
    """Share of responses whose final answer is exact.

    Example:
        >>> exact_accuracy(["The answer is 5.", "The answer is 7."], HeldOutPrompts(["a", "b"], ["5", "6"], ["add", "add"]))
        0.5
    """
    if len(responses) != len(held_out.answers):
        raise ValueError(f"Got {len(responses)} responses for {len(held_out.answers)} held-out prompts.")
    return sum(is_correct(r, a) for r, a in zip(responses, held_out.answers)) / len(responses)


def exact_win_rate(candidate: list[str], baseline: list[str], held_out: HeldOutPrompts, confidence: float = 0.95) -> WinRate:
    """Win rate of `candidate` against `baseline` answers with the exact judge (correct beats wrong, else a tie),
    ties 0.5, percentile bootstrap interval.

    Example:
        >>> held_out = HeldOutPrompts(["a", "b"], ["5", "6"], ["add", "add"])
        >>> exact_win_rate(["The answer is 5.", "The answer is 1."], ["The answer is 4.", "The answer is 1."], held_out).value
        0.75
    """
    judge = ExactAnswerJudge()
    outcomes = [judge.judge(c, b, a) for c, b, a in zip(candidate, baseline, held_out.answers, strict=True)]
    return win_rate(outcomes, confidence=confidence)
