"""Evaluation-temperature sweep (paper Fig. 4b): win rate of each method against SFT when both answer at several
sampling temperatures.

    python -m experiments.temperature_sweep --config experiments/configs/temperature_sweep_demo.yaml    # embedded, CPU

    export OPENAI_API_KEY=...
    python -m experiments.temperature_sweep --config recipes/evaluate/llama-3.1-8b.yaml \\
        --temperatures 0 0.3 0.7 1.0 --output_dir runs/analysis/llama-3.1-8b/temperature_sweep

This is recipes/evaluate.py run once per temperature: the YAML is a recipes/evaluate.py YAML (baseline, candidates,
benchmarks, judge, ...) plus `temperatures`; its `temperature` is replaced by each of them and each run writes to
`<output_dir>/temperature<T>/` (answers and verdicts cached there: a rerun only does what is missing). Writes
`temperature_sweep.csv` (one row per temperature, method and benchmark) and `temperature_sweep.png` (win rate ± CI vs T).
"""

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trl_dpr.evaluation import EvaluationConfig, MissingAPIKeyError, run_evaluation
from trl_dpr.evaluation.config import check_config_has_no_secrets
from trl_dpr.running.recipe_parser import RecipeParser

from .figures import plot_series, write_csv
from .win_rates import WIN_RATE_COLUMNS, win_rate_rows

COLUMNS = ("temperature", *WIN_RATE_COLUMNS)


@dataclass
class TemperatureSweepArguments:
    temperatures: list[float] = field(
        default_factory=lambda: [0.0, 0.3, 0.7, 1.0],
        metadata={"help": "Sampling temperatures of the answers (0 = greedy; the paper's evaluation uses 0.7)."},
    )


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" in argv:
        config_path = argv[argv.index("--config") + 1]
        with open(config_path) as f:
            check_config_has_no_secrets(yaml.safe_load(f) or {}, config_path)
    sweep, config = RecipeParser((TemperatureSweepArguments, EvaluationConfig)).parse_args_and_config(argv)
    output_dir = Path(config.output_dir)

    rows = []
    for temperature in sweep.temperatures:
        print(f"\n=== Answers at temperature {temperature:g} ===", flush=True)
        run_config = dataclasses.replace(
            config, temperature=temperature, output_dir=str(output_dir / f"temperature{temperature:g}")
        )
        try:
            report = run_evaluation(run_config, show_progress=False)
        except (FileNotFoundError, MissingAPIKeyError) as error:  # a setup problem, explained: no traceback needed
            sys.exit(f"error: {error}")
        rows += [{"temperature": temperature, **row} for row in win_rate_rows(report)]

    csv_path = write_csv(rows, output_dir / "temperature_sweep.csv", COLUMNS)
    series = {}
    for row in rows:
        if row["benchmark"] != "mt_bench":
            series.setdefault(f"{row['method']} ({row['benchmark']})", []).append(row)
    png_path = plot_series(
        series,
        output_dir / "temperature_sweep.png",
        x="temperature",
        y="win_rate",
        low="ci_low",
        high="ci_high",
        xlabel="evaluation temperature",
        ylabel=f"win rate vs {config.baseline_name}",
        title="Win rate vs evaluation temperature (paper Fig. 4b)",
        reference_line=0.5,
    )
    for row in rows:
        print(
            f"T={row['temperature']:<4g} {row['method']:<10} {row['benchmark']:<12} win rate {row['win_rate']:.3f} "
            f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}] (n={row['n']})",
            flush=True,
        )
    print(f"\nWritten to {csv_path} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
