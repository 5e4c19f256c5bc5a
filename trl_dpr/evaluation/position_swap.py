"""One outcome from a pair judged in both orders, which cancels the judge's position bias.

Every pair is judged twice: once with the candidate shown as assistant A, once as assistant B. Each order gives the
candidate a "win", "tie" or "loss" (or None when the verdict is unparseable). The two are combined by a rule:

`consistent` (default; MT-Bench's convention, Zheng et al., 2023): a verdict counts only when both orders agree; any
disagreement is a tie.

| candidate as A \\ as B | win  | tie  | loss |
|-----------------------|------|------|------|
| win                   | win  | tie  | tie  |
| tie                   | tie  | tie  | tie  |
| loss                  | tie  | tie  | loss |

`lenient`: score each order (win 1, tie 0.5, loss 0) and add: above 1 is a win (win+win, win+tie), exactly 1 a tie
(tie+tie, win+loss), below 1 a loss (loss+loss, loss+tie).

| candidate as A \\ as B | win  | tie  | loss |
|-----------------------|------|------|------|
| win                   | win  | win  | tie  |
| tie                   | win  | tie  | loss |
| loss                  | tie  | loss | loss |

Both rules are symmetric in the two orders. If either order is unparseable the pair is unparseable (None): it is
left out of the win rate and counted in the report.
"""

from __future__ import annotations

__all__ = ["POSITION_RULES", "combine_orders"]

POSITION_RULES = ("consistent", "lenient")
_SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


def combine_orders(candidate_as_a: str | None, candidate_as_b: str | None, rule: str = "consistent") -> str | None:
    """The pair's outcome for the candidate from its outcomes in the two orders (see the module's tables).

    Example:
        >>> combine_orders("win", "win"), combine_orders("win", "tie"), combine_orders("win", "tie", rule="lenient")
        ('win', 'tie', 'win')
        >>> combine_orders("win", None) is None
        True
    """
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
