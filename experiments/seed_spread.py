"""How much the demo's result varies: the `make demo` pipeline (SFT → DPR, and SR) over several seeds.

    python -m experiments.seed_spread --config experiments/configs/seed_spread_demo.yaml     # CPU, resumable

Each seed `s` runs the demo's recipes unchanged but for `seed: s` (the SFT's data order and subsample, DPR's and SR's
rollouts) into `<output_dir>/seed<s>/{sft,DPR,SR,evaluation}`, on the shipped pretrained base, and evaluates DPR and SR
against that seed's SFT with the demo's evaluation (500 held-out prompts × 4 answers, exact judge). Seed 0 is
`make demo` itself, so its row must equal the README's demo table.

Writes `seed_spread.md` and `seed_spread.csv`: per seed the three accuracies, then "DPR beats SFT in k of n seeds",
the mean gain and its 95% t-interval over seeds, the same for SR, and for DPR − SR.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, SFTConfig

from trl_dpr.evaluation import run_evaluation
from trl_dpr.running.pipeline import SFTScriptArguments, has_sft_output, print_stage, run_sft
from trl_dpr.running.recipe_parser import RecipeParser

from .figures import write_csv
from .overrides import DPR_ARGUMENTS, evaluation_config, parse_with_overrides, to_command_line
from .sweeps import train_variant, variant_settings

__all__ = ["SeedSpreadArguments", "main", "mean_t_interval"]

# Two-sided 97.5 % quantiles of Student's t by degrees of freedom (a 95 % interval of a mean over few seeds).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
METHODS = {"DPR": {}, "SR": {"reward_granularity": "sentence"}}


@dataclass
class SeedSpreadArguments:
    """Settings of `experiments/seed_spread.py`.

    Example:
        >>> SeedSpreadArguments().seeds
        [0, 1, 2, 3, 4]
    """

    output_dir: str = field(default="runs/seed_spread", metadata={"help": "seed<s>/ folders and the report."})
    sft_config: str = field(default="recipes/demo/sft.yaml", metadata={"help": "recipes/sft.py YAML (the demo's)."})
    dpr_config: str = field(default="recipes/demo/dpr.yaml", metadata={"help": "recipes/dpr.py YAML (the demo's)."})
    evaluation_config: str = field(
        default="recipes/evaluate/demo.yaml", metadata={"help": "recipes/evaluate.py YAML."}
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4], metadata={"help": "SFT and DPR seeds."})


def mean_t_interval(values: list[float]) -> tuple[float, float, float]:
    """`(mean, low, high)`: the mean of `values` and its 95 % Student-t interval (n ≤ 11; a normal one beyond).

    Example:
        >>> [round(x, 3) for x in mean_t_interval([1.0, 2.0, 3.0])]
        [2.0, -0.484, 4.484]
    """
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T_975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _run_seed(args: SeedSpreadArguments, seed: int) -> dict:
    folder = Path(args.output_dir) / f"seed{seed}"
    sft_argv = ["--config", args.sft_config, *to_command_line({"seed": seed, "output_dir": str(folder / "sft")})]
    sft_args, sft_training_args, sft_model_args = RecipeParser(
        (SFTScriptArguments, SFTConfig, ModelConfig)
    ).parse_args_and_config(sft_argv)
    start = time.perf_counter()
    if not has_sft_output(str(folder / "sft")):
        run_sft(sft_args, sft_training_args, sft_model_args)
    row = {"seed": seed, "sft_wall_s": round(time.perf_counter() - start, 1)}
    candidates = []
    for name, changes in METHODS.items():
        overrides = {
            **changes,
            "seed": seed,
            "model_name_or_path": str(folder / "sft"),
            "output_dir": str(folder / name),
        }
        script_args, training_args, model_args = parse_with_overrides(
            DPR_ARGUMENTS, ["--config", args.dpr_config], overrides
        )
        run = train_variant(
            name, script_args, training_args, model_args, variant_settings(script_args, training_args, model_args)
        )
        row[f"{name}_train_s"] = round(run.train_runtime_s, 1)
        candidates.append(f"{name}={folder / name}")
    config = evaluation_config(
        args.evaluation_config,
        baseline=f"SFT={folder / 'sft'}",
        candidates=candidates,
        output_dir=str(folder / "evaluation"),
    )
    report = run_evaluation(config, show_progress=False)
    for name in ("SFT", *METHODS):
        row[f"{name}_accuracy"] = report.accuracy_result("demo", name).accuracy
    for name in METHODS:
        row[f"{name}_win_rate"] = report.pairwise_result("demo", name).win_rate.value
    return row


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    (args,) = RecipeParser((SeedSpreadArguments,)).parse_args_and_config(argv)
    evaluation_config(args.evaluation_config)  # a bad evaluation YAML fails before any training
    rows = []
    for index, seed in enumerate(args.seeds, start=1):
        print_stage(index, len(args.seeds), f"seed {seed}: SFT → DPR, SR → evaluation")
        rows.append(_run_seed(args, seed))
    output_dir = Path(args.output_dir)
    write_csv(rows, output_dir / "seed_spread.csv", list(rows[0]))
    text = seed_spread_markdown(rows)
    (output_dir / "seed_spread.md").write_text(text)
    print(text, flush=True)


def seed_spread_markdown(rows: list[dict]) -> str:
    """The per-seed table and the summary lines of `seed_spread.md`.

    Example:
        >>> rows = [{"seed": s, "SFT_accuracy": 0.7, "DPR_accuracy": 0.7 + d, "SR_accuracy": 0.72}
        ...         for s, d in enumerate([0.05, 0.03, -0.01])]
        >>> print(seed_spread_markdown(rows).splitlines()[-3])
        - DPR beats SFT in 2 of 3 seeds: mean gain +2.3 points (95% t-interval -5.3 to +9.9).
    """

    def pct(x):
        return f"{100 * x:.1f}"

    lines = [
        "| seed | SFT accuracy % | DPR accuracy % | SR accuracy % | DPR − SFT | SR − SFT | DPR − SR |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {pct(r['SFT_accuracy'])} | {pct(r['DPR_accuracy'])} | {pct(r['SR_accuracy'])} | "
            f"{100 * (r['DPR_accuracy'] - r['SFT_accuracy']):+.1f} | {100 * (r['SR_accuracy'] - r['SFT_accuracy']):+.1f} | "
            f"{100 * (r['DPR_accuracy'] - r['SR_accuracy']):+.1f} |"
        )
    lines.append("")
    n = len(rows)
    for label, a, b in (("DPR beats SFT", "DPR", "SFT"), ("SR beats SFT", "SR", "SFT"), ("DPR beats SR", "DPR", "SR")):
        gains = [r[f"{a}_accuracy"] - r[f"{b}_accuracy"] for r in rows]
        mean, low, high = mean_t_interval(gains)
        lines.append(
            f"- {label} in {sum(g > 0 for g in gains)} of {n} seeds: mean gain {100 * mean:+.1f} points "
            f"(95% t-interval {100 * low:+.1f} to {100 * high:+.1f})."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
