"""The LfD pipeline behind `recipes/sft.py` and `recipes/dpr.py`: SFT (+ π_ref) → DPR → evaluation against SFT.

Each stage is a function of the recipe's parsed dataclasses, so the recipes stay a few lines of argument parsing and
the same stages run from Python (notebooks, tests).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import AutoTokenizer
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, get_peft_config, get_quantization_config

from .callbacks import ReferenceCheckpointCallback
from .checkpointing import AtomicCheckpointsMixin, check_output_dir
from .config import DensePathConfig
from .data import load_demonstrations, prompts_for_rl
from .embedded.base_model import EMBEDDED_MODEL, build_embedded_base
from .hub import SafeHubPushMixin, check_hub_push, defer_push_to_hub, push_trainer_output
from .reference_manifest import MANIFEST_NAME
from .reward_model import CheckpointRewardModel
from .trainer import DensePathTrainer

__all__ = [
    "SFTScriptArguments",
    "DPRScriptArguments",
    "model_init_kwargs_from",
    "run_sft",
    "run_dpr",
    "check_adapter_settings",
    "evaluate_against_sft",
    "print_stage",
]


@dataclass
class SFTScriptArguments(ScriptArguments):
    """Script arguments of `recipes/sft.py` (on top of TRL's `ScriptArguments`: dataset_name, splits, ...).

    Example:
        >>> SFTScriptArguments(dataset_name="trl_dpr/embedded-demo").reference_fraction
        0.5
    """

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
        metadata={"help": "auto | openorca | messages | prompt_completion.", "choices": ["auto", "openorca", "messages", "prompt_completion"]},
    )


@dataclass
class DPRScriptArguments(SFTScriptArguments):
    """Script arguments of `recipes/dpr.py`. `model_name_or_path` (ModelConfig) is the SFT output: π_SFT + π_ref.

    Example:
        >>> DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", evaluation_config="recipes/evaluate/demo.yaml").sft_config is None
        True
    """

    ref_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "π_ref; by default the reference checkpoint the SFT stage recorded (dpr_reference.json)."},
    )
    sft_config: str | None = field(
        default=None,
        metadata={
            "help": "YAML of recipes/sft.py to run first when model_name_or_path holds no SFT output yet (the embedded "
            "demo runs the whole SFT → DPR → evaluation pipeline this way)."
        },
    )
    evaluation_config: str | None = field(
        default=None,
        metadata={
            "help": "A recipes/evaluate.py YAML: after training, the policy (`DPR=<output_dir>`) is evaluated against "
            "π_SFT (`SFT=<model_name_or_path>`) with it, exactly as `recipes/evaluate.py --config` would, and the "
            "results go to the YAML's output_dir and into the model card (the embedded demo: "
            "recipes/evaluate/demo.yaml)."
        },
    )
    merge_adapter: bool = field(
        default=False,
        metadata={
            "help": "With push_to_hub and a LoRA/QLoRA policy: push it merged into a full-precision copy of its base "
            "model (written to <output_dir>-merged) instead of as the adapter."
        },
    )


def print_stage(index: int, total: int, title: str) -> None:
    """A clear header between pipeline stages (main process only).

    Example:
        ```python
        print_stage(1, 3, "SFT")   # a header line between the pipeline's stages
        ```
    """
    state = PartialState()
    if state.is_main_process:
        bar = "=" * 100
        print(f"\n{bar}\n  Stage {index}/{total}: {title}\n{bar}", flush=True)


def model_init_kwargs_from(model_args: ModelConfig, trust_remote_code: bool = False) -> dict:
    """`from_pretrained` kwargs from TRL's ModelConfig (dtype, attention, revision, 4/8-bit quantisation).

    Example:
        >>> from trl import ModelConfig
        >>> model_init_kwargs_from(ModelConfig(model_name_or_path="runs/sft", dtype="float32"))
        {'revision': 'main', 'trust_remote_code': False, 'dtype': 'float32'}
    """
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


def _resolve_base(model_args: ModelConfig, output_dir: str, seed: int) -> str:
    if model_args.model_name_or_path == EMBEDDED_MODEL:
        return build_embedded_base(Path(output_dir).parent / "embedded-base", seed=seed)
    return model_args.model_name_or_path


class SafeSFTTrainer(SafeHubPushMixin, AtomicCheckpointsMixin, SFTTrainer):
    """TRL's SFTTrainer with staged-then-renamed checkpoints (`trl_dpr.checkpointing`) and safe Hub pushes
    (`trl_dpr.hub.SafeHubPushMixin`: the reference checkpoint goes with the model, no secret, once).

    Example:
        ```python
        trainer = SafeSFTTrainer(model="Qwen/Qwen2.5-0.5B", args=SFTConfig("runs/sft"), train_dataset=demonstrations,
                                 callbacks=[ReferenceCheckpointCallback(0.5)])
        ```
    """

    def __init__(self, *args, **kwargs):
        self._take_over_hub_push(kwargs["args"])
        super().__init__(*args, **kwargs)


def run_sft(
    script_args: SFTScriptArguments, training_args: SFTConfig, model_args: ModelConfig, callbacks: list | None = None
) -> str:
    """SFT on demonstrations, saving π_ref at ⌊α·N⌋ steps next to the final π_SFT; returns the output directory.

    `resume_from_checkpoint: true` resumes from the newest complete checkpoint; π_ref is not written twice. With
    `push_to_hub: true` the output is pushed once, at the end, with its reference checkpoint (`trl_dpr.hub`).

    Example:
        ```python
        from trl import ModelConfig, SFTConfig
        run_sft(SFTScriptArguments(dataset_name="trl_dpr/embedded-demo"),
                SFTConfig(output_dir="runs/demo/sft", max_steps=600, use_cpu=True),
                ModelConfig(model_name_or_path="trl_dpr/embedded-tiny-llama", dtype="float32"))
        ```
    """
    check_output_dir(training_args.output_dir)
    check_hub_push(training_args)
    push = defer_push_to_hub(training_args)  # transformers' own pushes would upload training_args.bin and .partial/
    base = _resolve_base(model_args, training_args.output_dir, training_args.seed)
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    quantization_config = init_kwargs.pop("quantization_config", None)
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    callback = ReferenceCheckpointCallback(fraction=script_args.reference_fraction)  # α checked before any loading

    train_dataset = load_demonstrations(
        script_args.dataset_name,
        script_args.dataset_config,
        split=script_args.dataset_train_split,
        num_samples=script_args.num_train_samples,
        seed=training_args.seed,
        dataset_format=script_args.dataset_format,
    )
    trainer = SafeSFTTrainer(
        model=base,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=AutoTokenizer.from_pretrained(base, revision=model_args.model_revision),
        quantization_config=quantization_config,
        peft_config=get_peft_config(model_args),
        callbacks=[callback, *(callbacks or [])],
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    if push:  # π_SFT with dpr_reference/ and its manifest: loadable as the reward model from the Hub
        push_trainer_output(trainer, dataset_name=script_args.dataset_name)
    del trainer
    _free_memory()
    return training_args.output_dir


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def check_adapter_settings(sft_path: str, model_args: ModelConfig) -> None:
    """An adapter SFT output (LoRA / QLoRA) is continued as it is: the policy is a trainable copy of the SFT adapter.
    `use_peft` / `lora_*` keys then describe that adapter (the memory plan reads them) and must agree with its
    `adapter_config.json`; different values would be silently ignored, so they are an error, before anything loads.

    Example:
        >>> from trl import ModelConfig
        >>> check_adapter_settings("runs/not-an-adapter", ModelConfig(use_peft=True, lora_r=8))  # a full model: LoRA is new
    """
    config_path = Path(sft_path) / "adapter_config.json"
    if not model_args.use_peft or not config_path.is_file():
        return
    adapter = json.loads(config_path.read_text())
    asked = {"lora_r": model_args.lora_r, "lora_alpha": model_args.lora_alpha, "lora_dropout": model_args.lora_dropout}
    found = {"lora_r": adapter.get("r"), "lora_alpha": adapter.get("lora_alpha"), "lora_dropout": adapter.get("lora_dropout")}
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


def run_dpr(
    script_args: DPRScriptArguments,
    training_args: DensePathConfig,
    model_args: ModelConfig,
    callbacks: list | None = None,
    reward_model: CheckpointRewardModel | None = None,
) -> DensePathTrainer:
    """DPR from the SFT output `model_args.model_name_or_path` (policy initialised from π_SFT); returns the trainer.

    `reward_model` replaces the one loaded from the SFT output (π_SFT and π_ref), e.g. a control reward such as
    the correctness oracle of `experiments/oracle.py`. With `push_to_hub: true` the policy (adapter, or merged with `merge_adapter`) and its model card are pushed once, at
    the end; recipes/dpr.py turns that off (`defer_push_to_hub`) and pushes after the evaluation instead.

    Example:
        ```python
        from trl import ModelConfig
        trainer = run_dpr(DPRScriptArguments(dataset_name="trl_dpr/embedded-demo"),
                          DensePathConfig(output_dir="runs/demo/dpr", max_steps=100, kl_coef=5.0, use_cpu=True),
                          ModelConfig(model_name_or_path="runs/demo/sft", dtype="float32"))
        ```
    """
    sft_path = model_args.model_name_or_path
    check_output_dir(training_args.output_dir)
    check_adapter_settings(sft_path, model_args)
    check_hub_push(training_args)
    push = defer_push_to_hub(training_args)  # transformers' own pushes would upload training_args.bin and .partial/
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    if reward_model is None:
        reward_model = CheckpointRewardModel.from_pretrained(
            sft_path,
            script_args.ref_model_name_or_path,
            use_baseline=training_args.use_baseline,
            eliminate_value=training_args.eliminate_value,
            token_chunk_size=training_args.reward_token_chunk_size,
            **init_kwargs,
        )
    quantization_config = init_kwargs.pop("quantization_config", None)
    training_args.model_init_kwargs = {**init_kwargs, **(training_args.model_init_kwargs or {})}
    prompts = prompts_for_rl(
        load_demonstrations(
            script_args.dataset_name,
            script_args.dataset_config,
            split=script_args.dataset_train_split,
            num_samples=script_args.num_train_samples,
            seed=training_args.seed,
            dataset_format=script_args.dataset_format,
        ),
        script_args.dataset_name,
    )
    # An adapter SFT output (LoRA/QLoRA) gives one base with adapters sft and ref; the policy is then a trainable copy
    # of the sft adapter on that same base (model=None). A full SFT model is loaded again as the policy.
    shares_base = reward_model.sft_adapter is not None
    trainer = DensePathTrainer(
        model=None if shares_base else sft_path,
        reward_model=reward_model,
        args=training_args,
        train_dataset=prompts,
        processing_class=AutoTokenizer.from_pretrained(sft_path, padding_side="left"),
        quantization_config=None if shares_base else quantization_config,
        peft_config=None if shares_base else get_peft_config(model_args),
        callbacks=callbacks,
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    if push:
        push_trainer_output(trainer, dataset_name=script_args.dataset_name, merge_adapter=script_args.merge_adapter)
    return trainer


def has_sft_output(path: str) -> bool:
    return os.path.isdir(path) and (Path(path) / MANIFEST_NAME).is_file()


def evaluate_against_sft(evaluation_config, sft_path: str, policy_path: str) -> dict:
    """Evaluate the saved policy against π_SFT as `recipes/evaluate.py` does, on the main process, and write the report
    into `policy_path/eval_results.json` too (the model card's evaluation table).

    Args:
        evaluation_config: a recipes/evaluate.py YAML path or an `EvaluationConfig`; its baseline and candidates are
            replaced by `SFT=sft_path` and `DPR=policy_path`.

    Returns:
        The report as a dict (`table_markdown`, `pairwise`, `accuracy`, ...); empty on the other processes.

    Example:
        ```python
        evaluate_against_sft("recipes/evaluate/demo.yaml", "runs/demo/sft", "runs/demo/dpr")
        ```
    """
    from .evaluation import EvaluationConfig, run_evaluation
    from .evaluation.config import load_evaluation_config

    state = PartialState()
    results: dict = {}
    if state.is_main_process:
        replaced = {"baseline": f"SFT={sft_path}", "candidates": [f"DPR={policy_path}"]}
        if isinstance(evaluation_config, EvaluationConfig):
            config = dataclasses.replace(evaluation_config, **replaced)
        else:
            config = load_evaluation_config(evaluation_config, **replaced)
        report = run_evaluation(config)
        results = report.as_dict()
        with open(Path(policy_path) / "eval_results.json", "w") as f:
            json.dump(results, f, indent=2)
        print(results["table_markdown"], flush=True)
        print(f"\nWritten to {config.output_dir}/results.md and {Path(policy_path) / 'eval_results.json'}", flush=True)
    state.wait_for_everyone()
    return results
