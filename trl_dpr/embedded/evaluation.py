"""Judging the embedded task by its exact answers: one path for `make demo`, recipes/evaluate.py and the experiments.

A response is correct when its last `The answer is X.` gives the expected answer. The pairwise judge turns that into a
win / tie / loss for the candidate against the baseline (a correct answer beats a wrong one, anything else ties);
`run_evaluation` with `benchmarks: [demo]` and `judge: exact` reports it next to each model's accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..evaluation.judges import PairJudgement, PairToJudge, PairwiseJudge
from .task import is_correct

__all__ = ["ExactAnswerJudge"]


class ExactAnswerJudge(PairwiseJudge):
    """Pairwise judge from exact answers: "win" when only the candidate is correct, "loss" when only the baseline is,
    "tie" when both or neither are. Every verdict parses (there is no text to misread).

    Example:
        >>> ExactAnswerJudge().judge("The answer is 9.", "The answer is 8.", answer="9")
        'win'
        >>> ExactAnswerJudge().judge_pairs([PairToJudge("4+5?", "The answer is 8.", "The answer is 9.", reference="9")])[0].outcome
        'loss'
    """

    name = "exact-answer"

    def judge(self, candidate: str, baseline: str, answer: str) -> str:
        candidate_ok, baseline_ok = is_correct(candidate, answer), is_correct(baseline, answer)
        if candidate_ok == baseline_ok:
            return "tie"
        return "win" if candidate_ok else "loss"

    def judge_pairs(self, pairs: Sequence[PairToJudge]) -> list[PairJudgement]:
        missing = [i for i, pair in enumerate(pairs) if pair.reference is None]
        if missing:
            raise ValueError(
                f"ExactAnswerJudge needs the expected answer as `reference`; pairs {missing[:5]} have none. It only "
                "applies to prompt sets with exact answers (the embedded task, benchmark `demo`); use an LLM judge "
                "for open-ended benchmarks."
            )
        return [PairJudgement(self.judge(p.candidate, p.baseline, p.reference)) for p in pairs]
