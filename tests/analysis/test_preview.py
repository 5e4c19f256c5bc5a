"""The DPR preview end to end on a tiny SFT output: its numbers against an independent recomputation (float64 unpadded
forwards, exact answers, a hand-written importance-weighting loop), its files, and its refusals of bad input."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from trl_dpr.analysis.preview import PreviewConfig, PreviewReport, run_preview
from trl_dpr.embedded.task import held_out_split, is_correct
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.evaluation.sampling import sample_completions

from ..conftest import run_forked, save_sft_output
from ..reference import unpadded_logprobs

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def small_config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "preview"),
        num_prompts=5,
        samples_per_prompt=4,
        min_ess=2.0,  # below N = 4: tilted points can be trusted
        max_new_tokens=6,
        batch_size=8,
        kl_coefs=[math.inf, 2.0, 0.5, 0.0],
        bootstrap_resamples=200,
        variants={
            "DPR": {},
            "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"},
            "oracle": {"oracle": True},
        },
    )
    values.update(overrides)
    return PreviewConfig(**values)


@pytest.fixture(scope="module")
def sft_output(tmp_path_factory, tokenizer):
    return save_sft_output(tmp_path_factory.mktemp("preview") / "sft", tokenizer)


def test_the_preview_equals_an_independent_recomputation_from_the_same_samples(sft_output, tokenizer, tmp_path):
    config = small_config(tmp_path)
    report = run_preview(config, str(sft_output), show_progress=False)

    # Independently: the same samples (same seed, prompts, batches), each scored by plain float64 forwards.
    sft, ref = build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    rows = held_out_split(5)
    prompts = [p for p in rows["prompt"] for _ in range(4)]
    samples = sample_completions(sft, tokenizer, prompts, temperature=1.0, max_new_tokens=6, batch_size=8, seed=0)
    dpr, wo_baseline = [], []
    for s in samples:
        sft_lp = unpadded_logprobs(sft, s.prompt_ids, s.completion_ids)
        ref_lp = unpadded_logprobs(ref, s.prompt_ids, s.completion_ids)
        dpr.append(sum(sft_lp) - sum(ref_lp))
        wo_baseline.append(sum(sft_lp))
    answers = [a for a in rows["answer"] for _ in range(4)]
    quality = torch.tensor([float(is_correct(s.text, a)) for s, a in zip(samples, answers)])
    by_key = {(p.variant, p.lam): p for p in report.points}
    for variant, rewards in (("DPR", dpr), ("wo/Baseline", wo_baseline), ("oracle", quality.tolist())):
        for lam in (math.inf, 2.0, 0.5, 0.0):
            q, kl = hand_tilt(rewards, quality.tolist(), lam, samples_per_prompt=4)
            point = by_key[(variant, lam)]
            assert point.quality == pytest.approx(q, abs=1e-6), (variant, lam)
            assert point.kl == pytest.approx(kl, abs=1e-6), (variant, lam)
    assert report.sft_quality == pytest.approx(quality.mean().item())
    assert report.pass_at_n == pytest.approx(quality.view(5, 4).max(dim=1).values.mean().item())


def hand_tilt(rewards, quality, lam, samples_per_prompt):
    """Mean over prompts of Σ_i w_i q_i and Σ_i w_i log(N w_i), w ∝ exp(R/λ) within a prompt, in plain floats."""
    qualities, kls = [], []
    for start in range(0, len(rewards), samples_per_prompt):
        r, q = rewards[start : start + samples_per_prompt], quality[start : start + samples_per_prompt]
        if math.isinf(lam):
            w = [1 / len(r)] * len(r)
        elif lam == 0:
            best = max(r)
            hits = [float(x == best) for x in r]
            w = [h / sum(hits) for h in hits]
        else:
            top = max(r)
            e = [math.exp((x - top) / lam) for x in r]
            w = [x / sum(e) for x in e]
        qualities.append(sum(a * b for a, b in zip(w, q)))
        kls.append(sum(a * math.log(len(r) * a) for a in w if a > 0))
    return sum(qualities) / len(qualities), sum(kls) / len(kls)


def test_the_preview_writes_its_table_plot_and_json(sft_output, tmp_path):
    report = run_preview(small_config(tmp_path), str(sft_output), show_progress=False)
    folder = tmp_path / "preview"
    with open(folder / "preview.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * 4 and {r["variant"] for r in rows} == {"DPR", "wo/Baseline", "oracle"}
    assert (folder / "preview.png").read_bytes()[:8] == PNG_SIGNATURE
    saved = json.loads((folder / "preview.json").read_text())
    assert [row["variant"] for row in saved["summary"]] == ["DPR", "wo/Baseline", "oracle"]
    assert saved["sft_quality"] == pytest.approx(report.sft_quality)
    assert "| DPR | ∞ (π_SFT) |" in (folder / "preview.md").read_text()
    again = PreviewReport.read(folder / "preview.json")  # read back: the same report, to plot or compare later
    assert again.points == report.points and again.markdown() == report.markdown()


def test_the_sft_demonstrations_file_previews_with_an_answer_pattern_as_an_independent_recount(
    sft_output, tokenizer, tmp_path
):
    """The file SFT trains on (`messages`) is the preview's too: the prompt is the turns before the assistant's, and
    `answer_pattern` reads the answer out of the assistant's text and out of each sample alike (here: the last
    letter, which a tiny random model does hit)."""
    import re

    rows = held_out_split(5)
    path = tmp_path / "demonstrations.jsonl"
    path.write_text(
        "".join(json.dumps({"messages": p + c}) + "\n" for p, c in zip(rows["prompt"], rows["completion"]))
    )
    config = small_config(
        tmp_path,
        dataset_name=str(path),
        num_prompts=5,
        variants={"DPR": {}},
        answer_pattern="([a-z])[^a-z]*$",
        plot=False,
    )
    report = run_preview(config, str(sft_output), show_progress=False)

    # Independently: the rows in the order the preview draws them (num_prompts of 5 shuffles with the seed), sampled
    # as it samples, scored by re directly.
    from datasets import load_dataset

    drawn = load_dataset("json", data_files={"test": str(path)})["test"].shuffle(seed=0).select(range(5))
    prompts = [m[:-1] for m in drawn["messages"] for _ in range(4)]
    samples = sample_completions(
        build_tiny_causal_lm(tokenizer, seed=0),
        tokenizer,
        prompts,
        temperature=1.0,
        max_new_tokens=6,
        batch_size=8,
        seed=0,
    )
    letter = lambda text: (re.findall("([a-z])[^a-z]*$", text) or [None])[-1]  # noqa: E731
    quality = torch.tensor(
        [
            float(letter(s.text) is not None and letter(s.text) == letter(m[-1]["content"]))
            for s, m in zip(samples, [m for m in drawn["messages"] for _ in range(4)])
        ]
    )
    assert report.quality_name == "exact (answer_pattern '([a-z])[^a-z]*$')"
    assert report.sft_quality == pytest.approx(quality.mean().item()) and report.sft_quality > 0
    assert report.pass_at_n == pytest.approx(quality.view(5, 4).max(dim=1).values.mean().item())


def test_when_sft_is_never_right_the_preview_says_it_cannot_tell_rather_than_no():
    from trl_dpr.analysis.preview import preview_points

    rewards = {"DPR": torch.tensor([[1.0, 0.0, 2.0], [0.5, 0.5, 0.5]]), "flat": torch.zeros(2, 3)}
    quality = torch.zeros(2, 3)  # no sample right
    points = preview_points(rewards, quality, [1.0], num_resamples=50)
    report = PreviewReport("exact", 2, 3, points, sft_quality=0.0, pass_at_n=0.0)
    assert [row["helps"] for row in report.summary_rows()] == [None, None]
    text = report.markdown()
    assert "| DPR | +0.000 | " in text and "| flat | n/a | " in text  # a flat reward has no KL: no slope, not +nan
    assert text.count("| cannot tell |") == 2 and "nan" not in text
    assert "Cannot tell: π_SFT was right on none of its 2 × 3 samples" in text
    right_once = PreviewReport(
        "exact",
        2,
        3,
        preview_points(rewards, torch.tensor([[0.0, 0.0, 1.0], [0.0] * 3]), [1.0], num_resamples=50),
        sft_quality=1 / 6,
        pass_at_n=0.5,
    )
    assert (
        all(row["helps"] in (True, False) for row in right_once.summary_rows())
        and "Cannot tell" not in right_once.markdown()
    )


def test_a_trained_policy_is_placed_with_its_own_quality_and_kl(sft_output, tokenizer, tmp_path):
    same = tmp_path / "same_as_sft"
    build_tiny_causal_lm(tokenizer, seed=0).save_pretrained(same)  # a "policy" equal to π_SFT
    other = tmp_path / "other"
    build_tiny_causal_lm(tokenizer, seed=7).save_pretrained(other)
    report = run_preview(
        small_config(tmp_path, policies=[f"same={same}", f"other={other}"]), str(sft_output), show_progress=False
    )
    by_name = {p.name: p for p in report.policies}
    assert by_name["same"].kl == pytest.approx(0.0, abs=1e-5)  # KL(π_SFT ‖ π_SFT) estimated from its own samples

    # "other": its own samples (policy_samples_per_prompt = 4, seed + 2), Σ log π_other − log π_SFT by plain forwards.
    policy, sft = build_tiny_causal_lm(tokenizer, seed=7), build_tiny_causal_lm(tokenizer, seed=0)
    prompts = [p for p in held_out_split(5)["prompt"] for _ in range(4)]
    samples = sample_completions(policy, tokenizer, prompts, temperature=1.0, max_new_tokens=6, batch_size=8, seed=2)
    kl = [
        sum(unpadded_logprobs(policy, s.prompt_ids, s.completion_ids))
        - sum(unpadded_logprobs(sft, s.prompt_ids, s.completion_ids))
        for s in samples
    ]
    assert by_name["other"].kl == pytest.approx(sum(kl) / len(kl), abs=1e-5)
    assert by_name["other"].kl_ci_low <= by_name["other"].kl <= by_name["other"].kl_ci_high


def test_the_recipe_runs_from_the_command_line(sft_output, tmp_path):
    from trl_dpr.running.cli import run as run_recipe
    from trl_dpr.scripts.preview import main

    # what recipes/preview.py runs, in a process of its own (forked from this one: no new imports)
    run = run_forked(
        lambda argv: run_recipe(main, argv),
        [
            "--config",
            str(ROOT / "recipes" / "preview" / "demo.yaml"),
            "--model_name_or_path",
            str(sft_output),
            "--output_dir",
            str(tmp_path / "out"),
            "--num_prompts",
            "4",
            "--samples_per_prompt",
            "3",
            "--min_ess",
            "2",
            "--max_new_tokens",
            "5",
            "--bootstrap_resamples",
            "100",
        ],
        folder=tmp_path,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| reward | gain per nat near kl_coef = ∞ |" in run.stdout
    assert (tmp_path / "out" / "preview.png").is_file()


def test_a_folder_without_a_recorded_reference_is_refused_before_sampling(tmp_path, tokenizer):
    bare = tmp_path / "bare"
    build_tiny_causal_lm(tokenizer).save_pretrained(bare)
    tokenizer.save_pretrained(bare)
    with pytest.raises(FileNotFoundError, match="dpr_reference.json"):
        run_preview(small_config(tmp_path), str(bare), show_progress=False)
    # wo/Baseline alone needs no π_ref
    report = run_preview(
        small_config(tmp_path, variants={"wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}}),
        str(bare),
        show_progress=False,
    )
    assert {p.variant for p in report.points} == {"wo/Baseline"}


def test_exact_and_demonstration_quality_need_answers_or_demonstrations_before_any_model_loads(
    sft_output, tmp_path, monkeypatch
):
    import transformers

    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}]}) + "\n")
    monkeypatch.setattr(
        transformers.PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("loaded"))
    )
    with pytest.raises(ValueError, match="quality: exact needs an `answer` column .*has prompts only"):
        run_preview(
            small_config(tmp_path, dataset_name=str(path), num_prompts=1), str(sft_output), show_progress=False
        )
    with pytest.raises(ValueError, match="quality: demonstration needs the demonstrations .*has none"):
        run_preview(
            small_config(
                tmp_path, dataset_name=str(path), num_prompts=1, quality="demonstration", variants={"DPR": {}}
            ),
            str(sft_output),
            show_progress=False,
        )


def test_pairwise_quality_asks_the_judge_once_per_pair_and_caches_it(sft_output, tmp_path, monkeypatch):
    """Quality = a win rate against an independent π_SFT answer, judged by an OpenAI-compatible server on 127.0.0.1."""
    import yaml

    from trl_dpr.running.recipe_parser import load_evaluation_config

    from ..evaluation.test_openai_judge import FakeChatCompletions

    server = FakeChatCompletions()
    server.default = lambda messages: "A is better. [[A>B]]"  # a judge with a pure position bias: every pair ties
    monkeypatch.setenv("PREVIEW_JUDGE_KEY", "test-key-0123456789")
    judge_yaml = tmp_path / "judge.yaml"
    judge_yaml.write_text(
        yaml.safe_dump(
            {
                "benchmarks": ["alpaca_eval"],
                "judge": "openai",
                "judge_model": "fake",
                "judge_base_url": server.base_url,
                "judge_api_key_env": "PREVIEW_JUDGE_KEY",
                "judge_max_retries": 0,
                "judge_max_workers": 2,
            }
        )
    )
    try:
        config = small_config(
            tmp_path,
            quality="pairwise",
            evaluation_config=str(judge_yaml),
            variants={"DPR": {}, "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}},
        )
        with pytest.raises(ValueError, match="quality: pairwise needs the judge's settings"):
            run_preview(config, str(sft_output), show_progress=False)
        judge_config = load_evaluation_config(str(judge_yaml))
        report = run_preview(config, str(sft_output), show_progress=False, judge_config=judge_config)
        assert len(server.requests) == 5 * 4 * 2  # every sample against π_SFT's answer, in both orders
        assert report.sft_quality == pytest.approx(0.5) and all(p.quality == pytest.approx(0.5) for p in report.points)
        run_preview(config, str(sft_output), show_progress=False, judge_config=judge_config)
        assert len(server.requests) == 5 * 4 * 2  # a rerun reads the cached verdicts
    finally:
        server.close()
