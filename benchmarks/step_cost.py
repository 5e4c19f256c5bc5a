"""Cost of a DPR step against a TRL GRPO step doing equivalent work, on the same model, batch and completion length.

    python benchmarks/step_cost.py                      # CPU, a small Llama-shaped model
    python benchmarks/step_cost.py --device cuda --hidden-size 2048 --layers 16 --completion-length 512

Equivalent work: GRPO scores with an LM-sized reward model (a sequence classifier as large as the policy) and keeps a
reference model for its KL (beta > 0), i.e. two frozen forwards per batch, like DPR's π_SFT and π_ref. Both sample the
same number of completions per step (DPR: B prompts x 1; GRPO: B/2 prompts x 2) of exactly `--completion-length`
tokens (EOS suppressed until then), so generation work is identical.

Each configuration runs in its own subprocesses (`--repeats`, round-robin over the configurations): peak memory is the process's peak resident memory on CPU
(/proc/self/status VmHWM) or `torch.cuda.max_memory_allocated` on GPU, measured over the training steps only. Step
time is the median over the steps after `--warmup` steps of every repeat. Results are printed and appended to `--output` as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

CONFIGURATIONS = ("dpr", "dpr_no_kl", "grpo")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8, help="completions per step (per device)")
    parser.add_argument("--prompt-length", type=int, default=64, help="approximate prompt tokens")
    parser.add_argument("--completion-length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="subprocesses per configuration, run round-robin (dpr, dpr_no_kl, grpo, dpr, ...) so that drifts in the "
        "machine's speed hit every configuration alike; the median is taken over the steps of all repeats",
    )
    parser.add_argument(
        "--configurations",
        nargs="+",
        choices=CONFIGURATIONS,
        default=list(CONFIGURATIONS),
        help="which to run (dpr and grpo for the ratio alone)",
    )
    parser.add_argument(
        "--fast-generation",
        action="store_true",
        help="a static KV cache for both trainers (DPR's fast_generation key; GRPO the same kwargs)",
    )
    parser.add_argument("--only", choices=CONFIGURATIONS, help=argparse.SUPPRESS)  # internal: one subprocess each
    parser.add_argument("--workdir", default="runs/benchmarks/step_cost")
    parser.add_argument("--output", default="benchmarks/results/step_cost.jsonl")
    return parser.parse_args(argv)


def peak_memory_reset(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    else:
        with open("/proc/self/clear_refs", "w") as f:  # "5" resets the peak resident set size (VmHWM)
            f.write("5")


def peak_memory_bytes(device: str) -> int:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_one(args) -> dict:
    """Train `args.steps` steps of one configuration in this process and measure it."""
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForSequenceClassification, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer

    torch.set_num_threads(args.threads)
    words = "the quick brown fox jumps over a lazy dog while numbers like 12 and 7 add up".split()
    tokenizer = build_tokenizer([" ".join(words)] * 20, vocab_size=512)
    prompt = " ".join(words * 10)[: args.prompt_length * 4]
    dataset = Dataset.from_dict({"prompt": [prompt] * 4096})

    def model(seed):
        return build_tiny_causal_lm(
            tokenizer,
            "llama",
            hidden_size=args.hidden_size,
            num_layers=args.layers,
            num_heads=8,
            max_positions=4096,
            seed=seed,
        )

    # The policy is loaded from a folder by both trainers (GRPO builds its beta > 0 reference model from that path).
    policy_path = Path(args.workdir) / f"policy-{args.hidden_size}x{args.layers}"
    if not (policy_path / "config.json").is_file():
        model(0).save_pretrained(policy_path)
        tokenizer.save_pretrained(policy_path)

    common = dict(
        output_dir=str(Path(args.workdir) / args.only),
        per_device_train_batch_size=args.batch_size,
        max_steps=args.steps + args.warmup,
        max_completion_length=args.completion_length,
        learning_rate=1e-6,
        logging_steps=1000,
        save_strategy="no",
        report_to="none",
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
        # every completion has the same length
        generation_kwargs={
            "min_new_tokens": args.completion_length,
            **({"cache_implementation": "static"} if args.fast_generation else {}),
        },
    )
    if args.only == "grpo":
        reward = LlamaForSequenceClassification(LlamaConfig(**{**model(1).config.to_dict(), "num_labels": 1}))
        reward.config.pad_token_id = tokenizer.pad_token_id
        trainer = GRPOTrainer(
            model=str(policy_path),
            reward_funcs=reward,
            reward_processing_classes=tokenizer,
            processing_class=tokenizer,
            train_dataset=dataset,
            args=GRPOConfig(num_generations=2, beta=0.04, **common),
        )
    else:
        reward_model = CheckpointRewardModel(model(0), model(1))
        kl = 0.0 if args.only == "dpr_no_kl" else 1e-5
        trainer = DensePathTrainer(
            model=str(policy_path),
            reward_model=reward_model,
            processing_class=tokenizer,
            train_dataset=dataset,
            args=DensePathConfig(kl_coef=kl, **common),
        )

    times = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *unused, **kwargs):
            if torch.cuda.is_available() and args.device == "cuda":
                torch.cuda.synchronize()
            self.start = time.perf_counter()
            if len(times) == args.warmup:
                peak_memory_reset(args.device)

        def on_step_end(self, *unused, **kwargs):
            if torch.cuda.is_available() and args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    trainer.add_callback(StepTimer())
    trainer.train()
    measured = times[args.warmup :]
    return {
        "configuration": args.only,
        "median_step_seconds": statistics.median(measured),
        "step_seconds": measured,
        "peak_memory_bytes": peak_memory_bytes(args.device),
    }


def summarize(args, argv, runs: dict, complete: bool) -> dict:
    """The JSON line of the rounds in `runs` so far: each configuration's median step, peak memory and the ratios."""
    results = {}
    for configuration, repeats in runs.items():
        steps = [seconds for run in repeats for seconds in run["step_seconds"]]
        results[configuration] = {
            "configuration": configuration,
            "median_step_seconds": statistics.median(steps),
            "repeat_median_step_seconds": [run["median_step_seconds"] for run in repeats],
            "step_seconds": steps,
            "peak_memory_bytes": max(run["peak_memory_bytes"] for run in repeats),
        }
    summary = {
        "date": date.today().isoformat(),
        "hardware": platform.processor() or platform.machine(),
        "device": args.device,
        "command": "python benchmarks/step_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": f"llama hidden={args.hidden_size} layers={args.layers}",
        "batch": args.batch_size,
        "completion_length": args.completion_length,
        "results": results,
        "rounds": len(next(iter(runs.values()))),
        "complete": complete,
    }
    if "grpo" in results:
        for name in ("dpr", "dpr_no_kl"):
            if name in results:
                summary[f"step_time_ratio_{name}_over_grpo"] = (
                    results[name]["median_step_seconds"] / results["grpo"]["median_step_seconds"]
                )
        if "dpr" in results:
            summary["peak_memory_ratio_dpr_over_grpo"] = (
                results["dpr"]["peak_memory_bytes"] / results["grpo"]["peak_memory_bytes"]
            )
    return summary


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        print(json.dumps(run_one(args)))
        return
    runs = {configuration: [] for configuration in args.configurations}
    for repeat in range(args.repeats):
        for configuration in args.configurations:
            command = [
                sys.executable,
                __file__,
                *(argv if argv is not None else sys.argv[1:]),
                "--only",
                configuration,
            ]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{configuration} failed:\n{done.stderr[-3000:]}")
            runs[configuration].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(
                f"repeat {repeat + 1}: {configuration} median step {runs[configuration][-1]['median_step_seconds']:.3f} s",
                flush=True,
            )
        # After every round a whole summary line: a run stopped at its time limit keeps the pairs it finished.
        summary = summarize(args, argv, runs, complete=repeat + 1 == args.repeats)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        with open(args.output, "a") as f:
            f.write(json.dumps(summary) + "\n")
    results = summary["results"]
    for name, result in results.items():
        repeats = ", ".join(f"{seconds:.3f}" for seconds in result["repeat_median_step_seconds"])
        print(
            f"{name:10s} median step {result['median_step_seconds']:.3f} s (per repeat: {repeats})   "
            f"peak memory {result['peak_memory_bytes'] / 2**20:.0f} MiB"
        )
    ratios = {key.removeprefix("step_time_ratio_"): value for key, value in summary.items() if "ratio" in key}
    print("  ".join(f"{name} = {value:.3f}" for name, value in ratios.items()))


if __name__ == "__main__":
    main()
