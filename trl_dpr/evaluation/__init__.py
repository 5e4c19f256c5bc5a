"""Evaluate like the paper: answers from each method and the SFT model, pairwise judges in both orders, win rate with
ties = 0.5 and a bootstrap CI, MT-Bench 1–10 grades, answer lengths, and the Table 1 layout.

    prompt_sets   AlpacaEval / Arena-Hard / LIMA / MT-Bench / the embedded task → EvalPrompt
    answers       answers per (model, prompt, turn), cached in JSONL (transformers or vLLM)      [cache: JsonlCache]
    chat_models   what a judge talks to: an OpenAI-compatible API, or a local Hugging Face model
    judges        judge prompts, strict verdict parsers, both orders, LLMPairwiseJudge, MT-Bench grading, cached
    results       win rate, accuracy, lengths, EvaluationReport and the Table 1 markdown
    config        EvaluationConfig: the settings of `trl-dpr evaluate`
    runner        run_evaluation: the whole run from an EvaluationConfig
    callback      WinRateCallback: eval/win_rate during training

The embedded task's judge is `ExactAnswerJudge` (`judge: exact`): its exact answers decide.
"""

from .answers import TransformersAnswerGenerator, answer_prompts
from .callback import WinRateCallback
from .chat_models import ChatModel, ChatRequestError, LocalChatModel, MissingAPIKeyError, OpenAIChatModel
from .config import EvaluationConfig
from .judges import (
    ExactAnswerJudge,
    LLMPairwiseJudge,
    MTBenchGrader,
    MTBenchScore,
    PairJudgement,
    PairToJudge,
    PairwiseJudge,
    combine_orders,
    mt_bench_score,
    parse_rating,
    parse_verdict,
)
from .prompt_sets import EvalPrompt, load_prompt_set
from .results import AccuracyResult, EvaluationReport, LengthStats, WinRate, length_stats, summarize_pairwise, win_rate
from .runner import run_evaluation

__all__ = [
    "AccuracyResult",
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
    "length_stats",
    "load_prompt_set",
    "mt_bench_score",
    "parse_rating",
    "parse_verdict",
    "run_evaluation",
    "summarize_pairwise",
    "win_rate",
]
