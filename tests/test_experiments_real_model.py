"""The pieces of experiments/real_model.py, seed_spread.py and readme_tables.py on hand-computed numbers: the slip
finder on multi-token numbers (SmolLM2 writes one digit per token), the paired accuracy gains read back from the
evaluation's answer files, the t-interval over seeds, and the README block check."""

import json
import math

import pytest

from experiments.readme_tables import main as readme_tables_main
from experiments.readme_tables import replace_block
from experiments.real_model import _paired, credit_at_slips
from experiments.seed_spread import mean_t_interval
from trl_dpr.embedded.task import held_out_split


def test_the_slip_is_the_first_digit_token_that_departs_from_the_true_result():
    # "17 + 5 = 23": true 22, written "23" as the digit tokens "2", "3"; the "2" still agrees, the "3" is the slip.
    tokens = ["1", "7", " +", " ", "5", " =", " ", "2", "3", ".", " The", " answer", " is", " ", "2", "3", "."]
    rewards = [0.0] * len(tokens)
    rewards[8] = -2.0  # lowest at the "3"
    assert credit_at_slips(tokens, rewards) == (True, len(tokens))
    rewards[8], rewards[7] = 0.0, -2.0  # lowest at the "2", which is right so far
    assert credit_at_slips(tokens, rewards) == (False, len(tokens))
    correct = ["1", "7", " +", " ", "5", " =", " ", "2", "2", "."]
    assert credit_at_slips(correct, [0.0] * len(correct)) is None


def test_paired_gains_come_from_the_answer_files_per_prompt(tmp_path):
    rows = held_out_split(3, seed=0)
    answers = list(rows["answer"])

    def write(name, right):  # right[prompt][k]: whether sample k of prompt is correct
        lines = []
        for p, samples in enumerate(right):
            for k, ok in enumerate(samples):
                text = f"The answer is {answers[p] if ok else 'x'}."
                lines.append(json.dumps({"model": name, "prompt_id": f"{p}#{k}", "turn": 0, "answer": text}))
        folder = tmp_path / "answers" / "demo"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")

    write("SFT", [[1, 0], [0, 0], [1, 1]])     # per prompt 0.5, 0, 1   → 0.5
    write("DPR", [[1, 1], [1, 0], [1, 1]])     # per prompt 1, 0.5, 1   → 0.8333
    result = _paired(tmp_path, "DPR", "SFT")
    assert result["prompts"] == 3
    assert result["accuracy"] == pytest.approx(2.5 / 3)
    assert result["gain"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    low, high = result["gain_ci"]
    assert 0.0 <= low <= result["gain"] <= high <= 0.5


def test_mean_t_interval_is_the_student_t_interval():
    values = [0.02, 0.05, -0.01, 0.04, 0.00]
    mean = sum(values) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    half = 2.776 * sd / math.sqrt(5)  # t(0.975, 4 df)
    assert mean_t_interval(values) == pytest.approx((mean, mean - half, mean + half))


def test_the_readme_check_fails_on_a_drifted_table_and_passes_on_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/demo/dpr").mkdir(parents=True)
    (tmp_path / "runs/demo/dpr/eval_results.json").write_text(json.dumps({"table_markdown": "| a |\n| 1 |"}))
    (tmp_path / "README.md").write_text("x\n<!-- table:demo -->\n| a |\n| 2 |\n<!-- /table:demo -->\ny\n")
    assert readme_tables_main(["--check", "demo"]) == 1
    assert readme_tables_main(["--write"]) == 0
    assert (tmp_path / "README.md").read_text() == "x\n<!-- table:demo -->\n| a |\n| 1 |\n<!-- /table:demo -->\ny\n"
    assert readme_tables_main(["--check", "demo"]) == 0
    with pytest.raises(ValueError, match="no block"):
        replace_block("no blocks here", "demo", "t\n")
