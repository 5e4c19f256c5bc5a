"""MT-Bench single-answer grading: a judge rates each of the two answers of a conversation from 1 to 10.

As in MT-Bench (Zheng et al., 2023): turn 1 is graded on the first question alone; turn 2 on the whole conversation,
focusing on the second answer. Questions of the math, reasoning and coding categories are graded against their
reference answers. The score is the mean rating over every graded (question, turn); unparseable ratings are counted
and left out of the mean.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from .chat_model import ChatModel
from .judge_prompts import single_grade_messages
from .prompt_sets import EvalPrompt
from .verdicts import parse_rating

__all__ = ["REFERENCE_CATEGORIES", "MTBenchGrade", "MTBenchGrader", "MTBenchScore", "mt_bench_score"]

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
    """Rates answers with a chat model (paper: GPT-4o at temperature 0) in MT-Bench's single-answer format.

    Args:
        chat: the judge backend (`OpenAIChatModel`, `LocalChatModel`, ...).
        reference_categories: categories graded against the question's reference answers.

    Example:
        >>> class Grader:
        ...     name = "fixed"
        ...     def complete_batch(self, conversations):
        ...         return ["Helpful and correct. Rating: [[8]]" for _ in conversations]
        >>> prompt = EvalPrompt("111", ("Area of a 2x3 rectangle?", "And its perimeter?"), "math", ("6", "10"))
        >>> grades = MTBenchGrader(Grader()).grade([prompt], {("111", 0): "6", ("111", 1): "10"})
        >>> [(g.turn, g.rating, g.used_reference) for g in grades]
        [(0, 8.0, True), (1, 8.0, True)]
    """

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
                MTBenchGrade(prompt.prompt_id, turn, prompt.category, parsed.value, parsed.problem, reply, used_reference)
            )
        return grades


def mt_bench_score(grades: Sequence[MTBenchGrade]) -> MTBenchScore:
    """Aggregate grades: the MT-Bench score is the mean of all parseable ratings (both turns).

    Example:
        >>> grades = [MTBenchGrade("1", 0, "writing", 8.0), MTBenchGrade("1", 1, "writing", 6.0),
        ...           MTBenchGrade("2", 0, "math", None, "no rating in [[n]] format")]
        >>> result = mt_bench_score(grades)
        >>> result.score, result.turn_scores, result.unparseable
        (7.0, {1: 8.0, 2: 6.0}, 1)
    """
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
