"""Evaluate like the paper: answers from each method and the SFT model, pairwise judges in both orders, win rate with
ties = 0.5 and a bootstrap CI, MT-Bench 1–10 grades, answer lengths, and the Table 1 layout.

    prompt_sets      AlpacaEval / Arena-Hard / LIMA / MT-Bench / embedded task → EvalPrompt
    answering        answers per (model, prompt, turn), cached in JSONL (transformers; vllm_generation: vLLM)
    chat_model       the ChatModel protocol; openai_chat (HTTP API), local_chat (a local HF model)
    judge_prompts    what a judge is asked;  verdicts: strict [[A>B]] / [[n]] parsers
    pairwise_judge   PairwiseJudge, LLMPairwiseJudge (both orders, position_swap rule); exact_judge
    mt_bench         single-answer grading of both turns, with references for math / reasoning / coding
    judging          judging with a JSONL cache;  win_rate, length_stats, results, results_table
    evaluation_runner  run_evaluation: the whole run from an EvaluationConfig (recipes/evaluate.py)
    win_rate_callback  WinRateCallback: eval/win_rate during training
"""

from .answering import TransformersAnswerGenerator, answer_prompts
from .chat_model import ChatModel
from .evaluation_config import EvaluationConfig
from .evaluation_runner import run_evaluation
from .exact_judge import ExactAnswerJudge
from .generation import generate_answers
from .length_stats import LengthStats, length_stats
from .local_chat import LocalChatModel
from .mt_bench import MTBenchGrader, MTBenchScore, mt_bench_score
from .openai_chat import ChatRequestError, MissingAPIKeyError, OpenAIChatModel
from .pairwise_judge import LLMPairwiseJudge, PairJudgement, PairToJudge, PairwiseJudge
from .position_swap import combine_orders
from .prompt_sets import EvalPrompt, load_prompt_set
from .results import EvaluationReport, summarize_pairwise
from .verdicts import parse_rating, parse_verdict
from .win_rate import WinRate, win_rate
from .win_rate_callback import WinRateCallback

__all__ = [
    "ChatModel",
    "ChatRequestError",
    "EvalPrompt",
    "EvaluationConfig",
    "EvaluationReport",
    "ExactAnswerJudge",
    "LLMPairwiseJudge",
    "LengthStats",
    "LocalChatModel",
    "MTBenchGrader",
    "MTBenchScore",
    "MissingAPIKeyError",
    "OpenAIChatModel",
    "PairJudgement",
    "PairToJudge",
    "PairwiseJudge",
    "TransformersAnswerGenerator",
    "WinRate",
    "WinRateCallback",
    "answer_prompts",
    "combine_orders",
    "generate_answers",
    "length_stats",
    "load_prompt_set",
    "mt_bench_score",
    "parse_rating",
    "parse_verdict",
    "run_evaluation",
    "summarize_pairwise",
    "win_rate",
]
