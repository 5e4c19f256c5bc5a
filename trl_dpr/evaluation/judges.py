"""Pairwise judges: how an LLM, the right answers, or your own class decides between a candidate's answer and the
baseline's, and `judge_pairs_cached`, which saves every verdict to JSONL as it comes back (judge calls cost money),
keyed by the prompt and a hash of the answers.

    LLMPairwiseJudge   an LLM asked in both orders (verdicts.py: prompts, parsers, position rules)
    ExactAnswerJudge   right answers decide (the embedded task's, or your answer check)
    load_judge         `judge: module:Class`, a class of yours with `judge_pairs(pairs)`, named as `dense_reward` is
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..embedded.task import is_correct
from .cache import JsonlCache, text_digest
from .chat_models import ChatModel

# MT-Bench's grading and the verdicts' parsers, importable from here as before (`from trl_dpr.evaluation.judges import`)
from .mt_bench import MTBenchGrade as MTBenchGrade
from .mt_bench import MTBenchGrader as MTBenchGrader
from .mt_bench import MTBenchScore as MTBenchScore
from .mt_bench import grade_mt_bench_cached as grade_mt_bench_cached
from .mt_bench import mt_bench_score as mt_bench_score
from .verdicts import PAIRWISE_LABELS as PAIRWISE_LABELS
from .verdicts import POSITION_RULES, candidate_outcome, combine_orders, pairwise_messages, parse_verdict
from .verdicts import parse_rating as parse_rating
from .verdicts import single_grade_messages as single_grade_messages

# ---- pairwise judges ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairToJudge:
    """One comparison: `candidate` against `baseline` (SFT) on `question`, with the benchmark's `reference` if any."""

    question: str
    candidate: str
    baseline: str
    reference: str | None = None
    prompt: str | list[dict] | None = (
        None  # as the file wrote it, for an answer check (TRL's format); None: `question`
    )


@dataclass(frozen=True)
class PairJudgement:
    """A judge's decision on one pair: the candidate's `outcome` (None when unparseable, with the `problem`), and the
    `verdicts` and raw `judge_outputs` of each order, candidate as A first."""

    outcome: str | None
    verdicts: tuple[str | None, ...] = ()
    judge_outputs: tuple[str, ...] = ()
    problem: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class PairwiseJudge(ABC):
    """What `run_evaluation` and `WinRateCallback` need from a judge."""

    name: str = "judge"

    @abstractmethod
    def judge_pairs(self, pairs: Sequence[PairToJudge]) -> list[PairJudgement]:
        """One judgement per pair, in order."""


class LLMPairwiseJudge(PairwiseJudge):
    """An LLM judge asked for `[[A>B]]` / `[[A=B]]` / `[[B>A]]` (Arena-Hard's `>>` labels accepted too), in both orders.

    `position_rule` combines the two orders: "consistent" (default, MT-Bench's: disagreement is a tie) or "lenient".

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
        problems = [
            f"{order}: {p.problem}" for order, p in zip(("candidate as A", "candidate as B"), parsed) if p.problem
        ]
        return PairJudgement(
            outcome=outcome,
            verdicts=(parsed[0].label, parsed[1].label),
            judge_outputs=(reply_as_a, reply_as_b),
            problem="; ".join(problems) or None,
        )


class ExactAnswerJudge(PairwiseJudge):
    """Pairwise judge from exact answers: "win" when only the candidate is correct, "loss" when only the baseline is,
    "tie" when both or neither are. Every verdict parses (there is no text to misread). `check` is your task's
    `AnswerCheck` (a higher score wins); without one, the embedded task's `The answer is X.`.

    Example:
        >>> ExactAnswerJudge().judge("The answer is 9.", "The answer is 8.", answer="9")
        'win'
        >>> ExactAnswerJudge().judge_pairs([PairToJudge("4+5?", "The answer is 8.", "The answer is 9.", reference="9")])[0].outcome
        'loss'
    """

    def __init__(self, check=None):
        self.check = check
        self.name = "exact-answer" if check is None else f"exact-answer:{check.name}"

    def judge(self, candidate: str, baseline: str, answer: str) -> str:
        return self._outcomes([PairToJudge("", candidate, baseline, answer)])[0]

    def _outcomes(self, pairs: Sequence[PairToJudge]) -> list[str]:
        if self.check is None:
            scores = [
                (float(is_correct(p.candidate, p.reference)), float(is_correct(p.baseline, p.reference)))
                for p in pairs
            ]
        else:
            answers = [p.reference for p in pairs]
            prompts = [p.question if p.prompt is None else p.prompt for p in pairs]
            scores = list(
                zip(
                    self.check([p.candidate for p in pairs], answers, prompts),
                    self.check([p.baseline for p in pairs], answers, prompts),
                )
            )
        return ["tie" if c == b else "win" if c > b else "loss" for c, b in scores]

    def judge_pairs(self, pairs: Sequence[PairToJudge]) -> list[PairJudgement]:
        missing = [i for i, pair in enumerate(pairs) if pair.reference is None]
        if missing:
            raise ValueError(
                f"ExactAnswerJudge needs the expected answer as `reference`; pairs {missing[:5]} have none. It only "
                "applies to prompt sets with answers (the embedded task, benchmark `demo`, or your own, `jsonl`); use "
                "an LLM judge for open-ended benchmarks."
            )
        return [PairJudgement(outcome) for outcome in self._outcomes(pairs)]


class _YourJudge(PairwiseJudge):
    """A judge of yours (`load_judge`), its answers checked: one per pair, each an outcome or a `PairJudgement`."""

    def __init__(self, judge, spec: str):
        self.judge = judge
        self.name = str(getattr(judge, "name", spec))

    def judge_pairs(self, pairs: Sequence[PairToJudge]) -> list[PairJudgement]:
        answers = list(self.judge.judge_pairs(list(pairs)))
        if len(answers) != len(pairs):
            raise ValueError(
                f"judge {self.name} returned {len(answers)} judgements for {len(pairs)} pairs; it must "
                "return one per pair."
            )
        judgements = [a if isinstance(a, PairJudgement) else PairJudgement(a) for a in answers]
        bad = [j.outcome for j in judgements if j.outcome not in ("win", "tie", "loss", None)]
        if bad:
            raise ValueError(
                f"judge {self.name} returned the outcome {bad[0]!r}; each must be 'win', 'tie' or 'loss' "
                "(the candidate's, against the baseline), None when it cannot say, or a PairJudgement."
            )
        return judgements


def load_judge(spec: str) -> PairwiseJudge:
    """`judge: module:Class`: your class, built with no arguments, with `judge_pairs(pairs)` returning the candidate's
    outcome per `PairToJudge` ("win" / "tie" / "loss", None when it cannot say). Named as `dense_reward` is.

    Example:
        >>> import sys, types
        >>> sys.modules["my_judges"] = types.SimpleNamespace(ShorterWins=type("ShorterWins", (), {
        ...     "judge_pairs": lambda self, pairs: ["win" if len(p.candidate) < len(p.baseline) else "loss" for p in pairs]}))
        >>> load_judge("my_judges:ShorterWins").judge_pairs([PairToJudge("2+2?", "4", "It is 4.")])[0].outcome
        'win'
    """
    from .answer_checks import import_named

    factory = import_named(spec, "judge", "my_judges:MyJudge", "a class {}() with judge_pairs(pairs) -> outcomes")
    judge = factory()
    if not callable(getattr(judge, "judge_pairs", None)):
        raise ValueError(
            f"judge {spec!r} has no judge_pairs(pairs) method: it must return 'win' / 'tie' / 'loss' (or "
            "None) for each PairToJudge(question, candidate, baseline, reference)."
        )
    return _YourJudge(judge, spec)


# ---- judging with a cache ---------------------------------------------------------------------------------------


def judge_pairs_cached(
    judge: PairwiseJudge,
    prompt_ids: Sequence[str],
    pairs: Sequence[PairToJudge],
    cache_path: str | Path,
    settings: dict | None = None,
    chunk_size: int = 64,
    show_progress: bool = True,
) -> list[PairJudgement]:
    """`judge.judge_pairs(pairs)`, reading cached judgements back and saving new ones chunk by chunk."""
    if len(prompt_ids) != len(pairs):
        raise ValueError(f"Got {len(prompt_ids)} prompt ids for {len(pairs)} pairs.")
    cache = JsonlCache(cache_path, ("prompt_id", "answers"), settings=settings or {"judge": judge.name})
    keys = [(pid, text_digest(p.candidate, p.baseline, p.reference or "")) for pid, p in zip(prompt_ids, pairs)]
    todo = [i for i, key in enumerate(keys) if key not in cache]
    for start in tqdm(
        range(0, len(todo), chunk_size), desc=f"Judging ({judge.name})", disable=not show_progress or not todo
    ):
        chunk = todo[start : start + chunk_size]
        judgements = judge.judge_pairs([pairs[i] for i in chunk])
        cache.add_many(
            {"prompt_id": keys[i][0], "answers": keys[i][1], **judgement.as_dict()}
            for i, judgement in zip(chunk, judgements)
        )
    return [_judgement_from_record(cache.get(key)) for key in keys]


def _judgement_from_record(record: dict) -> PairJudgement:
    return PairJudgement(
        outcome=record["outcome"],
        verdicts=tuple(record.get("verdicts") or ()),
        judge_outputs=tuple(record.get("judge_outputs") or ()),
        problem=record.get("problem"),
    )
