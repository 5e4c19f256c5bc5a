"""Table 1 on one setup: SFT → {DPR, SR, SPIN, GSIL} from the same SFT output and demonstrations, each trained once,
all evaluated against SFT on the same held-out prompts with the same judge (win rate and accuracy, bootstrap CIs).

    python -m experiments.table1 --config experiments/configs/table1_demo.yaml        # embedded default, CPU

The YAML names the recipes of each stage (recipes/demo/{sft,dpr,spin,gsil}.yaml by default) and the recipes/evaluate.py
YAML of the evaluation; each method's recipe is used as it is, with its `output_dir` replaced by `<output_dir>/<NAME>`
(SR: the DPR recipe with `reward_granularity: sentence`, the paper's sentence-level REINFORCE). The SFT recipe runs
first when its output is missing; every method must start from that SFT output. A method already trained in its
folder with the same settings is reused (DPR/SR: `analysis_run.json`, SPIN/GSIL: `self_play.json`), and the
evaluation's answer caches make a rerun only answer what is missing. Writes `<output_dir>/table1.md` (the Table 1
layout), `table1.csv` (one row per method) and `evaluation/` (answers, verdicts, results.json).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, SFTConfig

from trl_dpr.evaluation import run_evaluation
from trl_dpr.lfd import GSILConfig, SelfPlayScriptArguments, SPINConfig, run_self_play
from trl_dpr.lfd.self_play import ITERATION_RECORD, RUN_RECORD
from trl_dpr.running.pipeline import SFTScriptArguments, has_sft_output, print_stage, run_sft
from trl_dpr.running.recipe_parser import RecipeParser

from .figures import write_csv
from .overrides import DPR_ARGUMENTS, evaluation_config, parse_with_overrides
from .sweeps import RUN_SUMMARY_NAME, free_memory, train_variant, variant_settings
from .win_rates import WIN_RATE_COLUMNS, forget_cached_answers, win_rate_rows

__all__ = ["METHODS", "Table1Arguments", "main"]

# Each method: the recipe key of `Table1Arguments` it is trained with, and what it changes in that recipe.
METHODS = {
    "DPR": ("dpr_config", {}),
    "SR": ("dpr_config", {"reward_granularity": "sentence"}),
    "SPIN": ("spin_config", {}),
    "GSIL": ("gsil_config", {}),
}
SELF_PLAY = {"SPIN": SPINConfig, "GSIL": GSILConfig}
COLUMNS = (*WIN_RATE_COLUMNS, "train_runtime_s")


@dataclass
class Table1Arguments:
    """The setup of a Table 1 run: recipes per stage, the methods, the evaluation.

    Example:
        >>> Table1Arguments().methods
        ['DPR', 'SR', 'SPIN', 'GSIL']
    """

    output_dir: str = field(
        default="runs/table1_demo", metadata={"help": "Each method's folder, the evaluation, table1.md."}
    )
    sft_config: str = field(
        default="recipes/demo/sft.yaml",
        metadata={"help": "recipes/sft.py YAML; run first when its output_dir holds no SFT output."},
    )
    dpr_config: str = field(default="recipes/demo/dpr.yaml", metadata={"help": "recipes/dpr.py YAML of DPR (and SR)."})
    spin_config: str = field(default="recipes/demo/spin.yaml", metadata={"help": "recipes/spin.py YAML of SPIN."})
    gsil_config: str = field(default="recipes/demo/gsil.yaml", metadata={"help": "recipes/gsil.py YAML of GSIL."})
    methods: list[str] = field(
        default_factory=lambda: list(METHODS),
        metadata={"help": f"Methods to train and compare, among {list(METHODS)}."},
    )
    evaluation_config: str = field(
        default="recipes/evaluate/demo.yaml",
        metadata={"help": "recipes/evaluate.py YAML; its baseline, candidates and output_dir are replaced."},
    )

    def __post_init__(self):
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"Unknown methods {unknown or '(none given)'}; choose among {list(METHODS)}.")


def _train_dpr(name: str, recipe: str, changes: dict, output_dir: Path) -> tuple[str, str, float, bool]:
    """DPR or SR from its recipe (trained once): `(sft_path, folder, training seconds, trained now)`."""
    overrides = {**changes, "output_dir": str(output_dir)}
    script_args, training_args, model_args = parse_with_overrides(DPR_ARGUMENTS, ["--config", recipe], overrides)
    already = (output_dir / RUN_SUMMARY_NAME).is_file()
    run = train_variant(
        name, script_args, training_args, model_args, variant_settings(script_args, training_args, model_args)
    )
    return model_args.model_name_or_path, run.output_dir, run.train_runtime_s, not already


def _train_self_play(name: str, recipe: str, output_dir: Path) -> tuple[str, str, float, bool]:
    """SPIN or GSIL from its recipe (finished iterations are kept): `(sft_path, folder, seconds, trained now)`."""
    types = (SelfPlayScriptArguments, SELF_PLAY[name], ModelConfig)
    script_args, training_args, model_args = parse_with_overrides(
        types, ["--config", recipe], {"output_dir": str(output_dir)}
    )
    already = (output_dir / RUN_RECORD).is_file() and all(
        (output_dir / f"iteration-{t}" / ITERATION_RECORD).is_file() for t in range(training_args.num_iterations)
    )
    run = run_self_play(script_args, training_args, model_args)
    seconds = sum(it.get("wall_time_s", it.get("train_runtime", 0.0)) for it in run.iterations)  # answering + training
    free_memory()
    return model_args.model_name_or_path, run.output_dir, seconds, not already


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    (table,) = RecipeParser((Table1Arguments,)).parse_args_and_config(argv)
    evaluation_config(table.evaluation_config)  # a bad evaluation YAML fails before any training
    output_dir = Path(table.output_dir)
    stages = 2 + len(table.methods)

    sft_args, sft_training_args, sft_model_args = RecipeParser(
        (SFTScriptArguments, SFTConfig, ModelConfig)
    ).parse_args_and_config(["--config", table.sft_config])
    sft_path = sft_training_args.output_dir
    found = has_sft_output(sft_path)
    print_stage(1, stages, f"SFT ({table.sft_config})" + (f": found in {sft_path}, skipped" if found else ""))
    start = time.perf_counter()
    if not found:
        run_sft(sft_args, sft_training_args, sft_model_args)
        forget_cached_answers(output_dir / "evaluation", "SFT")
    sft_seconds = time.perf_counter() - start

    trained: dict[str, tuple[str, float]] = {}
    for index, name in enumerate(table.methods, start=2):
        recipe_key, changes = METHODS[name]
        recipe = getattr(table, recipe_key)
        print_stage(index, stages, f"{name} ({recipe}{''.join(f', {k}: {v}' for k, v in changes.items())})")
        if name in SELF_PLAY:
            start_path, folder, seconds, fresh = _train_self_play(name, recipe, output_dir / name)
        else:
            start_path, folder, seconds, fresh = _train_dpr(name, recipe, changes, output_dir / name)
        if start_path != sft_path:
            raise ValueError(
                f"{recipe} starts {name} from {start_path!r}, but the SFT recipe {table.sft_config} writes {sft_path!r}: "
                "every method of Table 1 starts from the same SFT output."
            )
        if fresh:  # answers cached for an earlier model of this name are stale
            forget_cached_answers(output_dir / "evaluation", name)
        trained[name] = (folder, seconds)

    print_stage(stages, stages, f"Evaluation vs SFT ({table.evaluation_config})")
    config = evaluation_config(
        table.evaluation_config,
        baseline=f"SFT={sft_path}",
        candidates=[f"{n}={folder}" for n, (folder, _) in trained.items()],
        output_dir=str(output_dir / "evaluation"),
    )
    report = run_evaluation(config, show_progress=False)
    rows = [{**row, "train_runtime_s": trained[row["method"]][1]} for row in win_rate_rows(report)]
    times = ", ".join(f"{name} {seconds / 60:.1f}" for name, (_, seconds) in trained.items())
    text = (
        f"{report.as_dict()['table_markdown']}\n\nTraining time (min): SFT {sft_seconds / 60:.1f}"
        f"{' (found, not retrained)' if found else ''}, {times}.\n"
    )
    (output_dir / "table1.md").write_text(text)
    write_csv(rows, output_dir / "table1.csv", COLUMNS)
    print(text, flush=True)
    print(
        f"Written to {output_dir / 'table1.md'}, {output_dir / 'table1.csv'} and {output_dir / 'evaluation'}",
        flush=True,
    )


if __name__ == "__main__":
    main()
