"""SFT on demonstrations, keeping the reference checkpoint π_ref at ⌊α·N⌋ steps (Algorithm 1, line 1).

    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml \
        recipes/sft.py --config recipes/llama-3.1-8b/sft/config_qlora.yaml

Writes π_SFT to `output_dir`, π_ref to `dpr_reference/` and the manifest `dpr_reference.json` that `trl-dpr dpr` reads.
"""

from trl import ModelConfig

from trl_dpr.config import SFTRecipeConfig
from trl_dpr.running.checkpointing import run_fingerprint
from trl_dpr.running.cli import run
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.pipeline import SFTScriptArguments, print_stage, run_sft
from trl_dpr.running.placement import LaunchPlacement, check_launched_run
from trl_dpr.running.recipe_parser import RecipeParser
from trl_dpr.running.stages import finished_already


def make_parser() -> RecipeParser:
    # MemoryTarget (gpu_memory_gib, num_gpus) is read by `trl-dpr memory`, not by training.
    return RecipeParser((SFTScriptArguments, SFTRecipeConfig, ModelConfig, MemoryTarget), prog="trl-dpr sft")


def main(argv=None):
    launch = LaunchPlacement.from_environment()  # before parsing: what accelerate launched this process with
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(argv)
    placement = check_launched_run(training_args, launch)  # the recipe's device and precision are the launcher's
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    fingerprint = run_fingerprint(script_args, training_args, model_args)
    if finished_already(training_args, fingerprint):  # the same command run again: says so, exit code 0
        return
    print_stage(
        1,
        1,
        f"SFT of {model_args.model_name_or_path} (reference checkpoint at α={script_args.reference_fraction}; "
        f"{placement}, dtype {model_args.dtype})",
    )
    run_sft(script_args, training_args, model_args, fingerprint=fingerprint)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
