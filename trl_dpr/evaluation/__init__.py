"""Evaluate like the paper: answers from the candidate and the SFT model, pairwise judges, win rate with ties = 0.5."""

from .exact_judge import ExactAnswerJudge
from .generation import generate_answers
from .win_rate import WinRate, win_rate

__all__ = ["ExactAnswerJudge", "WinRate", "generate_answers", "win_rate"]
