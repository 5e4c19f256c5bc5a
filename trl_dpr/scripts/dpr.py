"""Dense-Path REINFORCE from an SFT output (π_SFT + its reference checkpoint π_ref).

    trl-dpr dpr --config demo/dpr.yaml       # the embedded demo, offline on CPU

`model_name_or_path` is the SFT output of `trl-dpr sft`; `sft_config:` runs that SFT first when it is missing, and
`evaluation_config:` evaluates the policy against SFT afterwards, before `merge_adapter:` merges it and `push_to_hub:`
pushes it. The run is recorded finished first, with those steps pending: the same command again trains nothing and does
only the steps that did not finish (for the push, it prints the `trl-dpr push` line). `reward_funcs:` adds outcome
rewards (a verifier) beside r̂, weighted by `reward_weights` (docs/dense_plus_outcome.md).
"""

import shlex
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from accelerate import PartialState
from trl import ModelConfig

from trl_dpr import DensePathConfig
from trl_dpr.reward_loading import check_reference_is_not_sft
from trl_dpr.running.checkpointing import (
    mark_evaluated,
    mark_run_finished,
    mark_step_done,
    releasing_output_dir,
    run_fingerprint,
)
from trl_dpr.running.cli import run
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.model_card import add_evaluation_to_card, evaluation_table
from trl_dpr.running.pipeline import DPRScriptArguments, check_dpr_inputs, evaluate_against_sft, run_dpr
from trl_dpr.running.placement import LaunchPlacement, check_launched_run
from trl_dpr.running.push import defer_push_to_hub, merge_output_dir, merge_trainer_output, push_trainer_output
from trl_dpr.running.recipe_parser import RecipeParser
from trl_dpr.running.stages import check_fits_sft_recipe_context, evaluation_stage, finished_already, run_stages


def make_parser() -> RecipeParser:
    # MemoryTarget (gpu_memory_gib, num_gpus) is read by `trl-dpr memory`, not by training.
    return RecipeParser((DPRScriptArguments, DensePathConfig, ModelConfig, MemoryTarget), prog="trl-dpr dpr")


def main(argv=None):
    launch = LaunchPlacement.from_environment()  # before parsing: what accelerate launched this process with
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(argv)
    placement = check_launched_run(training_args, launch)  # the recipe's device and precision are the launcher's
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    fingerprint = run_fingerprint(script_args, training_args, model_args)
    sft_path = model_args.model_name_or_path
    output_dir = training_args.output_dir
    push_command = _push_command(training_args, script_args.merge_adapter) if training_args.push_to_hub else None

    def evaluate(trainer, device):  # trainer None: a finished run evaluated again, its card written already
        earlier_table = evaluation_table(output_dir)  # before it is replaced: what an earlier trl_dpr's card holds
        results = evaluate_against_sft(  # the report on the main process, {} on the others
            script_args.evaluation_config,
            sft_path,
            output_dir,
            device=device,
            trust_remote_code=training_args.trust_remote_code,
        )
        if trainer is not None:
            trainer.create_model_card(dataset_name=script_args.dataset_name)  # now with the evaluation table
        elif results:
            add_evaluation_to_card(output_dir, earlier_table)
        mark_evaluated(output_dir, fingerprint)  # with these settings: the same command again shows its table

    def merge_again():  # a merge that did not finish, or an evaluation redone: in the dtype the run loaded its model in
        if PartialState().is_main_process:
            merge_output_dir(output_dir, (training_args.model_init_kwargs or {}).get("dtype") or model_args.dtype)
            mark_step_done(output_dir, "merge")

    evaluate_again = (
        (lambda: evaluation_stage("DPR", script_args.evaluation_config, placement, evaluate, None))
        if script_args.evaluation_config
        else None
    )
    merges = merge_again if script_args.merge_adapter else None  # merge_adapter is the run's: its record's too
    if finished_already(training_args, fingerprint, evaluate_again, merges, push_command):  # exit code 0
        return
    # The DPR stage's own input is checked before the SFT stage spends anything: its reward functions (imported, with
    # their weights and columns), its folder (claimed), the push, the prompts (loaded). run_dpr takes what was
    # claimed and loaded rather than doing it again.
    check_fits_sft_recipe_context(script_args.sft_config, training_args.check_fits_context)  # π_SFT's, before its SFT
    if script_args.ref_model_name_or_path:  # r̂ ≡ 0: refused before an SFT stage writes that folder, too
        check_reference_is_not_sft(sft_path, script_args.ref_model_name_or_path)
    dpr_inputs = check_dpr_inputs(script_args, training_args, sft_path=sft_path)
    push = defer_push_to_hub(training_args)  # pushed below, after the evaluation: the model card carries its table
    # What the record of the finished run lists as still to do, each cleared once done: the same command again does
    # what a failure (or Ctrl-C) left undone. A push merges first when it merges (the push line says --merge_adapter).
    pending = ["evaluation"] if script_args.evaluation_config else []
    pending += ["push"] if push else ["merge"] if script_args.merge_adapter else []

    # A failed stage leaves the folder free; Ctrl-C keeps it held until the process ends, so `run` names its checkpoint.
    with releasing_output_dir(training_args.output_dir):
        trainer = run_stages(
            "DPR",
            sft_path,
            placement,
            script_args.sft_config,
            script_args.evaluation_config,
            # merged below, after the evaluation (the merged card carries its table), as the push
            train=lambda: run_dpr(
                replace(script_args, merge_adapter=False), training_args, model_args, inputs=dpr_inputs
            ),
            train_title=f"Dense-Path REINFORCE from {sft_path} ({placement}, dtype {model_args.dtype})",
            evaluate=evaluate,
            trust_remote_code=training_args.trust_remote_code,
            # Before the evaluation, with the steps pending: after a failure the same command again does only those.
            finish=lambda trainer: mark_run_finished(output_dir, fingerprint, pending),
            reads_reference=not script_args.ref_model_name_or_path,  # a named π_ref replaces the SFT output's
        )
        if push:
            with _said_on_failure(
                f"The push did not finish; the trained run is kept, finished. Push it: {push_command}"
            ):
                push_trainer_output(
                    trainer, dataset_name=script_args.dataset_name, merge_adapter=script_args.merge_adapter
                )
            mark_step_done(output_dir, "push")
        elif script_args.merge_adapter:
            with _said_on_failure(
                "The merge did not finish; the trained run is kept, finished: the same command again merges it."
            ):
                merge_trainer_output(trainer)
            mark_step_done(output_dir, "merge")


@contextmanager
def _said_on_failure(line: str):
    """Print `line` (main process, stderr) when the block fails, before its error: what the folder keeps, what next."""
    try:
        yield
    except Exception:
        if PartialState().is_main_process:
            print(line, file=sys.stderr, flush=True)
        raise


def _push_command(training_args, merge_adapter: bool) -> str:
    """The `trl-dpr push` line that pushes the run as its recipe would (repo, merge, privacy, branch); no token."""
    repo = training_args.hub_model_id or Path(training_args.output_dir).absolute().name
    flags = [
        *(["--merge_adapter"] if merge_adapter else []),
        *(["--private"] if training_args.hub_private_repo else []),
        *(["--revision", training_args.hub_revision] if training_args.hub_revision else []),
    ]
    return shlex.join(["trl-dpr", "push", str(training_args.output_dir), "--to", repo, *flags])


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
