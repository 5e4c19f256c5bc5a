"""Pairwise judges: the protocol every judge follows, and the LLM judge that asks in both orders.

A judge takes `PairToJudge`s (a question, the candidate's answer, the baseline's answer, maybe a reference) and
returns one `PairJudgement` per pair whose `outcome` is "win" / "tie" / "loss" for the candidate, or None when the
judge's verdict could not be parsed. Implementations: `LLMPairwiseJudge` (any `ChatModel`: an OpenAI-compatible API
or a local Hugging Face model) and `ExactAnswerJudge` (the embedded task's exact answers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .chat_model import ChatModel
from .judge_prompts import pairwise_messages
from .position_swap import POSITION_RULES, combine_orders
from .verdicts import candidate_outcome, parse_verdict

__all__ = ["LLMPairwiseJudge", "PairJudgement", "PairToJudge", "PairwiseJudge"]


@dataclass(frozen=True)
class PairToJudge:
    """One comparison: `candidate` (the method being evaluated) against `baseline` (SFT) on `question`.

    `reference` is a reference answer when the benchmark has one (the embedded task's exact answer).
    """

    question: str
    candidate: str
    baseline: str
    reference: str | None = None


@dataclass(frozen=True)
class PairJudgement:
    """A judge's decision on one pair.

    Attributes:
        outcome: "win" / "tie" / "loss" for the candidate; None when unparseable (left out of the win rate, counted).
        verdicts: the parsed label of each order, candidate shown as A first, then as B (None where unparseable).
        judge_outputs: the judge's raw replies, same order (empty for judges that do not write text).
        problem: why the outcome is None.
    """

    outcome: str | None
    verdicts: tuple[str | None, ...] = ()
    judge_outputs: tuple[str, ...] = ()
    problem: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class PairwiseJudge(ABC):
    """What `run_evaluation` and `WinRateCallback` need from a judge.

    Example:
        >>> class LongerWins(PairwiseJudge):
        ...     name = "longer-wins"
        ...     def judge_pairs(self, pairs):
        ...         return [PairJudgement("win" if len(p.candidate) > len(p.baseline) else "loss") for p in pairs]
        >>> LongerWins().judge_pairs([PairToJudge("q", "a long answer", "short")])[0].outcome
        'win'
    """

    name: str = "judge"

    @abstractmethod
    def judge_pairs(self, pairs: Sequence[PairToJudge]) -> list[PairJudgement]:
        """One judgement per pair, in order."""


class LLMPairwiseJudge(PairwiseJudge):
    """An LLM judge asked for `[[A>B]]` / `[[A=B]]` / `[[B>A]]` (Arena-Hard's `>>` labels accepted too), in both orders.

    Every pair is sent twice, candidate as assistant A then as assistant B, and the two outcomes are combined by
    `position_rule` (see `trl_dpr.evaluation.position_swap`: "consistent" = MT-Bench's rule, disagreement is a tie).

    Args:
        chat: the judge backend, e.g. `OpenAIChatModel(model="gpt-4o")` or `LocalChatModel(model, tokenizer)`.
        position_rule: "consistent" (default) or "lenient".

    Example:
        >>> class AlwaysPrefersA:  # a judge with a pure position bias
        ...     name = "biased"
        ...     def complete_batch(self, conversations):
        ...         return ["A is better. [[A>B]]" for _ in conversations]
        >>> judgement = LLMPairwiseJudge(AlwaysPrefersA()).judge_pairs([PairToJudge("q", "x", "y")])[0]
        >>> judgement.verdicts, judgement.outcome  # a win as A, a loss as B: inconsistent, so a tie
        (('A>B', 'A>B'), 'tie')
    """

    def __init__(self, chat: ChatModel, position_rule: str = "consistent"):
        if position_rule not in POSITION_RULES:
            raise ValueError(f"position_rule must be one of {POSITION_RULES}, got {position_rule!r}.")
        self.chat = chat
        self.position_rule = position_rule
        self.name = f"pairwise:{chat.name}"

    def judge_pairs(self, pairs: Sequence[PairToJudge]) -> list[PairJudgement]:
        conversations = []
        for pair in pairs:
            conversations.append(pairwise_messages(pair.question, pair.candidate, pair.baseline, pair.reference))
            conversations.append(pairwise_messages(pair.question, pair.baseline, pair.candidate, pair.reference))
        replies = self.chat.complete_batch(conversations)
        if len(replies) != len(conversations):
            raise RuntimeError(f"The judge backend returned {len(replies)} replies for {len(conversations)} prompts.")
        return [self._judgement(replies[2 * i], replies[2 * i + 1]) for i in range(len(pairs))]

    def _judgement(self, reply_as_a: str, reply_as_b: str) -> PairJudgement:
        parsed = (parse_verdict(reply_as_a), parse_verdict(reply_as_b))
        outcome = combine_orders(
            candidate_outcome(parsed[0].label, "A"), candidate_outcome(parsed[1].label, "B"), self.position_rule
        )
        problems = [f"{order}: {p.problem}" for order, p in zip(("candidate as A", "candidate as B"), parsed) if p.problem]
        return PairJudgement(
            outcome=outcome,
            verdicts=(parsed[0].label, parsed[1].label),
            judge_outputs=(reply_as_a, reply_as_b),
            problem="; ".join(problems) or None,
        )
