"""experiments/finished_sft.py: its pure pieces on hand-computed numbers, the report recomputed from planted per-prompt
rows, and every stage end to end on the embedded tiny Llama (resuming without retraining)."""

import json
import math

import pytest
import yaml

from experiments import finished_sft
from experiments.finished_sft import FinishedSFTArguments, control_step, finished_step, half_lr_step, paired
from trl_dpr.embedded import EMBEDDED_MODEL


def test_pi_ref_sits_where_half_of_pi_sft_sum_of_rates_is_reached():
    rates = [
        0.5,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ]  # Σ over 6 steps = 5.5, half = 2.75: reached after step 4 (3.5), not 3 (2.5)
    assert half_lr_step(rates, 6) == 4
    assert half_lr_step(rates, 2) == 2  # Σ = 1.5, half = 0.75: step 1 has 0.5


def test_pi_sft_is_the_held_out_loss_minimum_within_the_epoch_cap():
    losses = {10: 1.0, 20: 0.7, 30: 0.8, 40: 0.6}
    assert finished_step(losses, cap=30) == 20
    assert finished_step(losses, cap=40) == 40


def test_the_control_is_the_first_later_snapshot_that_has_spent_dpr_flops():
    assert control_step(10, flops=7.0, sft_step_flops=1.0, snapshots=[5, 10, 14, 18, 22]) == 18
    assert control_step(10, flops=100.0, sft_step_flops=1.0, snapshots=[10, 14]) == 14  # short: the last one
    assert control_step(10, flops=1.0, sft_step_flops=1.0, snapshots=[5, 10]) is None


def test_paired_gain_and_interval_match_a_hand_computation():
    method = {str(i): float(i % 2) for i in range(200)}
    baseline = {str(i): float(i % 4 == 1) for i in range(200)}  # gains: +1 on i ≡ 3 mod 4, else 0 → mean 0.25
    r = paired(method, baseline)
    assert r["gain"] == pytest.approx(0.25) and r["prompts"] == 200
    se = math.sqrt(0.25 * 0.75 / 200)
    assert r["ci"][0] == pytest.approx(0.25 - 1.96 * se, abs=0.02) and r["ci"][1] == pytest.approx(
        0.25 + 1.96 * se, abs=0.02
    )


def test_rollouts_not_a_multiple_of_the_step_size_are_refused():
    with pytest.raises(ValueError, match="multiple of rollouts_per_step"):
        FinishedSFTArguments(rollouts=100, rollouts_per_step=16)


def test_the_report_recomputes_gains_kl_and_the_preview_at_that_kl_from_planted_rows(tmp_path):
    rows = []
    for i in range(10):  # π_SFT right on 0–4; DPR right on 0–6 at T = 1 (+20 points), the same at greedy (0)
        for decoding in ("T=1", "T=0.7", "greedy"):
            rows.append({"policy": "SFT", "decoding": decoding, "prompt": i, "correct": int(i < 5), "length": 10})
            dpr = i < 7 if decoding == "T=1" else i < 5
            rows.append(
                {
                    "policy": "DPR λ=1e-05 seed0 at 100%",
                    "decoding": decoding,
                    "prompt": i,
                    "correct": int(dpr),
                    **({"kl": 0.5 * (i % 2) * 2, "length": 20, "entropy": float(i)} if decoding == "T=1" else {}),
                }
            )
    summary = {
        "settings": {"num_demonstrations": 1000},
        "sft": {
            "sft_step": 250,
            "cap": 500,
            "steps_per_epoch": 125,
            "ref_step": 128,
            "alpha": 0.5,
            "held_out_loss": {"125": 0.4, "250": 0.3},
        },
        "rl": {"DPR λ=1e-05 seed0": {"rollouts": 800}},
        "control": None,
        "choice": None,
        "preview": [
            {
                "variant": "DPR",
                "lam": 1.0,
                "delta": 0.1,
                "kl": 1.0,
                "delta_ci_low": 0.0,
                "delta_ci_high": 0.2,
                "trusted": True,
            },
            {
                "variant": "DPR",
                "lam": 2.0,
                "delta": 0.0,
                "kl": 0.0,
                "delta_ci_low": 0.0,
                "delta_ci_high": 0.0,
                "trusted": True,
            },
        ],
    }
    text = finished_sft.render_report(rows, summary)
    line = next(x for x in text.splitlines() if x.startswith("| DPR λ=1e-05 seed0 at 100%"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # mean KL 0.5 → the preview's line from (0, 0) to (1, +10) gives +5.0; T = 1: (7 − 5) / 10 = +20 points
    # entropy: the mean of the planted 0, 1, ..., 9 nats; π_SFT planted none
    assert cells[1:6] == ["800", "0.500", "+5.0", "20.0", "4.50"]
    assert cells[6].startswith("+20.0 (") and cells[8].startswith("+0.0 (")
    assert "| π_SFT (accuracy) | — | 0 | — | 10.0 | — | 50.0% (n = 10) |" in text


def test_the_report_without_results_says_what_to_run(tmp_path, capsys):
    with pytest.raises(SystemExit, match="run the stages up to `export`"):
        finished_sft.main(["--stage", "report", "--results_dir", str(tmp_path)])


@pytest.mark.slow
def test_every_stage_runs_end_to_end_on_the_tiny_model_and_a_rerun_trains_nothing(tmp_path):
    sft_yaml, dpr_yaml = tmp_path / "sft.yaml", tmp_path / "dpr.yaml"
    common = {
        "model_name_or_path": EMBEDDED_MODEL,
        "dtype": "float32",
        "bf16": False,
        "use_cpu": True,
        "save_strategy": "no",
        "report_to": "none",
        "seed": 0,
        "logging_steps": 1,
        "disable_tqdm": True,
    }
    sft_yaml.write_text(
        yaml.safe_dump(
            {
                **common,
                "per_device_train_batch_size": 8,
                "learning_rate": 1e-3,
                "lr_scheduler_type": "constant_with_warmup",
                "warmup_steps": 1,
                "max_length": 128,
                "gradient_checkpointing": False,
            }
        )
    )
    dpr_yaml.write_text(
        yaml.safe_dump(
            {
                **common,
                "learning_rate": 1e-3,
                "lr_scheduler_type": "constant",
                "warmup_steps": 0,
                "max_completion_length": 8,
                "gradient_checkpointing": False,
            }
        )
    )
    results = tmp_path / "results"
    argv = [
        "--output_dir",
        str(tmp_path / "run"),
        "--results_dir",
        str(results),
        "--sft_config",
        str(sft_yaml),
        "--dpr_config",
        str(dpr_yaml),
        "--num_demonstrations",
        "16",
        "--sft_epochs",
        "2",
        "--control_epochs",
        "1",
        "--snapshot_every",
        "1",
        "--control_snapshot_every",
        "1",
        "--loss_demonstrations",
        "4",
        "--preview_prompts",
        "4",
        "--preview_samples",
        "5",  # more than the preview's min_ess (4): fewer is refused
        "--lambdas",
        "inf",
        "1.0",
        "0.0",
        "--seeds",
        "0",
        "--ablations",
        "wo/Baseline",
        "--rollouts",
        "16",
        "--rollouts_per_step",
        "4",
        "--eval_prompts",
        "6",
        "--snapshot_eval_prompts",
        "3",
        "--max_new_tokens",
        "8",
        "--eval_batch_size",
        "8",
        "--checkpoint_every",
        "2",
    ]
    finished_sft.main(argv)
    rows = [json.loads(x) for x in (results / "per_prompt.jsonl").read_text().splitlines()]
    sft = json.loads((tmp_path / "run" / "sft_record.json").read_text())
    assert sft["steps"] == 6 and sft["cap"] == 4 and 1 <= sft["sft_step"] <= 4
    losses = {int(s): v for s, v in sft["held_out_loss"].items()}
    assert losses[sft["sft_step"]] == min(v for s, v in losses.items() if s <= 4)
    counts = {}
    for r in rows:
        counts[(r["policy"], r["decoding"])] = counts.get((r["policy"], r["decoding"]), 0) + 1
    assert counts[("SFT", "greedy")] == 6 and counts[("DPR λ=1e-05 seed0 at 100%", "T=0.7")] == 6
    assert counts[("DPR λ=1e-05 seed0 at 50%", "T=1")] == 3 and ("DPR λ=1e-05 seed0 at 50%", "greedy") not in counts
    assert counts[("SFT-continued", "T=1")] == 6 and counts[("wo/Baseline λ=1e-05 at 100%", "T=1")] == 6
    assert all("kl" in r for r in rows if r["decoding"] == "T=1")
    assert all(r["kl"] == 0 for r in rows if r["policy"] == "SFT" and r["decoding"] == "T=1")
    # pass@1 and pass@4 from 4 draws on the snapshots' 3 prompts: pass@4 is at least pass@1 on each
    assert counts[("SFT", "pass@4")] == 3 and counts[("SFT-continued", "pass@1")] == 3
    passes = {
        (r["policy"], r["prompt"], r["decoding"]): r["correct"] for r in rows if r["decoding"].startswith("pass")
    }
    assert all(v >= passes[(p, i, "pass@1")] for (p, i, d), v in passes.items() if d == "pass@4")
    trained = tmp_path / "run" / "rl" / "DPR_λ1e-05_seed0" / "rl_record.json"
    stamp = trained.stat().st_mtime_ns
    # a run stopped after its last checkpoint (its record not yet written) resumes there: no step trained again
    stopped = tmp_path / "run" / "rl" / "wo_Baseline_λ1e-05"
    assert [c.name for c in (stopped / "trainer").glob("checkpoint-*")] == ["checkpoint-4"]
    first = json.loads((stopped / "rl_record.json").read_text())
    (stopped / "rl_record.json").unlink()
    snapshot = (stopped / "at100" / "model.safetensors").stat().st_mtime_ns
    finished_sft.main(argv)  # everything there: nothing trained again
    assert trained.stat().st_mtime_ns == stamp
    resumed = json.loads((stopped / "rl_record.json").read_text())
    assert (stopped / "at100" / "model.safetensors").stat().st_mtime_ns == snapshot  # no step 4 again
    assert [h["step"] for h in resumed["history"]] == [h["step"] for h in first["history"]] == [1, 2, 3, 4]
    report = finished_sft.main(["--stage", "report", "--results_dir", str(results)])
    del report
    assert "| SFT-continued |" in (results / "report.md").read_text()


def test_the_report_pools_dpr_seeds_per_prompt_before_pairing():
    rows = []
    for i in range(
        4
    ):  # π_SFT right on 0–1; seed0 right on 0–2, seed1 on 0–3: per prompt (1, 1, 1, 0.5) − (1, 1, 0, 0)
        rows.append({"policy": "SFT", "decoding": "T=1", "prompt": i, "correct": int(i < 2), "kl": 0.0})
        rows.append(
            {"policy": "DPR λ=1e-05 seed0 at 100%", "decoding": "T=1", "prompt": i, "correct": int(i < 3), "kl": 0.2}
        )
        rows.append({"policy": "DPR λ=1e-05 seed1 at 100%", "decoding": "T=1", "prompt": i, "correct": 1, "kl": 0.4})
    summary = {
        "settings": {"num_demonstrations": 8},
        "control": None,
        "choice": None,
        "preview": [],
        "sft": {"sft_step": 2, "cap": 4, "steps_per_epoch": 1, "ref_step": 1, "alpha": 0.5, "held_out_loss": {}},
        "rl": {"DPR λ=1e-05 seed0": {"rollouts": 64}, "DPR λ=1e-05 seed1": {"rollouts": 64}},
    }
    text = finished_sft.render_report(rows, summary)
    line = next(x for x in text.splitlines() if "2 seeds pooled" in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "0.300" and cells[6].startswith("+37.5 (")  # mean KL (0.2 + 0.4) / 2; gain 1.5 / 4


def test_a_second_worker_starts_from_the_cap_record_and_the_control_waits_for_sft_to_finish(tmp_path):
    args = finished_sft.FinishedSFTArguments(output_dir=str(tmp_path), snapshot_every=2)
    with pytest.raises(SystemExit, match="run `--stage sft` first"):
        finished_sft._sft_so_far(args, tmp_path, tmp_path / "demonstrations.jsonl")
    # the record SFT writes at its cap: losses 0.5, 0.3, 0.4 at steps 2, 4, 6; the minimum is step 4; a constant
    # rate puts half of its Σ lr at step 2
    cap = finished_sft._finish(
        {"learning_rates": [1.0] * 6, "held_out_loss": {"2": 0.5, "4": 0.3, "6": 0.4}, "snapshots": {}, "cap": 6},
        cap=6,
        snapshot_every=2,
    )
    assert (cap["sft_step"], cap["ref_step"], cap["alpha"]) == (4, 2, 0.5)
    (tmp_path / "sft_cap.json").write_text(json.dumps(cap))
    assert finished_sft._sft_so_far(args, tmp_path, tmp_path / "d.jsonl")["sft_step"] == 4
    # a DPR run has finished, but SFT's control epochs have not: no control yet
    rl = finished_sft._folder(tmp_path, "DPR λ=1e-05 seed0")
    rl.mkdir(parents=True)
    (rl / "rl_record.json").write_text(json.dumps({"tokens": 1000.0, "frozen_scorers": 2}))
    assert finished_sft._control(args, tmp_path, cap) is None
    finished = {**cap, "held_out_loss": {"2": 0.5, "4": 0.3, "6": 0.2}}  # the one SFT writes at its end wins
    (tmp_path / "sft_record.json").write_text(json.dumps(finished))
    assert finished_sft._sft_so_far(args, tmp_path, tmp_path / "d.jsonl")["sft_step"] == 6


def test_pass_at_k_rows_give_sharpening_and_skill_apart():
    # π_SFT: prompts 0-3 right in 1 of 4 draws, 4-7 never. The policy: 0-3 right in 4 of 4 (sharpened), 4-7 never.
    # pass@1 gains (1 − 0.25) × 4/8 = +37.5 points; pass@4 gains nothing (0-3 were already reached by π_SFT).
    rows = []
    for i in range(8):
        sft = finished_sft.pass_at(1.0 if i < 4 else 0.0, [0.0, 0.0, 0.0])
        policy = finished_sft.pass_at(1.0 if i < 4 else 0.0, [1.0 if i < 4 else 0.0] * 3)
        for name, values in (("SFT", sft), ("DPR λ=1e-05 seed0 at 100%", policy)):
            rows += [{"policy": name, "decoding": k, "prompt": i, "correct": v} for k, v in values.items()]
    summary = {
        "settings": {"num_demonstrations": 8},
        "control": None,
        "choice": None,
        "preview": [],
        "sft": {"sft_step": 2, "cap": 4, "steps_per_epoch": 1, "ref_step": 1, "alpha": 0.5, "held_out_loss": {}},
        "rl": {},
    }
    text = finished_sft.render_report(rows, summary)
    assert "| π_SFT | 12.5% | 50.0% |" in text
    line = next(x for x in text.splitlines() if x.startswith("| DPR λ=1e-05 seed0 at 100% | +37.5"))
    assert line.split("|")[3].strip().startswith("+0.0 (")


def test_the_evaluation_prompts_are_none_of_ds_the_previews_or_the_losss(tmp_path):
    from trl_dpr.embedded.task import held_out_split

    args = FinishedSFTArguments(output_dir=str(tmp_path), eval_prompts=1000)
    finished_sft._data(args, tmp_path)
    key = lambda prompt: json.dumps(prompt, sort_keys=True)  # noqa: E731
    d = {key(json.loads(line)["prompt"]) for line in (tmp_path / "demonstrations.jsonl").read_text().splitlines()}
    # the plain held-out prefix is not held out from this D past its first 500 rows: what the evaluation must skip
    assert sum(key(r["prompt"]) in d for r in held_out_split(1000, seed=0)) > 100
    rows = finished_sft._evaluation_rows(args, tmp_path, 1000)
    data = tmp_path / "demonstrations.jsonl"
    others = [r["prompt"] for r in finished_sft._rows(args, "preview", data)] + [
        r["prompt"] for r in finished_sft._rows(args, "loss", data)
    ]
    assert len(rows) == 1000 and not {key(r["prompt"]) for r in rows} & (d | {key(p) for p in others})
    # the snapshots' prompts are the first of the same rows, so prompt ids pair across both evaluations
    assert finished_sft._evaluation_rows(args, tmp_path, 400)["prompt"] == rows.select(range(400))["prompt"]


def test_the_held_out_loss_and_preview_rows_are_none_of_ds_prompts(tmp_path):
    from trl_dpr.embedded.task import held_out_split

    args = FinishedSFTArguments(output_dir=str(tmp_path))
    data = finished_sft._data(args, tmp_path)
    key = lambda prompt: json.dumps(prompt, sort_keys=True)  # noqa: E731
    d = {key(json.loads(line)["prompt"]) for line in data.read_text().splitlines()}
    wanted = args.preview_prompts + args.loss_demonstrations
    plain = held_out_split(finished_sft.HELD_OUT_OFFSET + wanted, seed=0).select(
        range(finished_sft.HELD_OUT_OFFSET, finished_sft.HELD_OUT_OFFSET + wanted)
    )
    # the plain rows past the offset (what the committed runs used) hold one of D's prompts among the loss's 64
    assert sum(key(r["prompt"]) in d for r in plain.select(range(args.preview_prompts, wanted))) == 1
    preview, loss = finished_sft._rows(args, "preview", data), finished_sft._rows(args, "loss", data)
    assert (len(preview), len(loss)) == (args.preview_prompts, args.loss_demonstrations)
    assert not {key(r["prompt"]) for r in [*preview, *loss]} & d
    # the rows that were outside D stay, in order: the preview's all 48 (none was in D), the loss's 63 of 64
    outside = [r["prompt"] for r in plain if key(r["prompt"]) not in d]
    assert [r["prompt"] for r in [*preview, *loss]][: len(outside)] == outside


def test_pi_sft_is_chosen_only_among_snapshots_whose_pi_ref_was_saved():
    # step 6 is a half-Σ-lr snapshot (of the cap 12): lowest loss, but its own π_ref (step 3) was never saved
    record = {"learning_rates": [1.0] * 12, "held_out_loss": {"4": 0.5, "6": 0.1, "8": 0.3, "12": 0.4}}
    finished = finished_sft._finish(record, cap=12, snapshot_every=4)
    assert (finished["sft_step"], finished["ref_step"]) == (8, 4)


def test_a_policy_past_every_finite_tilts_kl_reads_the_previews_best_of_n_end():
    # the preview's DPR curve: λ = ∞ at (0, 0), λ = 1 at (1, +10), λ = 0 (best-of-N) at (3, +50); KL 2 → +30
    points = [
        {"variant": "DPR", "lam": lam, "delta": d, "kl": kl, "delta_ci_low": d, "delta_ci_high": d, "trusted": True}
        for lam, kl, d in ((math.inf, 0.0, 0.0), (1.0, 1.0, 0.1), (0.0, 3.0, 0.5))
    ]
    rows = [{"policy": "SFT", "decoding": "T=1", "prompt": i, "correct": 1, "kl": 0.0} for i in range(4)]
    rows += [
        {"policy": "DPR λ=1e-05 seed0 at 100%", "decoding": "T=1", "prompt": i, "correct": 1, "kl": 2.0}
        for i in range(4)
    ]
    summary = {
        "settings": {"num_demonstrations": 8},
        "control": None,
        "choice": None,
        "preview": points,
        "sft": {"sft_step": 2, "cap": 4, "steps_per_epoch": 1, "ref_step": 1, "alpha": 0.5, "held_out_loss": {}},
        "rl": {"DPR λ=1e-05 seed0": {"rollouts": 64}},
    }
    line = next(
        x for x in finished_sft.render_report(rows, summary).splitlines() if x.startswith("| DPR λ=1e-05 seed0")
    )
    assert line.split("|")[4].strip() == "+30.0"


def test_sr_reads_dprs_preview_curve_and_wo_baseline_its_own():
    # SR pays Σ r̂ at the end: the same KL-regularised optimum as DPR's dense r̂, so the same tilt curve
    points = [
        {"variant": v, "lam": lam, "delta": d, "kl": kl, "delta_ci_low": d, "delta_ci_high": d, "trusted": True}
        for v, scale in (("DPR", -1.0), ("wo/Baseline", 1.0))
        for lam, kl, d in ((math.inf, 0.0, 0.0), (0.0, 1.0, 0.2 * scale))
    ]
    rows = [{"policy": "SFT", "decoding": "T=1", "prompt": i, "correct": 1, "kl": 0.0} for i in range(4)]
    for policy in ("SR λ=1e-05 at 100%", "wo/Baseline λ=1e-05 at 100%"):
        rows += [{"policy": policy, "decoding": "T=1", "prompt": i, "correct": 1, "kl": 0.5} for i in range(4)]
    summary = {
        "settings": {"num_demonstrations": 8},
        "control": None,
        "choice": None,
        "preview": points,
        "sft": {"sft_step": 2, "cap": 4, "steps_per_epoch": 1, "ref_step": 1, "alpha": 0.5, "held_out_loss": {}},
        "rl": {"SR λ=1e-05": {"rollouts": 64}, "wo/Baseline λ=1e-05": {"rollouts": 64}},
    }
    lines = finished_sft.render_report(rows, summary).splitlines()
    predicted = {x.split("|")[1].strip(): x.split("|")[4].strip() for x in lines if "at 100%" in x}
    assert predicted == {"SR λ=1e-05 at 100%": "-10.0", "wo/Baseline λ=1e-05 at 100%": "+10.0"}


def test_the_report_states_each_runs_flops_and_the_controls_ratio_to_it():
    rows = [{"policy": "SFT", "decoding": "T=1", "prompt": 0, "correct": 1}]
    summary = {
        "settings": {"num_demonstrations": 8},
        "choice": None,
        "preview": [],
        "sft": {"sft_step": 2, "cap": 4, "steps_per_epoch": 1, "ref_step": 1, "alpha": 0.5, "held_out_loss": {}},
        "rl": {"DPR λ=1e-05 seed0": {"rollouts": 64, "flops": 4.0e12}, "wo/Baseline λ=1e-05": {"flops": 3.2e12}},
        "control": {"sft_flops": 4.4e12, "from_step": 2, "to_step": 5, "flops_share": 1.1},
    }
    line = next(x for x in finished_sft.render_report(rows, summary).splitlines() if x.startswith("FLOPs"))
    # 4.4 / 4.0 = 1.10 and 4.4 / 3.2 = 1.375 → 1.38
    assert "DPR λ=1e-05 seed0 4e+12 (the control 1.10×)" in line
    assert "wo/Baseline λ=1e-05 3.2e+12 (the control 1.38×)" in line and line.endswith(
        "the control 4.4e+12 (6N per SFT token)."
    )


def test_each_rl_run_is_paired_against_the_control_per_prompt():
    # 10 prompts at every decoding: the control right on 0–7, DPR right on 0–4 → DPR − control = (5 − 8) / 10 = −30
    rows = []
    for i in range(10):
        for decoding in ("T=1", "T=0.7", "greedy"):
            rows.append({"policy": "SFT", "decoding": decoding, "prompt": i, "correct": int(i < 6)})
            rows.append({"policy": "SFT-continued", "decoding": decoding, "prompt": i, "correct": int(i < 8)})
            rows.append(
                {"policy": "DPR λ=1e-05 seed0 at 100%", "decoding": decoding, "prompt": i, "correct": int(i < 5)}
            )
    summary = {
        "settings": {"num_demonstrations": 8},
        "choice": None,
        "preview": [],
        "control": None,
        "sft": {"sft_step": 2, "cap": 4, "steps_per_epoch": 1, "ref_step": 1, "alpha": 0.5, "held_out_loss": {}},
        "rl": {"DPR λ=1e-05 seed0": {"rollouts": 64}},
    }
    lines = finished_sft.render_report(rows, summary).splitlines()
    header = lines.index("| policy − control | T = 1 | T = 0.7 | greedy |")
    cells = [c.strip() for c in lines[header + 2].strip("|").split("|")]
    assert cells[0] == "DPR λ=1e-05 seed0 at 100%"
    # every paired difference is 0 or −1 (prompts 5–7): the interval stays within [−1, 0] and holds −0.3
    for cell in cells[1:]:
        gain, low, high = (float(x) for x in cell.replace("(", "").replace(")", "").replace(" to ", " ").split())
        assert gain == -30.0 and -100.0 <= low <= gain <= high <= 0.0
