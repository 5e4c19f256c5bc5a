"""Reference-checkpoint sweep (paper Fig. 3): win rate of DPR against SFT when π_ref is the SFT checkpoint taken at a
fraction α of SFT training.

    python -m experiments.reference_sweep --config experiments/configs/reference_sweep_demo.yaml   # embedded, CPU

    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml -m experiments.reference_sweep \\
        --config recipes/llama-3.1-8b/dpr/config_qlora.yaml --output_dir runs/analysis/llama-3.1-8b/reference_sweep \\
        --model_name_or_path runs/llama-3.1-8b/sft-qlora-checkpoints --evaluation_config recipes/evaluate/llama-3.1-8b.yaml

π_ref at α is the checkpoint at step ⌊α·N⌋ of an SFT run that saved step checkpoints (`--save_strategy steps
--save_steps K --save_only_model true`), the step `ReferenceCheckpointCallback` would pick; π_SFT is that run's final
model (`model_name_or_path`), unless the checkpoints are elsewhere (`checkpoints_dir`). With `sft_config:` set and no SFT
output yet, that SFT recipe runs first. Writes `reference_sweep.csv` and `reference_sweep.png` (win rate ± CI vs α).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState

from trl_dpr.running.recipe_parser import RecipeParser

from .figures import plot_series, write_csv
from .overrides import DPR_ARGUMENTS
from .sweeps import WinRateSweepArguments, ensure_sft_output, reference_at, sweep_win_rates
from .win_rates import WIN_RATE_COLUMNS

COLUMNS = ("alpha", "reference", *WIN_RATE_COLUMNS, "train_runtime_s", "kl_sft_final", "train_reward_final")


@dataclass
class ReferenceSweepArguments(WinRateSweepArguments):
    reference_fractions: list[float] = field(
        default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9],
        metadata={
            "help": "Fractions α of SFT training at which π_ref is taken (paper default 0.5; Fig. 3 sweeps it)."
        },
    )
    checkpoints_dir: str | None = field(
        default=None,
        metadata={
            "help": "SFT run holding the checkpoint-N folders (save_strategy: steps); default: model_name_or_path."
        },
    )


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    types = (ReferenceSweepArguments, *DPR_ARGUMENTS)
    sweep, script_args, training_args, model_args = RecipeParser(types).parse_args_and_config(argv)
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    ensure_sft_output(script_args, model_args)

    sft_path = model_args.model_name_or_path
    references = {alpha: reference_at(alpha, sft_path, sweep.checkpoints_dir) for alpha in sweep.reference_fractions}
    variants = {f"alpha{alpha:g}": {"ref_model_name_or_path": path} for alpha, path in references.items()}
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
    alpha_of = dict(zip(variants, sweep.reference_fractions))
    for row in rows:
        run, alpha = runs[row["method"]], alpha_of[row["method"]]
        row.update(
            alpha=alpha,
            reference=references[alpha],
            train_runtime_s=run.train_runtime_s,
            kl_sft_final=run.final_metrics.get("kl_sft/per_token"),
            train_reward_final=run.final_metrics.get("reward"),
        )
    output_dir = Path(training_args.output_dir)
    csv_path = write_csv(rows, output_dir / "reference_sweep.csv", COLUMNS)
    pairwise = {}
    for row in rows:
        if row["benchmark"] != "mt_bench":
            pairwise.setdefault(row["benchmark"], []).append(row)
    png_path = plot_series(
        pairwise,
        output_dir / "reference_sweep.png",
        x="alpha",
        y="win_rate",
        low="ci_low",
        high="ci_high",
        xlabel="α (fraction of SFT training at which π_ref was taken)",
        ylabel="win rate vs SFT",
        title="DPR win rate vs reference checkpoint (paper Fig. 3)",
        reference_line=0.5,
    )
    for row in rows:
        print(
            f"α={row['alpha']:<4g} {row['benchmark']:<12} win rate {row['win_rate']:.3f} "
            f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}] (n={row['n']})",
            flush=True,
        )
    print(f"\nWritten to {csv_path} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
