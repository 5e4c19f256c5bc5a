"""The exact-answer judge of the embedded task: a correct answer beats a wrong one; otherwise it is a tie."""

from __future__ import annotations

from ..demo_task import is_correct

__all__ = ["ExactAnswerJudge"]


class ExactAnswerJudge:
    """Pairwise judge from exact answers: "win" when only the candidate is correct, "loss" when only the baseline is,
    "tie" when both or neither are.

    Example:
        >>> ExactAnswerJudge().judge("The answer is 9.", "The answer is 8.", answer="9")
        'win'
    """

    name = "exact-answer"

    def judge(self, candidate: str, baseline: str, answer: str) -> str:
        candidate_ok, baseline_ok = is_correct(candidate, answer), is_correct(baseline, answer)
        if candidate_ok == baseline_ok:
            return "tie"
        return "win" if candidate_ok else "loss"
