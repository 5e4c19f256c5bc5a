"""DPR runs for the sweeps: each variant trained once into `<output_dir>/<name>`, and π_ref taken at any α.

ensure_sft_output       run the SFT stage first when `sft_config` is set and the SFT output is missing
train_variant           `run_dpr` (or a run with another reward model) unless the folder already holds that run;
                        what it measured (time, final kl_sft/per_token and reward) goes to `analysis_run.json`
sweep_win_rates         train every variant, then evaluate them all against SFT (recipes/evaluate.py's evaluation)
sft_checkpoints         the `checkpoint-N` folders of an SFT run saved with `save_strategy: steps`
reference_checkpoint    π_ref at α: the checkpoint at step ⌊α·N⌋, as `ReferenceCheckpointCallback` picks it
reference_at            the same, or the recorded `dpr_reference/` when it was taken at that α
"""

from __future__ import annotations

import gc
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from trl import ModelConfig, SFTConfig

from trl_dpr.evaluation import OpenAIChatModel, run_evaluation
from trl_dpr.reference_callback import check_reference_fraction
from trl_dpr.reference_manifest import MANIFEST_NAME, resolve_reference
from trl_dpr.reward_model import CheckpointRewardModel
from trl_dpr.running.pipeline import SFTScriptArguments, has_sft_output, print_stage, run_dpr, run_sft
from trl_dpr.running.recipe_parser import RecipeParser

from .overrides import evaluation_config, parse_with_overrides
from .win_rates import forget_cached_answers, win_rate_rows

__all__ = [
    "RUN_SUMMARY_NAME",
    "VariantRun",
    "WinRateSweepArguments",
    "ensure_sft_output",
    "variant_settings",
    "train_variant",
    "sweep_win_rates",
    "free_memory",
    "sft_checkpoints",
    "reference_checkpoint",
    "reference_at",
]

RUN_SUMMARY_NAME = "analysis_run.json"

# The settings that decide what a DPR run trains: a folder trained with other values is not reused.
SETTINGS_KEYS = (
    "model_name_or_path",
    "ref_model_name_or_path",
    "dataset_name",
    "dataset_config",
    "num_train_samples",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "num_generations",
    "temperature",
    "max_completion_length",
    "kl_coef",
    "gamma",
    "epsilon",
    "beta",
    "reward_granularity",
    "dense_reward",
    "whiten_advantages",
    "seed",
)


@dataclass
class VariantRun:
    """A trained variant: its folder, the settings it was trained with, and what training measured (`train_runtime_s`:
    TRL's `train_runtime`; `final_metrics`: the last logged `kl_sft/per_token`, `kl_sft/per_response`, `reward`, ...).

    Example:
        >>> VariantRun("gamma1", "runs/a/gamma1", {"gamma": 1.0}, 105.4, {"kl_sft/per_token": 0.0013}).final_metrics["kl_sft/per_token"]
        0.0013
    """

    name: str
    output_dir: str
    settings: dict
    train_runtime_s: float
    final_metrics: dict


def ensure_sft_output(script_args, model_args) -> None:
    """With `sft_config:` set and no SFT output at `model_name_or_path`, run that SFT recipe first (as recipes/dpr.py
    does); the SFT YAML must write to `model_name_or_path`.

    Example:
        ```python
        script_args, training_args, model_args = RecipeParser(DPR_ARGUMENTS).parse_args_and_config(argv)
        ensure_sft_output(script_args, model_args)   # runs recipes/demo/sft.yaml when runs/demo/sft is missing
        ```
    """
    if not script_args.sft_config or has_sft_output(model_args.model_name_or_path):
        return
    sft_args, sft_training_args, sft_model_args = RecipeParser(
        (SFTScriptArguments, SFTConfig, ModelConfig)
    ).parse_args_and_config(["--config", script_args.sft_config])
    if sft_training_args.output_dir != model_args.model_name_or_path:
        raise ValueError(
            f"{script_args.sft_config} writes the SFT model to {sft_training_args.output_dir!r} but the analysis starts "
            f"from model_name_or_path={model_args.model_name_or_path!r}; make them the same folder."
        )
    if PartialState().is_main_process:
        print(
            f"No SFT output in {model_args.model_name_or_path} yet: running {script_args.sft_config} first.",
            flush=True,
        )
    run_sft(sft_args, sft_training_args, sft_model_args)


def _plain(value):
    value = getattr(value, "value", value)  # enums (lr_scheduler_type)
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def variant_settings(script_args, training_args, model_args, **extra) -> dict:
    """The values of `SETTINGS_KEYS` (plus `extra`, e.g. `oracle=True`) that identify a trained variant.

    Example:
        >>> from types import SimpleNamespace
        >>> variant_settings(SimpleNamespace(dataset_name="d"), SimpleNamespace(gamma=0.95), SimpleNamespace(), oracle=True)
        {'dataset_name': 'd', 'gamma': 0.95, 'oracle': True}
    """
    settings = {}
    for key in SETTINGS_KEYS:
        for source in (script_args, training_args, model_args):
            if hasattr(source, key):
                settings[key] = _plain(getattr(source, key))
                break
    settings.update({k: _plain(v) for k, v in extra.items()})
    return json.loads(json.dumps(settings))


def free_memory() -> None:
    """Collect garbage and empty the CUDA cache between runs (models of the previous variant are gone).

    Example:
        >>> free_memory()
    """
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _final_metrics(log_history: list[dict]) -> dict:
    """The last logged value of DPR's training metrics (`kl_sft/per_token`, `reward`, ...) and TRL's `train_runtime`."""
    wanted = (
        "kl_sft/per_token",
        "kl_sft/per_response",
        "reward",
        "reward_std",
        "dense_reward/token_mean",
        "completions/mean_length",
        "train_runtime",
    )
    final = {}
    for entry in log_history:
        final.update({k: float(entry[k]) for k in wanted if k in entry})
    return final


def train_variant(
    name: str,
    script_args,
    training_args,
    model_args,
    settings: dict,
    reward_model: CheckpointRewardModel | None = None,
    reward_funcs: list | None = None,
) -> VariantRun:
    """Train variant `name` into `training_args.output_dir`, or reuse the run already there.

    A folder whose `analysis_run.json` records the same `settings` is reused as it is; other settings are an error
    (delete the folder or use another output_dir). Trains with recipes/dpr.py's `run_dpr`; `reward_model` (e.g. the oracle) replaces the
    one loaded from the SFT output; `reward_funcs` are
    TRL's outcome rewards added to r̂ (`DensePathTrainer`). The Hub push of a DPR recipe is never done for a variant.

    Example:
        ```python
        _, script_args, training_args, model_args = parse_with_overrides(types, argv, {"gamma": 0.95, "output_dir": "runs/a/g"})
        run = train_variant("gamma0.95", script_args, training_args, model_args,
                            variant_settings(script_args, training_args, model_args))
        run.train_runtime_s, run.final_metrics["kl_sft/per_token"]
        ```
    """
    output_dir = Path(training_args.output_dir)
    summary_path = output_dir / RUN_SUMMARY_NAME
    if summary_path.is_file():
        recorded = json.loads(summary_path.read_text())
        if recorded["settings"] != settings:
            changed = sorted(
                k for k in set(settings) | set(recorded["settings"]) if settings.get(k) != recorded["settings"].get(k)
            )
            details = ", ".join(f"{k}: {recorded['settings'].get(k)!r} → {settings.get(k)!r}" for k in changed)
            raise ValueError(
                f"{output_dir} already holds variant {name!r} trained with other settings ({details}). Delete the folder "
                "to retrain it, or choose another output_dir."
            )
        return VariantRun(**recorded)
    training_args.push_to_hub = False
    start = time.perf_counter()
    trainer = run_dpr(script_args, training_args, model_args, reward_model=reward_model, reward_funcs=reward_funcs)
    final = _final_metrics(trainer.state.log_history)
    run = VariantRun(
        name=name,
        output_dir=str(output_dir),
        settings=settings,
        train_runtime_s=final.pop("train_runtime", time.perf_counter() - start),
        final_metrics=final,
    )
    del trainer
    free_memory()
    state = PartialState()
    if state.is_main_process:
        summary_path.write_text(json.dumps(run.__dict__, indent=2))
    state.wait_for_everyone()
    return run


def sft_checkpoints(checkpoints_dir: str | Path) -> tuple[dict[int, Path], int]:
    """`({step: folder}, N)`: the complete `checkpoint-<step>` folders of an SFT run and its total steps N.

    Example:
        >>> sft_checkpoints("runs/nowhere")
        Traceback (most recent call last):
        ...
        FileNotFoundError: runs/nowhere has no checkpoint-N folders. ...
    """
    folders = {}
    for path in Path(checkpoints_dir).glob("checkpoint-*"):
        match = re.fullmatch(r"checkpoint-(\d+)", path.name)
        if match and path.is_dir() and (path / "trainer_state.json").is_file():
            folders[int(match.group(1))] = path
    if not folders:
        raise FileNotFoundError(
            f"{checkpoints_dir} has no checkpoint-N folders. π_ref at other fractions α needs an SFT run that saved "
            "step checkpoints: recipes/sft.py ... --save_strategy steps --save_steps 60 --save_only_model true (see "
            "experiments/README.md)."
        )
    state = json.loads((folders[max(folders)] / "trainer_state.json").read_text())
    return folders, int(state["max_steps"])


def reference_checkpoint(checkpoints_dir: str | Path, fraction: float) -> str:
    """The folder of π_ref at α = `fraction`: the SFT checkpoint at step ⌊α·N⌋ (the step `ReferenceCheckpointCallback`
    would save), or an error naming the saved steps.

    Example:
        >>> import json, tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> for step in (60, 600):
        ...     (run / f"checkpoint-{step}").mkdir()
        ...     _ = (run / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"max_steps": 600}))
        >>> Path(reference_checkpoint(run, 0.1)).name
        'checkpoint-60'
    """
    check_reference_fraction(fraction)
    folders, total = sft_checkpoints(checkpoints_dir)
    step = math.floor(fraction * total)
    if step not in folders:
        raise FileNotFoundError(
            f"π_ref at α={fraction} is step ⌊{fraction}·{total}⌋ = {step} of the SFT run in {checkpoints_dir}, which saved "
            f"steps {sorted(folders)}. Choose α among those steps / {total}, or rerun the SFT with a save_steps that "
            f"divides {step}."
        )
    return str(folders[step])


def reference_at(fraction: float, sft_dir: str | Path, checkpoints_dir: str | Path | None = None) -> str:
    """π_ref at α = `fraction` for the SFT output `sft_dir`: its recorded `dpr_reference/` when that was taken at
    this α, else the step checkpoint ⌊α·N⌋ of `checkpoints_dir` (default: `sft_dir` itself).

    Example:
        ```python
        reference_at(0.5, "runs/demo/sft")                                 # runs/demo/sft/dpr_reference
        reference_at(0.1, "runs/demo/sft", "runs/demo/sft_checkpoints")    # runs/demo/sft_checkpoints/checkpoint-60
        ```
    """
    if (Path(sft_dir) / MANIFEST_NAME).is_file():
        manifest, path = resolve_reference(str(sft_dir))
        if manifest.fraction == fraction:
            return path
    return reference_checkpoint(checkpoints_dir or sft_dir, fraction)


@dataclass
class WinRateSweepArguments:
    """What a win-rate sweep adds to recipes/dpr.py's arguments (whose `output_dir` is the sweep's folder, and whose
    `evaluation_config` is the recipes/evaluate.py YAML every variant is evaluated with: its baseline, candidates and
    output_dir are replaced by the sweep's, SFT = model_name_or_path and one candidate per variant).

    Example:
        >>> WinRateSweepArguments().stage
        'all'
    """

    stage: str = field(
        default="all",
        metadata={
            "help": "all: train the missing variants, then evaluate. train: only train (e.g. one variant per "
            "`accelerate launch` on GPUs). evaluate: only evaluate (every variant must be trained).",
            "choices": ["all", "train", "evaluate"],
        },
    )


def sweep_win_rates(
    dataclass_types: Sequence[type],
    argv: Sequence[str],
    variants: dict[str, dict],
    *,
    evaluation_config_path: str,
    output_dir: str | Path,
    stage: str = "all",
) -> tuple[dict[str, VariantRun], list[dict]]:
    """Train each variant (name → keys of recipes/dpr.py to change) into `output_dir/<name>`, then evaluate them all
    against SFT with `evaluation_config_path` into `output_dir/evaluation`. Returns the runs and the win-rate rows
    (`trl_dpr.analysis.WIN_RATE_COLUMNS`, `method` = variant name; none with `stage="train"`).

    `dataclass_types` are the script's parser types, recipes/dpr.py's three last; `argv` its command line. The
    evaluation runs on the main process only.

    Example:
        ```python
        types = (GammaSweepArguments, *DPR_ARGUMENTS)
        runs, rows = sweep_win_rates(types, argv, {"gamma0.95": {"gamma": 0.95}, "gamma1": {"gamma": 1.0}},
                                     evaluation_config_path="experiments/configs/evaluate_demo.yaml",
                                     output_dir="runs/analysis/gamma_sweep")
        [(row["method"], row["win_rate"]) for row in rows]
        ```
    """
    if stage not in ("all", "train", "evaluate"):
        raise ValueError(f"stage must be all, train or evaluate, got {stage!r}.")
    if not evaluation_config_path:
        raise ValueError("Set evaluation_config: the recipes/evaluate.py YAML the variants are evaluated with.")
    output_dir = Path(output_dir)
    evaluation_dir = output_dir / "evaluation"
    if stage != "train":  # a bad evaluation YAML or a missing judge key fails now, not after hours of training
        config = evaluation_config(evaluation_config_path, output_dir=str(evaluation_dir))
        if config.judge == "openai":
            OpenAIChatModel(api_key_env=config.judge_api_key_env).check_api_key()
    runs: dict[str, VariantRun] = {}
    sft_paths = set()
    for index, (name, overrides) in enumerate(variants.items(), start=1):
        parsed = parse_with_overrides(dataclass_types, argv, {**overrides, "output_dir": str(output_dir / name)})
        script_args, training_args, model_args = parsed[-3:]
        sft_paths.add(model_args.model_name_or_path)
        already_trained = (Path(training_args.output_dir) / RUN_SUMMARY_NAME).is_file()
        if stage == "evaluate" and not already_trained:
            raise FileNotFoundError(
                f"stage=evaluate, but variant {name!r} has not been trained ({training_args.output_dir} has no "
                f"{RUN_SUMMARY_NAME}). Train it first (stage=train or all)."
            )
        print_stage(
            index, len(variants), f"DPR variant {name} ({', '.join(f'{k}={v}' for k, v in overrides.items())})"
        )
        settings = variant_settings(script_args, training_args, model_args)
        runs[name] = train_variant(name, script_args, training_args, model_args, settings)
        if not already_trained and PartialState().is_main_process:
            forget_cached_answers(evaluation_dir, name)  # answers of an earlier model with this name are stale
    if stage == "train":
        return runs, []
    if len(sft_paths) != 1:
        raise ValueError(
            f"A win-rate sweep compares every variant with one SFT model; the variants start from {sorted(sft_paths)}."
        )
    rows: list[dict] = []
    state = PartialState()
    if state.is_main_process:
        config = evaluation_config(
            evaluation_config_path,
            baseline=f"SFT={sft_paths.pop()}",
            candidates=[f"{name}={run.output_dir}" for name, run in runs.items()],
            output_dir=str(evaluation_dir),
        )
        rows = win_rate_rows(run_evaluation(config, show_progress=False))
    state.wait_for_everyone()
    return runs, rows
