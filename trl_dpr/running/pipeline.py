"""The LfD pipeline behind `trl-dpr sft` and `trl-dpr dpr`: SFT (+ π_ref) → DPR → evaluation against SFT.

Each stage is a function of the recipe's parsed dataclasses, so the recipes stay a few lines of argument parsing and
the same stages run from Python (notebooks, tests).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from datasets import Dataset
from transformers import AutoTokenizer
from trl import ModelConfig, ScriptArguments, SFTConfig, get_peft_config, get_quantization_config
from trl.data_utils import is_conversational

from ..config import DensePathConfig
from ..data import check_chat_template, check_prompt_dataset, prompts_for_rl
from ..embedded.base_model import EMBEDDED_MODELS, resolve_embedded_base
from ..embedded.task import load_demonstrations
from ..field_checks import check_fits_context, check_pad_token_fits, model_config_of
from ..range_rules import check_ranges
from ..reference_callback import ReferenceCheckpointCallback
from ..reference_manifest import check_model_source, mark_sft_complete, sft_output_problem, sft_trained_on_messages
from ..resources import free_memory
from ..reward_model import CheckpointRewardModel, load_reward_model
from ..rewards import load_reward_func
from ..trainer import check_reward_func_columns, check_reward_weights
from .checkpointing import (
    check_output_dir_apart,
    claim_output_dir,
    mark_run_finished,
    parse_resume_from_checkpoint,
    release_output_dir,
    write_eval_results,
)
from .gguf import find_gguf_file, is_gguf_path, resolve_gguf_base
from .merge import _check_merge_target_on_main, merged_folder
from .push import check_hub_push, defer_push_to_hub, merge_trainer_output, push_trainer_output
from .trainers import DPRRunTrainer, SafeSFTTrainer

logger = logging.getLogger(__name__)


@dataclass
class SFTScriptArguments(ScriptArguments):
    """Script arguments of `trl-dpr sft` (on top of TRL's `ScriptArguments`: dataset_name, splits, ...)."""

    reference_fraction: float = field(
        default=0.5,
        metadata={"help": "α of Algorithm 1: π_ref is saved after ⌊α·N⌋ of the N SFT optimizer steps (paper: 0.5)."},
    )
    num_train_samples: int | None = field(
        default=None,
        metadata={"help": "Random subsample of the train split (paper: 100k OpenOrca rows), drawn with `seed`."},
    )
    dataset_format: str = field(
        default="auto",
        metadata={
            "help": "auto | openorca | messages | prompt_completion.",
            "choices": ["auto", "openorca", "messages", "prompt_completion"],
        },
    )

    # Fields of TRL's ScriptArguments and training configs that the recipes have no use for: set in a recipe, each
    # would be accepted and ignored, or fail once the models are built. RecipeParser refuses them while parsing, unless
    # the value is one of those listed (the "off" value). field → (accepted values, why not). Unlike a config's own
    # `_UNUSED_FIELDS`, these are not refused from Python: run_sft and run_dpr simply do not read them.
    _UNUSED_FIELDS = {
        "dataset_test_split": (
            (),
            "the recipes train on dataset_train_split only; they evaluate after training with "
            "evaluation_config (`trl-dpr evaluate`), on its own benchmarks",
        ),
        "dataset_streaming": (
            (False,),
            "the recipes subsample (num_train_samples) and filter the training set, which "
            "needs the whole dataset; streaming is not supported",
        ),
        "eval_strategy": (
            ("no",),
            "the recipes pass no eval_dataset to the trainer (they evaluate after training "
            "with evaluation_config: `trl-dpr evaluate`); from Python, give the trainer an eval_dataset",
        ),
    }

    _RANGE_RULES = ("reference_fraction", "num_train_samples")  # range_rules.RANGE_RULES, the recipe parser's too

    def __post_init__(self):
        check_ranges(self, self._RANGE_RULES)


REFERENCE_FRACTION_OF_SFT = (
    "α is the SFT stage's: π_ref is saved at ⌊α·N⌋ of the SFT steps, and this run reads it from the SFT output's "
    "dpr_reference.json; set it in the SFT recipe: sft_config's reference_fraction"
)


@dataclass
class DPRScriptArguments(SFTScriptArguments):
    """Script arguments of `trl-dpr dpr`. `model_name_or_path` (ModelConfig) is the SFT output: π_SFT + π_ref."""

    # α belongs to the SFT output (its dpr_reference.json): on a DPR recipe it would be accepted and ignored.
    _UNUSED_FIELDS = {**SFTScriptArguments._UNUSED_FIELDS, "reference_fraction": ((), REFERENCE_FRACTION_OF_SFT)}

    ref_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "π_ref; by default the reference checkpoint the SFT stage recorded (dpr_reference.json)."},
    )
    sft_config: str | None = field(
        default=None,
        metadata={
            "help": "A `trl-dpr sft` recipe to run first when model_name_or_path holds no SFT output yet (the embedded "
            "demo runs the whole SFT → DPR → evaluation pipeline this way)."
        },
    )
    evaluation_config: str | None = field(
        default=None,
        metadata={
            "help": "A `trl-dpr evaluate` recipe: after training, the policy (`DPR=<output_dir>`) is evaluated against "
            "π_SFT (`SFT=<model_name_or_path>`) with it, exactly as `trl-dpr evaluate --config` would, and the "
            "results go to <output_dir>/../eval/<output_dir's name> (runs/demo/dpr → runs/demo/eval/dpr; not the "
            "YAML's output_dir) and into the model card (the embedded demo: evaluate/demo.yaml)."
        },
    )
    merge_adapter: bool = field(
        default=False,
        metadata={
            "help": "A LoRA/QLoRA policy is also merged, at the end, into a full-precision copy of its base model "
            "(written to <output_dir>-merged); with push_to_hub that merged model is pushed instead of the adapter."
        },
    )
    heatmap_steps: int = field(
        default=0,
        metadata={
            "help": "Every this many optimizer steps, the token-reward heatmaps of the last heatmap_samples rollouts "
            "(`TokenHeatmapCallback`): written to <output_dir>/heatmaps/ and logged to W&B and trackio when the run "
            "reports to them. 0: none."
        },
    )
    heatmap_samples: int = field(default=4, metadata={"help": "Rollouts per heatmap page (with heatmap_steps)."})
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Outcome reward functions (TRL's reward_funcs), each scalar added at its completion's last token "
            "beside r̂ and weighted by reward_weights ([w_0 for r̂, then one per function]). Each is a name of TRL's "
            "(accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment: the last "
            "quarter of max_completion_length penalised), a dotted import path (my_checks.right_answer) or "
            "module:function (my_checks:right_answer), my_checks.py in the folder you run from. Command line: "
            "--reward_funcs a b."
        },
    )

    _RANGE_RULES = (*SFTScriptArguments._RANGE_RULES, "heatmap_samples")

    def __post_init__(self):
        check_ranges(self, self._RANGE_RULES)
        if isinstance(self.reward_funcs, str):  # `reward_funcs: my_checks.f` in YAML: one function, not its letters
            self.reward_funcs = [self.reward_funcs]


def print_stage(index: int, total: int, title: str) -> None:
    """A header line between pipeline stages (main process only)."""
    state = PartialState()
    if state.is_main_process:
        bar = "=" * 100
        print(f"\n{bar}\n  Stage {index}/{total}: {title}\n{bar}", flush=True)


def model_init_kwargs_from(model_args: ModelConfig, trust_remote_code: bool = False) -> dict:
    """`from_pretrained` kwargs from TRL's ModelConfig (dtype, attention, revision, 4/8-bit quantisation)."""
    kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    quantization_config = get_quantization_config(model_args)
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
        kwargs["device_map"] = {"": PartialState().local_process_index} if torch.cuda.is_available() else None
    return {k: v for k, v in kwargs.items() if v is not None}


def run_sft(
    script_args: SFTScriptArguments,
    training_args: SFTConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    fingerprint: str | None = None,
) -> str:
    """SFT on demonstrations, saving π_ref at ⌊α·N⌋ steps next to the final π_SFT; returns the output directory.

    The folder is claimed for the run (`overwrite_output_dir` starts over in a finished one); `resume_from_checkpoint:
    true` resumes (π_ref is not written twice); `push_to_hub` pushes once, at the end, with the reference checkpoint.
    `fingerprint` (`run_fingerprint` of `trl-dpr sft`'s arguments) is recorded last: the same command again finds the
    run finished.
    """
    # Everything that can be checked before a model loads: the folder, the push, α, the data, the tokenizer.
    claim_output_dir(
        training_args.output_dir,
        resuming=parse_resume_from_checkpoint(training_args.resume_from_checkpoint) is not None,
        overwrite=getattr(training_args, "overwrite_output_dir", False),  # TRL's own SFTConfig has none
    )
    check_hub_push(training_args)
    callback = ReferenceCheckpointCallback(fraction=script_args.reference_fraction)
    if training_args.max_length is not None and training_args.max_length < 1:
        raise ValueError(f"max_length must be a positive number of tokens, got {training_args.max_length}.")
    if is_gguf_path(model_args.model_name_or_path):
        find_gguf_file(model_args.model_name_or_path)  # converted below, once the data is known to load
    elif model_args.model_name_or_path not in EMBEDDED_MODELS:
        check_model_source(model_args.model_name_or_path, "The base model (model_name_or_path)")
    train_dataset = load_demonstrations(
        script_args.dataset_name,
        script_args.dataset_config,
        split=script_args.dataset_train_split,
        num_samples=script_args.num_train_samples,
        seed=training_args.seed,
        dataset_format=script_args.dataset_format,
    )
    push = defer_push_to_hub(training_args)  # transformers' own pushes would upload training_args.bin and .partial/
    base = resolve_embedded_base(model_args.model_name_or_path, training_args.output_dir, training_args.seed)
    base = resolve_gguf_base(base, training_args.output_dir)  # a .gguf file: a normal HF folder beside the run
    model_config = model_config_of(base, model_args.model_revision, training_args.trust_remote_code)
    if model_config is not None:  # before the model loads
        _check_sft_max_length(model_config, model_args.model_name_or_path, training_args)
    tokenizer = AutoTokenizer.from_pretrained(base, revision=model_args.model_revision)
    if model_config is not None:
        check_pad_token_fits(tokenizer, model_config, model_args.model_name_or_path, training_args.pad_token)
    if not training_args.chat_template_path:
        check_chat_template(tokenizer, train_dataset, script_args.dataset_name)
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    quantization_config = init_kwargs.pop("quantization_config", None)
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}

    trainer = SafeSFTTrainer(
        model=base,
        base_model=model_args.model_name_or_path,  # `base` may be a folder this run built it into (embedded, GGUF)
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        quantization_config=quantization_config,
        peft_config=get_peft_config(model_args),
        callbacks=[callback, *(callbacks or [])],
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.create_model_card(dataset_name=script_args.dataset_name)  # with save_strategy "no", the only one written
    if trainer.is_world_process_zero():  # last: what "this SFT output is finished" means, and what it started from
        mark_sft_complete(  # and how it reads a string prompt: as TRL's SFTTrainer rendered its first row
            training_args.output_dir,
            base_model=model_args.model_name_or_path,
            conversational=is_conversational(train_dataset[0]),
        )
    if push:  # π_SFT with dpr_reference/ and its manifest: loadable as the reward model from the Hub
        push_trainer_output(trainer, dataset_name=script_args.dataset_name)
    if fingerprint is not None:
        mark_run_finished(training_args.output_dir, fingerprint)  # last: the same command again finds it finished
    release_output_dir(training_args.output_dir)  # finished: the folder holds its outputs only
    del trainer
    free_memory()
    return training_args.output_dir


def check_adapter_settings(sft_path: str, model_args: ModelConfig) -> None:
    """An adapter SFT output is continued as it is, so `use_peft` / `lora_*` must agree with its `adapter_config.json`
    (the memory plan reads them; a different value would be silently ignored): an error before anything loads.
    """
    config_path = Path(sft_path) / "adapter_config.json"
    if not model_args.use_peft or not config_path.is_file():
        return
    adapter = json.loads(config_path.read_text())
    asked = {"lora_r": model_args.lora_r, "lora_alpha": model_args.lora_alpha, "lora_dropout": model_args.lora_dropout}
    found = {
        "lora_r": adapter.get("r"),
        "lora_alpha": adapter.get("lora_alpha"),
        "lora_dropout": adapter.get("lora_dropout"),
    }
    if model_args.lora_target_modules not in (None, "all-linear", ["all-linear"]) and adapter.get("target_modules"):
        asked["lora_target_modules"] = sorted(model_args.lora_target_modules)
        found["lora_target_modules"] = sorted(adapter["target_modules"])
    differing = {k: (asked[k], found[k]) for k in asked if found.get(k) is not None and asked[k] != found[k]}
    if differing:
        details = ", ".join(f"{k}: {a!r} in the recipe, {f!r} in the adapter" for k, (a, f) in differing.items())
        raise ValueError(
            f"{sft_path} is a LoRA adapter SFT output, and the DPR policy continues that adapter as it is; the recipe "
            f"asks for another one ({details}). Make the lora_* keys match {config_path} (or remove use_peft and "
            "lora_*), or start DPR from a merged, full SFT model to train a new adapter."
        )


def dpr_prompts(script_args: DPRScriptArguments, seed: int):
    """The prompts DPR samples from: the recipe's dataset, subsampled as the SFT stage did (same count and seed)."""
    return prompts_for_rl(
        load_demonstrations(
            script_args.dataset_name,
            script_args.dataset_config,
            split=script_args.dataset_train_split,
            num_samples=script_args.num_train_samples,
            seed=seed,
            dataset_format=script_args.dataset_format,
            stage="rl",
        ),
        script_args.dataset_name,
    )


@dataclass(frozen=True)
class DPRInputs:
    """What `check_dpr_inputs` did before any model loaded, for `run_dpr` to use rather than do again."""

    prompts: Dataset
    reward_funcs: list = field(default_factory=list)


def check_dpr_inputs(
    script_args: DPRScriptArguments,
    training_args: DensePathConfig,
    reward_funcs: list | None = None,
    sft_path: str | None = None,
) -> DPRInputs:
    """What the DPR stage can check without the SFT output, each once: the outcome `reward_funcs` (the recipe's, by
    name, or `reward_funcs` from Python) with their `reward_weights` and dataset columns, the folder (claimed; apart
    from π_SFT's folder `sft_path` and π_ref), the Hub push and the prompts. `trl-dpr dpr` runs it before its SFT
    stage, so a mistake is found before the SFT is spent.
    """
    if script_args.reward_funcs and reward_funcs:  # which weight is whose would depend on an order nobody wrote down
        raise ValueError(
            f"reward_funcs are named in the recipe ({script_args.reward_funcs}) and passed from Python too: give them "
            "in one place."
        )
    if script_args.reward_funcs:
        reward_funcs = [
            load_reward_func(spec, training_args.max_completion_length) for spec in script_args.reward_funcs
        ]
    reward_funcs = list(reward_funcs or [])
    check_reward_weights(training_args.reward_weights, len(reward_funcs))
    check_output_dir_apart(
        training_args.output_dir,
        **{"π_SFT, the SFT output (model_name_or_path)": sft_path, "π_ref": script_args.ref_model_name_or_path},
    )
    claim_output_dir(
        training_args.output_dir,
        resuming=parse_resume_from_checkpoint(training_args.resume_from_checkpoint) is not None,
        overwrite=training_args.overwrite_output_dir,
    )
    check_hub_push(training_args)
    if script_args.merge_adapter:  # its merged copy may not replace a folder of yours
        _check_merge_target_on_main(merged_folder(training_args.output_dir))
    prompts = dpr_prompts(script_args, training_args.seed)
    check_reward_func_columns(reward_funcs, prompts)  # the trainer checks again, after the models load
    return DPRInputs(prompts=prompts, reward_funcs=reward_funcs)


def check_evaluation_config(evaluation_config: str) -> None:
    """The evaluation a pipeline runs after training (`evaluation_config`), checked before it trains: the YAML loads,
    its `answer_check` of yours imports (a typo would fail only after training), and the judge's API key is set when
    the judge is OpenAI's.
    """
    from ..evaluation import OpenAIChatModel
    from ..evaluation.answer_checks import answer_check_from
    from .recipe_parser import load_evaluation_config

    evaluation = load_evaluation_config(evaluation_config)
    answer_check_from(evaluation.answer_check, evaluation.answer_pattern)
    if evaluation.judge == "openai":  # its key must be there when the evaluation starts, after training
        OpenAIChatModel(api_key_env=evaluation.judge_api_key_env).check_api_key()


def check_evaluation_fits_context(evaluation_config: str, sft_path: str, trust_remote_code: bool = False) -> None:
    """The evaluation's longest prompt + `max_new_tokens` against π_SFT's context (`check_answers_fit_context`), whose
    context the candidate trained from it shares: checked once π_SFT is there and before training, not after it.
    `trust_remote_code` is the training run's, the evaluation's where its YAML does not set it (as it will run)."""
    from ..evaluation.runner import check_answers_fit_context
    from .recipe_parser import load_evaluation_config

    config = load_evaluation_config(
        evaluation_config, unset={"trust_remote_code": trust_remote_code}, baseline=f"SFT={sft_path}"
    )  # the baseline it will run with (`evaluate_against_sft`), whose record says how its prompts are read
    check_answers_fit_context(config, {"SFT": sft_path})


def run_dpr(
    script_args: DPRScriptArguments,
    training_args: DensePathConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    reward_model: CheckpointRewardModel | None = None,
    inputs: DPRInputs | None = None,
    reward_funcs: list | None = None,
) -> DPRRunTrainer:
    """DPR from the SFT output `model_args.model_name_or_path` (the policy starts from π_SFT); returns the trainer.

    `reward_model` replaces the one loaded from the SFT output (e.g. `experiments/oracle.py`); `reward_funcs` are TRL's
    outcome rewards added to r̂ (or the recipe's `reward_funcs`, by name); `inputs` is `check_dpr_inputs`' result when
    the caller ran it first (then its `reward_funcs` went there).
    """
    # Everything that can be checked before a model loads: the reward functions, the folder, the push and the prompts
    # (check_dpr_inputs, unless the caller did it), then the SFT output, its adapter and its chat template.
    if inputs is not None and reward_funcs:
        raise ValueError("run_dpr got inputs from check_dpr_inputs and reward_funcs: pass reward_funcs to it instead.")
    inputs = inputs or check_dpr_inputs(script_args, training_args, reward_funcs, model_args.model_name_or_path)
    sft_path = model_args.model_name_or_path
    if os.path.isdir(sft_path) and (problem := sft_output_problem(sft_path)):
        raise ValueError(f"{sft_path!r} is not a finished SFT output: {problem}. {UNFINISHED_SFT_HELP}")
    check_model_source(sft_path, "The SFT output (model_name_or_path)")
    check_adapter_settings(sft_path, model_args)
    model_config = model_config_of(sft_path, model_args.model_revision, training_args.trust_remote_code)
    if model_config is not None:
        training_args.check_fits_context(model_config, sft_path)  # before any model loads (the trainer checks again)
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    hub = init_kwargs.get("revision"), init_kwargs.get("token")
    check_prompt_dataset(
        inputs.prompts, script_args.dataset_name, lambda: bool(sft_trained_on_messages(sft_path, *hub))
    )
    tokenizer = AutoTokenizer.from_pretrained(sft_path, revision=model_args.model_revision, padding_side="left")
    if model_config is not None:
        check_pad_token_fits(tokenizer, model_config, sft_path)
    check_chat_template(tokenizer, inputs.prompts, script_args.dataset_name)
    push = defer_push_to_hub(training_args)  # transformers' own pushes would upload training_args.bin and .partial/
    if reward_model is None:
        reward_model = load_reward_model(sft_path, training_args, script_args.ref_model_name_or_path, **init_kwargs)
    quantization_config = init_kwargs.pop("quantization_config", None)
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    # An adapter SFT output (LoRA/QLoRA) gives one base with adapters sft and ref; the policy is then a trainable copy
    # of the sft adapter on that same base (model=None). A full SFT model is loaded again as the policy.
    shares_base = reward_model.sft_adapter is not None
    trainer = DPRRunTrainer(
        # A local π_SFT by its absolute path: a LoRA policy's adapter_config.json records it as its base, and a path
        # relative to where this run started would not load from anywhere else (a merge, a push).
        model=None if shares_base else (os.path.abspath(sft_path) if os.path.isdir(sft_path) else sft_path),
        reward_model=reward_model,
        args=training_args,
        train_dataset=inputs.prompts,
        processing_class=tokenizer,
        quantization_config=None if shares_base else quantization_config,
        peft_config=None if shares_base else get_peft_config(model_args),
        callbacks=callbacks,
        reward_funcs=inputs.reward_funcs or None,
        sft_model_name_or_path=sft_path,  # its record says how it reads a string prompt, whatever `reward_model` is
    )
    if script_args.heatmap_steps:
        from ..analysis.tracking import TokenHeatmapCallback

        trainer.add_callback(TokenHeatmapCallback(trainer, script_args.heatmap_steps, script_args.heatmap_samples))
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.create_model_card(dataset_name=script_args.dataset_name)  # `trl-dpr dpr` writes it again after evaluating
    if push:
        push_trainer_output(trainer, dataset_name=script_args.dataset_name, merge_adapter=script_args.merge_adapter)
    elif script_args.merge_adapter:
        merge_trainer_output(trainer)
    return trainer


def _check_sft_max_length(model_config, model_name: str, training_args: SFTConfig) -> None:
    """Packed (`packing`, `padding_free`), every sequence is `max_length` tokens: past the model's context it is refused.
    Unpacked, `max_length` only truncates longer examples (TRL's default 1024 on a 512-token model is fine): a warning."""
    lengths = {"max_length": training_args.max_length}
    if training_args.packing or training_args.padding_free:
        check_fits_context(model_config, model_name, lengths, lower="max_length")
        return
    try:
        check_fits_context(model_config, model_name, lengths, lower="max_length")
    except ValueError as problem:
        logger.warning(f"{problem} Not packed: only an example longer than the context would reach past it.")


UNFINISHED_SFT_HELP = (
    "An interrupted SFT resumes with the same SFT recipe and --resume_from_checkpoint true (when it saved checkpoints); "
    "otherwise delete the folder and run the SFT again."
)


def has_sft_output(path: str) -> bool:
    """Whether `path` holds a finished SFT output (`sft_output_problem` finds nothing wrong with it)."""
    return os.path.isdir(path) and sft_output_problem(path) is None


def evaluation_dir(output_dir: str | os.PathLike) -> str:
    """Where a pipeline writes its evaluation of the run in `output_dir`: `<parent>/eval/<run folder>` (runs/demo/dpr →
    runs/demo/eval/dpr). A folder per run, as its cached answers are those of this run's model: an ablation beside a
    finished run (runs/p/dpr_sr next to runs/p/dpr) would otherwise find the other model's answers under its name."""
    folder = Path(os.path.abspath(output_dir))  # "." or "runs/p/dpr/..": the folder's own name and parent
    return str(folder.parent / "eval" / folder.name)


def evaluate_against_sft(
    evaluation_config, sft_path: str, policy_path: str, device: str | None = None, trust_remote_code: bool = False
) -> dict:
    """Evaluate the saved policy against π_SFT as `trl-dpr evaluate` does (main process; else an empty dict), into
    `evaluation_dir(policy_path)`, and write `policy_path/eval_results.json` for the model card.

    `trust_remote_code` (the training run's) reaches the evaluation, so the models it trained with load the same way:
    a YAML's own value is kept, the training's True is used where the YAML does not set the key. An `EvaluationConfig`
    cannot tell its default False from a False set on purpose, so the training's True replaces it (logged); pass
    `trust_remote_code=False` here to keep it off."""
    from ..evaluation import EvaluationConfig, run_evaluation
    from .recipe_parser import load_evaluation_config

    state = PartialState()
    results: dict = {}
    if state.is_main_process:
        replaced = {
            "baseline": f"SFT={sft_path}",
            "candidates": [f"DPR={policy_path}"],
            "output_dir": evaluation_dir(policy_path),
        }
        if device is not None:
            replaced["device"] = device
        if isinstance(evaluation_config, EvaluationConfig):
            if trust_remote_code and not evaluation_config.trust_remote_code:
                judge = (
                    f" and the local judge {evaluation_config.judge_model}"
                    if evaluation_config.judge == "local"
                    else ""
                )
                logger.warning(
                    f"The evaluation loads the models{judge} with trust_remote_code=True, as the training run did (its "
                    "EvaluationConfig's False is the default, indistinguishable from one set on purpose). To keep it "
                    "off, pass trust_remote_code=False to evaluate_against_sft."
                )
                replaced["trust_remote_code"] = True
            config = dataclasses.replace(evaluation_config, **replaced)
        else:
            config = load_evaluation_config(evaluation_config, {"trust_remote_code": trust_remote_code}, **replaced)
        report = run_evaluation(config)
        results = report.as_dict()
        write_eval_results(policy_path, results)  # renamed into place: a kill mid-write keeps the earlier one
        print(results["table_markdown"], flush=True)
        print(f"\nWritten to {config.output_dir}/results.md and {Path(policy_path) / 'eval_results.json'}", flush=True)
    state.wait_for_everyone()
    return results
