"""String prompts (`prompt` files: held-out `prompt` + `answer`, `prompt` + `completion`) reach π_SFT as it was trained
to read them, in DPR, the preview, the evaluation and the heatmap alike: one user turn of the chat template for an SFT
on `messages`, raw text for an SFT on string prompt/completion (TRL's own reading), and raw text with a warning when no
`trl-dpr sft` record says which. The expected token ids are computed here with the tokenizer, not with trl_dpr's `render_prompts`."""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import Dataset
from trl import ModelConfig, SFTConfig

from trl_dpr.data import prompts_for_rl, string_prompts_as_chat
from trl_dpr.reference_manifest import sft_trained_on_messages
from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

from ..conftest import dpr_config, save_sft_output

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [f"Convert {km} km to meters." for km in (5, 12, 79, 140)]
DEMONSTRATION = "{km} km = {km} x 1000 m = {m} m. The answer is {m}."


def demonstrations(form: str) -> list[dict]:
    rows = []
    for question in QUESTIONS:
        km = int(question.split()[1])
        answer = DEMONSTRATION.format(km=km, m=km * 1000)
        if form == "messages":
            rows.append(
                {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}
            )
        else:
            rows.append({"prompt": question, "completion": answer})
    return rows


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture(scope="module")
def sft_outputs(tmp_path_factory):
    """`trl-dpr sft`'s stage (run_sft) for 2 steps of the embedded tiny Llama, on `messages` and on string
    prompt/completion files; plus the held-out `prompt` + `answer` file. `{form: folder}`, `held_out`."""
    folder = tmp_path_factory.mktemp("string-prompts")
    outputs = {}
    for form in ("messages", "prompt_completion"):
        run_sft(
            SFTScriptArguments(dataset_name=write_jsonl(folder / f"{form}.jsonl", demonstrations(form))),
            SFTConfig(
                output_dir=str(folder / f"sft-{form}"),
                max_steps=2,
                per_device_train_batch_size=4,
                max_length=64,
                bf16=False,
                use_cpu=True,
                report_to="none",
                save_strategy="no",
                seed=0,
            ),
            ModelConfig(model_name_or_path="trl_dpr/embedded-tiny-llama", dtype="float32"),
        )
        outputs[form] = str(folder / f"sft-{form}")
    held_out = [{"prompt": q, "answer": str(int(q.split()[1]) * 1000)} for q in QUESTIONS]
    return outputs, write_jsonl(folder / "held_out.jsonl", held_out)


def expected_ids(sft_path: str, form: str) -> set[tuple[int, ...]]:
    """Each question's ids as π_SFT was trained to read it: its chat template around one user turn, or the text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sft_path)
    if form == "messages":
        return {
            tuple(
                tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)[
                    "input_ids"
                ]
            )
            for q in QUESTIONS
        }
    return {tuple(tokenizer(q)["input_ids"]) for q in QUESTIONS}


def test_the_sft_stage_records_whether_it_trained_on_messages_or_on_raw_text(sft_outputs, tmp_path, tokenizer):
    outputs, _ = sft_outputs
    assert sft_trained_on_messages(outputs["messages"]) is True
    assert sft_trained_on_messages(outputs["prompt_completion"]) is False
    assert sft_trained_on_messages(save_sft_output(tmp_path / "elsewhere", tokenizer)) is None  # no record


def prompt_ids_trained_on(trainer) -> list[tuple[int, ...]]:
    """Train `trainer` and return the prompt ids of every row its loss saw (what DPR generated from)."""
    seen = []
    compute_loss = trainer._compute_loss

    def recording(model, inputs):
        for ids, mask in zip(inputs["prompt_ids"], inputs["prompt_mask"]):
            seen.append(tuple(ids[mask.bool()].tolist()))
        return compute_loss(model, inputs)

    trainer._compute_loss = recording
    trainer.train()
    return seen


@pytest.mark.parametrize("form", ["messages", "prompt_completion"])
def test_dpr_samples_from_string_prompts_as_its_sft_was_trained_to_read_them(sft_outputs, tmp_path, form):
    """The prompt ids DPR generates from (what its loss sees) for the held-out `prompt` + `answer` file."""
    from trl_dpr.running.trainers import DPRRunTrainer

    outputs, held_out = sft_outputs
    prompts = prompts_for_rl(Dataset.from_json(held_out), "held_out")
    trainer = DPRRunTrainer(
        model=None, reward_model=outputs[form], args=dpr_config(tmp_path, max_steps=1), train_dataset=prompts
    )
    seen = prompt_ids_trained_on(trainer)
    assert seen and set(seen) <= expected_ids(outputs[form], form)


def mixed_prompts_file(path) -> str:
    """The held-out questions, messages first, then strings and messages in turn (`datasets` reads it as `Json`)."""
    rows = [
        {"prompt": q if i % 2 else [{"role": "user", "content": q}], "answer": str(int(q.split()[1]) * 1000)}
        for i, q in enumerate(QUESTIONS)
    ]
    return write_jsonl(path, rows)


def test_a_prompt_column_mixing_strings_and_messages_reaches_an_sft_trained_on_messages_as_user_turns(
    sft_outputs, tmp_path, caplog
):
    """Every row is read, not the first alone (a messages first row used to leave the strings raw: a crash in TRL)."""
    from trl_dpr.running.trainers import DPRRunTrainer

    outputs, _ = sft_outputs
    prompts = prompts_for_rl(Dataset.from_json(mixed_prompts_file(tmp_path / "mixed.jsonl")), "mixed")
    with caplog.at_level(logging.WARNING, logger="trl_dpr.data"):
        trainer = DPRRunTrainer(
            model=None, reward_model=outputs["messages"], args=dpr_config(tmp_path, max_steps=1), train_dataset=prompts
        )
    assert [type(p) for p in trainer.train_dataset["prompt"]] == [list] * 4
    assert sum("as one user turn of its chat template" in m for m in caplog.messages) == 1
    seen = prompt_ids_trained_on(trainer)
    assert seen and set(seen) <= expected_ids(outputs["messages"], "messages")


def test_a_prompt_column_mixing_strings_and_messages_is_refused_before_a_model_loads_without_a_messages_record(
    sft_outputs, tmp_path, monkeypatch
):
    import trl_dpr.trainer

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(trl_dpr.trainer, "load_reward_model", no_loading)
    outputs, _ = sft_outputs
    prompts = prompts_for_rl(Dataset.from_json(mixed_prompts_file(tmp_path / "mixed.jsonl")), "mixed")
    with pytest.raises(ValueError, match=r"^train_dataset mixes string prompts and chat messages, and no `trl-dpr sf"):
        trl_dpr.trainer.DensePathTrainer(
            reward_model=outputs["prompt_completion"], args=dpr_config(tmp_path), train_dataset=prompts
        )


def test_an_iterable_dataset_of_string_prompts_reaches_an_sft_trained_on_messages_as_user_turns(sft_outputs, tmp_path):
    """TRL's GRPOTrainer takes an IterableDataset; its string prompts (and an IterableDatasetDict's) are mapped too."""
    from datasets import IterableDataset, IterableDatasetDict

    from trl_dpr.running.trainers import DPRRunTrainer

    outputs, _ = sft_outputs

    def rows():
        yield from ({"prompt": q} for q in QUESTIONS)

    trainer = DPRRunTrainer(
        model=None,
        reward_model=outputs["messages"],
        args=dpr_config(tmp_path, max_steps=1),
        train_dataset=IterableDataset.from_generator(rows),
        eval_dataset=IterableDatasetDict({"held_out": IterableDataset.from_generator(rows)}),
    )
    assert [row["prompt"] for row in trainer.eval_dataset["held_out"]] == [
        [{"role": "user", "content": q}] for q in QUESTIONS
    ]
    seen = prompt_ids_trained_on(trainer)
    assert seen and set(seen) <= expected_ids(outputs["messages"], "messages")


def test_run_dpr_reads_the_sft_record_of_its_sft_path_when_given_a_reward_model_without_one(
    sft_outputs, tmp_path, monkeypatch
):
    """`run_dpr(reward_model=...)` with a scorer that names no path (built in memory): π_SFT's record still decides."""
    from trl import ModelConfig

    from trl_dpr import CheckpointRewardModel
    from trl_dpr.running.pipeline import DPRScriptArguments, run_dpr
    from trl_dpr.running.trainers import DPRRunTrainer

    outputs, held_out = sft_outputs
    reward_model = CheckpointRewardModel.from_pretrained(outputs["messages"])
    reward_model.sft_model_name_or_path = None  # as a scorer built in memory has it
    seen = []
    compute_loss = DPRRunTrainer._compute_loss

    def recording(self, model, inputs):
        for ids, mask in zip(inputs["prompt_ids"], inputs["prompt_mask"]):
            seen.append(tuple(ids[mask.bool()].tolist()))
        return compute_loss(self, model, inputs)

    monkeypatch.setattr(DPRRunTrainer, "_compute_loss", recording)
    run_dpr(
        DPRScriptArguments(dataset_name=held_out),
        dpr_config(tmp_path, max_steps=1),
        ModelConfig(model_name_or_path=outputs["messages"], dtype="float32"),
        reward_model=reward_model,
    )
    assert seen and set(seen) <= expected_ids(outputs["messages"], "messages")


@pytest.mark.parametrize("form", ["messages", "prompt_completion"])
def test_the_preview_samples_string_prompts_as_the_sft_was_trained_to_read_them(
    sft_outputs, tmp_path, monkeypatch, form
):
    from trl_dpr.analysis.preview import PreviewConfig, run_preview
    from trl_dpr.evaluation import sampling

    outputs, held_out = sft_outputs
    seen = []
    sample_completions = sampling.sample_completions

    def recording(*args, **kwargs):
        samples = sample_completions(*args, **kwargs)
        seen.extend(tuple(s.prompt_ids) for s in samples)
        return samples

    monkeypatch.setattr(sampling, "sample_completions", recording)
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"),
        dataset_name=held_out,
        dataset_split="train",
        num_prompts=4,
        samples_per_prompt=2,
        min_ess=1.0,  # two samples: what is sampled is the point here, not which kl_coef is trusted
        max_new_tokens=4,
        batch_size=8,
        variants={"DPR": {}},
        kl_coefs=[float("inf"), 1.0],
        answer_pattern=r"The answer is (-?[0-9]+)",
        bootstrap_resamples=20,
        plot=False,
    )
    run_preview(config, outputs[form], {"dtype": "float32"}, show_progress=False)
    assert len(seen) == 8 and set(seen) == expected_ids(outputs[form], form)


@pytest.mark.parametrize("form", ["messages", "prompt_completion"])
def test_the_evaluation_answers_string_prompts_as_the_baseline_sft_was_trained_to_read_them(
    sft_outputs, tmp_path, monkeypatch, form
):
    """An SFT on string prompt/completion answers the raw text (the evaluation used to wrap it in a user turn)."""
    from trl_dpr.evaluation import EvaluationConfig, run_evaluation, sampling

    outputs, held_out = sft_outputs
    seen = []
    sample_completions = sampling.sample_completions

    def recording(*args, **kwargs):
        samples = sample_completions(*args, **kwargs)
        seen.extend(tuple(s.prompt_ids) for s in samples)
        return samples

    monkeypatch.setattr(sampling, "sample_completions", recording)
    config = EvaluationConfig(
        output_dir=str(tmp_path / "eval"),
        baseline=f"SFT={outputs[form]}",
        candidates=[f"DPR={outputs[form]}"],
        benchmarks=["jsonl"],
        jsonl_path=held_out,
        judge="exact",
        answer_pattern=r"The answer is (-?[0-9]+)",
        max_new_tokens=4,
        generation_backend="transformers",
        dtype="float32",
        device="cpu",
        bootstrap_resamples=20,
    )
    run_evaluation(config, show_progress=False)
    assert len(seen) == 8 and set(seen) == expected_ids(outputs[form], form)  # 4 prompts x 2 models


def no_record_warning(stage: str, readers: str, source: str) -> str:
    return (
        f"{stage}: string prompts go to {readers} as raw text because {source} has no `trl-dpr sft` record (a Hub or "
        "Python SFT, or a `trl-dpr sft` from before this version); for a chat model write them as messages "
        '([{"role": "user", "content": ...}]), or add "conversational": true to its sft_complete.json '
        "(trl_dpr.reference_manifest.mark_sft_complete writes one for a Python SFT)."
    )


def test_string_prompts_go_as_raw_text_with_a_warning_when_no_sft_record_says_how_it_was_trained(
    tmp_path, tokenizer, caplog
):
    sft = save_sft_output(tmp_path / "trained-elsewhere", tokenizer)  # no sft_complete.json; a chat template
    with caplog.at_level(logging.WARNING, logger="trl_dpr.data"):
        assert string_prompts_as_chat(str(sft), tokenizer, ["Convert 5 km to meters."], "train_dataset") is False
    assert caplog.messages == [no_record_warning("train_dataset", "π_SFT", f"π_SFT ({sft})")]


def test_the_evaluation_says_once_per_run_that_its_string_prompts_go_to_every_model_as_raw_text(
    tmp_path, tokenizer, caplog
):
    """`trl-dpr dpr` reads the evaluation's prompts before training (the context check) and again to evaluate."""
    from trl_dpr.evaluation import EvaluationConfig
    from trl_dpr.evaluation.runner import check_answers_fit_context

    sft = save_sft_output(tmp_path / "trained-elsewhere", tokenizer)
    held_out = write_jsonl(tmp_path / "held_out.jsonl", [{"prompt": q, "answer": "1"} for q in QUESTIONS])
    config = EvaluationConfig(
        output_dir=str(tmp_path / "eval"),
        baseline=f"SFT={sft}",
        candidates=[f"DPR={sft}"],
        benchmarks=["jsonl"],
        jsonl_path=held_out,
        judge="exact",
        answer_pattern=r"The answer is (-?[0-9]+)",
        max_new_tokens=4,
    )
    with caplog.at_level(logging.WARNING, logger="trl_dpr.data"):
        for _ in range(2):
            check_answers_fit_context(config, {"SFT": str(sft)})
    assert caplog.messages == [no_record_warning("jsonl", "every model", f"baseline SFT ({sft})")]


def test_a_string_prompt_to_an_sft_trained_on_messages_is_said_in_one_line(sft_outputs, tokenizer, caplog):
    outputs, _ = sft_outputs
    with caplog.at_level(logging.WARNING, logger="trl_dpr.data"):
        assert string_prompts_as_chat(outputs["messages"], tokenizer, ["hi", "ho"], "preview") is True
        assert (
            string_prompts_as_chat(outputs["messages"], tokenizer, [[{"role": "user", "content": "hi"}]], "x") is False
        )
    assert caplog.messages == [
        f"preview: π_SFT ({outputs['messages']}) was trained on chat messages, so each string prompt goes to it as "
        "one user turn of its chat template."
    ]


def test_an_sft_pushed_to_the_hub_says_how_it_was_trained_through_its_pushed_record(sft_outputs, monkeypatch):
    import huggingface_hub

    outputs, _ = sft_outputs
    fetched = []

    def hub_download(repo_id, filename, **kwargs):  # the Hub copy of the pushed folder
        fetched.append((repo_id, filename))
        if repo_id != "me/my-sft":
            raise huggingface_hub.errors.LocalEntryNotFoundError(f"{repo_id}: not cached, and offline")
        return f"{outputs['messages']}/{filename}"

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub_download)
    assert sft_trained_on_messages("me/my-sft") is True
    assert sft_trained_on_messages("someone/else") is None
    assert fetched == [("me/my-sft", "sft_complete.json"), ("someone/else", "sft_complete.json")]


def test_the_hub_record_is_read_at_the_revision_and_with_the_token_pi_sft_loads_with(
    sft_outputs, tmp_path, monkeypatch
):
    """The trainer reads `sft_complete.json` (here: to accept a column mixing strings and messages) of the π_SFT its
    `model_init_kwargs` load (`run_dpr` puts the recipe's `model_revision` there), not the Hub repo's default branch."""
    import huggingface_hub

    import trl_dpr.trainer

    outputs, _ = sft_outputs
    fetched = []

    def hub_download(repo_id, filename, revision=None, token=None, **kwargs):
        fetched.append((repo_id, filename, revision, token))
        return f"{outputs['messages']}/{filename}"

    class Loaded(Exception):
        pass

    def stop(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub_download)
    monkeypatch.setattr(trl_dpr.trainer, "load_reward_model", stop)
    assert sft_trained_on_messages("me/my-sft", revision="v2", token="hf_x") is True
    args = dpr_config(tmp_path, model_init_kwargs={"revision": "v1", "token": "hf_y"})
    prompts = prompts_for_rl(Dataset.from_json(mixed_prompts_file(tmp_path / "mixed.jsonl")), "mixed")
    with pytest.raises(Loaded):  # a mixed column is accepted: the record says messages
        trl_dpr.trainer.DensePathTrainer(reward_model="me/my-sft", args=args, train_dataset=prompts)
    assert fetched == [
        ("me/my-sft", "sft_complete.json", "v2", "hf_x"),
        ("me/my-sft", "sft_complete.json", "v1", "hf_y"),
    ]


def test_the_heatmap_scores_a_string_prompt_as_raw_text_for_an_sft_trained_on_it(sft_outputs, tmp_path):
    """`trl-dpr heatmap` wraps a string prompt in a user turn by default; not for an SFT on raw text."""
    from html.parser import HTMLParser

    from trl_dpr import CheckpointRewardModel
    from trl_dpr.scripts.heatmap import main

    outputs, _ = sft_outputs
    sft = outputs["prompt_completion"]
    response = "5 km = 5 x 1000 m = 5000 m."
    output = str(tmp_path / "rewards")
    (written,) = main(
        ["--sft", sft, "--prompt", QUESTIONS[0], "--response", response, "--formats", "html", "--output", output]
    )

    class Rewards(HTMLParser):
        values = []

        def handle_starttag(self, tag, attrs):
            self.values += [float(v) for k, v in attrs if k == "data-reward"]

    parser = Rewards()
    parser.feed(written.read_text())
    model = CheckpointRewardModel.from_pretrained(sft)
    raw, wrapped = (
        model.score_text([prompt], [response])[0]["rewards"]
        for prompt in (QUESTIONS[0], [{"role": "user", "content": QUESTIONS[0]}])
    )
    assert parser.values == pytest.approx(raw) and raw != pytest.approx(wrapped)


def test_the_heatmap_scores_a_string_prompt_as_raw_text_with_the_one_warning_when_no_sft_record_says_how(
    tmp_path, tokenizer
):
    """`trl-dpr heatmap` on an SFT without a `trl-dpr sft` record (with a chat template): the prompt is raw text, as
    DPR, the preview and the evaluation read it, said in the same one line; each reward is log π_SFT − log π_ref of
    the response's token after the prompt's own tokenization (its special tokens, no chat template), computed here."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sft = save_sft_output(tmp_path / "trained-elsewhere", tokenizer)  # no sft_complete.json; a chat template
    question, response = QUESTIONS[0], "5 km = 5 x 1000 m = 5000 m."
    heatmap = ["heatmap", "--sft", str(sft), "--prompt", question, "--response", response, "--formats", "html"]
    # A new interpreter, as the console script runs: its warnings reach stderr as a user sees them.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "trl_dpr.running.cli", *heatmap, "--output", str(tmp_path / "rewards")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "raw text because" in line]
    assert warnings == [no_record_warning("heatmap", "π_SFT", f"π_SFT ({sft})")]
    shown = [float(value) for value in re.findall(r'data-reward="([^"]+)"', (tmp_path / "rewards.html").read_text())]

    tok = AutoTokenizer.from_pretrained(sft)
    assert tok.chat_template  # so the rule, not a missing template, decides
    answer = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]

    def rewards(prompt_ids: list[int]) -> list[float]:
        ids = torch.tensor([prompt_ids + answer])
        with torch.no_grad():
            log_probs = [
                AutoModelForCausalLM.from_pretrained(path).float()(ids).logits.double().log_softmax(-1)[0]
                for path in (sft, sft / "dpr_reference")
            ]
        start = len(prompt_ids)
        return [
            float(log_probs[0][start + t - 1, token] - log_probs[1][start + t - 1, token])
            for t, token in enumerate(answer)
        ]

    raw = rewards(tok(question)["input_ids"])
    as_turn = rewards(
        list(tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)["input_ids"])
    )
    assert shown == pytest.approx(raw, abs=1e-4) and as_turn != pytest.approx(raw, abs=1e-4)
