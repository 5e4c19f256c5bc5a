"""Strict parsers for what LLM judges write: pairwise verdicts (`[[A>B]]`) and single-answer ratings (`[[7]]`).

A judge explains first and gives its verdict last, so the parsers look for the bracketed label anywhere in the text.
They are strict on purpose: a verdict that is missing, malformed (`[[A>B]`, `A>B` without brackets) or contradicted by
a different one in the same output is *unparseable*, never guessed. Callers count unparseable outputs and report them
(see `PairJudgement.outcome is None`); they are never silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "PAIRWISE_LABELS",
    "ParsedRating",
    "ParsedVerdict",
    "candidate_outcome",
    "parse_rating",
    "parse_verdict",
]

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

    Rules: every well-formed `[[label]]` in the text is collected; exactly one distinct label (repeating it is fine)
    parses. No well-formed label, or two different ones, is unparseable (as in Arena-Hard's own parser).

    Example:
        >>> parse_verdict("Both are correct, but A explains the steps. My final verdict is: [[A>B]]").label
        'A>B'
        >>> parse_verdict("A is better [[A>B]").problem
        "no well-formed verdict; found malformed '[[A>B]'"
        >>> parse_verdict("[[A>B]] ... on reflection [[B>A]]").problem
        "conflicting verdicts: ['A>B', 'B>A']"
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
    """The one `[[rating]]` in a grader's output, e.g. `"... Rating: [[7]]"` → 7.0; unparseable outside [low, high].

    Example:
        >>> parse_rating("The answer is accurate and well organised. Rating: [[8]]").value
        8.0
        >>> parse_rating("Rating: [[11]]").problem
        'rating 11.0 outside [1, 10]'
        >>> parse_rating("Rating: 7").problem
        'no rating in [[n]] format'
    """
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
    """"win" / "tie" / "loss" of the candidate from a verdict label, given whether it was shown as "A" or "B".

    Strength (`>>` vs `>`) does not change the outcome; None (unparseable) stays None.

    Example:
        >>> candidate_outcome("A>>B", "A"), candidate_outcome("A>B", "B"), candidate_outcome("A=B", "B")
        ('win', 'loss', 'tie')
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
