"""Where does DPR help? The DPR preview of π_SFT over a grid of bases and SFT lengths (docs/results.md, "The regime
scan").

    python -m experiments.regime_scan --config experiments/configs/regime_scan_demo.yaml              # CPU
    python -m experiments.regime_scan --config experiments/configs/regime_scan_demo.yaml --only pretrained_s50_lr1e-4

The YAML names an SFT recipe (`sft_config`, the settings every point starts from), a preview recipe
(`preview_config`) and `grid:`, a mapping from a point's name to the SFT keys it changes (model_name_or_path,
max_steps, learning_rate, seed, reference_fraction, ...). For each point: SFT into `<output_dir>/<name>/sft` (with
π_ref at its α), then the preview of that π_SFT into `<output_dir>/<name>/preview`; a point whose preview.json exists
is read back, not redone. An embedded base name (`trl_dpr/embedded-pretrained-llama`) is built once into `<output_dir>/` for all points.

Writes `regime_scan.csv` and `regime_scan.md` (one row per point and reward variant: π_SFT's quality, the gain of π_λ
at `lambda_of_interest` and at the best trusted λ, with paired 95% CIs) and `regime_scan.png` (those gains).
"""

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, SFTConfig

from trl_dpr.analysis.preview import PreviewConfig, run_preview
from trl_dpr.analysis.preview_report import helps_verdict
from trl_dpr.embedded.base_model import EMBEDDED_MODELS, resolve_embedded_base
from trl_dpr.running.pipeline import SFTScriptArguments, has_sft_output, model_init_kwargs_from, print_stage, run_sft
from trl_dpr.running.recipe_parser import RecipeParser

from .figures import plot_intervals, write_csv
from .overrides import parse_with_overrides, select_overrides
from .sweeps import free_memory

SFT_ARGUMENTS = (SFTScriptArguments, SFTConfig, ModelConfig)
COLUMNS = (
    "point",
    "base",
    "sft_steps",
    "sft_learning_rate",
    "reference_fraction",
    "variant",
    "sft_quality",
    "pass_at_n",
    "lambda",
    "gain",
    "gain_ci_low",
    "gain_ci_high",
    "kl",
    "best_lambda",
    "best_gain",
    "best_gain_ci_low",
    "best_gain_ci_high",
    "best_kl",
    "helps",
)


@dataclass
class RegimeScanArguments:
    output_dir: str = field(
        default="runs/regime_scan", metadata={"help": "The scan's folder (one subfolder per point)."}
    )
    sft_config: str = field(
        default="recipes/demo/sft.yaml", metadata={"help": "The SFT recipe every point starts from."}
    )
    preview_config: str = field(
        default="recipes/preview/demo.yaml", metadata={"help": "The preview recipe of every point."}
    )
    grid: dict = field(default_factory=dict, metadata={"help": "Point name → the SFT recipe keys it changes."})
    only: list[str] | None = field(default=None, metadata={"help": "Run only these points (names from `grid`)."})
    lambda_of_interest: float = field(default=1.0, metadata={"help": "The λ (kl_coef) whose gain is tabulated."})


def _point_row(name: str, sft_args, sft_training, model_base: str, preview: dict, lam: float) -> list[dict]:
    rows = []
    for summary in preview["summary"]:
        variant = summary["variant"]
        at = [p for p in preview["points"] if p["variant"] == variant and float(p["lam"]) == lam]
        at = (
            at[0]
            if at
            else {
                "lam": math.nan,
                "delta": math.nan,
                "delta_ci_low": math.nan,
                "delta_ci_high": math.nan,
                "kl": math.nan,
            }
        )
        rows.append(
            {
                "point": name,
                "base": model_base,
                "sft_steps": sft_training.max_steps,
                "sft_learning_rate": sft_training.learning_rate,
                "reference_fraction": sft_args.reference_fraction,
                "variant": variant,
                "sft_quality": preview["sft_quality"],
                "pass_at_n": preview["pass_at_n"],
                "lambda": lam,
                "gain": at["delta"],
                "gain_ci_low": at["delta_ci_low"],
                "gain_ci_high": at["delta_ci_high"],
                "kl": at["kl"],
                "best_lambda": summary["best_kl_coef"],
                "best_gain": summary["best_delta"],
                "best_gain_ci_low": summary["best_delta_ci_low"],
                "best_gain_ci_high": summary["best_delta_ci_high"],
                "best_kl": summary["best_kl"],
                "helps": summary["helps"],
            }
        )
    return rows


def _markdown(rows: list[dict]) -> str:
    lam = rows[0]["lambda"] if rows else 1.0
    lines = [
        f"| point | base | SFT steps × lr | α | reward | π_SFT quality | gain at λ = {lam:g} (95% CI) | KL | best λ | "
        "best gain (95% CI) | helps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        best_lam = "∞" if math.isinf(float(r["best_lambda"])) else f"{float(r['best_lambda']):g}"
        lines.append(
            f"| {r['point']} | {Path(r['base']).name} | {r['sft_steps']} × {r['sft_learning_rate']:g} | "
            f"{float(r['reference_fraction']):g} | {r['variant']} | "
            f"{r['sft_quality']:.3f} | {r['gain']:+.3f} ({r['gain_ci_low']:+.3f}–{r['gain_ci_high']:+.3f}) | "
            f"{r['kl']:.2f} | {best_lam} | {r['best_gain']:+.3f} ({r['best_gain_ci_low']:+.3f}–"
            f"{r['best_gain_ci_high']:+.3f}) | {helps_verdict(r['helps'])} |"
        )
    return "\n".join(lines)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    (scan,) = RecipeParser((RegimeScanArguments,)).parse_args_and_config(argv)
    selected = select_overrides(scan.grid, scan.only, SFT_ARGUMENTS, (), kind="point", yaml_key="grid")
    output_dir = Path(scan.output_dir)
    rows = []
    for index, name in enumerate(selected, start=1):
        point_dir = output_dir / name
        print_stage(index, len(selected), f"point {name}: {scan.grid[name]}")
        overrides = {**scan.grid[name], "output_dir": str(point_dir / "sft")}
        sft_args, sft_training, sft_model = parse_with_overrides(
            SFT_ARGUMENTS, ["--config", scan.sft_config], overrides
        )
        base = sft_model.model_name_or_path
        if base in EMBEDDED_MODELS:  # one build for the whole scan, beside the points
            sft_model.model_name_or_path = resolve_embedded_base(base, output_dir / "sft", seed=0)
        if not has_sft_output(sft_training.output_dir):
            run_sft(sft_args, sft_training, sft_model)
            free_memory()
        preview_json = point_dir / "preview" / "preview.json"
        if not preview_json.is_file():
            (config, preview_model) = parse_with_overrides(
                (PreviewConfig, ModelConfig),
                ["--config", scan.preview_config],
                {"output_dir": str(point_dir / "preview"), "model_name_or_path": sft_training.output_dir},
            )
            report = run_preview(config, sft_training.output_dir, model_init_kwargs_from(preview_model))
            print(report.markdown(), flush=True)
            free_memory()
        rows += _point_row(
            name, sft_args, sft_training, base, json.loads(preview_json.read_text()), scan.lambda_of_interest
        )

    csv_path = write_csv(rows, output_dir / "regime_scan.csv", COLUMNS)
    (output_dir / "regime_scan.md").write_text(_markdown(rows) + "\n")
    labels = [f"{r['point']} · {r['variant']}" for r in rows]
    png_path = plot_intervals(
        labels,
        {
            f"λ = {scan.lambda_of_interest:g}": (
                [r["gain"] for r in rows],
                [r["gain_ci_low"] for r in rows],
                [r["gain_ci_high"] for r in rows],
            ),
            "best λ": (
                [r["best_gain"] for r in rows],
                [r["best_gain_ci_low"] for r in rows],
                [r["best_gain_ci_high"] for r in rows],
            ),
        },
        output_dir / "regime_scan.png",
        xlabel="quality of π_λ − π_SFT's (paired 95% CI)",
        title="Where DPR's tilt helps: the preview per base and SFT length",
        reference_line=0.0,
    )
    print(_markdown(rows), flush=True)
    print(f"\nWritten to {csv_path}, {output_dir / 'regime_scan.md'} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
