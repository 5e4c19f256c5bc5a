"""Evaluate like the paper: answers from each method and the SFT model, pairwise judges in both orders, win rate with
ties = 0.5 and a bootstrap CI, MT-Bench 1–10 grades, answer lengths, and the Table 1 layout.

    prompt_sets   AlpacaEval / Arena-Hard / LIMA / MT-Bench / the embedded task / your own (jsonl) → EvalPrompt
    answer_checks your task's right answers: `answer_check: module:function` or `answer_pattern` (a regex)
    answers       answers per (model, prompt, turn), cached in JSONL (transformers or vLLM)      [cache: JsonlCache]
    chat_models   what a judge talks to: an OpenAI-compatible API, or a local Hugging Face model
    verdicts      what a judge is asked (MT-Bench's prompts) and strict parsers of what it answers, both orders
    judges        pairwise judges: LLMPairwiseJudge, ExactAnswerJudge, yours (`judge: module:Class`), cached
    mt_bench      MT-Bench's 1–10 single-answer grading, cached
    results       win rate, accuracy, lengths, EvaluationReport and the Table 1 markdown
    config        EvaluationConfig: the settings of `trl-dpr evaluate`
    runner        run_evaluation: the whole run from an EvaluationConfig
    callback      WinRateCallback: eval/win_rate during training

The embedded task's judge is `ExactAnswerJudge` (`judge: exact`): its exact answers decide; on your own task, your
answer check does.
"""

# `X as X`: importable (docs/evaluation.md builds judges from these), not advertised; `__all__` is the entry points.
from .answers import TransformersAnswerGenerator as TransformersAnswerGenerator
from .answers import answer_prompts as answer_prompts
from .callback import WinRateCallback
from .chat_models import ChatModel as ChatModel
from .chat_models import ChatRequestError as ChatRequestError
from .chat_models import LocalChatModel as LocalChatModel
from .chat_models import MissingAPIKeyError as MissingAPIKeyError
from .chat_models import OpenAIChatModel as OpenAIChatModel
from .config import EvaluationConfig
from .judges import ExactAnswerJudge, LLMPairwiseJudge
from .judges import MTBenchGrader as MTBenchGrader
from .judges import MTBenchScore as MTBenchScore
from .judges import PairJudgement as PairJudgement
from .judges import PairToJudge as PairToJudge
from .judges import PairwiseJudge as PairwiseJudge
from .judges import combine_orders as combine_orders
from .judges import mt_bench_score as mt_bench_score
from .judges import parse_rating as parse_rating
from .judges import parse_verdict as parse_verdict
from .prompt_sets import EvalPrompt as EvalPrompt
from .prompt_sets import load_prompt_set as load_prompt_set
from .results import AccuracyResult as AccuracyResult
from .results import EvaluationReport as EvaluationReport
from .results import LengthStats as LengthStats
from .results import WinRate as WinRate
from .results import length_stats as length_stats
from .results import summarize_pairwise as summarize_pairwise
from .results import win_rate as win_rate
from .runner import run_evaluation

# The entry points: `run_evaluation(EvaluationConfig(...))` is `trl-dpr evaluate`; `WinRateCallback` with a judge
# (`LLMPairwiseJudge`, or `ExactAnswerJudge` on the embedded task) is the win rate during training.
__all__ = ["EvaluationConfig", "ExactAnswerJudge", "LLMPairwiseJudge", "WinRateCallback", "run_evaluation"]
