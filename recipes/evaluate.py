"""Evaluate like the paper: win rate of each method against SFT (pairwise judge, both orders, ties 0.5, bootstrap 95%
CI) on AlpacaEval, Arena-Hard and LIMA, the MT-Bench 1–10 score, and answer lengths, as Table 1 (markdown + JSON).

    export OPENAI_API_KEY=...      # the judge's key lives in the environment, never in a file
    python recipes/evaluate.py --config recipes/evaluate/llama-3.1-8b.yaml

The embedded demo (after `make demo`), offline on CPU with the exact-answer judge:

    python recipes/evaluate.py --config recipes/evaluate/demo.yaml

Answers, verdicts and grades are cached under `output_dir` line by line: rerunning an interrupted evaluation
continues where it stopped. Any YAML key can be overridden on the command line (`--max_prompts 20`); unknown keys
are an error. See docs/evaluation.md for the benchmark files and the judges.
"""

import sys

import yaml

from trl_dpr.evaluation import EvaluationConfig, MissingAPIKeyError, run_evaluation
from trl_dpr.evaluation.config import check_config_has_no_secrets
from trl_dpr.recipe_parser import RecipeParser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" in argv:
        config_path = argv[argv.index("--config") + 1]
        with open(config_path) as f:
            check_config_has_no_secrets(yaml.safe_load(f) or {}, config_path)
    (config,) = RecipeParser((EvaluationConfig,)).parse_args_and_config(argv)
    try:
        report = run_evaluation(config)
    except (FileNotFoundError, MissingAPIKeyError) as error:  # a setup problem, explained: no traceback needed
        sys.exit(f"error: {error}")
    print(report.as_dict()["table_markdown"], flush=True)
    print(f"\nWritten to {config.output_dir}/results.json and results.md", flush=True)


if __name__ == "__main__":
    main()
