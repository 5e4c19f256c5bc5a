"""Dense-Path REINFORCE from an SFT output (π_SFT + its reference checkpoint π_ref).

    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml \
        recipes/dpr.py --config recipes/llama-3.1-8b/dpr/config_qlora.yaml

`model_name_or_path` is the SFT output of `trl-dpr sft` (a local folder or a Hub repo). With `sft_config:` set and no
SFT output there yet, the SFT stage runs first; with `evaluation_config:` (a `trl-dpr evaluate` YAML) the trained policy
is then evaluated against SFT as `trl-dpr evaluate` would. The embedded demo (`make demo`) does all three stages,
offline, on CPU:

    accelerate launch --config_file recipes/accelerate_configs/cpu.yaml recipes/dpr.py --config recipes/demo/dpr.yaml
"""

from trl import ModelConfig

from trl_dpr import DensePathConfig
from trl_dpr.running.checkpointing import last_complete_checkpoint, release_output_dir
from trl_dpr.running.cli import run
from trl_dpr.running.hub import defer_push_to_hub, push_trainer_output
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.pipeline import (
    DPRScriptArguments,
    check_dpr_inputs,
    check_evaluation_config,
    evaluate_against_sft,
    has_sft_output,
    print_stage,
    run_dpr,
    run_sft,
)
from trl_dpr.running.placement import LaunchPlacement, check_launched_run, sft_stage_of_pipeline
from trl_dpr.running.recipe_parser import RecipeParser


def make_parser() -> RecipeParser:
    # MemoryTarget (gpu_memory_gib, num_gpus) is read by `trl-dpr memory`, not by training.
    return RecipeParser((DPRScriptArguments, DensePathConfig, ModelConfig, MemoryTarget), prog="trl-dpr dpr")


def main(argv=None):
    launch = LaunchPlacement.from_environment()  # before parsing: what accelerate launched this process with
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(argv)
    placement = check_launched_run(training_args, launch)  # the recipe's device and precision are the launcher's
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    sft_path = model_args.model_name_or_path
    # The DPR stage's own input is checked before the SFT stage spends anything: its folder (claimed), the push, the
    # prompts (loaded), the evaluation YAML. run_dpr takes what was claimed and loaded rather than doing it again.
    dpr_inputs = check_dpr_inputs(script_args, training_args)
    if script_args.evaluation_config:
        check_evaluation_config(script_args.evaluation_config)
    push = defer_push_to_hub(training_args)  # pushed below, after the evaluation: the model card carries its table
    stages = 1 + bool(script_args.sft_config) + bool(script_args.evaluation_config)
    stage = 1
    if script_args.sft_config:
        sft_args, sft_training_args, sft_model_args = sft_stage_of_pipeline(script_args.sft_config, placement)
        if sft_training_args.output_dir != sft_path:
            raise ValueError(
                f"{script_args.sft_config} writes the SFT model to {sft_training_args.output_dir!r} but DPR starts from "
                f"model_name_or_path={sft_path!r}. To start from your own SFT output in {sft_path!r}, run without the "
                f"SFT stage: --sft_config \"\" (or sft_config: null in the recipe); else make them the same folder."
            )
        title = f"SFT of {sft_model_args.model_name_or_path} (reference checkpoint at α={sft_args.reference_fraction})"
        finished = has_sft_output(sft_path)
        unfinished_checkpoint = None if finished else last_complete_checkpoint(sft_path)
        if finished:
            title += f": found in {sft_path}, skipped"
        elif unfinished_checkpoint:
            title += f": resuming the unfinished run in {sft_path} from {unfinished_checkpoint}"
            sft_training_args.resume_from_checkpoint = unfinished_checkpoint
        print_stage(stage, stages, title)
        if not finished:
            run_sft(sft_args, sft_training_args, sft_model_args)
        stage += 1

    print_stage(stage, stages, f"Dense-Path REINFORCE from {sft_path} ({placement}, dtype {model_args.dtype})")
    trainer = run_dpr(script_args, training_args, model_args, inputs=dpr_inputs)
    stage += 1

    if script_args.evaluation_config:
        print_stage(stage, stages, f"Evaluation: DPR vs SFT ({script_args.evaluation_config})")
        evaluate_against_sft(script_args.evaluation_config, sft_path, training_args.output_dir, device="cpu" if placement.use_cpu else "auto")
        trainer.create_model_card(dataset_name=script_args.dataset_name)  # now with the evaluation table
    if push:
        push_trainer_output(trainer, dataset_name=script_args.dataset_name, merge_adapter=script_args.merge_adapter)
    release_output_dir(training_args.output_dir)  # after the evaluation's eval_results.json and the push


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
