"""The pieces of experiments/real_model.py, seed_spread.py and readme_tables.py on hand-computed numbers: the share of
SFT's learning at π_ref, compute matching (steps for a wall time or FLOP budget, DPR's FLOPs), the KL per response, the
preview read at a measured KL, paired gains, the preview's choice of α and λ, and the resume of every stage."""

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from experiments import real_model
from experiments.readme_tables import main as readme_tables_main
from experiments.readme_tables import replace_block
from experiments.real_model import (
    RealModelArguments,
    choose,
    dpr_step_flops,
    interpolate_at_kl,
    lr_share,
    matched_steps,
    paired_gain,
    per_response_kl,
)
from experiments.seed_spread import mean_t_interval


def test_lr_share_is_the_learning_done_by_a_step_over_all_of_it():
    # Warm-up 0.5, 1.0, then constant 1.0 for 8 steps: Σ = 9.5; after 5 steps 4.5 / 9.5.
    rates = [0.5, 1.0] + [1.0] * 8
    assert lr_share(rates, 5) == pytest.approx(4.5 / 9.5)
    # A cosine schedule has done far more than half its learning at half its steps (the old run's π_ref was late).
    cosine = [0.5 * (1 + math.cos(math.pi * k / 40)) for k in range(40)]
    assert lr_share(cosine, 20) > 0.5


def test_sft_steps_matched_to_a_wall_time_or_a_flop_budget():
    assert matched_steps(1085.0, 32.4) == 33  # 1085 / 32.4 = 33.49
    assert matched_steps(1.4e13, 6e11) == 23  # 23.3
    assert matched_steps(1.0, 100.0) == 1  # at least one step
    with pytest.raises(ValueError, match="positive"):
        matched_steps(10.0, 0.0)
    # DPR: generation 2N + 2N per frozen scorer + update 6N, per prompt + completion token.
    assert dpr_step_flops(135_000_000, 1000, 2) == pytest.approx(12 * 135e6 * 1000)
    assert dpr_step_flops(135_000_000, 1000, 1) == pytest.approx(10 * 135e6 * 1000)  # wo/Baseline: no π_ref forward


def test_kl_per_response_sums_the_log_ratio_over_real_tokens_only():
    policy = torch.tensor([[-1.0, -0.5, -3.0], [-0.2, -9.0, -9.0]])
    sft = torch.tensor([[-1.5, -1.0, -0.1], [-0.7, -0.1, -0.1]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert per_response_kl(policy, sft, mask).tolist() == pytest.approx([1.0, 0.5])


def test_the_preview_is_read_at_the_measured_kl_not_at_the_same_lambda():
    curve = [(0.0, 0.0), (0.4, 0.02), (1.2, 0.05), (3.0, 0.04)]
    assert interpolate_at_kl(curve, 0.8) == pytest.approx(0.035)
    assert interpolate_at_kl(curve, -0.01) == 0.0  # an estimate a hair below 0 is π_SFT
    assert interpolate_at_kl(curve, 5.0) is None  # beyond the preview's range: no prediction


def test_paired_gain_is_per_prompt_with_a_bootstrap_interval():
    method = {"0": 1.0, "1": 1.0, "2": 0.0, "3": 1.0}
    base = {"0": 1.0, "1": 0.0, "2": 0.0, "3": 0.0, "9": 1.0}  # "9" has no pair: left out
    result = paired_gain(method, base)
    assert result["prompts"] == 4 and result["mean"] == 0.75 and result["gain"] == 0.5
    low, high = result["gain_ci"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0


def _point(variant, lam, delta, kl, trusted=True):
    return SimpleNamespace(
        variant=variant,
        lam=lam,
        delta=delta,
        kl=kl,
        trusted=trusted,
        delta_ci_low=delta - 0.01,
        delta_ci_high=delta + 0.01,
    )


def test_the_preview_chooses_alpha_and_lambda_among_trusted_finite_points():
    points = [
        _point("DPR α=0.25", 1.0, 0.03, 0.5),
        _point("DPR α=0.5", 2.0, 0.02, 0.3),
        _point("DPR α=0.5", 0.25, 0.09, 2.0, trusted=False),
        _point("DPR α=0.5", math.inf, 0.0, 0.0),
        _point("DPR α=0.75", 0.0, 0.2, 2.07),
        _point("wo/Baseline", 1.0, 0.5, 0.4),
    ]
    report = SimpleNamespace(variant_points=lambda v: [p for p in points if p.variant == v])
    choice = choose(RealModelArguments(), report)
    assert (choice["alpha"], choice["lambda"], choice["target_kl"]) == (0.25, 1.0, 0.5)  # not untrusted, ∞, best-of-N
    assert choose(RealModelArguments(alpha=0.5), report)["lambda"] == 2.0
    with pytest.raises(ValueError, match="no trusted finite λ"):
        choose(RealModelArguments(kl_coef=7.0), report)


def test_every_stage_resumes_from_what_it_wrote(tmp_path, monkeypatch):
    args = RealModelArguments(output_dir=str(tmp_path), num_demonstrations=5, eval_prompts=3, preview_prompts=2)
    # data: written once, the same bytes on a rerun
    data = real_model._data(args, tmp_path)
    first = data.read_bytes()
    assert len(first.splitlines()) == 5 and real_model._data(args, tmp_path).read_bytes() == first
    # train: a run with its record is not trained again
    folder = tmp_path / "DPR-seed0"
    folder.mkdir()
    (folder / "rl_record.json").write_text(json.dumps({"steps": 7}))
    monkeypatch.setattr("trl_dpr.running.pipeline.run_dpr", lambda *a, **k: pytest.fail("trained again"))
    assert real_model._train_dpr(args, "DPR-seed0", {}, "sft", {"lambda": 1.0, "alpha": 0.5}, data, tmp_path) == {
        "steps": 7
    }
    # evaluate: decodings already answered are not answered again
    recorded = {d: {"correct": {}} for d in real_model.DECODINGS}
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "SFT.json").write_text(json.dumps(recorded))
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", lambda *a, **k: pytest.fail("reloaded"))
    assert real_model._evaluate(args, tmp_path, "SFT", "sft", "sft") == recorded
    # the held-out slices never overlap each other or D
    evaluation, preview = real_model._held_out(args)
    d_prompts = {json.loads(line)["prompt"][0]["content"] for line in first.splitlines()}
    eval_prompts = {r["prompt"][0]["content"] for r in evaluation}
    preview_prompts = {r["prompt"][0]["content"] for r in preview}
    assert len(eval_prompts) == 3 and len(preview_prompts) == 2
    assert not (eval_prompts & preview_prompts) and not (d_prompts & (eval_prompts | preview_prompts))


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


def test_a_table_is_written_and_checked_in_whichever_document_holds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/seed_spread").mkdir(parents=True)
    (tmp_path / "runs/seed_spread/seed_spread.md").write_text("| seed |\n| 0 |\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("no tables here\n")
    (tmp_path / "docs/results.md").write_text("<!-- table:seed_spread -->\nold\n<!-- /table:seed_spread -->\n")
    assert readme_tables_main(["--check", "seed_spread"]) == 1
    assert readme_tables_main(["--write", "--check", "seed_spread"]) == 0
    assert (tmp_path / "docs/results.md").read_text() == (
        "<!-- table:seed_spread -->\n| seed |\n| 0 |\n<!-- /table:seed_spread -->\n"
    )
    assert (tmp_path / "README.md").read_text() == "no tables here\n"


def test_a_missing_run_names_make_demo_only_for_the_demo_table(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("no tables here\n")
    assert readme_tables_main(["--check", "demo", "seed_spread"]) == 1
    demo, seed_spread = capsys.readouterr().err.splitlines()
    assert demo.startswith("demo: runs/demo/dpr/eval_results.json is missing") and "make demo" in demo
    assert (
        seed_spread.startswith("seed_spread: runs/seed_spread/seed_spread.md is missing")
        and "make demo" not in seed_spread
    )


def test_the_first_finished_sft_block_is_what_its_committed_per_prompt_files_give(monkeypatch, capsys):
    from experiments.finished_sft import render_report

    root = Path(__file__).resolve().parents[2]
    results = root / "experiments/results/finished_sft"
    per_prompt = [json.loads(line) for line in (results / "per_prompt.jsonl").read_text().splitlines() if line]
    expected = render_report(per_prompt, json.loads((results / "run.json").read_text()))
    assert (
        f"<!-- table:finished_sft -->\n{expected}<!-- /table:finished_sft -->"
        in (root / "docs/real_model.md").read_text()
    )
    monkeypatch.chdir(root)
    assert readme_tables_main(["--check", "finished_sft"]) == 0
    assert "finished_sft: the table in docs/real_model.md is the run's, byte for byte" in capsys.readouterr().out


def test_every_generated_table_has_one_block_in_the_documents_and_the_demos_is_in_the_readme():
    from experiments.readme_tables import SOURCES, documents

    root = Path(__file__).resolve().parents[2]
    files = documents(root / "README.md")
    for name in SOURCES:
        holders = [path.name for path in files if f"<!-- table:{name} -->" in path.read_text()]
        assert len(holders) == 1, f"table {name} is in {holders}: expected exactly one of README.md, docs/*.md"
    assert "<!-- table:demo -->" in (root / "README.md").read_text()  # CI's --check demo reads it there
    assert "<!-- table:regime_map -->" in (root / "README.md").read_text()  # the real model's, filled in by its run


def _gain(mean, gain, low, high):
    return {"mean": mean, "gain": gain, "gain_ci": [low, high]}


def test_the_table_reads_the_preview_only_for_the_tilts_it_predicts():
    rows = [
        {
            "method": "SFT",
            "kl_per_response": 0.0,
            "kl_per_token": 0.0,
            "T=1": _gain(0.7, 0.0, 0.0, 0.0),
            "T=0.7 vs SFT at T=1": _gain(0.74, 0.04, 0.0, 0.08),
            "greedy vs SFT at T=1": _gain(0.75, 0.05, 0.01, 0.09),
        },
        {
            "method": "DPR-seed0",
            "steps": 3,
            "kl_per_response": 0.1,
            "kl_per_token": 0.002,
            "T=1": _gain(0.69, -0.01, -0.03, 0.01),
            "preview_gain_at_kl": -0.02,
            "sharpening_at_kl": 0.01,
        },
        {
            "method": "DPR-seed0 (lr 5e-5)",
            "steps": 4,
            "kl_per_response": 5.0,
            "kl_per_token": 0.1,
            "T=1": _gain(0.5, -0.2, -0.25, -0.15),
            "preview_gain_at_kl": None,
            "sharpening_at_kl": None,
        },
        {
            "method": "SFT-continued (wall)",
            "steps": 16,
            "kl_per_response": 0.8,
            "kl_per_token": 0.02,
            "T=1": _gain(0.62, -0.085, -0.13, -0.04),
            "sharpening_at_kl": 0.03,
        },
    ]
    lines = real_model.render_table(
        rows,
        {"alpha": 0.25, "lambda": 8.0, "target_kl": 0.017, "preview_gain": -0.011, "preview_gain_ci": [-0.03, 0.005]},
        None,
        {
            "targets": {"SFT-continued (wall)": 16, "SFT-continued (FLOPs)": 8},
            "dpr_mean_wall_s": 324.0,
            "dpr_mean_flops": 4.7e12,
            "dpr_now": {"wall_s": 180.0, "flops": 3.6e12},
        },
    ).splitlines()
    by_method = {
        line.split(" | ")[0][2:]: line.split(" | ") for line in lines if line.startswith("| ") and "---" not in line
    }
    assert by_method["DPR-seed0"][-2:] == ["-2.0", "+1.0 |"]
    assert by_method["DPR-seed0 (lr 5e-5)"][-2:] == ["— (beyond the preview's KL)", "— (beyond the preview's KL) |"]
    assert by_method["SFT-continued (wall)"][-2:] == [
        "—",
        "+3.0 |",
    ]  # no preview curve of its own; sharpening still read
    assert by_method["SFT"][-2:] == ["—", "— |"]
    assert by_method["DPR-seed0"][3] == "69.0%, -1.0 (-3.0 to +1.0)" and by_method["DPR-seed0"][4] == "not run"
    assert "DPR seeds reported here: 3.0 min and 3.60e+12 FLOPs" in lines[-1]


def test_earlier_runs_are_reported_from_their_folders_and_never_evaluated_again(tmp_path, monkeypatch):
    args = RealModelArguments(output_dir=str(tmp_path), earlier_runs=["DPR-seed0 (lr 5e-5)"], probe_lambdas=[])
    policies = real_model._policies(args, tmp_path, "sft")
    assert policies["DPR-seed0 (lr 5e-5)"] == str(tmp_path / "DPR-seed0_lr_5e-5")
    (tmp_path / "DPR-seed0_lr_5e-5").mkdir()
    evaluated = []
    monkeypatch.setattr(real_model, "_data", lambda *a: tmp_path / "d.jsonl")
    monkeypatch.setattr(real_model, "_sft", lambda *a: "sft")
    monkeypatch.setattr(real_model, "_evaluate", lambda a, o, name, *r: evaluated.append(name))
    real_model.main(["--output_dir", str(tmp_path), "--stage", "evaluate", "--earlier_runs", "DPR-seed0 (lr 5e-5)"])
    assert "DPR-seed0 (lr 5e-5)" not in evaluated


def _exact_report(sft_right: list[int], dpr_right: list[int], prompts: list[int], temperature: float) -> dict:
    """A results.json of DPR vs SFT under the exact judge, made by trl_dpr's own evaluation functions."""
    from trl_dpr.evaluation.results import exact_accuracy, win_rate

    outcomes = ["win" if d > s else "loss" if s > d else "tie" for s, d in zip(sft_right, dpr_right)]
    rate = win_rate(outcomes, groups=prompts).as_dict()
    accuracy = [
        {**exact_accuracy("demo", name, [bool(x) for x in right], prompts, ["add"] * len(right)).as_dict()}
        for name, right in (("SFT", sft_right), ("DPR", dpr_right))
    ]
    return {
        "baseline": "SFT",
        "methods": ["DPR"],
        "accuracy": accuracy,
        "pairwise": [{"method": "DPR", "judge": "exact-answer", "win_rate": rate}],
        "settings": {
            "temperature": temperature,
            "demo_num_prompts": len(set(prompts)),
            "samples_per_prompt": len(prompts) // len(set(prompts)),
            "output_dir": "x",
        },
    }


def test_the_paired_gain_is_the_accuracy_difference_with_the_bootstrap_interval_of_the_differences():
    import random

    from experiments.readme_tables import exact_paired_gain
    from trl_dpr.evaluation.results import bootstrap_mean_ci, unit_means

    rng = random.Random(0)
    prompts = [p for p in range(60) for _ in range(2)]
    sft = [int(rng.random() < 0.6) for _ in prompts]
    dpr = [int(rng.random() < 0.7) for _ in prompts]
    gain, low, high = exact_paired_gain(_exact_report(sft, dpr, prompts, 1.0)["pairwise"][0])
    assert gain == pytest.approx(sum(dpr) / len(dpr) - sum(sft) / len(sft))
    # the same resamples (seed 0, 2000) of the per-prompt mean difference, computed directly
    direct_low, direct_high = bootstrap_mean_ci(unit_means([d - s for s, d in zip(sft, dpr)], prompts))
    assert (low, high) == pytest.approx((float(direct_low[0]), float(direct_high[0])), abs=1e-9)


def test_the_decoding_table_shows_each_decodings_gain_and_its_share_of_the_t1_gain():
    from experiments.readme_tables import decoding_markdown

    prompts = list(range(10))
    t1 = _exact_report([1, 0, 0, 0, 1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0, 1, 1, 0], prompts, 1.0)  # 50% → 80%
    t07 = _exact_report([1, 0, 0, 1, 1, 1, 0, 1, 1, 0], [1, 1, 0, 1, 1, 1, 0, 1, 1, 0], prompts, 0.7)  # 60% → 70%
    greedy = _exact_report([1, 1, 0, 1, 1, 1, 0, 1, 1, 0], [1, 1, 0, 1, 1, 1, 0, 1, 1, 0], prompts, 0.0)  # a tie
    rows = decoding_markdown([t1, t07, greedy]).splitlines()[2:]
    assert rows[0].startswith("| T = 1 (`make demo`) | 10 × 1 | 50.0 (") and "| 80.0 (" in rows[0]
    assert "| +30.0 (" in rows[0] and rows[0].endswith("| 100% |")
    assert "| +10.0 (" in rows[1] and rows[1].endswith("| 33% |")  # 10 of the 30 points
    assert "| +0.0 (+0.0 to +0.0) |" in rows[2] and rows[2].endswith("| 0% |")
    with pytest.raises(ValueError, match="temperature 0.7"):
        decoding_markdown([t1, t1, greedy])  # answers at T = 1 are not the T = 0.7 row


def test_table1_has_one_row_per_method_with_the_best_accuracy_in_bold(tmp_path, monkeypatch):
    from experiments.readme_tables import main as tables_main

    report = _exact_report([1, 0, 0, 1], [1, 1, 0, 1], [0, 1, 2, 3], 1.0)
    report["methods"] = ["DPR", "SPIN"]
    report["accuracy"].append(
        {**report["accuracy"][0], "method": "SPIN", "accuracy": 0.25, "by_category": {"add": 0.25}}
    )
    report["pairwise"].append(
        {"method": "SPIN", "judge": "exact-answer", "win_rate": {"win_rate": 0.375, "ci_low": 0.25, "ci_high": 0.5}}
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/table1_demo/evaluation").mkdir(parents=True)
    (tmp_path / "runs/table1_demo/evaluation/results.json").write_text(json.dumps(report))
    (tmp_path / "runs/table1_demo/table1.md").write_text("| tables |\n\nTraining time (min): SFT 1.0, DPR 2.0.\n")
    (tmp_path / "README.md").write_text("<!-- table:table1 -->\nold\n<!-- /table:table1 -->\n")
    assert tables_main(["--write", "--check", "table1"]) == 0
    block = (tmp_path / "README.md").read_text().splitlines()
    assert block[1] == "| Method | accuracy % (95% CI) | add | win rate vs SFT % (95% CI) |"
    assert block[3].startswith("| SFT | 50.0 (") and block[3].endswith("| 50.0 | — |")
    assert block[4].startswith("| DPR | **75.0** (") and "| 75.0 | 62.5 (" in block[4]
    assert block[5] == "| SPIN | 25.0 (" + block[3].split("(")[1].split(")")[0] + ") | 25.0 | 37.5 (25.0–50.0) |"
    assert block[7] == "Training time (min): SFT 1.0, DPR 2.0."


def test_the_regime_table_has_one_row_per_point_from_its_dpr_and_wo_baseline_rows(tmp_path, monkeypatch):
    from experiments.readme_tables import main as tables_main
    from experiments.regime_scan import COLUMNS

    def row(point, base, steps, lr, alpha, variant, quality, gain, best_lambda, best_gain, helps):
        values = dict(
            point=point,
            base=base,
            sft_steps=steps,
            sft_learning_rate=lr,
            reference_fraction=alpha,
            variant=variant,
            sft_quality=quality,
            pass_at_n=0.9,
            **{"lambda": 1.0},
            gain=gain,
            gain_ci_low=gain - 0.01,
            gain_ci_high=gain + 0.01,
            kl=0.1,
            best_lambda=best_lambda,
            best_gain=best_gain,
            best_gain_ci_low=best_gain - 0.004,
            best_gain_ci_high=best_gain + 0.004,
            best_kl=0.2,
            helps=helps,
        )
        return [values[c] for c in COLUMNS]

    scratch, pretrained = "trl_dpr/embedded-tiny-llama", "trl_dpr/embedded-pretrained-llama"
    rows = [
        row("scratch_s600_lr2e-3", scratch, 600, 2e-3, 0.5, "DPR", 0.4, -0.1, float("inf"), 0.0, False),
        row("scratch_s600_lr2e-3", scratch, 600, 2e-3, 0.5, "wo/Baseline", 0.4, 0.05, 0.0, 0.1, True),
        row("scratch_s600_lr2e-3", scratch, 600, 2e-3, 0.5, "oracle", 0.4, 0.3, 0.0, 0.5, True),
        row("pretrained_s50_lr1e-4", pretrained, 50, 1e-4, 0.5, "DPR", 0.8, 0.04, 0.5, 0.05, True),
        row("pretrained_s50_lr1e-4", pretrained, 50, 1e-4, 0.5, "wo/Baseline", 0.8, 0.2, 0.0, 0.25, True),
        row("pretrained_s50_lr1e-4_alpha0.25", pretrained, 50, 1e-4, 0.25, "DPR", 0.8, -0.04, 8.0, 0.007, True),
        row("pretrained_s50_lr1e-4_alpha0.25", pretrained, 50, 1e-4, 0.25, "wo/Baseline", 0.8, 0.2, 0.0, 0.25, True),
        row("pretrained_s50_lr1e-4_seed1", pretrained, 50, 1e-4, 0.5, "DPR", 0.78, 0.04, 0.5, 0.06, True),
        row("pretrained_s50_lr1e-4_seed1", pretrained, 50, 1e-4, 0.5, "wo/Baseline", 0.78, 0.2, 0.0, 0.22, True),
    ]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/regime_scan").mkdir(parents=True)
    with open(tmp_path / "runs/regime_scan/regime_scan.csv", "w", newline="") as out:
        csv.writer(out).writerows([COLUMNS, *rows])
    (tmp_path / "README.md").write_text("<!-- table:regime_scan -->\nold\n<!-- /table:regime_scan -->\n")
    assert tables_main(["--write", "--check", "regime_scan"]) == 0
    block = (tmp_path / "README.md").read_text().splitlines()[1:-1]
    assert block[0].startswith("| base | SFT steps × lr, α | π_SFT accuracy | DPR tilt: gain at λ = 1 (95% CI) |")
    assert block[2:] == [
        "| random init | 600 × 2e-3 (the 0.1 demo) | 0.400 | −0.100 (−0.110 to −0.090) | ∞ (none) | +0.100 | no |",
        "| pretrained | **50 × 1e-4 (the demo)** | 0.800 | +0.040 (+0.030 to +0.050) | 0.5: +0.050 (+0.046 to +0.054) "
        "| +0.250 | **yes** |",
        "| pretrained | 50 × 1e-4, α = 0.25 | 0.800 | −0.040 (−0.050 to −0.030) | 8: +0.007 (+0.003 to +0.011) | "
        "+0.250 | yes, by 0.7 points |",
        "| pretrained | 50 × 1e-4, SFT seed 1 | 0.780 | +0.040 (+0.030 to +0.050) | 0.5: +0.060 (+0.056 to +0.064) "
        "| +0.220 | **yes** |",
    ]


def test_a_preview_where_every_gain_is_negative_says_do_not_train():
    losing = [_point("DPR α=0.5", 8.0, -0.011, 0.02), _point("DPR α=0.5", 1.0, -0.12, 0.8)]
    report = SimpleNamespace(variant_points=lambda v: [p for p in losing if p.variant == v])
    choice = choose(RealModelArguments(alphas=[0.5]), report)
    assert choice["train"] is False and choice["verdict"].startswith("do not train")
    winning = losing + [_point("DPR α=0.5", 2.0, 0.004, 0.3)]
    report = SimpleNamespace(variant_points=lambda v: [p for p in winning if p.variant == v])
    assert choose(RealModelArguments(alphas=[0.5]), report)["train"] is True


# ---- experiments/regime_map.py ---------------------------------------------------------------------------------------


def test_snapshots_are_placed_at_shares_of_the_learning_rate_sum_not_of_the_steps():
    from experiments.regime_map import steps_at_shares

    # Warm-up 1, 2, then constant 4 for 8 steps: Σ = 35, running sums 1, 3, 7, 11, 15, 19, ... A share is the first
    # step whose running sum reaches it: 5% (1.75) → step 2, 25% (8.75) → 4, 50% (17.5) → 6 (not step 5, half the steps).
    rates = [1.0, 2.0] + [4.0] * 8
    running = [sum(rates[:k]) for k in range(1, 11)]
    expected = {s: next(k for k, r in enumerate(running, start=1) if r >= s * 35) for s in (0.05, 0.25, 0.5, 1.0)}
    assert steps_at_shares(rates, [0.05, 0.25, 0.5, 1.0]) == expected == {0.05: 2, 0.25: 4, 0.5: 6, 1.0: 10}


def test_the_regime_map_trains_where_the_gain_is_largest_or_says_do_not_train():
    from experiments.regime_map import RegimeMapArguments, _runs
    from experiments.regime_map import choose as choose_point

    early = [
        _point("DPR", 2.0, 0.03, 0.4),
        _point("DPR", 0.25, 0.2, 3.0, trusted=False),
        _point("DPR", math.inf, 0, 0),
    ]
    late = [_point("DPR", 2.0, 0.05, 0.2), _point("DPR", 0.0, 0.3, 2.0)]  # best-of-N (λ = 0) is never a choice
    choice = choose_point({0.1: early, 1.0: late})
    assert (choice["progress"], choice["lambda"], choice["target_kl"], choice["train"]) == (1.0, 2.0, 0.2, True)
    args = RegimeMapArguments(map_progress=[0.1, 0.25, 1.0], dpr_seeds=[0, 1], ablations=["SR"])
    assert list(_runs(args, choice)) == ["DPR-seed0", "DPR-seed1", "SR"]
    # every gain ≤ 0: "do not train", and the runs that test that answer go to the best point and the earliest one
    losing = choose_point({0.25: [_point("DPR", 4.0, -0.01, 0.1)], 1.0: [_point("DPR", 8.0, -0.02, 0.05)]})
    assert (losing["progress"], losing["train"]) == (0.25, False)
    runs = _runs(args, losing)
    assert (
        runs["DPR-seed0"][0] == 0.25
        and runs["DPR-seed0 @10%"][0] == 0.1
        and runs["SR @10%"][1]["reward_granularity"] == "sentence"
    )
    with pytest.raises(ValueError, match="no trusted finite"):
        choose_point({1.0: [_point("DPR", math.inf, 0.0, 0.0), _point("DPR", 0.0, 0.2, 1.0)]})


def test_sft_continued_is_the_sft_runs_own_snapshot_past_dprs_flops(monkeypatch):
    from experiments import regime_map

    monkeypatch.setattr(regime_map, "_parameters", lambda path: 100)
    sft = {
        "steps": 60,
        "tokens": 60_000.0,
        "share_steps": {"0.25": 15},
        "snapshots": {str(s): f"s{s}" for s in range(10, 61, 10)},
    }
    sft["snapshots"]["15"] = "s15"
    # DPR: (2 + 2·2 + 6)·100·5000 = 6e6 FLOPs; an SFT step: 6·100·1000 = 6e5 → 10 steps, 15 → 25, next snapshot 30
    path, info = regime_map._continued(None, None, sft, [{"tokens": 5000, "frozen_scorers": 2}], 0.25)
    assert (path, info["from_step"], info["to_step"]) == ("s30", 15, 30)
    assert info["flops_share"] == pytest.approx(15 * 6e5 / 6e6)
    # past the end of the pass: the pass's last snapshot, with the share of DPR's FLOPs it spent (45 steps of 100)
    path, info = regime_map._continued(None, None, sft, [{"tokens": 50_000, "frozen_scorers": 2}], 0.25)
    assert (path, info["to_step"]) == ("s60", 60) and info["flops_share"] == pytest.approx(0.45)
    # π_SFT at the end of the pass has no continuation of its own to compare with
    sft["share_steps"]["1.0"] = 60
    assert regime_map._continued(None, None, sft, [{"tokens": 5000, "frozen_scorers": 2}], 1.0) is None


def test_the_regime_scan_says_cannot_tell_where_the_preview_could_not_tell():
    from types import SimpleNamespace

    from experiments.regime_scan import _markdown, _point_row

    def preview(helps):
        summary = {
            "variant": "DPR",
            "best_kl_coef": float("inf") if helps is None else 1.0,
            "best_delta": 0.0 if helps is None else 0.05 if helps else -0.01,
            "best_delta_ci_low": 0.0 if helps is None else 0.01 if helps else -0.03,
            "best_delta_ci_high": 0.0 if helps is None else 0.09 if helps else 0.01,
            "best_kl": 0.0,
            "helps": helps,
        }
        point = {"variant": "DPR", "lam": 1.0, "delta": 0.0, "delta_ci_low": 0.0, "delta_ci_high": 0.0, "kl": 0.0}
        return {
            "summary": [summary],
            "points": [point],
            "sft_quality": 0.0 if helps is None else 0.5,
            "pass_at_n": 0.0,
        }

    sft_args, sft_training = SimpleNamespace(reference_fraction=0.5), SimpleNamespace(max_steps=50, learning_rate=1e-4)
    rows = [
        row
        for name, helps in (("never_right", None), ("helps", True), ("does_not", False))
        for row in _point_row(name, sft_args, sft_training, "trl_dpr/embedded-pretrained-llama", preview(helps), 1.0)
    ]
    verdicts = [line.rsplit("|", 2)[1].strip() for line in _markdown(rows).splitlines()[2:]]
    assert verdicts == ["cannot tell", "yes", "no"]


def test_the_readmes_regime_table_says_cannot_tell_for_a_point_whose_preview_could_not_tell():
    from experiments.readme_tables import regime_markdown

    def row(variant, helps):
        return {
            "point": "pretrained_s50_lr1e-4",
            "base": "trl_dpr/embedded-pretrained-llama",
            "sft_steps": "50",
            "sft_learning_rate": "0.0001",
            "reference_fraction": "0.5",
            "variant": variant,
            "sft_quality": "0.0",
            "lambda": "1.0",
            "gain": "0.0",
            "gain_ci_low": "0.0",
            "gain_ci_high": "0.0",
            "best_lambda": "inf",
            "best_gain": "0.0",
            "best_gain_ci_low": "0.0",
            "best_gain_ci_high": "0.0",
            "helps": helps,
        }

    # `helps` None is written to regime_scan.csv as an empty cell (experiments/figures.py's write_csv)
    table = regime_markdown([row("DPR", ""), row("wo/Baseline", "")])
    assert table.splitlines()[2].endswith("| cannot tell |")
