"""The whole evaluation on two tiny saved models and the embedded task (exact judge), in process and through
`recipes/evaluate.py`; what stops a run before any model is loaded; the recipe configs."""

import importlib
import json
from pathlib import Path

import pytest
import yaml

from trl_dpr.embedded.task import is_correct
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.evaluation import (
    EvaluationConfig,
    MissingAPIKeyError,
    TransformersAnswerGenerator,
    load_prompt_set,
    run_evaluation,
    runner,
)
from trl_dpr.running.recipe_parser import RecipeParser

from ..conftest import run_forked

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def saved_models(tmp_path, tokenizer):
    """Two tiny random Llamas saved like recipe outputs: an "SFT" and a "DPR" folder."""
    paths = {}
    for name, seed in (("sft", 0), ("dpr", 1)):
        path = tmp_path / name
        build_tiny_causal_lm(tokenizer, seed=seed).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[name] = str(path)
    return paths


def demo_config(tmp_path, saved_models, **overrides):
    values = dict(
        output_dir=str(tmp_path / "eval"),
        baseline=f"SFT={saved_models['sft']}",
        candidates=[f"DPR={saved_models['dpr']}"],
        benchmarks=["demo"],
        demo_num_prompts=8,
        max_new_tokens=8,
        generation_batch_size=4,
        generation_backend="transformers",
        dtype="float32",
        judge="exact",
        bootstrap_resamples=500,
    )
    values.update(overrides)
    return EvaluationConfig(**values)


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def rewrite_answers(path, new_answers):
    rows = read_jsonl(path)
    for row in rows:
        if row["prompt_id"] in new_answers:
            row["answer"] = new_answers[row["prompt_id"]]
    Path(path).write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.slow  # end to end: answers, judging, tables (≈ 2 s)
def test_two_tiny_models_are_evaluated_end_to_end_with_the_exact_judge(tmp_path, saved_models, monkeypatch):
    config = demo_config(tmp_path, saved_models)
    report = run_evaluation(config, show_progress=False)

    output = tmp_path / "eval"
    sft_rows, dpr_rows = read_jsonl(output / "answers/demo/SFT.jsonl"), read_jsonl(output / "answers/demo/DPR.jsonl")
    assert [(r["model"], r["prompt_id"], r["turn"]) for r in sft_rows] == [("SFT", str(i), 0) for i in range(8)]
    assert len(dpr_rows) == 8 and dpr_rows[0]["settings"]["temperature"] == 0.7
    (result,) = report.pairwise
    prompts = load_prompt_set("demo", num_prompts=8)
    expected = [
        "tie"
        if is_correct(d["answer"], p.references[0]) == is_correct(s["answer"], p.references[0])
        else "win"
        if is_correct(d["answer"], p.references[0])
        else "loss"
        for p, s, d in zip(prompts, sft_rows, dpr_rows)
    ]
    assert (result.win_rate.wins, result.win_rate.ties, result.win_rate.losses) == (
        expected.count("win"),
        expected.count("tie"),
        expected.count("loss"),
    )
    assert result.total == 8 and result.unparseable == 0

    # Make DPR right on prompts 1-4, SFT right on 0 (as DPR) and on 5: answers are read back from the cache, and the
    # verdicts follow the new answers. No model may be loaded now: every answer is cached.
    answers = {p.prompt_id: f"So it is. The answer is {p.references[0]}." for p in prompts}
    rewrite_answers(output / "answers/demo/DPR.jsonl", {i: answers[i] for i in "01234"})
    rewrite_answers(output / "answers/demo/SFT.jsonl", {i: answers[i] for i in "05"})

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded although all its answers are cached")

    monkeypatch.setattr("trl_dpr.evaluation.runner.load_answer_generator", no_loading)
    report = run_evaluation(config, show_progress=False)
    (result,) = report.pairwise
    assert (result.win_rate.wins, result.win_rate.ties, result.win_rate.losses) == (4, 3, 1)
    assert result.win_rate.value == pytest.approx((4 + 0.5 * 3) / 8)
    assert result.win_rate.ci_low <= result.win_rate.value <= result.win_rate.ci_high

    saved = json.loads((output / "results.json").read_text())
    assert saved["pairwise"][0]["win_rate"]["win_rate"] == pytest.approx(0.6875)
    assert saved["pairwise"][0]["method_lengths"]["n"] == 8
    markdown = (output / "results.md").read_text()
    assert "| Method | Embedded task win rate vs SFT % (95% CI) |" in markdown
    assert "| SFT | — |" in markdown and "| DPR | 68.8 (" in markdown
    assert "8 of 8 pairs judged, 0 unparseable" in markdown


@pytest.mark.slow  # three evaluations of two tiny models (≈ 3 s)
def test_a_model_retrained_in_place_is_answered_again_not_from_the_old_cache(
    tmp_path, saved_models, tokenizer, monkeypatch, caplog
):
    config = demo_config(tmp_path, saved_models)
    run_evaluation(config, show_progress=False)
    answers_file = tmp_path / "eval" / "answers" / "demo" / "DPR.jsonl"
    old_answers = [row["answer"] for row in read_jsonl(answers_file)]

    # Retrained in the same folder (rm -r and train again, --overwrite_output_dir): other weights, the same path.
    build_tiny_causal_lm(tokenizer, seed=2).save_pretrained(saved_models["dpr"])
    loaded = []
    real_loader = runner.load_answer_generator
    monkeypatch.setattr(
        runner, "load_answer_generator", lambda path, **kwargs: loaded.append(path) or real_loader(path, **kwargs)
    )
    with caplog.at_level("WARNING"):
        report = run_evaluation(config, show_progress=False)
    assert loaded == [saved_models["dpr"]]  # the SFT's answers are still its own: only DPR is answered again
    assert "DPR.jsonl was made with other weights" in caplog.text

    # What the new weights answer, sampled on their own with the evaluation's settings.
    prompts = load_prompt_set("demo", num_prompts=8)
    generator = TransformersAnswerGenerator.from_pretrained(
        saved_models["dpr"], dtype="float32", device="cpu", temperature=0.7, max_new_tokens=8, batch_size=4, seed=0
    )
    expected = generator.generate([p.conversation([]) for p in prompts])
    rows = read_jsonl(answers_file)
    assert [row["answer"] for row in rows] == expected != old_answers  # the file holds the new answers only
    (accuracy,) = [a for a in report.accuracy if a.method == "DPR"]
    right = [is_correct(answer, p.references[0]) for answer, p in zip(expected, prompts)]
    assert accuracy.accuracy == pytest.approx(sum(right) / len(right))

    loaded.clear()  # unchanged weights: every answer is reused, no model is loaded
    run_evaluation(config, show_progress=False)
    assert loaded == [] and read_jsonl(answers_file) == rows


def test_an_adapter_whose_base_folder_moved_is_evaluated_from_its_cached_answers(
    tmp_path, saved_models, tokenizer, monkeypatch
):
    """Every answer cached, then the adapter's base folder moved away: nothing needs the weights, so the evaluation
    reads the answers back (it did before the weights fingerprint) instead of stopping on the base's path."""
    base = tmp_path / "base"
    build_tiny_causal_lm(tokenizer, seed=3).save_pretrained(base)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    (adapter / "adapter_model.safetensors").write_bytes(b"never loaded: every answer is cached")
    tokenizer.save_pretrained(adapter)
    config = demo_config(tmp_path, {**saved_models, "dpr": str(adapter)}, demo_num_prompts=4)
    prompts = load_prompt_set("demo", num_prompts=4)
    for name, path in (("SFT", saved_models["sft"]), ("DPR", str(adapter))):  # as a first evaluation left them
        settings = runner._generation_settings(config, path)
        answers = tmp_path / "eval" / "answers" / "demo" / f"{name}.jsonl"
        answers.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            {
                "model": name,
                "prompt_id": p.prompt_id,
                "turn": 0,
                "answer": f"The answer is {p.references[0]}.",
                "settings": settings,
            }
            for p in prompts
        ]
        answers.write_text("".join(json.dumps(row) + "\n" for row in rows))

    base.rename(tmp_path / "base-moved")
    monkeypatch.setattr(runner, "load_answer_generator", lambda path, **kwargs: pytest.fail(f"{path} was loaded"))
    report = run_evaluation(config, show_progress=False)
    assert {a.method: a.accuracy for a in report.accuracy} == {"SFT": 1.0, "DPR": 1.0}  # the planted answers


def test_each_models_weights_are_fingerprinted_once_per_evaluation(tmp_path, saved_models, monkeypatch):
    """The fingerprint may cost a Hub lookup (up to 10 s offline): the caches' settings are computed once per model,
    and the generator loaded to answer does not compute them again."""
    from collections import Counter

    from trl_dpr.evaluation import answers

    real, counted = answers.weights_fingerprint, Counter()

    def counting(path, *args, **kwargs):
        counted[str(path)] += 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(answers, "weights_fingerprint", counting)
    monkeypatch.setattr(runner, "weights_fingerprint", counting)
    run_evaluation(demo_config(tmp_path, saved_models, demo_num_prompts=2), show_progress=False)  # both answer
    assert counted == {saved_models["sft"]: 1, saved_models["dpr"]: 1}


def test_the_recipe_runs_from_a_yaml_config_in_a_process_of_its_own(tmp_path, saved_models):
    config = {
        "output_dir": str(tmp_path / "eval"),
        "baseline": f"SFT={saved_models['sft']}",
        "candidates": [f"DPR={saved_models['dpr']}"],
        "benchmarks": ["demo"],
        "demo_num_prompts": 4,
        "max_new_tokens": 6,
        "generation_backend": "transformers",
        "dtype": "float32",
        "judge": "exact",
        "bootstrap_resamples": 200,
    }
    path = tmp_path / "evaluate.yaml"
    path.write_text(yaml.safe_dump(config))
    recipe = load_recipe()  # what recipes/evaluate.py runs, forked from this process (no new imports)
    run = run_forked(
        lambda argv: recipe.run(recipe.main, argv), ["--config", str(path)], folder=tmp_path, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| DPR |" in run.stdout and "results.json" in run.stdout
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["pairwise"][0]["total"] == 4 and results["settings"]["judge"] == "exact"
    assert len(read_jsonl(tmp_path / "eval" / "answers" / "demo" / "DPR.jsonl")) == 4


def load_recipe():
    return importlib.import_module("trl_dpr.scripts.evaluate")


def test_a_missing_model_folder_stops_the_recipe_with_a_clear_message(tmp_path, saved_models, capsys):
    path = tmp_path / "evaluate.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "baseline": f"SFT={saved_models['sft']}",
                "candidates": ["DPR=runs/demo/never_trained_dpr"],
                "benchmarks": ["demo"],
                "judge": "exact",
                "output_dir": str(tmp_path / "eval"),
            }
        )
    )
    recipe = load_recipe()
    with pytest.raises(SystemExit) as stop:
        recipe.run(recipe.main, ["--config", str(path)])
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert "Model DPR: the folder 'runs/demo/never_trained_dpr' does not exist" in message and "make demo" in message
    assert "Traceback" not in message and "--debug" in message
    assert not (tmp_path / "eval").exists()


def test_a_folder_without_a_model_is_refused(tmp_path, saved_models):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no model"):
        run_evaluation(demo_config(tmp_path, saved_models, candidates=[f"DPR={tmp_path / 'empty'}"]))


def test_a_missing_api_key_stops_the_run_before_any_generation(tmp_path, saved_models, monkeypatch):
    monkeypatch.delenv("TRL_DPR_TEST_ABSENT_KEY", raising=False)
    alpaca = tmp_path / "alpaca_eval.json"
    alpaca.write_text(json.dumps([{"instruction": "Name three primary colours.", "dataset": "selfinstruct"}]))
    config = demo_config(
        tmp_path,
        saved_models,
        benchmarks=["alpaca_eval"],
        alpaca_eval_path=str(alpaca),
        judge="openai",
        judge_api_key_env="TRL_DPR_TEST_ABSENT_KEY",
    )
    with pytest.raises(MissingAPIKeyError, match="TRL_DPR_TEST_ABSENT_KEY"):
        run_evaluation(config, show_progress=False)
    assert not (tmp_path / "eval").exists()  # no answer was generated


def test_the_demo_and_backbone_configs_parse_with_the_papers_settings():
    parser = RecipeParser((EvaluationConfig,))
    (demo,) = parser.parse_args_and_config(["--config", str(ROOT / "recipes/evaluate/demo.yaml")])
    assert demo.models() == {"SFT": "runs/demo/sft", "DPR": "runs/demo/dpr"}
    # the demo evaluates at T = 1, the policy DPR trains and the preview predicts; the paper's benchmarks at 0.7
    assert (demo.benchmarks, demo.judge, demo.temperature) == (["demo"], "exact", 1.0)
    (paper,) = parser.parse_args_and_config(["--config", str(ROOT / "recipes/evaluate/llama-3.1-8b.yaml")])
    assert paper.benchmarks == ["alpaca_eval", "arena_hard", "lima", "mt_bench"]
    assert (paper.judge, paper.judge_model, paper.judge_temperature, paper.judge_api_key_env) == (
        "openai",
        "gpt-4o",
        0.0,
        "OPENAI_API_KEY",
    )
    assert (paper.temperature, paper.position_rule, paper.confidence) == (0.7, "consistent", 0.95)
    dpr = yaml.safe_load((ROOT / "recipes/llama-3.1-8b/dpr/config_qlora.yaml").read_text())
    assert paper.models()["DPR"] == dpr["output_dir"] and paper.models()["SFT"] == dpr["model_name_or_path"]


def judge_reply(messages):
    """The fake GPT-4o: grades every answer 7 (8 with a reference), and prefers the answer shown as A."""
    if "[[rating]]" in messages[-1]["content"]:
        return (
            "Correct and clear.\nRating: [[8]]" if "reference answer" in messages[-1]["content"] else "Rating: [[7]]"
        )
    return "Assistant A is more helpful.\n\nMy final verdict is: [[A>B]]"


@pytest.mark.slow  # end to end against a local HTTP judge (≈ 2 s)
def test_the_paper_setup_with_an_openai_compatible_judge_and_mt_bench(tmp_path, saved_models, monkeypatch):
    from .test_openai_judge import FakeChatCompletions

    server = FakeChatCompletions()
    server.default = judge_reply
    try:
        monkeypatch.setenv("TRL_DPR_TEST_KEY", "k-123")
        alpaca = tmp_path / "alpaca_eval.json"
        alpaca.write_text(
            json.dumps(
                [{"instruction": f"Give me tip number {i} for a good sleep.", "dataset": "koala"} for i in range(3)]
            )
        )
        mt_bench = tmp_path / "question.jsonl"
        mt_bench.write_text(
            "\n".join(
                json.dumps(row)
                for row in [
                    {
                        "question_id": 81,
                        "category": "writing",
                        "turns": ["Write a haiku about rain.", "Now about snow."],
                    },
                    {
                        "question_id": 111,
                        "category": "math",
                        "turns": ["Area of a 2 by 3 rectangle?", "Its perimeter?"],
                        "reference": ["6", "10"],
                    },
                ]
            )
            + "\n"
        )
        config = demo_config(
            tmp_path,
            saved_models,
            benchmarks=["alpaca_eval", "mt_bench"],
            alpaca_eval_path=str(alpaca),
            mt_bench_path=str(mt_bench),
            judge="openai",
            judge_model="gpt-4o",
            judge_base_url=server.base_url,
            judge_api_key_env="TRL_DPR_TEST_KEY",
            judge_max_workers=2,
        )
        report = run_evaluation(config, show_progress=False)
        # 3 pairs × 2 orders, then 2 models × 2 questions × 2 turns graded
        assert len(server.requests) == 6 + 8
        assert all(r["body"]["temperature"] == 0 and r["body"]["model"] == "gpt-4o" for r in server.requests)
        (pairwise,) = report.pairwise
        assert (pairwise.win_rate.ties, pairwise.position_disagreements, pairwise.unparseable) == (
            3,
            3,
            0,
        )  # pure bias
        scores = {r.method: r.score for r in report.mt_bench}
        assert scores["SFT"].score == pytest.approx(7.5) and scores["DPR"].category_scores == {
            "math": 8.0,
            "writing": 7.0,
        }
        markdown = (tmp_path / "eval" / "results.md").read_text()
        assert "| Method | AlpacaEval win rate vs SFT % (95% CI) | MT-Bench (1–10) |" in markdown
        assert "| DPR | 50.0 (50.0–50.0) | 7.50 |" in markdown and "| SFT | — | 7.50 |" in markdown
        assert "k-123" not in (tmp_path / "eval" / "results.json").read_text()

        run_evaluation(config, show_progress=False)  # everything cached: the judge is not asked again
        assert len(server.requests) == 14
    finally:
        server.close()


def test_the_tables_name_the_confidence_level_their_intervals_were_computed_at():
    """`confidence: 0.9` gives 90% intervals: the table says 90% CI, not the default's 95%."""
    from trl_dpr.evaluation.results import EvaluationReport, exact_accuracy, results_markdown

    correct, groups = [True, False, True, True], ["0", "1", "2", "3"]
    for confidence, label in ((0.9, "90% CI"), (0.95, "95% CI"), (0.975, "97.5% CI")):
        accuracy = exact_accuracy("demo", "DPR", correct, groups, [None] * 4, confidence=confidence, num_resamples=50)
        report = EvaluationReport("SFT", ["DPR"], ["demo"], accuracy=[accuracy], settings={"confidence": confidence})
        markdown = results_markdown(report)
        assert f"| Method | Embedded task win rate vs SFT % ({label}) |" in markdown
        assert f"| Method | accuracy % ({label}) |" in markdown
        assert markdown.count("% CI") == 2
