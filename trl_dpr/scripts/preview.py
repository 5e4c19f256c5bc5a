"""The DPR preview: will DPR help on this data? Estimated from π_SFT's own samples, before any RL.

    trl-dpr preview --config preview/demo.yaml [--policies DPR=runs/demo/dpr]

N samples per prompt are scored with each reward variant and judged; the tilted policies π_λ ∝ π_SFT·exp(R/λ) that
DPR converges to are estimated by importance weighting per λ (= `kl_coef`). Reading the output: docs/preview.md.
"""

from trl import ModelConfig

from trl_dpr.analysis.preview import PreviewConfig, run_preview
from trl_dpr.running.cli import run
from trl_dpr.running.pipeline import model_init_kwargs_from
from trl_dpr.running.recipe_parser import RecipeParser, load_evaluation_config


def make_parser() -> RecipeParser:
    return RecipeParser((PreviewConfig, ModelConfig), recipe_subfolder="preview", prog="trl-dpr preview")


def main(argv=None):
    config, model_args = make_parser().parse_args_and_config(argv)
    judge_config = load_evaluation_config(config.evaluation_config) if config.quality == "pairwise" else None
    report = run_preview(
        config, model_args.model_name_or_path, model_init_kwargs_from(model_args), judge_config=judge_config
    )
    print(report.markdown(), flush=True)
    print(
        f"\nWritten to {config.output_dir}/preview.csv, .json, .md" + (" and .png" if config.plot else ""), flush=True
    )


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
