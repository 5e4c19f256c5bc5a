"""The stages of `trl-dpr dpr`, `trl-dpr spin` and `trl-dpr gsil`, written once:

sft_config (skipped when done, resumed when unfinished) ──► train ──► (finished) ──► evaluation_config (against SFT)
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..reference_manifest import MANIFEST_NAME, parse_manifest
from .checkpointing import (
    EVAL_RESULTS_NAME,
    RUN_COMPLETE_NAME,
    OutputDirInUse,
    claim_output_dir,
    evaluation_changed,
    finished_run,
    finished_with_other,
    last_complete_checkpoint,
    mark_step_pending,
    pending_steps,
    releasing_output_dir,
    run_fingerprint,
)
from .pipeline import (
    SFTScriptArguments,
    check_evaluation_config,
    check_evaluation_fits_context,
    has_sft_output,
    print_stage,
    run_sft,
)
from .placement import PLACEMENT_KEYS, RunPlacement

Trained = TypeVar("Trained")


def run_stages(
    method: str,
    sft_path: str,
    placement: RunPlacement,
    sft_config: str | None,
    evaluation_config: str | None,
    train: Callable[[], Trained],
    train_title: str,
    evaluate: Callable[[Trained, str], object],
    trust_remote_code: bool = False,
    finish: Callable[[Trained], object] | None = None,
    reads_reference: bool = True,
) -> Trained:
    """Run a pipeline recipe's stages: the SFT stage of `sft_config` (when set) writing `sft_path`, then `train()`,
    `finish(trained)` (the run's record of being finished, and of what is still to do), then `evaluate(trained,
    device)` against SFT (when `evaluation_config` is set); returns what `train()` returned. `reads_reference`: the
    training reads the SFT output's π_ref (DPR without `ref_model_name_or_path`), so a found SFT whose π_ref is at
    another α is refused.

    The evaluation YAML is checked before anything trains, its lengths against π_SFT's context before `train()` (π_SFT
    read with the training run's `trust_remote_code` where the YAML does not set it, as `evaluate` must load it); a
    finished SFT output is not trained again when its run record is the SFT recipe's (one of other arguments is refused,
    as `trl-dpr sft` refuses it; one without a record is used, with a note), an unfinished one resumes. The run is finished before its evaluation, so
    a failed evaluation leaves a finished run, which the same command again only evaluates (`finished_already`), then
    does what the caller runs after it (a merge, a push) when its record lists that still pending.
    """
    if evaluation_config:  # a bad evaluation YAML fails before the SFT stage and the training are spent
        check_evaluation_config(evaluation_config)
    stages = 1 + bool(sft_config) + bool(evaluation_config)
    stage = 1
    if sft_config:
        _sft_stage(method, sft_path, placement, sft_config, stage, stages, reads_reference)
        stage += 1
    if evaluation_config:  # π_SFT is there now: the answers must fit its context before hours of training
        check_evaluation_fits_context(evaluation_config, sft_path, trust_remote_code)
    print_stage(stage, stages, train_title)
    trained = train()
    if finish is not None:
        finish(trained)
    if evaluation_config:
        evaluation_stage(method, evaluation_config, placement, evaluate, trained, stage + 1, stages)
    return trained


def evaluation_stage(
    method: str,
    evaluation_config: str,
    placement: RunPlacement,
    evaluate: Callable[[Trained, str], object],
    trained: Trained,
    stage: int = 1,
    stages: int = 1,
) -> None:
    """`evaluate(trained, device)` under its stage header; a failure says that the trained run is kept (finished) and
    that the same command again runs only the evaluation, before the error itself."""
    print_stage(stage, stages, f"Evaluation: {method} vs SFT ({evaluation_config})")
    try:
        evaluate(trained, "cpu" if placement.use_cpu else "auto")
    except Exception:  # Ctrl-C: `cli.run` says what the folder holds
        from accelerate import PartialState

        if PartialState().is_main_process:
            print(
                f"The evaluation did not finish; the trained {method} run is kept, finished: the same command again "
                "runs only its evaluation, then what follows it.",
                file=sys.stderr,
                flush=True,
            )
        raise


def finished_already(
    training_args,
    fingerprint: str,
    evaluate_again: Callable[[], object] | None = None,
    merge_again: Callable[[], object] | None = None,
    push_command: str | None = None,
) -> bool:
    """Whether this command already ran to its end in `training_args.output_dir` with the same arguments
    (`run_fingerprint`, `finished_run`; the evaluation settings are not among them): then it says so, shows the run's
    evaluation, and says how to train again. A finished run with steps still pending (`pending_steps`: the evaluation
    failed or was stopped, or the merge or the push after it) gets only those, in order, in the claimed folder:
    `evaluate_again()` (the recipe's `evaluation_stage`), `merge_again()`, and for the push the line `push_command` (the
    push needs the user's network and token: printed, not run). A run evaluated with other evaluation settings than the
    command's (`evaluation_changed`: the YAML edited or another one named, or none before) is evaluated again first: the
    command asks for that evaluation, and the table shown is then the one it asks for; then merged again when it merges
    (`merge_again` given: `<output_dir>-merged` copies the card), and a pushed run gets the `push_command` line, as its
    Hub copy keeps the old table. A record that lists no pending steps (an earlier trl_dpr's) is pending its evaluation
    when its `eval_results.json` is missing, and then its push.

    A re-run of the README's `make demo` then ends with exit code 0 rather than refusing the folder (a refusal under
    `accelerate launch` also prints the launcher's traceback). A run that overwrites is never finished; one that
    resumes a finished run is (resuming its last checkpoint would train a step past `max_steps`).
    """
    if training_args.overwrite_output_dir:
        return False
    output_dir = training_args.output_dir
    if not finished_run(output_dir, fingerprint):
        return False
    from accelerate import PartialState

    main = PartialState().is_main_process
    pending = pending_steps(output_dir)
    if pending is None:  # an earlier trl_dpr's record: its evaluation (then its push) is pending if it has no table
        evaluated = evaluate_again is None or (Path(output_dir) / EVAL_RESULTS_NAME).is_file()
        pending = [] if evaluated else ["evaluation", "push"]
    redo = {"evaluation": evaluate_again, "merge": merge_again}
    unfinished = [step for step in pending if redo.get(step) is not None]
    changed = (
        evaluate_again is not None and "evaluation" not in pending and evaluation_changed(output_dir, fingerprint)
    )
    todo = ["evaluation", *unfinished] if changed else unfinished
    if changed and merge_again is not None and "merge" not in todo:  # the merged copy's card: the old table
        todo.append("merge")
    push_line = f"Not pushed yet: {push_command}" if push_command and "push" in pending else None
    if changed and push_command and "push" not in pending:  # pushed: the Hub copy is not ours to push unasked
        push_line = f"Its Hub copy keeps the earlier evaluation table; to push this one: {push_command}"
    if todo:
        if main:
            doing = {
                "evaluation": "evaluating it again" if changed == "changed" else "evaluating it",
                "merge": "merging its adapter" if "merge" in unfinished else "merging its adapter again",
            }
            why = [f"its {' and '.join(unfinished)} did not finish"] if unfinished else []
            if changed:
                why.insert(0, _EVALUATION_CHANGES[changed])
            print(
                f"{output_dir} holds this run, trained; {'; '.join(why)}: "
                f"{', then '.join(doing[step] for step in todo)}.",
                flush=True,
            )
        claim_output_dir(output_dir, evaluating=True)
        with releasing_output_dir(output_dir):
            for step in todo:
                if step == "merge" and step not in pending:  # redone after the evaluation: pending until done
                    mark_step_pending(output_dir, step)
                redo[step]()
        if push_line and main:
            print(push_line, flush=True)
        return True
    if main:
        try:
            table = json.loads((Path(output_dir) / EVAL_RESULTS_NAME).read_text())["table_markdown"]
        except (OSError, ValueError, KeyError, TypeError):  # a run without an evaluation stage
            table = None
        print(f"Already finished: {output_dir} holds this run (same recipe and arguments); nothing to train.")
        if table:
            print(f"\n{table}\n")
        if push_line:
            print(f"{push_line} (its push did not finish)")
        print(f"To train it again: --overwrite_output_dir true, or remove {output_dir}.", flush=True)
    return True


_EVALUATION_CHANGES = {
    "changed": "its evaluation settings (evaluation_config) changed since it was evaluated",
    "new": "it was trained without an evaluation_config",
}


def _sft_stage(
    method: str,
    sft_path: str,
    placement: RunPlacement,
    sft_config: str,
    stage: int,
    stages: int,
    reads_reference: bool = True,
) -> None:
    sft_args, sft_training_args, sft_model_args = sft_stage_of_pipeline(sft_config, placement)
    if sft_training_args.output_dir != sft_path:
        raise ValueError(
            f"{sft_config} writes the SFT model to {sft_training_args.output_dir!r} but {method} starts from "
            f"model_name_or_path={sft_path!r}. To start from your own SFT output in {sft_path!r}, run without the "
            f'SFT stage: --sft_config "" (or sft_config: null in the recipe); else make them the same folder.'
        )
    alpha = sft_args.reference_fraction
    # As `trl-dpr sft` would: its record of the run (run_complete.json) says whether the SFT found there is this
    # recipe's; one of other arguments is refused (trained again only with the SFT recipe's overwrite_output_dir).
    fingerprint = run_fingerprint(sft_args, sft_training_args, sft_model_args)
    finished = has_sft_output(sft_path)
    other = finished_with_other(sft_path, fingerprint) if finished else None
    overwrite = bool(other) and getattr(sft_training_args, "overwrite_output_dir", False)
    finished = finished and not overwrite
    unfinished_checkpoint = None if finished or overwrite else last_complete_checkpoint(sft_path)
    if finished and reads_reference:  # SPIN/GSIL and a named π_ref never read the SFT output's π_ref
        alpha = _check_found_alpha(sft_path, sft_config, alpha)
    if finished and other:
        raise ValueError(
            f"{other}; its model is left as it is. To train it with {sft_config}: overwrite_output_dir: true in "
            f"{sft_config}, or another output_dir there (and this recipe's model_name_or_path the same); to start "
            f'from the SFT output that is there: --sft_config "" (or sft_config: null in the recipe).'
        )
    reference = f"reference checkpoint at α={alpha}" if reads_reference else f"its π_ref (α={alpha}) not read here"
    title = f"SFT of {sft_model_args.model_name_or_path} ({reference})"
    if finished:
        title += f": found in {sft_path}, skipped"
    elif overwrite:
        title += f": the run in {sft_path} had other arguments, trained again (overwrite_output_dir in {sft_config})"
    elif unfinished_checkpoint:
        title += f": resuming the unfinished run in {sft_path} from {unfinished_checkpoint}"
        sft_training_args.resume_from_checkpoint = unfinished_checkpoint
    print_stage(stage, stages, title)
    from accelerate import PartialState

    if finished and other is None and PartialState().is_main_process:
        print(
            f"{sft_path} has no run record ({RUN_COMPLETE_NAME}: run_sft from Python and earlier trl_dpr versions "
            f"write none), so it is not compared with {sft_config}; to train it with {sft_config}, remove {sft_path}.",
            flush=True,
        )
    if not finished:
        try:
            run_sft(sft_args, sft_training_args, sft_model_args, fingerprint=fingerprint)
        except OutputDirInUse as error:  # e.g. a sweep's runs started at once from one SFT recipe
            # Not "give this run another output_dir": this run's own folder is free; the SFT folder is the recipe's.
            holder = str(error).split(". Two runs")[0]
            raise OutputDirInUse(
                f"{holder}: it is training the SFT stage this {method} run starts from ({sft_config}). Run this "
                "command again once that SFT has finished: it then finds the SFT output and skips the stage."
            ) from None


def check_fits_sft_recipe_context(sft_config: str | None, check: Callable[[object, str], None]) -> None:
    """`check(model_config, name)` (a run's lengths against a context) on the model the SFT recipe `sft_config` trains,
    read from its config.json alone: π_SFT keeps that context, so a length past it is refused before the SFT stage
    rather than after it. No `sft_config`, or a model unreadable here (offline, not cached): nothing to check yet."""
    if not sft_config:
        return
    import yaml

    from .memory import recipe_model_config
    from .recipe_checks import find_recipe_file, load_recipe_yaml

    try:
        name = (load_recipe_yaml(Path(find_recipe_file(sft_config)).read_text()) or {}).get("model_name_or_path")
        model_config = recipe_model_config(sft_config, follow_sft_config=False)
    except (OSError, ValueError, yaml.YAMLError):  # the SFT stage says what is wrong with its recipe
        return
    check(model_config, name or sft_config)


def _check_found_alpha(sft_path: str, sft_config: str, asked: float):
    """The α of the π_ref a finished SFT output holds (its dpr_reference.json; `asked` where it records none): refused
    when it is not the SFT recipe's, as skipping that SFT would train against another π_ref than the recipe asks."""
    manifest_path = Path(sft_path) / MANIFEST_NAME
    if not manifest_path.is_file():
        return asked
    found = parse_manifest(manifest_path.read_text(), str(manifest_path)).fraction
    if not math.isclose(found, asked):
        raise ValueError(
            f"{sft_path} holds a finished SFT whose π_ref is at α={found} ({MANIFEST_NAME}), but {sft_config} asks for "
            f"reference_fraction {asked}. To train π_ref at α={asked}, remove {sft_path} or give {sft_config} another "
            f"output_dir (and this recipe the same model_name_or_path); to use the SFT that is there, set "
            f"reference_fraction: {found} in {sft_config}."
        )
    return found


def sft_stage_of_pipeline(sft_config: str, run: RunPlacement) -> tuple:
    """(sft_args, training_args, model_args) of the SFT stage a pipeline runs first (`sft_config:` of a DPR, SPIN or
    GSIL recipe), on the pipeline's device and precision (`run` replaces the YAML's, said on the console): the stages
    share one process, and a CPU SFT stage before a GPU DPR stage left the DPR models on the CPU.
    """
    from types import SimpleNamespace

    from accelerate import PartialState
    from trl import ModelConfig

    from ..config import SFTRecipeConfig
    from .memory import MemoryTarget
    from .recipe_parser import RecipeParser, find_recipe_file, load_recipe_yaml

    with open(find_recipe_file(sft_config)) as handle:
        written = load_recipe_yaml(handle) or {}
    own = RunPlacement.of(SimpleNamespace(**{key: written.get(key, False) for key in PLACEMENT_KEYS}))
    if own != run and PartialState().is_main_process:
        print(
            f"{sft_config} runs as the rest of this run, on {run} (its own use_cpu/bf16/fp16 say {own}).", flush=True
        )
    parser = RecipeParser((SFTScriptArguments, SFTRecipeConfig, ModelConfig, MemoryTarget), prog="trl-dpr sft")
    sft_args, training_args, model_args, _ = parser.parse_args_and_config(["--config", sft_config, *run.flags()])
    return sft_args, training_args, model_args
