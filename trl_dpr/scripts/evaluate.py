"""Evaluate like the paper: win rate of each method against SFT (pairwise judge, both orders, ties 0.5, bootstrap 95%
CI) on AlpacaEval, Arena-Hard and LIMA, the MT-Bench 1–10 score, and answer lengths, as Table 1 (markdown + JSON).

    export OPENAI_API_KEY=...      # the judge's key lives in the environment, never in a file
    trl-dpr evaluate --config evaluate/llama-3.1-8b.yaml

The embedded demo (after `make demo`), offline on CPU with the exact-answer judge:

    trl-dpr evaluate --config evaluate/demo.yaml

Answers, verdicts and grades are cached under `output_dir` line by line: rerunning an interrupted evaluation
continues where it stopped. Any YAML key can be overridden on the command line (`--max_prompts 20`); unknown keys
are an error. See docs/evaluation.md for the benchmark files and the judges.
"""

import sys

import yaml

from trl_dpr.evaluation import EvaluationConfig, run_evaluation
from trl_dpr.evaluation.config import check_config_has_no_secrets
from trl_dpr.running.cli import run
from trl_dpr.running.recipe_parser import RecipeParser, find_recipe_file


def make_parser() -> RecipeParser:
    return RecipeParser((EvaluationConfig,), recipe_subfolder="evaluate", prog="trl-dpr evaluate")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" in argv:
        index = argv.index("--config") + 1
        argv[index] = find_recipe_file(argv[index], subfolder="evaluate")
        with open(argv[index]) as f:
            check_config_has_no_secrets(yaml.safe_load(f) or {}, argv[index])
    (config,) = make_parser().parse_args_and_config(argv)
    report = run_evaluation(config)
    print(report.as_dict()["table_markdown"], flush=True)
    print(f"\nWritten to {config.output_dir}/results.json and results.md", flush=True)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
