"""Self-play from demonstrations (SPIN, GSIL): the iterations around `SPINTrainer` / `GSILTrainer`.

    π_0 = π_SFT (the SFT output of `trl-dpr sft`; its dpr_reference/ is not used)
    for t = 0 … T−1:
        π_t answers each prompt < max_length tokens  answer_prompts       <output_dir>/generations/iteration-<t>.jsonl
        (chosen = demonstration, rejected = answer)  demonstration_pairs  (+ iteration t−1's pairs: SPIN)
        π_{t+1} = train π_t against itself, frozen   SPINTrainer / GSILTrainer   <output_dir>/iteration-<t>/
    <output_dir> gets π_T (the files of iteration-<T−1>/)

A rerun resumes (cached answers, finished iterations, the last checkpoint); `self_play.json` refuses other settings.
The same `trl-dpr spin|gsil` command again on a run it finished trains nothing: it says `Already finished` (as DPR's).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list, gather_object, is_peft_model
from datasets import Dataset, concatenate_datasets
from tqdm.auto import tqdm
from transformers import AutoTokenizer
from trl import ModelConfig, get_peft_config
from trl.data_utils import is_conversational

from ..data import split_at_last_answer
from ..embedded.task import load_demonstrations
from ..evaluation.cache import JsonlCache
from ..evaluation.sampling import sample_completions
from ..field_checks import check_fits_context, context_of, model_config_of
from ..reference_manifest import check_model_source, sft_trained_on_messages
from ..resources import free_memory
from ..running.checkpointing import (
    LOCK_HOLDER_NAME,
    LOCK_NAME,
    check_output_dir_apart,
    claim_output_dir,
    last_complete_checkpoint,
    mark_evaluated,
    mark_run_finished,
    parse_resume_from_checkpoint,
    release_output_dir,
    releasing_output_dir,
    run_fingerprint,
    start_writing,
    write_eval_results,
)
from ..running.pipeline import SFTScriptArguments, evaluation_dir, model_init_kwargs_from
from ..token_batches import render_prompts
from .config import GSILConfig, SelfPlayConfig, SPINConfig
from .trainer import GSILTrainer, SelfPlayTrainer, SPINTrainer, trains_on_prompt

logger = logging.getLogger(__name__)

RUN_RECORD = "self_play.json"
ITERATION_RECORD = "self_play_iteration.json"
_OUTPUTS = (RUN_RECORD, "generations", "iteration-*")  # what a run writes in its folder besides π_T
# Settings that decide what a self-play run trains (num_iterations is not one: raising it continues a finished run).
_SETTINGS = (
    "model_name_or_path",
    "dataset_name",
    "dataset_config",
    "dataset_train_split",
    "num_train_samples",
    "dataset_format",
    "seed",
    "learning_rate",
    "optim",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "beta",
    "spin_loss_type",
    "gsil_loss_type",
    "gsil_shift",
    "generation_temperature",
    "generation_top_p",
    "max_new_tokens",
    "generation_batch_size",
    "previous_iteration_pairs",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "load_in_4bit",
)


@dataclass
class SelfPlayScriptArguments(SFTScriptArguments):
    """Script arguments of `trl-dpr spin` / `trl-dpr gsil`: `model_name_or_path` is π_0, and the demonstrations are
    loaded as for SFT and DPR (same name, count and seed: the same prompts).
    """

    # α is the SFT output's (π_ref, which self-play does not use): on a SPIN/GSIL recipe it would be ignored.
    _UNUSED_FIELDS = {
        **SFTScriptArguments._UNUSED_FIELDS,
        "reference_fraction": ((), "α is the SFT stage's; set it in the SFT recipe: sft_config's reference_fraction"),
    }

    sft_config: str | None = field(
        default=None,
        metadata={"help": "A `trl-dpr sft` recipe to run first when model_name_or_path holds no SFT output yet."},
    )
    evaluation_config: str | None = field(
        default=None,
        metadata={
            "help": "A `trl-dpr evaluate` recipe: after training, the last iterate (`SPIN=` / `GSIL=<output_dir>`) is "
            "evaluated against π_SFT (`SFT=<model_name_or_path>`) with it, as `trl-dpr evaluate` would."
        },
    )


@dataclass
class SelfPlayRun:
    """A finished self-play run: its folder (the last iterate), the method, and per iteration what training logged."""

    output_dir: str
    method: str
    iterations: list[dict]


def trainer_class(args: SelfPlayConfig) -> type[SelfPlayTrainer]:
    """The trainer of a config: `SPINTrainer` for `SPINConfig`, `GSILTrainer` for `GSILConfig`."""
    if isinstance(args, SPINConfig):
        return SPINTrainer
    if isinstance(args, GSILConfig):
        return GSILTrainer
    raise TypeError(f"Self-play needs a SPINConfig or a GSILConfig, got {type(args).__name__}.")


# ---- data ---------------------------------------------------------------------------------------------------------


def prompts_and_demonstrations(dataset: Dataset, name: str) -> tuple[list, list]:
    """`(prompts, completions)` of a demonstration dataset: `prompt`/`completion` columns as they are, `messages` split
    before the final assistant turn.
    """
    columns = set(dataset.column_names)
    if {"prompt", "completion"} <= columns:
        return list(dataset["prompt"]), list(dataset["completion"])
    if "messages" in columns:
        prompts, completions = [], []
        for messages in dataset["messages"]:
            prompt, answer = split_at_last_answer(messages, name)
            prompts.append(prompt)
            completions.append([answer])  # TRL's conversational completion: the assistant's message(s)
        return prompts, completions
    raise ValueError(
        f"Dataset {name!r} has columns {sorted(columns)}; self-play needs demonstrations: `prompt` and `completion` "
        "columns, or `messages` conversations ending with the assistant's answer."
    )


def demonstration_ids(tokenizer, prompt, completion, prompt_ids: Sequence[int]) -> list[int]:
    """The token ids of a demonstration after its prompt: the chat template renders prompt + completion, and the
    rendered prompt (`render_prompts`, what π_t answered) must be its prefix.
    """
    if is_conversational({"prompt": prompt}):
        full = tokenizer.apply_chat_template(
            conversation=list(prompt) + list(completion), tokenize=True, return_dict=True
        )
        full = list(full["input_ids"])
    else:
        full = list(tokenizer(text=prompt + completion)["input_ids"])
        if tokenizer.eos_token_id is not None and (not full or full[-1] != tokenizer.eos_token_id):
            full.append(tokenizer.eos_token_id)  # as DPOTrainer ends a plain-text completion
    if full[: len(prompt_ids)] != list(prompt_ids):
        raise ValueError(
            "The chat template renders this prompt differently alone (with the generation prompt) than at the start of "
            f"the prompt + demonstration conversation: {tokenizer.decode(prompt_ids)!r} vs "
            f"{tokenizer.decode(full[: len(prompt_ids)])!r}. The demonstration and the model's own answer must follow the "
            "same prompt tokens. Use a chat template that renders the prompt the same way in both cases."
        )
    return full[len(prompt_ids) :]


def demonstration_pairs(tokenizer, prompts: Sequence, completions: Sequence, answers: Sequence[dict]) -> Dataset:
    """One pair per prompt, as token ids: `prompt_ids` (what π_t answered), `chosen_ids` (the demonstration),
    `rejected_ids` (π_t's sampled answer, ids as sampled), plus `prompt_index`.
    """
    if not len(prompts) == len(completions) == len(answers):
        raise ValueError(f"Got {len(prompts)} prompts, {len(completions)} demonstrations and {len(answers)} answers.")
    rows = [
        {
            "prompt_index": answer["prompt_index"],
            "prompt_ids": list(answer["prompt_ids"]),
            "chosen_ids": demonstration_ids(tokenizer, prompt, completion, answer["prompt_ids"]),
            "rejected_ids": list(answer["completion_ids"]),
        }
        for prompt, completion, answer in zip(prompts, completions, answers)
    ]
    return Dataset.from_list(rows)


def check_lengths_fit_context(
    sft_path: str,
    tokenizer,
    prompts: Sequence,
    completions: Sequence,
    args: SelfPlayConfig,
    revision: str | None = None,
) -> list[int]:
    """The rows of `prompts` whose pairs train (`trains_on_prompt`), which π_t alone answers; checked first: π_t's
    answers (the longest of those prompts + `max_new_tokens`) and the pairs trained on (prompt + demonstration or own
    answer, cut at `max_length` as DPOTrainer cuts them) against π_SFT's context, which every iterate shares
    (`check_fits_context`), before anything is generated: past it a rotary model reads positions it never saw."""
    model_config = model_config_of(sft_path, revision, args.trust_remote_code)
    context, source = context_of(model_config) if model_config is not None else (None, None)
    lengths = _prompt_lengths(tokenizer, prompts, args.max_length, context if isinstance(context, int) else None)
    if prompts and not lengths.kept:  # whatever the context: nothing would be trained
        raise ValueError(
            f"Every one of the {len(prompts)} prompts is max_length ({args.max_length}) tokens or more: DPOTrainer "
            "would drop every pair, and nothing would be trained. Raise max_length, or use shorter prompts."
        )
    if not isinstance(context, int):
        return lengths.kept
    answered = "" if len(lengths.kept) == len(prompts) else " answered (shorter than max_length)"
    check_fits_context(
        model_config,
        sft_path,
        {"the longest prompt": lengths.longest, "max_new_tokens": args.max_new_tokens},
        lower="max_new_tokens",
        alone=f"{lengths.filling} of the {len(lengths.kept)} prompts{answered} "
        f"{'is' if lengths.filling == 1 else 'are'} {context} tokens or more (the longest is prompt "
        f"{lengths.longest_index}, counted from 0): leave them out of the dataset, or use a model with a longer context",
    )
    if args.max_length is not None and args.max_length <= context:
        return lengths.kept  # a pair cut at max_length fits
    pair, index = _longest_pair(tokenizer, prompts, completions, args.max_length)
    if pair <= context:
        return lengths.kept
    if args.max_length is None:
        raise ValueError(
            "max_length is null, so DPOTrainer does not cut the pairs, and the longest prompt + demonstration "
            f"(prompt {index}, counted from 0) is {pair} tokens: more than {sft_path}'s context of {context} tokens "
            f"({source}). Set max_length to at most {context} (DPOTrainer cuts each pair to it)."
        )
    try:
        check_fits_context(model_config, sft_path, {"max_length": args.max_length}, lower="max_length")
    except ValueError as problem:
        raise ValueError(
            f"{problem} The longest prompt + demonstration is {pair} tokens: cut at max_length {args.max_length}, it "
            "still reaches past the context."
        ) from None
    return lengths.kept


_CHECK_ROWS = 1000  # prompts rendered at a time by the context check: it holds one chunk's token ids, not all


@dataclass
class _PromptLengths:
    """What `check_lengths_fit_context` reads of the prompts: which π_t answers, and how long those are."""

    kept: list[int] = field(default_factory=list)  # rows shorter than max_length: their pairs train, π_t answers them
    longest: int = 0  # tokens of the longest kept prompt as π_t reads it, and its row
    longest_index: int | None = None
    filling: int = 0  # kept prompts of the context's length or more: no room for any answer token


def _rendered(tokenizer, prompts: Sequence):
    """`(row, prompt, its ids as π_t reads them)`, rendered `_CHECK_ROWS` at a time (`render_prompts`): 100k prompts
    are not all held as ids at once."""
    for start in range(0, len(prompts), _CHECK_ROWS):
        chunk = prompts[start : start + _CHECK_ROWS]
        yield from zip(range(start, start + len(chunk)), chunk, render_prompts(tokenizer, chunk))


def _prompt_lengths(tokenizer, prompts: Sequence, max_length: int | None, context: int | None) -> _PromptLengths:
    lengths = _PromptLengths()
    for index, _, ids in _rendered(tokenizer, prompts):
        if not trains_on_prompt(len(ids), max_length):
            continue  # its pair is dropped: π_t does not answer it
        lengths.kept.append(index)
        lengths.filling += context is not None and len(ids) >= context
        if lengths.longest_index is None or len(ids) > lengths.longest:
            lengths.longest, lengths.longest_index = len(ids), index
    return lengths


def _longest_pair(tokenizer, prompts: Sequence, completions: Sequence, max_length: int | None) -> tuple[int, int]:
    """`(tokens, row)` of the longest prompt + demonstration among the pairs trained on."""
    longest, longest_index = 0, 0
    for index, prompt, ids in _rendered(tokenizer, prompts):
        if trains_on_prompt(len(ids), max_length):
            pair = len(ids) + len(demonstration_ids(tokenizer, prompt, completions[index], ids))
            if pair > longest:
                longest, longest_index = pair, index
    return longest, longest_index


# ---- π_t answers ----------------------------------------------------------------------------------------------------


def _fingerprint(values) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def _full_weights(model):
    """Every weight of `model` on this process while it generates: under ZeRO-3 the policy is loaded partitioned
    (`zero3_init_flag`) and only the trainer's engine would gather its weights; elsewhere, nothing to do."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(model.parameters()))


def answer_prompts(
    model,
    tokenizer,
    prompts: Sequence,
    cache_path: str | Path,
    *,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    top_p: float = 1.0,
    settings: dict | None = None,
    show_progress: bool = True,
    indices: Sequence[int] | None = None,
) -> list[dict]:
    """One answer of `model` per prompt, cached in `cache_path` (JSONL, flushed per batch), in prompt order.

    `indices`: only these rows of `prompts` are answered and returned (default: all); each answer is keyed by its row,
    so a file that holds more rows (all of them) serves any subset. Batch seeds are `seed + <first prompt index>`
    (reproducible); `settings` must match the file's.
    """
    state = PartialState()
    settings = {
        **(settings or {}),
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "seed": seed,
        "prompts": _fingerprint(list(prompts)),
    }
    cache = JsonlCache(cache_path, ("prompt_index",), settings)
    indices = range(len(prompts)) if indices is None else indices
    missing = [i for i in indices if (i,) not in cache]
    per_round = batch_size * state.num_processes
    rounds = range(0, len(missing), per_round)
    for start in tqdm(rounds, desc="π_t answers", disable=not (show_progress and state.is_main_process)):
        mine = missing[start : start + per_round][
            state.process_index * batch_size : (state.process_index + 1) * batch_size
        ]
        # Under ZeRO-3, generate synchronises the processes at every step: a process with no prompt left in this round
        # answers the round's first one too (and drops it), so that every process calls generate in every round.
        work = mine or missing[start : start + 1]
        with _full_weights(
            model
        ):  # seeded by the batch's first prompt: the same batch gets the same answers in any run
            samples = sample_completions(
                model,
                tokenizer,
                [prompts[i] for i in work],
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
                seed=seed + work[0],
            )
        records = [
            {"prompt_index": i, "prompt_ids": s.prompt_ids, "completion_ids": s.completion_ids, "text": s.text}
            for i, s in zip(mine, samples)
        ]
        records = gather_object(records) if state.num_processes > 1 else records
        if state.is_main_process:
            cache.add_many(records)
        state.wait_for_everyone()
    if not state.is_main_process:
        cache = JsonlCache(cache_path, ("prompt_index",), settings)  # written by the main process
    return [cache.get((i,)) for i in indices]


def load_policy(path: str, model_init_kwargs: dict):
    """π_t, trainable: a full model, or a PEFT adapter folder on its base (DPOTrainer keeps the frozen reference)."""
    from trl.trainer.utils import create_model_from_path

    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return create_model_from_path(path, **model_init_kwargs)
    from peft import PeftModel

    base_name = json.loads(config.read_text()).get("base_model_name_or_path")
    if not base_name:
        raise ValueError(
            f"{config} names no base model (base_model_name_or_path); set it to the base's Hub id or folder."
        )
    return PeftModel.from_pretrained(create_model_from_path(base_name, **model_init_kwargs), path, is_trainable=True)


# ---- the run --------------------------------------------------------------------------------------------------------


def _plain(value):
    value = getattr(value, "value", value)  # enums (optim, lr_scheduler_type)
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _run_settings(script_args, training_args, model_args) -> dict:
    settings = {"method": type(training_args).__name__.removesuffix("Config")}
    for key in _SETTINGS:
        for source in (script_args, training_args, model_args):
            if hasattr(source, key):
                settings[key] = _plain(getattr(source, key))
                break
    return json.loads(json.dumps(settings))


def _claim(root: Path, settings: dict, overwrite: bool) -> None:
    """Record the run's settings in `root/self_play.json`, or check them against a run already there: the same
    settings resume it, others are refused unless `overwrite` (`root` claimed to start over). Then the run starts
    writing in `root` (`start_writing`): started over, the earlier run's π_T, iterations and answers go now."""
    record = root / RUN_RECORD
    state = PartialState()
    if record.is_file():
        recorded = json.loads(record.read_text())["settings"]
        if recorded != settings and not overwrite:
            changed = sorted(k for k in set(settings) | set(recorded) if settings.get(k) != recorded.get(k))
            details = ", ".join(f"{k}: {recorded.get(k)!r} → {settings.get(k)!r}" for k in changed)
            raise ValueError(
                f"{root} holds a self-play run with other settings ({details}). Its iterations and cached answers "
                "belong to those settings: choose another output_dir, or set overwrite_output_dir: true (without "
                "resume_from_checkpoint) to delete them and start over."
            )
    state.wait_for_everyone()  # every process has read and compared before the main one rewrites
    start_writing(root, outputs=_OUTPUTS)
    if state.is_main_process:
        _write_record(record, {"settings": settings, "iterations": []})
    state.wait_for_everyone()


def _write_record(record: Path, values: dict) -> None:
    """`record` whole or not at all (a temporary file renamed over it): a crash mid-write never leaves a record that
    the next run cannot read."""
    partial = record.with_name(f".{record.name}.partial")
    partial.write_text(json.dumps(values, indent=2))
    os.replace(partial, record)


def _release_deepspeed_accelerator() -> None:
    """Under DeepSpeed, accelerate refuses a second `Accelerator` with a DeepSpeed plugin in one process; each iteration's
    trainer makes its own, so the finished iteration's accelerator state is dropped (the process group is kept)."""
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DistributedType

    if AcceleratorState._shared_state and AcceleratorState().distributed_type == DistributedType.DEEPSPEED:
        AcceleratorState._reset_state()
        GradientState._reset_state()


def _final_metrics(log_history: list[dict]) -> dict:
    wanted = ("loss", "rewards/margins", "rewards/accuracies", "rewards/real", "rewards/generated", "train_runtime")
    final = {}
    for entry in log_history:
        final.update({k: float(entry[k]) for k in wanted if k in entry})
    return final


def _publish_last_iterate(iteration_dir: Path, root: Path) -> None:
    """Copy the last iterate's files (weights, config, tokenizer; not its checkpoints) into the run's folder."""
    skip = {ITERATION_RECORD, LOCK_NAME, LOCK_HOLDER_NAME, "training_args.bin"}
    for path in iteration_dir.iterdir():
        if path.is_file() and path.name not in skip and not path.name.startswith(".write-test-"):
            shutil.copy2(path, root / path.name)


def run_self_play(
    script_args: SelfPlayScriptArguments,
    training_args: SelfPlayConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    *,
    keep_output_dir: bool = False,
) -> SelfPlayRun:
    """SPIN or GSIL (by the type of `training_args`) from the SFT output `model_args.model_name_or_path`: each
    iteration answers, pairs and trains π_t into `iteration-<t>/` against itself (module docstring); π_T lands in `output_dir`.
    `keep_output_dir=True` leaves `output_dir` claimed: the caller writes there after (`recipe_main`) and releases it.
    """
    trainer_cls = trainer_class(training_args)  # before any loading
    method = trainer_cls._name
    check_model_source(
        model_args.model_name_or_path, "π_0, the SFT output (model_name_or_path)"
    )  # before the folder is claimed
    root = Path(training_args.output_dir)
    check_output_dir_apart(
        root, _OUTPUTS, **{"π_0, the SFT output (model_name_or_path)": model_args.model_name_or_path}
    )
    # One run per folder; a rerun continues the run there, checked against its self_play.json (`_claim`). Started over
    # (overwrite, and resuming wins as for DPR), the earlier run stays until `_claim` has checked everything before it.
    resuming = parse_resume_from_checkpoint(training_args.resume_from_checkpoint) is not None
    start_over = bool(training_args.overwrite_output_dir) and not resuming
    claim_output_dir(root, resuming=not start_over, overwrite=start_over)
    state = PartialState()

    sft_path = model_args.model_name_or_path
    demonstrations = load_demonstrations(
        script_args.dataset_name,
        script_args.dataset_config,
        split=script_args.dataset_train_split,
        num_samples=script_args.num_train_samples,
        seed=training_args.seed,
        dataset_format=script_args.dataset_format,
    )
    prompts, completions = prompts_and_demonstrations(demonstrations, script_args.dataset_name)
    if state.is_main_process and any(isinstance(p, str) for p in prompts):
        # Self-play renders a demonstration as its file writes it (π_t answers the same tokens it is compared on)
        if sft_trained_on_messages(sft_path, model_args.model_revision):
            logger.warning(
                f"{method}: π_0 ({sft_path}) was trained on chat messages, but {script_args.dataset_name}'s prompts are "
                "strings: self-play renders them as raw text, as the file writes them. Give a `messages` file to train "
                "on what π_0 learned to read."
            )
    tokenizer = AutoTokenizer.from_pretrained(sft_path, revision=model_args.model_revision, padding_side="left")
    # Before the settings are recorded: a run refused here leaves none that its corrected rerun would differ from.
    # The main process renders every prompt; the others stop on its verdict (not wait for it at the next barrier),
    # or take the rows it keeps: π_t answers only the prompts whose pairs train (`trains_on_prompt`).
    error, kept = None, None
    if state.is_main_process:
        try:
            kept = check_lengths_fit_context(
                sft_path, tokenizer, prompts, completions, training_args, model_args.model_revision
            )
        except Exception as caught:
            error = caught
    (problem,) = broadcast_object_list([None if error is None else str(error)])
    if error is not None:
        raise error
    if problem is not None:
        raise ValueError(problem)
    (kept,) = broadcast_object_list([kept])
    if len(kept) < len(prompts) and state.is_main_process:
        left_out = len(prompts) - len(kept)
        print(
            f"{left_out} of the {len(prompts)} prompts {'is' if left_out == 1 else 'are'} max_length "
            f"({training_args.max_length}) tokens or more: DPOTrainer would drop their pairs, so π_t does not answer "
            f"{'it' if left_out == 1 else 'them'}.",
            flush=True,
        )
    settings = _run_settings(script_args, training_args, model_args)
    _claim(root, settings, overwrite=start_over)
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    if torch.cuda.is_available():  # each process answers on its own GPU (not "auto", which spreads over all of them)
        init_kwargs.setdefault("device_map", {"": state.local_process_index})

    def answers_path(t: int) -> Path:
        return root / "generations" / f"iteration-{t}.jsonl"

    def pairs_of(t: int, answers: list[dict]) -> Dataset:  # answers of the rows `kept`, in order
        kept_prompts, kept_completions = [prompts[i] for i in kept], [completions[i] for i in kept]
        return demonstration_pairs(tokenizer, kept_prompts, kept_completions, answers).add_column(
            "iteration", [t] * len(kept)
        )

    policy_path, iterations, previous_pairs = sft_path, [], None
    for t in range(training_args.num_iterations):
        iteration_dir = root / f"iteration-{t}"
        record_path = iteration_dir / ITERATION_RECORD
        if record_path.is_file():  # trained by an earlier run with these settings
            iterations.append(json.loads(record_path.read_text()))
            policy_path, previous_pairs = str(iteration_dir), None
            continue
        if state.is_main_process:  # a line, not a stage banner: the iterations are one stage of the recipe
            print(
                f"\n{method} iteration {t} ({t + 1} of {training_args.num_iterations}): {policy_path} answers, then "
                f"trains against itself into {iteration_dir}",
                flush=True,
            )
        start = time.perf_counter()
        if training_args.previous_iteration_pairs and t > 0 and previous_pairs is None:
            # Iteration t−1 ran in an earlier process: its answers are in its cache, read before π_t answers.
            cache = JsonlCache(answers_path(t - 1), ("prompt_index",))
            previous = [cache.get((i,)) for i in kept]
            missing = [i for i, answer in zip(kept, previous) if answer is None]
            if missing:  # the rows that train changed since (a new tokenizer or chat template in π_SFT's folder)
                raise ValueError(
                    f"Iteration {t - 1}'s answers ({answers_path(t - 1)}) lack {len(missing)} of the prompts that "
                    f"train now (rows {missing[:5]}{' ...' if len(missing) > 5 else ''}): the prompts kept for "
                    "training changed since that iteration ran. Start the self-play again with "
                    "overwrite_output_dir: true."
                )
            previous_pairs = pairs_of(t - 1, previous)
        policy = load_policy(policy_path, init_kwargs)
        answers = answer_prompts(
            policy,
            tokenizer,
            prompts,
            answers_path(t),
            temperature=training_args.generation_temperature,
            top_p=training_args.generation_top_p,
            max_new_tokens=training_args.max_new_tokens,
            batch_size=training_args.generation_batch_size,
            seed=training_args.seed + 100_003 * t,
            settings={"model": str(policy_path), "iteration": t},
            indices=kept,  # keyed by row: a cache of an earlier run that answered every prompt serves as it is
        )
        pairs = current_pairs = pairs_of(t, answers)
        if training_args.previous_iteration_pairs and t > 0:
            pairs = concatenate_datasets([previous_pairs, current_pairs])

        args = copy.copy(training_args)  # the same settings (processed fields kept), in this iteration's folder
        args.output_dir, args.push_to_hub = str(iteration_dir), False
        trainer = trainer_cls(
            model=policy,
            args=args,
            train_dataset=pairs,
            processing_class=tokenizer,
            callbacks=callbacks,
            peft_config=None if is_peft_model(policy) else get_peft_config(model_args),  # an adapter π_t stays one
        )
        resume = last_complete_checkpoint(iteration_dir) if training_args.resume_from_checkpoint else None
        trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(str(iteration_dir))
        trainer.create_model_card(model_name=f"{root.name}-iteration-{t}", dataset_name=script_args.dataset_name)
        record = {
            "iteration": t,
            "policy": str(policy_path),
            "reference": str(policy_path),
            "pairs": len(pairs),
            **_final_metrics(trainer.state.log_history),
            "wall_time_s": time.perf_counter() - start,
        }
        if state.is_main_process:
            record_path.write_text(json.dumps(record, indent=2))
        state.wait_for_everyone()
        release_output_dir(iteration_dir)  # finished (its record written): the folder holds its outputs only
        iterations.append(record)
        previous_pairs = current_pairs
        del trainer, policy
        free_memory()
        _release_deepspeed_accelerator()
        policy_path = str(iteration_dir)

    if state.is_main_process:
        _publish_last_iterate(Path(policy_path), root)
        summary = json.loads((root / RUN_RECORD).read_text())
        _write_record(root / RUN_RECORD, {**summary, "iterations": iterations})
    state.wait_for_everyone()
    if not keep_output_dir:
        release_output_dir(root)
    return SelfPlayRun(output_dir=str(root), method=method, iterations=iterations)


def evaluate_last_iterate(
    evaluation_config: str, sft_path: str, run: SelfPlayRun, device: str = "auto", trust_remote_code: bool = False
) -> dict:
    """Evaluate the last iterate against π_SFT as `trl-dpr evaluate` does, on the main process and `device`, into
    `evaluation_dir(output_dir)` (a folder per run, as DPR's); returns the report as a dict (empty on the other
    processes), also written to `<output_dir>/eval_results.json` (as DPR's: the same command again shows its table).
    `trust_remote_code` (the run's) is the evaluation's where its YAML is silent.
    """
    from ..evaluation import run_evaluation
    from ..running.recipe_parser import load_evaluation_config

    state = PartialState()
    results: dict = {}
    if state.is_main_process:
        config = load_evaluation_config(
            evaluation_config,
            {"trust_remote_code": trust_remote_code},
            baseline=f"SFT={sft_path}",
            candidates=[f"{run.method}={run.output_dir}"],
            output_dir=evaluation_dir(run.output_dir),
            device=device,
        )
        results = run_evaluation(config).as_dict()
        write_eval_results(run.output_dir, results)  # renamed into place: a kill mid-write keeps the earlier one
        print(results["table_markdown"], flush=True)
        print(f"\nWritten to {config.output_dir}/results.md", flush=True)
    state.wait_for_everyone()
    return results


def recipe_parser(config_class: type[SelfPlayConfig]):
    """The parser of `trl-dpr spin` / `trl-dpr gsil`: unknown YAML keys are errors."""
    from ..running.memory import MemoryTarget
    from ..running.recipe_parser import RecipeParser

    # MemoryTarget (gpu_memory_gib, num_gpus) is part of every recipe YAML; training does not use it.
    command = f"trl-dpr {config_class.__name__.removesuffix('Config').lower()}"  # SPINConfig → trl-dpr spin
    return RecipeParser((SelfPlayScriptArguments, config_class, ModelConfig, MemoryTarget), prog=command)


def recipe_main(config_class: type[SelfPlayConfig], argv: Sequence[str] | None = None) -> SelfPlayRun:
    """`trl-dpr spin` / `trl-dpr gsil`: parse the recipe, then `run_stages`: SFT (skipped when done), self-play, evaluation;
    the same command again on the run it finished says so (`finished_already`) and returns the recorded run."""
    from ..running.placement import LaunchPlacement, check_launched_run
    from ..running.stages import evaluation_stage, finished_already, run_stages

    launch = LaunchPlacement.from_environment()  # before parsing: what accelerate launched this process with
    script_args, training_args, model_args, _ = recipe_parser(config_class).parse_args_and_config(argv)
    placement = check_launched_run(training_args, launch)  # the recipe's device and precision are the launcher's
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    method = trainer_class(training_args)._name
    root = Path(training_args.output_dir)
    fingerprint = run_fingerprint(script_args, training_args, model_args)
    sft_path = model_args.model_name_or_path

    def recorded() -> SelfPlayRun:
        return SelfPlayRun(str(root), method, json.loads((root / RUN_RECORD).read_text())["iterations"])

    def evaluate(run, device):
        evaluate_last_iterate(script_args.evaluation_config, sft_path, run, device, training_args.trust_remote_code)
        mark_evaluated(root, fingerprint)  # with these settings: the same command again shows its table

    evaluate_again = (
        (lambda: evaluation_stage(method, script_args.evaluation_config, placement, evaluate, recorded()))
        if script_args.evaluation_config
        else None
    )
    if finished_already(training_args, fingerprint, evaluate_again):  # the same command again: exit code 0
        return recorded()
    # π_0 where this run writes: refused before an SFT stage spends anything (run_self_play checks it again).
    check_output_dir_apart(root, _OUTPUTS, **{"π_0, the SFT output (model_name_or_path)": sft_path})
    # A failed stage leaves the folder free; Ctrl-C keeps it held until the process ends, so `run` says what it holds.
    with releasing_output_dir(root):
        run = run_stages(
            method,
            sft_path,
            placement,
            script_args.sft_config,
            script_args.evaluation_config,
            train=lambda: run_self_play(script_args, training_args, model_args, keep_output_dir=True),
            train_title=f"{method} from {sft_path}: {training_args.num_iterations} iteration(s)",
            evaluate=evaluate,
            trust_remote_code=training_args.trust_remote_code,
            # Before the evaluation: a failed one leaves a finished run, which the same command again only evaluates.
            finish=lambda run: mark_run_finished(
                root, fingerprint, ["evaluation"] if script_args.evaluation_config else []
            ),
            reads_reference=False,  # self-play trains against π_t, never the SFT output's π_ref
        )
    return run
