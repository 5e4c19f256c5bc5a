"""Evaluate like the paper (Table 1): win rate against SFT (pairwise judge, both orders, ties 0.5, bootstrap 95%
CI) on AlpacaEval, Arena-Hard and LIMA, the MT-Bench score, and answer lengths.

    OPENAI_API_KEY=... trl-dpr evaluate --config evaluate/llama-3.1-8b.yaml   # the key only in the environment
    trl-dpr evaluate --config evaluate/demo.yaml                             # embedded demo, exact-answer judge

Answers, verdicts and grades are cached line by line, so an interrupted evaluation continues (docs/evaluation.md).
"""

import sys

from trl_dpr.evaluation import EvaluationConfig, run_evaluation
from trl_dpr.evaluation.config import check_config_has_no_secrets
from trl_dpr.running.cli import run
from trl_dpr.running.recipe_parser import RecipeParser, find_recipe_file, load_recipe_yaml


def make_parser() -> RecipeParser:
    return RecipeParser((EvaluationConfig,), recipe_subfolder="evaluate", prog="trl-dpr evaluate")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" in argv:
        index = argv.index("--config") + 1
        argv[index] = find_recipe_file(argv[index], subfolder="evaluate")
        with open(argv[index]) as f:
            named = any(arg == "--judge_base_url" or arg.startswith("--judge_base_url=") for arg in argv)
            check_config_has_no_secrets(load_recipe_yaml(f) or {}, argv[index], url_on_command_line=named)
    (config,) = make_parser().parse_args_and_config(argv)
    report = run_evaluation(config)
    print(report.as_dict()["table_markdown"], flush=True)
    print(f"\nWritten to {config.output_dir}/results.json and results.md", flush=True)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
