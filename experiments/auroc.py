"""Does the dense reward tell right from wrong? AUROC of the reward against exact correctness on the embedded task.

Two levels:

- **sequence**: Σ_t r̂_t of a response against whether its final answer is correct (per task kind, and over all);
- **token**, at the numbers the response computes ("a op b = c", checked locally: is c = a op b?):
    - `computed_number`: Σ r̂ over the tokens of c, correct c against wrong c;
    - `computed_digit`: the digit tokens of c that still agree with the true result (correct) against the first digit
      token where c departs from it (wrong) — the decision point of an arithmetic slip.

AUROC = P(reward of a correct item > reward of a wrong item) + ½ P(tie): 0.5 is chance, 1 a perfect ranking.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "ComputedNumber",
    "auroc",
    "find_computed_numbers",
    "token_char_spans",
    "computed_number_rewards",
    "top_token_rewards",
]

EQUATION = re.compile(r"(\d+) ([-+*]) (\d+) = (\d+)")
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def auroc(positive: list[float], negative: list[float]) -> float:
    """P(p > n) + ½ P(p = n) over all pairs of a positive and a negative score (Mann–Whitney U / (n₊·n₋)), from
    average ranks in O(n log n). NaN when either list is empty.

    Example:
        >>> auroc([3.0, 2.0], [1.0, 2.0])   # pairs: 3>1, 3>2, 2>1, 2=2 → (3 + 0.5) / 4
        0.875
        >>> math.isnan(auroc([1.0], []))
        True
    """
    n_pos, n_neg = len(positive), len(negative)
    if n_pos == 0 or n_neg == 0:
        return math.nan
    values = sorted([(float(v), True) for v in positive] + [(float(v), False) for v in negative])
    rank_sum_positive, i = 0.0, 0
    while i < len(values):
        j = i
        while j < len(values) and values[j][0] == values[i][0]:
            j += 1
        average_rank = (i + 1 + j) / 2  # ranks i+1 .. j share their mean
        rank_sum_positive += average_rank * sum(1 for _, is_positive in values[i:j] if is_positive)
        i = j
    return (rank_sum_positive - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@dataclass(frozen=True)
class ComputedNumber:
    """One "left op right = written" in a response; `start`/`end` are the character span of `written`."""

    left: int
    op: str
    right: int
    written: str
    start: int
    end: int

    @property
    def true_value(self) -> int:
        return OPERATIONS[self.op](self.left, self.right)

    @property
    def is_correct(self) -> bool:
        return int(self.written) == self.true_value


def find_computed_numbers(text: str) -> list[ComputedNumber]:
    """Every "a + b = c", "a - b = c", "a * b = c" in `text` (the embedded task's format), with c's span.

    Example:
        >>> [(n.written, n.true_value, n.is_correct) for n in find_computed_numbers("4 * 7 = 28. Total: 28 + 18 = 47.")]
        [('28', 28, True), ('47', 46, False)]
    """
    return [
        ComputedNumber(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4), m.start(4), m.end(4))
        for m in EQUATION.finditer(text)
    ]


def token_char_spans(tokens: list[str]) -> list[tuple[int, int]]:
    """The `[start, end)` character span of each token string in their concatenation.

    Example:
        >>> token_char_spans(["4", " *", " 7"])
        [(0, 1), (1, 3), (3, 5)]
    """
    spans, position = [], 0
    for token in tokens:
        spans.append((position, position + len(token)))
        position += len(token)
    return spans


def computed_number_rewards(
    tokens: list[str], rewards: list[float]
) -> tuple[list[tuple[float, bool]], list[tuple[float, bool]]]:
    """Token rewards at the computed numbers of one response, given its token strings and their rewards.

    Returns `(numbers, digits)`:
      - `numbers`: `(Σ r̂ over the tokens of c, c is correct)` per computed number c;
      - `digits`: `(r̂ of the token, True)` for each token of c whose digits still agree with the true result, and
        `(r̂, False)` for the first token that departs from it (later tokens of that number are left out).

    Example:
        >>> tokens = ["2", " +", " 3", " =", " ", "6", "."]
        >>> computed_number_rewards(tokens, [0, 0, 0, 0, 0, -1.5, 0])
        ([(-1.5, False)], [(-1.5, False)])
        >>> computed_number_rewards(["9", " +", " 5", " =", " ", "1", "5"], [0, 0, 0, 0, 0, 0.5, -2.0])
        ([(-1.5, False)], [(0.5, True), (-2.0, False)])
    """
    if len(tokens) != len(rewards):
        raise ValueError(f"Got {len(tokens)} tokens and {len(rewards)} rewards; pass one reward per token.")
    spans = token_char_spans(tokens)
    numbers, digits = [], []
    for number in find_computed_numbers("".join(tokens)):
        inside = [i for i, (start, end) in enumerate(spans) if start < number.end and end > number.start]
        if not inside:
            continue
        numbers.append((float(sum(rewards[i] for i in inside)), number.is_correct))
        truth = str(number.true_value)
        for i in inside:
            written_so_far = number.written[: min(spans[i][1], number.end) - number.start]
            agrees = truth.startswith(written_so_far)
            digits.append((float(rewards[i]), agrees))
            if not agrees:
                break
    return numbers, digits


def top_token_rewards(scored: list[dict], k: int, largest: bool = True, context_chars: int = 60) -> list[dict]:
    """The `k` largest (or smallest) token rewards over responses, with where they occur.

    `scored` holds one dict per response with `tokens` and `rewards` (as `CheckpointRewardModel.score_text` returns)
    and any other keys (e.g. `correct`, `sft_prob`, `ref_prob` lists), which are copied or indexed at the token.

    Returns dicts with `reward`, `token`, `response` (index), `before` / `after` (context text) and, when present,
    `correct`, `sft_prob`, `ref_prob`.

    Example:
        >>> top = top_token_rewards([{"tokens": ["a", "b", "c"], "rewards": [0.1, 2.0, -1.0]}], k=1)
        >>> top[0]["token"], top[0]["before"], top[0]["after"]
        ('b', 'a', 'c')
    """
    flat = [(r, i, t) for i, item in enumerate(scored) for t, r in enumerate(item["rewards"])]
    flat.sort(key=lambda x: -x[0] if largest else x[0])
    rows = []
    for reward, i, t in flat[:k]:
        item = scored[i]
        row = {
            "reward": float(reward),
            "token": item["tokens"][t],
            "response": i,
            "before": "".join(item["tokens"][:t])[-context_chars:],
            "after": "".join(item["tokens"][t + 1 :])[:context_chars],
        }
        if "correct" in item:
            row["correct"] = item["correct"]
        for key in ("sft_prob", "ref_prob"):
            if key in item:
                row[key] = item[key][t]
        rows.append(row)
    return rows
