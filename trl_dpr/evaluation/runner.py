"""`run_evaluation`: the paper's evaluation from an `EvaluationConfig` — what `trl-dpr evaluate` runs.

    check (model folders, prompt files, the judge's API key) → answers of every model (cached)
    → pairwise judgements vs the baseline, MT-Bench grades (cached) → win rates, scores, lengths → results.{json,md}

The one evaluation of the embedded task too (`make demo`, the experiments), so the same settings give the same numbers
wherever it runs from. `samples_per_prompt` > 1 answers each prompt several times (ids `<id>#<k>`); intervals then
resample prompts. The cached files under `output_dir`: docs/evaluation.md.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

from ..data import string_prompts_as_chat
from ..field_checks import check_fits_context, tightest_prompt_context
from ..reference_manifest import check_model_source
from ..resources import check_output_dir, free_memory
from .answer_checks import AnswerCheck, answer_check_from, embedded_check
from .answers import answer_prompts, is_vllm_available, load_answer_generator, weights_fingerprint
from .cache import JsonlCache
from .chat_models import ChatModel, LocalChatModel, OpenAIChatModel
from .config import EvaluationConfig
from .judges import (
    ExactAnswerJudge,
    LLMPairwiseJudge,
    MTBenchGrader,
    PairToJudge,
    PairwiseJudge,
    grade_mt_bench_cached,
    judge_pairs_cached,
    load_judge,
    mt_bench_score,
)
from .prompt_sets import EvalPrompt, load_prompt_set
from .results import EvaluationReport, MTBenchResult, PairwiseResult, exact_accuracy, length_stats, summarize_pairwise

logger = logging.getLogger(__name__)


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _generation_settings(config: EvaluationConfig, model_path: str) -> dict:
    """What makes answers reusable: the model (its path and the weights there now), the backend that sampled them and
    the sampling settings."""
    backend = config.generation_backend
    if backend == "auto":
        import torch

        is_adapter = (Path(model_path) / "adapter_config.json").is_file()
        on_gpu = config.device != "cpu" and torch.cuda.is_available()
        backend = "vllm" if is_vllm_available() and on_gpu and not is_adapter else "transformers"
    return {
        "model_path": str(model_path),
        "weights": weights_fingerprint(model_path),
        "backend": backend,
        "temperature": config.temperature,
        "max_new_tokens": config.max_new_tokens,
        "seed": config.seed,
    }


def check_answers_fit_context(
    config: EvaluationConfig, models: dict[str, str], prompt_sets: dict | None = None
) -> None:
    """Each model's longest prompt (its first turn, rendered as the model reads it) + `max_new_tokens` must fit the
    model's context (`check_fits_context`), before any model loads. Every model and benchmark is measured first and
    the tightest is named, so the value it gives fits them all. A later turn also holds the earlier answers, whose
    lengths are not known yet. `trl-dpr dpr|spin|gsil` run it before training, on π_SFT (the candidate's context)."""
    prompt_sets = _prompt_sets(config) if prompt_sets is None else prompt_sets
    conversations = {benchmark: [p.model_input([]) for p in prompts] for benchmark, prompts in prompt_sets.items()}
    tightest = tightest_prompt_context(models, conversations, trust_remote_code=config.trust_remote_code)
    if tightest is not None:
        model_config, name, benchmark, longest = tightest
        check_fits_context(
            model_config,
            f"model {name}",
            {f"the longest {benchmark} prompt": longest, "max_new_tokens": config.max_new_tokens},
            lower="max_new_tokens",
            alone=f"leave {benchmark} out of benchmarks, evaluate fewer of its prompts (max_prompts) so that the longest "
            "is left out, or use a model with a longer context",
        )


def _prompt_sets(config: EvaluationConfig) -> dict[str, list[EvalPrompt]]:
    """Each benchmark's prompts, each `samples_per_prompt` times; your file's string prompts as the baseline π_SFT
    reads them (`string_prompts_as_chat`, DPR's rule): raw text for a π_SFT trained on it, else user turns."""
    prompt_sets = {
        b: _replicated(
            load_prompt_set(
                b,
                config.prompt_path(b),
                limit=config.max_prompts,
                **({"num_prompts": config.demo_num_prompts, "seed": config.demo_seed} if b == "demo" else {}),
            ),
            config.samples_per_prompt,
        )
        for b in config.benchmarks
    }
    strings = [p.turns[0] for p in prompt_sets.get("jsonl", []) if not p.conversational]
    if strings:
        from transformers import AutoTokenizer

        baseline = config.models()[config.baseline_name]
        tokenizer = AutoTokenizer.from_pretrained(baseline, trust_remote_code=config.trust_remote_code)
        if not string_prompts_as_chat(baseline, tokenizer, strings, "jsonl", baseline=config.baseline_name):
            prompt_sets["jsonl"] = [dataclasses.replace(p, as_text=not p.conversational) for p in prompt_sets["jsonl"]]
    return prompt_sets


def _answer_caches(config: EvaluationConfig, name: str, path: str, prompt_sets: dict, output_dir: Path) -> dict:
    """The answers of model `name` cached under `output_dir`, one cache per benchmark (those of its settings; answers
    to raw-text prompts are not those to the same prompts as user turns); those of other weights at the same path
    (retrained since) are made again."""
    settings = _generation_settings(config, path)
    return {
        b: JsonlCache(
            output_dir / "answers" / b / f"{_file_name(name)}.jsonl",
            ("model", "prompt_id", "turn"),
            {**settings, "prompts": "raw text"} if any(p.as_text for p in prompts) else settings,
            renewed_by=("weights",),
        )
        for b, prompts in prompt_sets.items()
    }


def _answers_missing(name: str, caches: dict, prompt_sets: dict) -> bool:
    return any(
        (name, p.prompt_id, t) not in caches[b]
        for b, prompts in prompt_sets.items()
        for p in prompts
        for t in range(len(p.turns))
    )


def _generate_all_answers(config, models, prompt_sets, answer_caches: dict, show_progress: bool) -> dict:
    """`answers[benchmark][model][(prompt_id, turn)]`; a model is loaded only when some of its answers are missing."""
    answers: dict = {benchmark: {} for benchmark in prompt_sets}
    for name, path in models.items():
        caches = answer_caches[name]
        generator = None
        if _answers_missing(name, caches, prompt_sets):
            logger.info(f"Loading {name} from {path} to answer the missing prompts.")
            generator = load_answer_generator(
                path,
                backend=next(iter(caches.values())).settings["backend"],  # the settings its caches hold
                temperature=config.temperature,
                max_new_tokens=config.max_new_tokens,
                batch_size=config.generation_batch_size,
                seed=config.seed,
                dtype=config.dtype,
                device=config.device,
                trust_remote_code=config.trust_remote_code,
            )
        for benchmark, prompts in prompt_sets.items():
            answers[benchmark][name] = answer_prompts(
                generator,
                name,
                prompts,
                caches[benchmark],
                chunk_size=4 * config.generation_batch_size,
                show_progress=show_progress,
            )
        del generator
        free_memory()
    return answers


def chat_model_from_config(config: EvaluationConfig) -> ChatModel | None:
    """The judge's chat backend of an evaluation config (`openai` or `local`; None for the exact judge)."""
    if config.judge == "openai":
        return OpenAIChatModel(
            model=config.judge_model,
            base_url=config.judge_base_url,
            api_key_env=config.judge_api_key_env,
            temperature=config.judge_temperature,
            max_tokens=config.judge_max_tokens,
            timeout_s=config.judge_timeout_s,
            max_retries=config.judge_max_retries,
            max_workers=config.judge_max_workers,
        )
    if config.judge == "local":
        return LocalChatModel.from_pretrained(
            config.judge_model,
            dtype=config.dtype,
            device=config.device,
            trust_remote_code=config.trust_remote_code,
            max_new_tokens=config.judge_max_tokens,
        )
    return None


def judge_from_config(config: EvaluationConfig, chat: ChatModel | None = None) -> PairwiseJudge:
    """The pairwise judge of an evaluation config: exact answers (the embedded task's, or your `answer_check` /
    `answer_pattern`), or an LLM asked in both orders (`position_rule`)."""
    if config.judge == "exact":
        return ExactAnswerJudge(answer_check_from(config.answer_check, config.answer_pattern))
    if ":" in config.judge:
        return load_judge(config.judge)
    return LLMPairwiseJudge(chat or chat_model_from_config(config), config.position_rule)


def _pairwise_result(
    judge, config, benchmark, method, prompts: list[EvalPrompt], answers, output_dir, tokenizer, show_progress
):
    baseline = config.baseline_name
    pairs = [
        PairToJudge(
            p.turns[0],
            answers[method][(p.prompt_id, 0)],
            answers[baseline][(p.prompt_id, 0)],
            p.references[0] if p.references else None,
            p.as_written(),
        )
        for p in prompts
    ]
    judgements = judge_pairs_cached(
        judge,
        [p.prompt_id for p in prompts],
        pairs,
        output_dir / "judgements" / benchmark / f"{_file_name(method)}_vs_{_file_name(baseline)}.jsonl",
        settings={"judge": judge.name, "position_rule": config.position_rule},
        show_progress=show_progress,
    )
    rate, unparseable, disagreements = summarize_pairwise(
        judgements,
        confidence=config.confidence,
        num_resamples=config.bootstrap_resamples,
        seed=config.seed,
        groups=[_source_prompt_id(p) for p in prompts],
    )
    if unparseable:
        logger.warning(
            f"{benchmark}, {method} vs {baseline}: {unparseable} of {len(pairs)} verdicts unparseable (left out)."
        )
    return PairwiseResult(
        benchmark=benchmark,
        method=method,
        baseline=baseline,
        judge=judge.name,
        win_rate=rate,
        total=len(pairs),
        unparseable=unparseable,
        position_disagreements=disagreements,
        method_lengths=length_stats([pair.candidate for pair in pairs], tokenizer),
        baseline_lengths=length_stats([pair.baseline for pair in pairs], tokenizer),
    )


def _replicated(prompts: list[EvalPrompt], samples_per_prompt: int) -> list[EvalPrompt]:
    """Each prompt `samples_per_prompt` times in a row, as `<id>#<k>`: one cached answer per copy."""
    if samples_per_prompt == 1:
        return prompts
    return [dataclasses.replace(p, prompt_id=f"{p.prompt_id}#{k}") for p in prompts for k in range(samples_per_prompt)]


def _source_prompt_id(prompt: EvalPrompt) -> str:
    return prompt.prompt_id.split("#")[0]


def _exact_accuracy(
    config: EvaluationConfig, benchmark: str, name: str, prompts: list[EvalPrompt], answers, check: AnswerCheck
):
    """Accuracy of one model on a benchmark with right answers (the embedded task, yours), bootstrapped over prompts."""
    return exact_accuracy(
        benchmark,
        name,
        check(
            [answers[(p.prompt_id, 0)] for p in prompts],
            [p.references[0] for p in prompts],
            [p.as_written() for p in prompts],
        ),
        groups=[_source_prompt_id(p) for p in prompts],
        categories=[p.category for p in prompts],
        confidence=config.confidence,
        num_resamples=config.bootstrap_resamples,
        seed=config.seed,
    )


def run_evaluation(config: EvaluationConfig, show_progress: bool = True) -> EvaluationReport:
    """Evaluate every candidate against the baseline on `config.benchmarks`; write and return the report.

    Example:
        >>> config = EvaluationConfig(benchmarks=["demo"], judge="exact", output_dir="runs/eval-demo")
        >>> report = run_evaluation(config)  # doctest: +SKIP
        >>> print(report.as_dict()["table_markdown"])  # doctest: +SKIP
    """
    from transformers import AutoTokenizer

    models = config.models()
    for name, path in models.items():
        check_model_source(path, f"Model {name}")
    check = answer_check_from(
        config.answer_check, config.answer_pattern
    )  # an unimportable check fails before any model
    prompt_sets = _prompt_sets(config)
    chat = (
        chat_model_from_config(config) if config.judge == "openai" else None
    )  # checks the API key before any generation
    yours = (
        load_judge(config.judge) if ":" in config.judge else None
    )  # an unimportable judge of yours: before any model
    check_output_dir(config.output_dir)  # answers and verdicts are written there as they come: writable first
    output_dir = Path(config.output_dir)
    caches = {name: _answer_caches(config, name, path, prompt_sets, output_dir) for name, path in models.items()}
    to_answer = {  # a model whose answers are all cached is not loaded: its context is not checked
        name: path for name, path in models.items() if _answers_missing(name, caches[name], prompt_sets)
    }
    check_answers_fit_context(config, to_answer, prompt_sets)

    answers = _generate_all_answers(config, models, prompt_sets, caches, show_progress)

    if config.judge == "local":
        chat = chat_model_from_config(config)
    judge = yours or judge_from_config(config, chat)
    tokenizer = AutoTokenizer.from_pretrained(models[config.baseline_name], trust_remote_code=config.trust_remote_code)
    candidates = [name for name in models if name != config.baseline_name]
    report = EvaluationReport(
        baseline=config.baseline_name,
        methods=candidates,
        benchmarks=list(config.benchmarks),
        settings=dataclasses.asdict(config),
    )
    for benchmark, prompts in prompt_sets.items():
        if benchmark == "mt_bench":
            continue
        if benchmark == "demo" or (
            benchmark == "jsonl" and check is not None
        ):  # right answers: every model's accuracy
            report.accuracy += [
                _exact_accuracy(config, benchmark, name, prompts, answers[benchmark][name], check or embedded_check())
                for name in models
            ]
        for method in candidates:
            report.pairwise.append(
                _pairwise_result(
                    judge, config, benchmark, method, prompts, answers[benchmark], output_dir, tokenizer, show_progress
                )
            )
    if "mt_bench" in prompt_sets:
        grader = MTBenchGrader(chat)
        prompts = prompt_sets["mt_bench"]
        for name in models:
            grades = grade_mt_bench_cached(
                grader,
                prompts,
                answers["mt_bench"][name],
                output_dir / "grades" / "mt_bench" / f"{_file_name(name)}.jsonl",
                show_progress=show_progress,
            )
            lengths = length_stats(list(answers["mt_bench"][name].values()), tokenizer)
            report.mt_bench.append(MTBenchResult(name, grader.name, mt_bench_score(grades), lengths))
    report.write(output_dir)
    return report
