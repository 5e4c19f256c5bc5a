"""A tiny SFT or DPR run of the embedded pipeline, for the kill-and-resume and concurrent-run tests.

    python tests/scripts/tiny_run.py sft OUTPUT_DIR [--resume] [--step-seconds S] [--device cuda]
    python tests/scripts/tiny_run.py dpr OUTPUT_DIR --sft-dir SFT_DIR [--resume] [--step-seconds S] [--wait-for FILE]

or `tiny_run(argv)` in a process forked from one that already imported torch and TRL (tests/running/test_checkpoint_safety.py:
the same run, without the ~13 s of imports each new interpreter pays here).

`--step-seconds` sleeps after each optimizer step (wall time only: it changes no number), so a test can kill the
process between two checkpoints. `--wait-for FILE` holds the run after its first step until FILE exists, so a test
knows the run is still going while it checks something else (a sleep would race against a slow machine).
"""

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import ModelConfig, SFTConfig  # noqa: E402

from trl_dpr import DensePathConfig  # noqa: E402
from trl_dpr.embedded import (
    EMBEDDED_DATASET,  # noqa: E402
    EMBEDDED_MODEL,
)
from trl_dpr.running.cli import run  # noqa: E402
from trl_dpr.running.pipeline import DPRScriptArguments, SFTScriptArguments, run_dpr, run_sft  # noqa: E402

COMMON = dict(
    bf16=False,
    report_to="none",
    gradient_checkpointing=False,
    seed=0,
    logging_steps=1,
    save_strategy="steps",
    disable_tqdm=True,
)


class SlowSteps(TrainerCallback):
    def __init__(self, seconds):
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


class WaitAfterFirstStep(TrainerCallback):
    def __init__(self, path, timeout=600.0):
        self.path, self.timeout = path, timeout

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            deadline = time.monotonic() + self.timeout
            while not os.path.exists(self.path) and time.monotonic() < deadline:
                time.sleep(0.1)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("stage", choices=["sft", "dpr"])
    parser.add_argument("output_dir")
    parser.add_argument("--sft-dir")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--wait-for")
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu"
    )  # cuda: the GPU tier (tests/end_to_end/test_gpu.py)
    args = parser.parse_args(argv)
    common = {**COMMON, "use_cpu": args.device == "cpu"}
    torch.set_num_threads(1)
    callbacks = [SlowSteps(args.step_seconds)] if args.step_seconds else []
    if args.wait_for:
        callbacks.append(WaitAfterFirstStep(args.wait_for))
    resume = True if args.resume else None
    if args.stage == "sft":
        run_sft(
            SFTScriptArguments(dataset_name=EMBEDDED_DATASET, num_train_samples=96, reference_fraction=0.5),
            SFTConfig(
                output_dir=args.output_dir,
                max_steps=12,
                save_steps=4,
                per_device_train_batch_size=8,
                learning_rate=1e-3,
                max_length=128,
                resume_from_checkpoint=resume,
                **common,
            ),
            ModelConfig(model_name_or_path=EMBEDDED_MODEL, dtype="float32"),
            callbacks=callbacks,
        )
    else:
        run_dpr(
            DPRScriptArguments(dataset_name=EMBEDDED_DATASET, num_train_samples=48),
            DensePathConfig(
                output_dir=args.output_dir,
                max_steps=6,
                save_steps=2,
                per_device_train_batch_size=4,
                max_completion_length=8,
                learning_rate=1e-4,
                kl_coef=0.1,
                resume_from_checkpoint=resume,
                **common,
            ),
            ModelConfig(model_name_or_path=args.sft_dir, dtype="float32"),
            callbacks=callbacks,
        )


def tiny_run(argv):
    """`main(argv)` as the recipes run it: a refused input is a message and exit code 2."""
    run(lambda _: main(argv), [])


if __name__ == "__main__":
    tiny_run(None)
