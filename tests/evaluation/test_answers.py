"""Answers are cached one JSONL line per (model, prompt id, turn): an interrupted run generates only what is missing."""

import json

import pytest
import torch

from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.evaluation import EvalPrompt, TransformersAnswerGenerator, answer_prompts, length_stats
from trl_dpr.evaluation.answers import answer_cache, weights_fingerprint
from trl_dpr.evaluation.cache import JsonlCache
from trl_dpr.evaluation.sampling import generate_answers


class CountingGenerator:
    """Answers `answer-to:<last user message>` and records every conversation it is asked to answer."""

    def __init__(self, settings=None, fail_after_calls=None):
        self.settings = settings or {"model_path": "fake", "temperature": 0.7}
        self.conversations = []
        self.calls = 0
        self.fail_after_calls = fail_after_calls

    def generate(self, conversations):
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.conversations.extend(conversations)
        return [f"answer-to:{c[-1]['content']}" for c in conversations]


PROMPTS = [EvalPrompt(str(i), (f"question {i}",)) for i in range(6)]


def test_a_rerun_generates_only_the_missing_prompts(tmp_path):
    path = tmp_path / "answers" / "SFT.jsonl"
    first = CountingGenerator()
    answer_prompts(first, "SFT", PROMPTS[:3], answer_cache(path, first), show_progress=False)
    assert len(first.conversations) == 3

    second = CountingGenerator()
    answers = answer_prompts(second, "SFT", PROMPTS, answer_cache(path, second), show_progress=False)
    assert [c[-1]["content"] for c in second.conversations] == ["question 3", "question 4", "question 5"]
    assert answers == {(str(i), 0): f"answer-to:question {i}" for i in range(6)}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["model"], r["prompt_id"], r["turn"]) for r in lines] == [("SFT", str(i), 0) for i in range(6)]

    third = CountingGenerator()
    answer_prompts(third, "SFT", PROMPTS, answer_cache(path, third), show_progress=False)
    assert third.calls == 0  # everything cached: the model is never asked


def test_an_interrupted_run_keeps_every_finished_chunk(tmp_path):
    path = tmp_path / "answers.jsonl"
    interrupted = CountingGenerator(fail_after_calls=2)
    with pytest.raises(KeyboardInterrupt):
        answer_prompts(interrupted, "DPR", PROMPTS, answer_cache(path, interrupted), chunk_size=2, show_progress=False)
    assert len(path.read_text().splitlines()) == 4  # two chunks of two were written before the interruption

    resumed = CountingGenerator()
    answer_prompts(resumed, "DPR", PROMPTS, answer_cache(path, resumed), chunk_size=2, show_progress=False)
    assert [c[-1]["content"] for c in resumed.conversations] == ["question 4", "question 5"]


def test_a_line_cut_by_a_crash_is_dropped_and_regenerated(tmp_path):
    path = tmp_path / "answers.jsonl"
    generator = CountingGenerator()
    answer_prompts(generator, "SFT", PROMPTS[:2], answer_cache(path, generator), show_progress=False)
    with open(path, "a") as f:
        f.write('{"model": "SFT", "prompt_id": "2", "turn": 0, "answ')  # a write cut mid-line
    resumed = CountingGenerator()
    answers = answer_prompts(resumed, "SFT", PROMPTS[:3], answer_cache(path, resumed), show_progress=False)
    assert [c[-1]["content"] for c in resumed.conversations] == ["question 2"]
    assert answers[("2", 0)] == "answer-to:question 2"
    assert all(json.loads(line) for line in path.read_text().splitlines())  # the file is whole again


def test_a_corrupt_line_in_the_middle_is_an_error_naming_it(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text(
        '{"model": "SFT", "prompt_id": "0", "turn": 0, "answer": "a"}\nnot json\n'
        '{"model": "SFT", "prompt_id": "1", "turn": 0, "answer": "b"}\n'
    )
    with pytest.raises(ValueError, match="answers.jsonl:2 is not valid JSON"):
        JsonlCache(path, ("model", "prompt_id", "turn"))


def test_answers_made_with_other_settings_are_not_reused(tmp_path):
    path = tmp_path / "answers.jsonl"
    generator = CountingGenerator(settings={"model_path": "runs/sft", "temperature": 0.7})
    answer_prompts(generator, "SFT", PROMPTS[:1], answer_cache(path, generator), show_progress=False)
    other = CountingGenerator(settings={"model_path": "runs/sft", "temperature": 1.0})
    with pytest.raises(ValueError, match=r"temperature: 0.7 in the file, 1.0 now.*delete the file"):
        answer_cache(path, other)


def test_second_turns_are_generated_from_the_models_own_first_answers(tmp_path):
    prompts = [EvalPrompt("81", ("Write a haiku.", "Translate it.")), EvalPrompt("82", ("Name a colour.",))]
    generator = CountingGenerator()
    answers = answer_prompts(
        generator, "SFT", prompts, answer_cache(tmp_path / "a.jsonl", generator), show_progress=False
    )
    assert set(answers) == {("81", 0), ("81", 1), ("82", 0)}
    second_turn = generator.conversations[-1]
    assert second_turn == [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "answer-to:Write a haiku."},
        {"role": "user", "content": "Translate it."},
    ]


def test_transformers_generation_is_seeded_batched_and_leaves_the_callers_random_state(tokenizer):
    model = build_tiny_causal_lm(tokenizer, seed=0)
    conversations = [[{"role": "user", "content": f"What is {i}+{i}?"}] for i in range(5)]
    generator = TransformersAnswerGenerator(model, tokenizer, temperature=0.7, max_new_tokens=5, batch_size=2, seed=3)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first = generator.generate(conversations)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert first == generator.generate(conversations) and len(first) == 5
    assert generator.settings == {
        "model_path": generator.settings["model_path"],
        "weights": None,  # an in-memory model: no saved weights to fingerprint
        "backend": "transformers",
        "temperature": 0.7,
        "max_new_tokens": 5,
        "seed": 3,
    }
    greedy = generate_answers(
        model, tokenizer, conversations[:1], temperature=0.0, max_new_tokens=5, show_progress=False
    )
    assert greedy == generate_answers(
        model, tokenizer, conversations[:1], temperature=0.0, max_new_tokens=5, seed=99, show_progress=False
    )


def test_length_statistics_in_words_and_tokens(tokenizer):
    stats = length_stats(["the cat sat", "hello", "the cat sat on the mat"], tokenizer)
    assert (stats.n, stats.mean_words, stats.median_words) == (3, pytest.approx(10 / 3), 3)
    token_counts = [
        len(tokenizer(a, add_special_tokens=False)["input_ids"])
        for a in ["the cat sat", "hello", "the cat sat on the mat"]
    ]
    assert stats.mean_tokens == pytest.approx(sum(token_counts) / 3)
    assert stats.median_tokens == sorted(token_counts)[1]
    with pytest.raises(ValueError, match="No answers"):
        length_stats([])


def test_sampling_ignores_the_checkpoints_own_generation_defaults(tokenizer):
    """Samples must come from π itself (the preview and DPR's rollouts assume it), whatever generation_config says."""
    from trl_dpr.evaluation.sampling import sample_completions

    model = build_tiny_causal_lm(tokenizer, seed=3)
    prompts = ["What is 12+7?"] * 24
    plain = sample_completions(model, tokenizer, prompts, temperature=1.0, max_new_tokens=4, seed=5)
    model.generation_config.top_k = 1  # would make every sample the greedy one
    model.generation_config.repetition_penalty = 3.0
    again = sample_completions(model, tokenizer, prompts, temperature=1.0, max_new_tokens=4, seed=5)
    assert [s.completion_ids for s in again] == [s.completion_ids for s in plain]
    assert len({tuple(s.completion_ids) for s in plain}) > 1


def test_answers_of_other_weights_at_the_same_path_are_generated_again_and_replace_the_file(tmp_path, caplog):
    path = tmp_path / "answers.jsonl"
    old = CountingGenerator(settings={"model_path": "runs/dpr", "weights": "aaa", "temperature": 0.7})
    answer_prompts(old, "DPR", PROMPTS[:3], answer_cache(path, old), show_progress=False)
    before = path.read_bytes()

    retrained = CountingGenerator(settings={"model_path": "runs/dpr", "weights": "bbb", "temperature": 0.7})
    with caplog.at_level("WARNING"):
        cache = answer_cache(path, retrained)
    assert "was made with other weights (weights: 'aaa' in the file, 'bbb' now)" in caplog.text
    assert len(cache) == 0 and path.read_bytes() == before  # nothing reused; the file is kept until new answers come
    answer_prompts(retrained, "DPR", PROMPTS[:2], cache, show_progress=False)
    assert len(retrained.conversations) == 2
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["prompt_id"], r["settings"]["weights"]) for r in rows] == [("0", "bbb"), ("1", "bbb")]


def test_other_weights_and_another_setting_are_still_refused(tmp_path):
    path = tmp_path / "answers.jsonl"
    old = CountingGenerator(settings={"model_path": "runs/dpr", "weights": "aaa", "temperature": 0.7})
    answer_prompts(old, "DPR", PROMPTS[:1], answer_cache(path, old), show_progress=False)
    other = CountingGenerator(settings={"model_path": "runs/dpr", "weights": "bbb", "temperature": 1.0})
    with pytest.raises(ValueError, match=r"temperature: 0.7 in the file, 1.0 now.*delete the file"):
        answer_cache(path, other)


def test_answers_of_an_earlier_trl_dpr_without_weights_are_reused_and_pinned_to_the_current_weights(tmp_path, caplog):
    """An answer file written before the weights fingerprint existed has no "weights" key: its records are the current
    weights' (nothing is generated, no warning), and the file is rewritten with them so a later retraining is seen."""
    path = tmp_path / "answers.jsonl"
    earlier = {"model_path": "runs/dpr", "temperature": 0.7}
    rows = [
        {"model": "DPR", "prompt_id": str(i), "turn": 0, "answer": f"old {i}", "settings": earlier} for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    now = CountingGenerator(settings={**earlier, "weights": "aaa"})
    with caplog.at_level("WARNING"):
        answers = answer_prompts(now, "DPR", PROMPTS[:3], answer_cache(path, now), show_progress=False)
    assert answers == {(str(i), 0): f"old {i}" for i in range(3)} and now.calls == 0 and caplog.text == ""
    pinned = [json.loads(line) for line in path.read_text().splitlines()]
    assert pinned == [{**r, "settings": {**earlier, "weights": "aaa"}} for r in rows]

    retrained = CountingGenerator(settings={**earlier, "weights": "bbb"})
    with caplog.at_level("WARNING"):
        assert len(answer_cache(path, retrained)) == 0
    assert "was made with other weights (weights: 'aaa' in the file, 'bbb' now)" in caplog.text


def test_an_earlier_file_without_weights_and_another_setting_is_still_refused(tmp_path):
    path = tmp_path / "answers.jsonl"
    record = {"model": "DPR", "prompt_id": "0", "turn": 0, "answer": "a", "settings": {"temperature": 0.7}}
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=r"\(temperature: 0.7 in the file, 1.0 now\)"):
        answer_cache(path, CountingGenerator(settings={"temperature": 1.0, "weights": "aaa"}))


@pytest.mark.parametrize("renewed_by", [(), ("weights",)])
def test_a_setting_absent_in_the_file_and_none_now_is_the_same_setting(tmp_path, caplog, renewed_by):
    """{"weights": None} (a Hub id whose commit is unknown) and a record without the key are the same settings: kept,
    whatever the cache renews, not dropped as stale."""
    path = tmp_path / "records.jsonl"
    line = json.dumps({"id": "0", "value": 1, "settings": {"judge": "exact"}}) + "\n"
    path.write_text(line)
    with caplog.at_level("WARNING"):
        cache = JsonlCache(path, ("id",), settings={"judge": "exact", "weights": None}, renewed_by=renewed_by)
    assert cache.get(("0",))["value"] == 1 and caplog.text == ""
    assert path.read_text() == line  # nothing to pin: a known fingerprint later is adopted, not taken for a change


def save_tiny_model(path, tokenizer, seed=0):
    build_tiny_causal_lm(tokenizer, seed=seed).save_pretrained(path)
    tokenizer.save_pretrained(path)


def test_the_weights_fingerprint_follows_the_weights_not_the_card_or_results(tmp_path, tokenizer):
    save_tiny_model(tmp_path / "dpr", tokenizer)
    first = weights_fingerprint(str(tmp_path / "dpr"))
    (tmp_path / "dpr" / "README.md").write_text("a model card")  # written after the evaluation: not the weights
    (tmp_path / "dpr" / "eval_results.json").write_text("{}")
    (tmp_path / "dpr" / "checkpoint-2").mkdir()
    (tmp_path / "dpr" / "checkpoint-2" / "model.safetensors").write_bytes(b"x")
    assert weights_fingerprint(str(tmp_path / "dpr")) == first
    save_tiny_model(tmp_path / "dpr", tokenizer, seed=1)
    assert weights_fingerprint(str(tmp_path / "dpr")) != first


def test_an_adapters_fingerprint_changes_with_its_base(tmp_path, tokenizer):
    save_tiny_model(tmp_path / "sft", tokenizer)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "sft")}))
    (adapter / "adapter_model.safetensors").write_bytes(b"lora")
    first = weights_fingerprint(str(adapter))
    save_tiny_model(tmp_path / "sft", tokenizer, seed=1)  # the SFT retrained under the same adapter
    assert weights_fingerprint(str(adapter)) != first


def test_a_hub_ids_fingerprint_is_its_cached_commit_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants

    snapshot = tmp_path / "models--owner--tiny" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--owner--tiny" / "refs").mkdir()
    (tmp_path / "models--owner--tiny" / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert weights_fingerprint("owner/tiny") == "hub:0123abc"
    assert weights_fingerprint("owner/not-cached") is None


def test_only_what_is_shaped_like_a_hub_id_is_looked_up_on_the_hub(monkeypatch):
    """A folder that is not there (moved, deleted; absolute, relative, with spaces) has unknown weights, not an error
    from the Hub client, and costs no Hub lookup."""
    import huggingface_hub
    from huggingface_hub import constants

    asked = []
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo, **kw: asked.append(repo) or 1 / 0)
    for gone in ("/no/such/runs/sft", "../moved/sft", "runs/x/sft", "a folder/sft", "~/sft"):
        assert weights_fingerprint(gone) is None
    assert asked == []
    assert weights_fingerprint("owner/never-downloaded") is None and asked == ["owner/never-downloaded"]


def test_an_adapter_whose_base_folder_is_gone_has_unknown_weights(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "moved")}))
    (adapter / "adapter_model.safetensors").write_bytes(b"lora")
    assert weights_fingerprint(str(adapter)) is None


def test_answers_stand_while_the_weights_cannot_be_told(tmp_path, caplog):
    """None now (the model's folder, or an adapter's base, moved away): the cached answers are read back as they are,
    not taken for another model's; they are compared again once the weights are back."""
    path = tmp_path / "answers.jsonl"
    made = CountingGenerator(settings={"model_path": "runs/dpr", "weights": "aaa", "temperature": 0.7})
    answer_prompts(made, "DPR", PROMPTS[:2], answer_cache(path, made), show_progress=False)
    before = path.read_bytes()
    unknown = CountingGenerator(settings={"model_path": "runs/dpr", "weights": None, "temperature": 0.7})
    with caplog.at_level("WARNING"):
        answers = answer_prompts(unknown, "DPR", PROMPTS[:2], answer_cache(path, unknown), show_progress=False)
    assert answers == {("0", 0): "answer-to:question 0", ("1", 0): "answer-to:question 1"}
    assert unknown.calls == 0 and caplog.text == "" and path.read_bytes() == before
