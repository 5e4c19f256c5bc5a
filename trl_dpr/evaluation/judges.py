"""Judges: how an LLM (or the exact answers) decides between two answers, and how MT-Bench grades one.

    pairwise_messages ─► ChatModel ─► parse_verdict ([[A>B]]) ─► candidate_outcome ─► combine_orders (both orders)
    single_grade_messages ─► ChatModel ─► parse_rating ([[7]]) ─► mt_bench_score
    judge_pairs_cached / grade_mt_bench_cached: the same, with every verdict saved to JSONL as it comes back

Prompts are MT-Bench's (Zheng et al., 2023). A missing, malformed or contradicted verdict, in either order, is
unparseable (None): counted and reported, never guessed. The position rules' table: docs/evaluation.md. Judge calls
cost money, so each chunk of verdicts is saved at once, keyed by the prompt and a hash of the answers.
"""

from __future__ import annotations

import hashlib
import logging
import re
import statistics
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..embedded.task import is_correct
from .cache import JsonlCache
from .chat_models import ChatModel
from .prompt_sets import EvalPrompt

logger = logging.getLogger(__name__)


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
    user = _PAIRWISE_USER.format(question=question, answer_a=answer_a, answer_b=answer_b, reference_block=reference_block)
    return [{"role": "system", "content": PAIRWISE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def single_grade_messages(
    questions: list[str], answers: list[str], references: list[str] | None = None
) -> list[dict]:
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
    """"win" / "tie" / "loss" of the candidate from a verdict label, given whether it was shown as "A" or "B".

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


# ---- pairwise judges ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairToJudge:
    """One comparison: `candidate` against `baseline` (SFT) on `question`, with the benchmark's `reference` if any."""

    question: str
    candidate: str
    baseline: str
    reference: str | None = None


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
        problems = [f"{order}: {p.problem}" for order, p in zip(("candidate as A", "candidate as B"), parsed) if p.problem]
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
            scores = [(float(is_correct(p.candidate, p.reference)), float(is_correct(p.baseline, p.reference)))
                      for p in pairs]
        else:
            answers = [p.reference for p in pairs]
            prompts = [p.question for p in pairs]
            scores = list(zip(self.check([p.candidate for p in pairs], answers, prompts),
                              self.check([p.baseline for p in pairs], answers, prompts)))
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


# ---- MT-Bench single-answer grading -----------------------------------------------------------------------------

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
                MTBenchGrade(prompt.prompt_id, turn, prompt.category, parsed.value, parsed.problem, reply, used_reference)
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


# ---- judging with a cache ---------------------------------------------------------------------------------------

def text_digest(*texts: str) -> str:
    """A short, stable fingerprint of some texts (to key cached verdicts by the exact answers judged)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return digest.hexdigest()[:16]


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
    for start in tqdm(range(0, len(todo), chunk_size), desc=f"Judging ({judge.name})", disable=not show_progress or not todo):
        chunk = todo[start : start + chunk_size]
        judgements = judge.judge_pairs([pairs[i] for i in chunk])
        cache.add_many(
            {"prompt_id": keys[i][0], "answers": keys[i][1], **judgement.as_dict()} for i, judgement in zip(chunk, judgements)
        )
    return [_judgement_from_record(cache.get(key)) for key in keys]


def _judgement_from_record(record: dict) -> PairJudgement:
    return PairJudgement(
        outcome=record["outcome"],
        verdicts=tuple(record.get("verdicts") or ()),
        judge_outputs=tuple(record.get("judge_outputs") or ()),
        problem=record.get("problem"),
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
    for start in tqdm(range(0, len(todo), chunk_size), desc=f"Grading ({grader.name})", disable=not show_progress or not todo):
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

