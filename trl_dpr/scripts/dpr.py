"""Dense-Path REINFORCE from an SFT output (π_SFT + its reference checkpoint π_ref).

    trl-dpr dpr --config demo/dpr.yaml       # the embedded demo, offline on CPU

`model_name_or_path` is the SFT output of `trl-dpr sft`; `sft_config:` runs that SFT first when it is missing, and
`evaluation_config:` evaluates the policy against SFT afterwards.
"""

from trl import ModelConfig

from trl_dpr import DensePathConfig
from trl_dpr.reward_loading import check_reference_is_not_sft
from trl_dpr.running.checkpointing import mark_run_finished, release_output_dir, run_fingerprint
from trl_dpr.running.cli import run
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.pipeline import DPRScriptArguments, check_dpr_inputs, evaluate_against_sft, run_dpr
from trl_dpr.running.placement import LaunchPlacement, check_launched_run
from trl_dpr.running.push import defer_push_to_hub, push_trainer_output
from trl_dpr.running.recipe_parser import RecipeParser
from trl_dpr.running.stages import check_fits_sft_recipe_context, finished_already, run_stages


def make_parser() -> RecipeParser:
    # MemoryTarget (gpu_memory_gib, num_gpus) is read by `trl-dpr memory`, not by training.
    return RecipeParser((DPRScriptArguments, DensePathConfig, ModelConfig, MemoryTarget), prog="trl-dpr dpr")


def main(argv=None):
    launch = LaunchPlacement.from_environment()  # before parsing: what accelerate launched this process with
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(argv)
    placement = check_launched_run(training_args, launch)  # the recipe's device and precision are the launcher's
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    fingerprint = run_fingerprint(script_args, training_args, model_args)
    if finished_already(training_args, fingerprint):  # the same command run again: says so, exit code 0
        return
    sft_path = model_args.model_name_or_path
    # The DPR stage's own input is checked before the SFT stage spends anything: its folder (claimed), the push, the
    # prompts (loaded). run_dpr takes what was claimed and loaded rather than doing it again.
    check_fits_sft_recipe_context(script_args.sft_config, training_args.check_fits_context)  # π_SFT's, before its SFT
    if script_args.ref_model_name_or_path:  # r̂ ≡ 0: refused before an SFT stage writes that folder, too
        check_reference_is_not_sft(sft_path, script_args.ref_model_name_or_path)
    dpr_inputs = check_dpr_inputs(script_args, training_args)
    push = defer_push_to_hub(training_args)  # pushed below, after the evaluation: the model card carries its table

    def evaluate(trainer, device):
        evaluate_against_sft(
            script_args.evaluation_config,
            sft_path,
            training_args.output_dir,
            device=device,
            trust_remote_code=training_args.trust_remote_code,
        )
        trainer.create_model_card(dataset_name=script_args.dataset_name)  # now with the evaluation table

    try:
        trainer = run_stages(
            "DPR",
            sft_path,
            placement,
            script_args.sft_config,
            script_args.evaluation_config,
            train=lambda: run_dpr(script_args, training_args, model_args, inputs=dpr_inputs),
            train_title=f"Dense-Path REINFORCE from {sft_path} ({placement}, dtype {model_args.dtype})",
            evaluate=evaluate,
            trust_remote_code=training_args.trust_remote_code,
        )
        if push:
            push_trainer_output(
                trainer, dataset_name=script_args.dataset_name, merge_adapter=script_args.merge_adapter
            )
        mark_run_finished(training_args.output_dir, fingerprint)  # last: the same command again finds it finished
    finally:  # after the evaluation's eval_results.json and the push; a failed stage leaves the folder free too
        release_output_dir(training_args.output_dir)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
