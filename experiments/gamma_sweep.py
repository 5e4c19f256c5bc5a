"""γ sweep (paper Fig. 2): win rate of DPR against SFT for several discounts γ of the token returns.

    python -m experiments.gamma_sweep --config experiments/configs/gamma_sweep_demo.yaml          # embedded, CPU

    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml -m experiments.gamma_sweep \\
        --config recipes/llama-3.1-8b/dpr/config_qlora.yaml --output_dir runs/analysis/llama-3.1-8b/gamma_sweep \\
        --evaluation_config recipes/evaluate/llama-3.1-8b.yaml

The YAML is a recipes/dpr.py YAML (its `output_dir` is the sweep's folder) plus `gammas`, `evaluation_config` and
`stage`. Each γ trains `run_dpr` from `model_name_or_path` into `<output_dir>/gamma<γ>/` (kept: a rerun only trains
what is missing), then recipes/evaluate.py's evaluation compares every policy with SFT (`<output_dir>/evaluation/`).
Writes `gamma_sweep.csv` (one row per γ and benchmark) and `gamma_sweep.png` (win rate ± bootstrap CI vs γ).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState

from trl_dpr.running.recipe_parser import RecipeParser

from .figures import plot_series, write_csv
from .overrides import DPR_ARGUMENTS
from .sweeps import WinRateSweepArguments, ensure_sft_output, sweep_win_rates
from .win_rates import WIN_RATE_COLUMNS

COLUMNS = ("gamma", *WIN_RATE_COLUMNS, "train_runtime_s", "kl_sft_final", "train_reward_final")


@dataclass
class GammaSweepArguments(WinRateSweepArguments):
    gammas: list[float] = field(
        default_factory=lambda: [0.93, 0.95, 0.97, 0.99, 1.0],
        metadata={
            "help": "Discounts γ of the returns G_t = Σ_k γ^(k−t) r_k to train with (paper Fig. 2: 0.93 to 1.00)."
        },
    )


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    types = (GammaSweepArguments, *DPR_ARGUMENTS)
    sweep, script_args, training_args, model_args = RecipeParser(types).parse_args_and_config(argv)
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    ensure_sft_output(script_args, model_args)

    variants = {f"gamma{gamma:g}": {"gamma": gamma} for gamma in sweep.gammas}
    runs, rows = sweep_win_rates(
        types,
        argv,
        variants,
        evaluation_config_path=script_args.evaluation_config,
        output_dir=training_args.output_dir,
        stage=sweep.stage,
    )
    if not rows or not PartialState().is_main_process:
        return
    gamma_of = dict(zip(variants, sweep.gammas))
    for row in rows:
        run = runs[row["method"]]
        row.update(
            gamma=gamma_of[row["method"]],
            train_runtime_s=run.train_runtime_s,
            kl_sft_final=run.final_metrics.get("kl_sft/per_token"),
            train_reward_final=run.final_metrics.get("reward"),
        )
    output_dir = Path(training_args.output_dir)
    csv_path = write_csv(rows, output_dir / "gamma_sweep.csv", COLUMNS)
    pairwise = {}
    for row in rows:
        if row["benchmark"] != "mt_bench":
            pairwise.setdefault(row["benchmark"], []).append(row)
    png_path = plot_series(
        pairwise,
        output_dir / "gamma_sweep.png",
        x="gamma",
        y="win_rate",
        low="ci_low",
        high="ci_high",
        xlabel="discount γ",
        ylabel="win rate vs SFT",
        title="DPR win rate vs γ (paper Fig. 2)",
        reference_line=0.5,
    )
    for row in rows:
        print(
            f"γ={row['gamma']:<5g} {row['benchmark']:<12} win rate {row['win_rate']:.3f} "
            f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}] (n={row['n']})",
            flush=True,
        )
    print(f"\nWritten to {csv_path} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
