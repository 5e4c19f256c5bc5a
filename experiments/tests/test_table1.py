"""experiments/table1.py end to end on a tiny setup: one SFT, four methods from it, one evaluation, the Table 1 layout."""

import csv
import doctest
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def write_yaml(path: Path, values: dict) -> str:
    path.write_text(yaml.safe_dump(values))
    return str(path)


def tiny_recipes(root: Path) -> dict:
    """SFT (4 steps), DPR (2 steps), SPIN (2 iterations of 2 steps), GSIL (1 iteration of 2 steps), and an evaluation on
    5 held-out prompts: the demo recipes' structure at test size."""
    sft_dir = root / "sft"
    common = {
        "dtype": "float32",
        "dataset_name": "trl_dpr/embedded-demo",
        "num_train_samples": 12,
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "seed": 0,
        "save_strategy": "no",
        "learning_rate": 1e-3,
        "per_device_train_batch_size": 4,
    }
    method = {**common, "model_name_or_path": str(sft_dir), "max_steps": 2, "warmup_steps": 0, "logging_steps": 1}
    self_play = {**method, "max_new_tokens": 8, "generation_batch_size": 6}
    return {
        "sft_config": write_yaml(
            root / "sft.yaml",
            {
                **common,
                "model_name_or_path": "trl_dpr/embedded-tiny-llama",
                "output_dir": str(sft_dir),
                "max_steps": 4,
                "max_length": 128,
            },
        ),
        "dpr_config": write_yaml(root / "dpr.yaml", {**method, "output_dir": "unused", "max_completion_length": 8}),
        "spin_config": write_yaml(root / "spin.yaml", {**self_play, "output_dir": "unused", "num_iterations": 2}),
        "gsil_config": write_yaml(root / "gsil.yaml", {**self_play, "output_dir": "unused", "num_iterations": 1}),
        "evaluation_config": write_yaml(
            root / "eval.yaml",
            {
                "output_dir": "unused",
                "baseline": "SFT=unused",
                "candidates": ["DPR=unused"],
                "benchmarks": ["demo"],
                "demo_num_prompts": 5,
                "max_new_tokens": 8,
                "generation_batch_size": 8,
                "generation_backend": "transformers",
                "dtype": "float32",
                "judge": "exact",
                "bootstrap_resamples": 200,
            },
        ),
    }


@pytest.mark.slow
def test_table1_trains_every_method_from_one_sft_and_prints_the_table(tmp_path, capsys):
    from experiments import table1

    config = write_yaml(tmp_path / "table1.yaml", {"output_dir": str(tmp_path / "table1"), **tiny_recipes(tmp_path)})
    table1.main(["--config", config])
    out = capsys.readouterr().out
    for name in ("DPR", "SR", "SPIN", "GSIL"):
        assert f"| {name} |" in out
    assert "Embedded task win rate vs SFT % (95% CI)" in out and "accuracy % (95% CI)" in out
    rows = list(csv.DictReader(open(tmp_path / "table1" / "table1.csv")))
    assert [r["method"] for r in rows] == ["DPR", "SR", "SPIN", "GSIL"] and {r["n"] for r in rows} == {"5"}
    for row in rows:
        assert float(row["ci_low"]) <= float(row["win_rate"]) <= float(row["ci_high"])
    assert (tmp_path / "table1" / "SR" / "analysis_run.json").read_text().count(
        '"reward_granularity": "sentence"'
    ) == 1
    assert (tmp_path / "table1" / "SPIN" / "iteration-1" / "model.safetensors").is_file()

    # A rerun trains nothing and answers nothing again: the same table.
    answers = sorted((tmp_path / "table1" / "evaluation" / "answers" / "demo").iterdir())
    stamps = [p.stat().st_mtime_ns for p in answers]
    first = (tmp_path / "table1" / "table1.md").read_text()
    table1.main(["--config", config])
    assert [p.stat().st_mtime_ns for p in answers] == stamps
    again = (tmp_path / "table1" / "table1.md").read_text()
    assert again.split("Training time")[0] == first.split("Training time")[0]
    assert "SFT 0.0 (found, not retrained)" in again


def test_an_unknown_method_is_an_error_that_lists_the_choices():
    from experiments.table1 import Table1Arguments

    with pytest.raises(ValueError, match=r"Unknown methods \['PPO'\]; choose among \['DPR', 'SR', 'SPIN', 'GSIL'\]"):
        Table1Arguments(methods=["DPR", "PPO"])


def test_docstring_examples_run():
    from experiments import table1

    result = doctest.testmod(table1)
    assert result.failed == 0 and result.attempted > 0
