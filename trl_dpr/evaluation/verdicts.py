"""What a judge is asked and what it answers: MT-Bench's prompts (Zheng et al., 2023) and strict parsers.

    pairwise_messages ─► ChatModel ─► parse_verdict ([[A>B]]) ─► candidate_outcome ─► combine_orders (both orders)
    single_grade_messages ─► ChatModel ─► parse_rating ([[7]])

A missing, malformed or contradicted verdict, in either order, is unparseable (None): counted and reported, never
guessed. The position rules' table: docs/evaluation.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---- what a judge is asked ----------------------------------------------------------------------------------------

PAIRWISE_SYSTEM_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to the "
    "user question displayed below. Choose the assistant that follows the user's instructions and answers the "
    "user's question better, considering helpfulness, relevance, accuracy, depth, creativity and level of detail. "
    "If a reference answer is given, use it to check correctness. Begin your evaluation by comparing the two "
    "responses and give a short explanation. Avoid any position bias: the order in which the responses are "
    "presented must not influence your decision. Do not let the length of the responses or the names of the "
    "assistants influence you. Be as objective as possible. After your explanation, output your final verdict by "
    'strictly following this format: "[[A>B]]" if assistant A is better, "[[B>A]]" if assistant B is better, and '
    '"[[A=B]]" for a tie.'
)

_PAIRWISE_USER = (
    "[User Question]\n{question}\n\n{reference_block}"
    "[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)

_GRADER_SYSTEM = "You are a helpful assistant."

_GRADE_INSTRUCTION = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question displayed below. Your evaluation should consider factors such as the helpfulness, relevance, "
    "accuracy, depth, creativity, and level of detail of the response. Begin your evaluation by providing a short "
    "explanation. Be as objective as possible. After providing your explanation, you must rate the response on a "
    'scale of 1 to 10 by strictly following this format: "[[rating]]", for example: "Rating: [[5]]".'
)
_GRADE_INSTRUCTION_WITH_REFERENCE = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question displayed below. Your evaluation should consider correctness and helpfulness. You will be given a "
    "reference answer and the assistant's answer. Begin your evaluation by comparing the assistant's answer with the "
    "reference answer. Identify and correct any mistakes. Be as objective as possible. After providing your "
    "explanation, you must rate the response on a scale of 1 to 10 by strictly following this format: "
    '"[[rating]]", for example: "Rating: [[5]]".'
)
_SECOND_TURN_FOCUS = " Your evaluation should focus on the assistant's answer to the second user question."


def pairwise_messages(question: str, answer_a: str, answer_b: str, reference: str | None = None) -> list[dict]:
    """Chat messages asking a judge to compare answers A and B to `question` (with an optional reference answer)."""
    reference_block = (
        f"[The Start of Reference Answer]\n{reference}\n[The End of Reference Answer]\n\n" if reference else ""
    )
    user = _PAIRWISE_USER.format(
        question=question, answer_a=answer_a, answer_b=answer_b, reference_block=reference_block
    )
    return [{"role": "system", "content": PAIRWISE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def single_grade_messages(questions: list[str], answers: list[str], references: list[str] | None = None) -> list[dict]:
    """Chat messages asking a grader to rate the assistant's last answer from 1 to 10 (MT-Bench single grading).

    With two questions the grader sees the conversation and grades the second answer; `references` switch to
    MT-Bench's correctness-first instruction (math, reasoning, coding).
    """
    if not questions or len(questions) != len(answers):
        raise ValueError(f"Need one answer per question (got {len(questions)} questions, {len(answers)} answers).")
    if references is not None and len(references) < len(questions):
        raise ValueError(f"Need one reference per question (got {len(references)} for {len(questions)} questions).")
    instruction = _GRADE_INSTRUCTION_WITH_REFERENCE if references else _GRADE_INSTRUCTION
    if len(questions) == 1:
        body = ""
        if references:
            body += f"[The Start of Reference Answer]\n{references[0]}\n[The End of Reference Answer]\n\n"
        body += f"[Question]\n{questions[0]}\n\n[The Start of Assistant's Answer]\n{answers[0]}\n[The End of Assistant's Answer]"
    else:
        instruction += _SECOND_TURN_FOCUS
        body = ""
        if references:
            reference_turns = "".join(
                f"### User:\n{q}\n\n### Reference answer:\n{r}\n\n" for q, r in zip(questions, references)
            )
            body += f"<|The Start of Reference Answer|>\n\n{reference_turns}<|The End of Reference Answer|>\n\n\n"
        turns = "".join(f"### User:\n{q}\n\n### Assistant:\n{a}\n\n" for q, a in zip(questions, answers))
        body += (
            f"<|The Start of Assistant's Conversation with User|>\n\n{turns}"
            "<|The End of Assistant's Conversation with User|>"
        )
    return [{"role": "system", "content": _GRADER_SYSTEM}, {"role": "user", "content": f"{instruction}\n\n{body}"}]


# ---- what a judge answers: strict parsers ------------------------------------------------------------------------

# MT-Bench/AlpacaEval-style three-way labels plus Arena-Hard's "significantly better" ones (`>>`).
PAIRWISE_LABELS = ("A>>B", "A>B", "A=B", "B>A", "B>>A")
_VERDICT = re.compile(r"\[\[(A>>B|A>B|A=B|B>A|B>>A)\]\]")
# Anything that looks like an attempt at a verdict (for the error message): `[[A>B]`, `[A>B]]`, `[[ A > B ]]`, ...
_NEAR_VERDICT = re.compile(r"\[{1,2}\s*[AB]\s*(?:>>|>|=|<<|<)\s*[AB]\s*\]{0,2}")
_RATING = re.compile(r"\[\[(-?\d+(?:\.\d+)?)\]\]")


@dataclass(frozen=True)
class ParsedVerdict:
    """A pairwise verdict: `label` is one of `PAIRWISE_LABELS`, or None with the reason in `problem`."""

    label: str | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.label is not None


@dataclass(frozen=True)
class ParsedRating:
    """A single-answer rating: `value` in [low, high], or None with the reason in `problem`."""

    value: float | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


def parse_verdict(text: str) -> ParsedVerdict:
    """The one verdict label in a judge's output, e.g. `"... so A is better. [[A>B]]"` → `A>B`.

    Exactly one distinct well-formed `[[label]]` parses; none, or two different ones, is None (as Arena-Hard's parser).
    """
    found = _VERDICT.findall(text or "")
    distinct = list(dict.fromkeys(found))
    if len(distinct) == 1:
        return ParsedVerdict(distinct[0])
    if distinct:
        return ParsedVerdict(None, f"conflicting verdicts: {distinct}")
    near = _NEAR_VERDICT.search(text or "")
    if near:
        return ParsedVerdict(None, f"no well-formed verdict; found malformed {near.group(0)!r}")
    return ParsedVerdict(None, "no verdict in [[A>B]] / [[A=B]] / [[B>A]] format")


def parse_rating(text: str, low: float = 1.0, high: float = 10.0) -> ParsedRating:
    """The one `[[rating]]` in a grader's output, e.g. `"... Rating: [[7]]"` → 7.0; unparseable outside [low, high]."""
    found = [float(v) for v in _RATING.findall(text or "")]
    distinct = list(dict.fromkeys(found))
    if not distinct:
        return ParsedRating(None, "no rating in [[n]] format")
    if len(distinct) > 1:
        return ParsedRating(None, f"conflicting ratings: {distinct}")
    value = distinct[0]
    if not low <= value <= high:
        return ParsedRating(None, f"rating {value} outside [{low:g}, {high:g}]")
    return ParsedRating(value)


def candidate_outcome(label: str | None, candidate_position: str) -> str | None:
    """ "win" / "tie" / "loss" of the candidate from a verdict label, given whether it was shown as "A" or "B".

    Strength (`>>` vs `>`) does not change the outcome; None (unparseable) stays None.
    """
    if candidate_position not in ("A", "B"):
        raise ValueError(f"candidate_position must be 'A' or 'B', got {candidate_position!r}.")
    if label is None:
        return None
    if label not in PAIRWISE_LABELS:
        raise ValueError(f"Unknown verdict label {label!r}; expected one of {PAIRWISE_LABELS}.")
    if label == "A=B":
        return "tie"
    better = label[0]  # "A>B" / "A>>B" → A is better; "B>A" / "B>>A" → B is better
    return "win" if better == candidate_position else "loss"


# ---- one outcome from both orders --------------------------------------------------------------------------------

POSITION_RULES = ("consistent", "lenient")
_SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


def combine_orders(candidate_as_a: str | None, candidate_as_b: str | None, rule: str = "consistent") -> str | None:
    """The pair's outcome for the candidate from its outcomes in the two orders (see the module's tables)."""
    if rule not in POSITION_RULES:
        raise ValueError(f"Unknown position rule {rule!r}; expected one of {POSITION_RULES}.")
    for outcome in (candidate_as_a, candidate_as_b):
        if outcome is not None and outcome not in _SCORE:
            raise ValueError(f"Outcomes must be 'win', 'tie', 'loss' or None (unparseable); got {outcome!r}.")
    if candidate_as_a is None or candidate_as_b is None:
        return None
    if rule == "consistent":
        return candidate_as_a if candidate_as_a == candidate_as_b else "tie"
    total = _SCORE[candidate_as_a] + _SCORE[candidate_as_b]
    return "win" if total > 1.0 else "tie" if total == 1.0 else "loss"
