"""Dense-Path REINFORCE from an SFT output (π_SFT + its reference checkpoint π_ref).

    trl-dpr dpr --config demo/dpr.yaml       # the embedded demo, offline on CPU

`model_name_or_path` is the SFT output of `trl-dpr sft`; `sft_config:` runs that SFT first when it is missing, and
`evaluation_config:` evaluates the policy against SFT afterwards (the run is finished first: the same command again
redoes only an evaluation that failed).
"""

from dataclasses import replace
from pathlib import Path

from trl import ModelConfig

from trl_dpr import DensePathConfig
from trl_dpr.reward_loading import check_reference_is_not_sft
from trl_dpr.running.checkpointing import mark_run_finished, releasing_output_dir, run_fingerprint
from trl_dpr.running.cli import run
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.model_card import add_evaluation_to_card
from trl_dpr.running.pipeline import DPRScriptArguments, check_dpr_inputs, evaluate_against_sft, run_dpr
from trl_dpr.running.placement import LaunchPlacement, check_launched_run
from trl_dpr.running.push import defer_push_to_hub, merge_trainer_output, push_trainer_output
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

    def evaluate(trainer, device):  # trainer None: a finished run evaluated again, its card written already
        results = evaluate_against_sft(  # the report on the main process, {} on the others
            script_args.evaluation_config,
            sft_path,
            training_args.output_dir,
            device=device,
            trust_remote_code=training_args.trust_remote_code,
        )
        if trainer is not None:
            trainer.create_model_card(dataset_name=script_args.dataset_name)  # now with the evaluation table
        elif results:
            add_evaluation_to_card(training_args.output_dir)
            if training_args.push_to_hub:  # the first run would have pushed after its evaluation
                repo = training_args.hub_model_id or Path(training_args.output_dir).absolute().name
                print(f"Not pushed yet: trl-dpr push {training_args.output_dir} --to {repo}", flush=True)

    evaluate_again = (
        (lambda: evaluation_stage("DPR", script_args.evaluation_config, placement, evaluate, None))
        if script_args.evaluation_config
        else None
    )
    if finished_already(training_args, fingerprint, evaluate_again):  # the same command again: exit code 0
        return
    # The DPR stage's own input is checked before the SFT stage spends anything: its folder (claimed), the push, the
    # prompts (loaded). run_dpr takes what was claimed and loaded rather than doing it again.
    check_fits_sft_recipe_context(script_args.sft_config, training_args.check_fits_context)  # π_SFT's, before its SFT
    if script_args.ref_model_name_or_path:  # r̂ ≡ 0: refused before an SFT stage writes that folder, too
        check_reference_is_not_sft(sft_path, script_args.ref_model_name_or_path)
    dpr_inputs = check_dpr_inputs(script_args, training_args)
    push = defer_push_to_hub(training_args)  # pushed below, after the evaluation: the model card carries its table

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
            # Before the evaluation: a failed one leaves a finished run, which the same command again only evaluates.
            finish=lambda trainer: mark_run_finished(training_args.output_dir, fingerprint),
            reads_reference=not script_args.ref_model_name_or_path,  # a named π_ref replaces the SFT output's
        )
        if push:
            push_trainer_output(
                trainer, dataset_name=script_args.dataset_name, merge_adapter=script_args.merge_adapter
            )
        elif script_args.merge_adapter:
            merge_trainer_output(trainer)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
