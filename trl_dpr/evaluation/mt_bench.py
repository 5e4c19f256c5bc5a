"""MT-Bench's single-answer grading: a chat model rates each turn 1–10 (`[[7]]`), math / reasoning / coding against
the question's reference answers; the score is the mean of the parseable ratings. Every grade is saved to JSONL as it
comes back (grader calls cost money), keyed by the prompt, the turn and a hash of the answers up to it.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from .cache import JsonlCache, text_digest
from .chat_models import ChatModel
from .prompt_sets import EvalPrompt
from .verdicts import parse_rating, single_grade_messages

logger = logging.getLogger(__name__)


REFERENCE_CATEGORIES = ("math", "reasoning", "coding")


@dataclass(frozen=True)
class MTBenchGrade:
    """The grade of one answer: `rating` in [1, 10], or None with the reason in `problem`."""

    prompt_id: str
    turn: int
    category: str | None
    rating: float | None
    problem: str | None = None
    judge_output: str = ""
    used_reference: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MTBenchScore:
    """Mean rating overall, per turn (1, 2) and per category, over the parseable grades."""

    score: float | None
    turn_scores: dict[int, float]
    category_scores: dict[str, float]
    graded: int
    unparseable: int

    def as_dict(self) -> dict:
        return asdict(self)


class MTBenchGrader:
    """Rates answers with a chat model (paper: GPT-4o at temperature 0) in MT-Bench's single-answer format;
    `reference_categories` are graded against the question's reference answers."""

    def __init__(self, chat: ChatModel, reference_categories: Sequence[str] = REFERENCE_CATEGORIES):
        self.chat = chat
        self.reference_categories = tuple(reference_categories)
        self.name = f"mt-bench:{chat.name}"

    def grading_messages(self, prompt: EvalPrompt, answers: Sequence[str], turn: int) -> tuple[list[dict], bool]:
        """The grader's prompt for `turn` (0-based) of `prompt`, and whether it includes reference answers."""
        wants_reference = prompt.category in self.reference_categories
        has_reference = len(prompt.references) > turn
        if wants_reference and not has_reference:
            logger.warning(
                f"MT-Bench question {prompt.prompt_id} ({prompt.category}) has no reference answer for turn {turn + 1}; "
                "graded without one."
            )
        references = list(prompt.references[: turn + 1]) if wants_reference and has_reference else None
        messages = single_grade_messages(list(prompt.turns[: turn + 1]), list(answers[: turn + 1]), references)
        return messages, references is not None

    def grade(self, prompts: Sequence[EvalPrompt], answers: Mapping[tuple[str, int], str]) -> list[MTBenchGrade]:
        """Grade every turn of every prompt; `answers[(prompt_id, turn)]` is the model's answer (turns 0-based)."""
        jobs = []
        for prompt in prompts:
            conversation = [answers[(prompt.prompt_id, t)] for t in range(len(prompt.turns))]
            for turn in range(len(prompt.turns)):
                messages, used_reference = self.grading_messages(prompt, conversation, turn)
                jobs.append((prompt, turn, messages, used_reference))
        replies = self.chat.complete_batch([messages for _, _, messages, _ in jobs])
        grades = []
        for (prompt, turn, _, used_reference), reply in zip(jobs, replies):
            parsed = parse_rating(reply)
            grades.append(
                MTBenchGrade(
                    prompt.prompt_id, turn, prompt.category, parsed.value, parsed.problem, reply, used_reference
                )
            )
        return grades


def mt_bench_score(grades: Sequence[MTBenchGrade]) -> MTBenchScore:
    """Aggregate grades: the MT-Bench score is the mean of all parseable ratings (both turns)."""
    parsed = [g for g in grades if g.rating is not None]
    by_turn, by_category = defaultdict(list), defaultdict(list)
    for grade in parsed:
        by_turn[grade.turn + 1].append(grade.rating)
        by_category[grade.category or "uncategorised"].append(grade.rating)
    return MTBenchScore(
        score=statistics.fmean(g.rating for g in parsed) if parsed else None,
        turn_scores={turn: statistics.fmean(v) for turn, v in sorted(by_turn.items())},
        category_scores={category: statistics.fmean(v) for category, v in sorted(by_category.items())},
        graded=len(parsed),
        unparseable=len(grades) - len(parsed),
    )


def grade_mt_bench_cached(
    grader: MTBenchGrader,
    prompts: Sequence[EvalPrompt],
    answers: Mapping[tuple[str, int], str],
    cache_path: str | Path,
    chunk_size: int = 16,
    show_progress: bool = True,
) -> list[MTBenchGrade]:
    """`grader.grade(prompts, answers)` for every turn, cached by (prompt, turn, the answers up to that turn)."""
    cache = JsonlCache(cache_path, ("prompt_id", "turn", "answers"), settings={"grader": grader.name})

    def key(prompt: EvalPrompt, turn: int) -> tuple:
        return (prompt.prompt_id, turn, text_digest(*(answers[(prompt.prompt_id, t)] for t in range(turn + 1))))

    todo = [p for p in prompts if any(key(p, t) not in cache for t in range(len(p.turns)))]
    for start in tqdm(
        range(0, len(todo), chunk_size), desc=f"Grading ({grader.name})", disable=not show_progress or not todo
    ):
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
