"""Win rate with ties counted 0.5, and its bootstrap confidence interval (the paper's Table 1 statistic)."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["WinRate", "win_rate"]

OUTCOME_SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


@dataclass
class WinRate:
    """Win rate of a candidate against a baseline over n judged prompts.

    Attributes:
        value: (wins + 0.5·ties) / n.
        ci_low, ci_high: percentile bootstrap confidence interval of `value` (resampling prompts).
        wins, ties, losses: counts.
        confidence: the interval's level (0.95 by default).
    """

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


def win_rate(
    outcomes: list[str], confidence: float = 0.95, num_resamples: int = 2000, seed: int = 0
) -> WinRate:
    """Win rate of `outcomes` ("win" / "tie" / "loss" for the candidate), ties = 0.5, with a bootstrap CI.

    Example:
        >>> result = win_rate(["win", "win", "tie", "loss"])
        >>> result.value  # (2 + 0.5) / 4
        0.625
    """
    unknown = set(outcomes) - set(OUTCOME_SCORE)
    if unknown:
        raise ValueError(f"Outcomes must be 'win', 'tie' or 'loss'; got {sorted(unknown)}.")
    if not outcomes:
        raise ValueError("No judged pairs: cannot compute a win rate from zero outcomes.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
    scores = [OUTCOME_SCORE[o] for o in outcomes]
    n = len(scores)
    rng = random.Random(seed)
    resampled = sorted(sum(rng.choices(scores, k=n)) / n for _ in range(num_resamples))
    tail = (1.0 - confidence) / 2.0
    low = resampled[int(tail * num_resamples)]
    high = resampled[min(num_resamples - 1, int((1.0 - tail) * num_resamples))]
    return WinRate(
        value=sum(scores) / n,
        ci_low=low,
        ci_high=high,
        wins=outcomes.count("win"),
        ties=outcomes.count("tie"),
        losses=outcomes.count("loss"),
        confidence=confidence,
    )
