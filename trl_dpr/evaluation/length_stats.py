"""Answer length statistics: LLM judges favour longer answers, so a win rate is read next to the lengths behind it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = ["LengthStats", "length_stats"]


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
    """Length statistics of `answers` (tokens counted without special tokens).

    Example:
        >>> stats = length_stats(["one two three", "four", "five six"])
        >>> stats.mean_words, stats.median_words
        (2.0, 2)
    """
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
