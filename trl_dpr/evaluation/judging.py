"""Judging with a cache: pairwise judgements and MT-Bench grades are written to JSONL as they come back.

Judge calls cost money and time (805 AlpacaEval pairs × 2 orders × each method), so every chunk of verdicts is saved
at once and a rerun asks the judge only about what is missing. Records are keyed by the prompt and a hash of the
answers judged, so regenerated answers are judged afresh, never matched with an old verdict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from .jsonl_cache import JsonlCache
from .mt_bench import MTBenchGrade, MTBenchGrader
from .pairwise_judge import PairJudgement, PairToJudge, PairwiseJudge
from .prompt_sets import EvalPrompt

__all__ = ["grade_mt_bench_cached", "judge_pairs_cached", "text_digest"]


def text_digest(*texts: str) -> str:
    """A short, stable fingerprint of some texts (to key cached verdicts by the exact answers judged).

    Example:
        >>> text_digest("a", "b") == text_digest("a", "b") != text_digest("ab", "")
        True
    """
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return digest.hexdigest()[:16]


def judge_pairs_cached(
    judge: PairwiseJudge,
    prompt_ids: Sequence[str],
    pairs: Sequence[PairToJudge],
    cache_path: str | Path,
    settings: dict | None = None,
    chunk_size: int = 64,
    show_progress: bool = True,
) -> list[PairJudgement]:
    """`judge.judge_pairs(pairs)`, reading cached judgements back and saving new ones chunk by chunk.

    Example:
        >>> import tempfile, os
        >>> from trl_dpr.evaluation import ExactAnswerJudge
        >>> path = os.path.join(tempfile.mkdtemp(), "judgements.jsonl")
        >>> pair = PairToJudge("2+2?", "The answer is 4.", "The answer is 5.", reference="4")
        >>> judge_pairs_cached(ExactAnswerJudge(), ["0"], [pair], path, show_progress=False)[0].outcome
        'win'
    """
    if len(prompt_ids) != len(pairs):
        raise ValueError(f"Got {len(prompt_ids)} prompt ids for {len(pairs)} pairs.")
    cache = JsonlCache(cache_path, ("prompt_id", "answers"), settings=settings or {"judge": judge.name})
    keys = [(pid, text_digest(p.candidate, p.baseline, p.reference or "")) for pid, p in zip(prompt_ids, pairs)]
    todo = [i for i, key in enumerate(keys) if key not in cache]
    for start in tqdm(range(0, len(todo), chunk_size), desc=f"Judging ({judge.name})", disable=not show_progress or not todo):
        chunk = todo[start : start + chunk_size]
        judgements = judge.judge_pairs([pairs[i] for i in chunk])
        cache.add_many(
            {"prompt_id": keys[i][0], "answers": keys[i][1], **judgement.as_dict()} for i, judgement in zip(chunk, judgements)
        )
    return [_judgement_from_record(cache.get(key)) for key in keys]


def _judgement_from_record(record: dict) -> PairJudgement:
    return PairJudgement(
        outcome=record["outcome"],
        verdicts=tuple(record.get("verdicts") or ()),
        judge_outputs=tuple(record.get("judge_outputs") or ()),
        problem=record.get("problem"),
    )


def grade_mt_bench_cached(
    grader: MTBenchGrader,
    prompts: Sequence[EvalPrompt],
    answers: Mapping[tuple[str, int], str],
    cache_path: str | Path,
    chunk_size: int = 16,
    show_progress: bool = True,
) -> list[MTBenchGrade]:
    """`grader.grade(prompts, answers)` for every turn, reading cached grades back and saving new ones as they come.

    Grades are keyed by (prompt, turn, the conversation's answers up to that turn).
    """
    cache = JsonlCache(cache_path, ("prompt_id", "turn", "answers"), settings={"grader": grader.name})

    def key(prompt: EvalPrompt, turn: int) -> tuple:
        return (prompt.prompt_id, turn, text_digest(*(answers[(prompt.prompt_id, t)] for t in range(turn + 1))))

    todo = [p for p in prompts if any(key(p, t) not in cache for t in range(len(p.turns)))]
    for start in tqdm(range(0, len(todo), chunk_size), desc=f"Grading ({grader.name})", disable=not show_progress or not todo):
        chunk = todo[start : start + chunk_size]
        grades = grader.grade(chunk, answers)
        by_id = {p.prompt_id: p for p in chunk}
        cache.add_many({**grade.as_dict(), "answers": key(by_id[grade.prompt_id], grade.turn)[2]} for grade in grades)
    grades = []
    for prompt in prompts:
        for turn in range(len(prompt.turns)):
            record = {k: v for k, v in cache.get(key(prompt, turn)).items() if k not in ("answers", "settings")}
            grades.append(MTBenchGrade(**record))
    return grades
