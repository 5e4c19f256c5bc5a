"""Hub pushes, offline: what a push uploads, that an SFT push loads as the reward model anywhere, the DPR model card,
and that no secret or machine-local path is ever pushed."""

import doctest
import importlib
import json
import os
import re
import shutil
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
import transformers.trainer
import yaml
from datasets import Dataset
from huggingface_hub import HfApi
from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS
from trl import ModelConfig, SFTConfig, SFTTrainer

import trl_dpr.running.push
from trl_dpr import CheckpointRewardModel, DensePathConfig
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.running.checkpointing import AtomicCheckpointsMixin
from trl_dpr.running.merge import merge_adapter_folder
from trl_dpr.running.model_card import add_evaluation_to_card
from trl_dpr.running.pipeline import (
    DPRScriptArguments,
    SafeSFTTrainer,
    SFTScriptArguments,
    evaluate_against_sft,
    run_dpr,
    run_sft,
)
from trl_dpr.running.push import (
    TRANSFORMERS_IGNORE_PATTERNS,
    copy_files_to_push,
    defer_push_to_hub,
    files_to_push,
    portability_problems,
    push_folder,
    push_trainer_output,
)
from trl_dpr.running.secret_scan import scan_for_secrets, secrets_from_environment

from ..conftest import demo_evaluation_yaml

EMBEDDED = "trl_dpr/embedded-demo"
COMMON = dict(bf16=False, use_cpu=True, report_to="none", save_strategy="no", seed=0, gradient_checkpointing=False)
QUESTION = [{"role": "user", "content": "Mia has 23 apples. She gets 5 more. How many apples does Mia have now?"}]
ANSWER = "Mia starts with 23 apples and gets 5 more. 23 + 5 = 28. The answer is 28."


def tiny_sft(root, use_peft: bool) -> str:
    """recipes/sft.py's stage on the embedded tiny Llama: 4 steps, π_ref after 2."""
    return run_sft(
        SFTScriptArguments(dataset_name=EMBEDDED, num_train_samples=32),
        SFTConfig(
            output_dir=str(root / "sft"),
            max_steps=4,
            per_device_train_batch_size=8,
            learning_rate=1e-3,
            max_length=128,
            **COMMON,
        ),
        ModelConfig(
            model_name_or_path="trl_dpr/embedded-tiny-llama",
            dtype="float32",
            use_peft=use_peft,
            lora_r=4,
            lora_alpha=8,
        ),
    )


@pytest.fixture(scope="module")
def sft_full(tmp_path_factory):
    return tiny_sft(tmp_path_factory.mktemp("full"), use_peft=False)


@pytest.fixture(scope="module")
def sft_lora(tmp_path_factory):
    return tiny_sft(tmp_path_factory.mktemp("lora"), use_peft=True)


class RecordingApi:
    """Stands in for HfApi offline: records what would be created and committed."""

    def __init__(self):
        self.repos, self.commits, self.uploads = [], [], []

    def create_repo(self, repo_id, **kwargs):
        self.repos.append((repo_id, kwargs))
        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, **kwargs):
        self.commits.append(kwargs)
        return "committed"

    def upload_folder(self, **kwargs):  # what transformers' Trainer calls
        # The selection at call time (a checkpoint push runs while the staged checkpoint still exists).
        kept = [p for p in TRANSFORMERS_IGNORE_PATTERNS if p in kwargs["ignore_patterns"]]
        assert kept == list(kwargs["ignore_patterns"]), kwargs["ignore_patterns"]
        self.uploads.append(
            {
                **kwargs,
                "selected": files_to_push(kwargs["folder_path"], safety_rules=False),
                "safe": files_to_push(kwargs["folder_path"]),
            }
        )
        done = Future()
        done.set_result("uploaded")
        return done


def write_tree(root, names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")


# ---- what a push uploads --------------------------------------------------------------------------------------------


def test_a_push_leaves_out_staged_checkpoints_training_args_and_hub_internals(tmp_path):
    write_tree(
        tmp_path,
        [
            "model.safetensors",
            "README.md",
            "dpr_reference/model.safetensors",
            "dpr_reference.json",
            "runs/events.out.tfevents.1",
            "training_args.bin",
            "_private.txt",
            "checkpoint-2/optimizer.pt",
            ".partial/checkpoint-4/optimizer.pt",
            ".dpr_reference.partial/model.safetensors",
            ".dpr_reference.abc.tmp",
            ".git/HEAD",
            ".cache/huggingface/upload/x.lock",
        ],
    )
    assert set(files_to_push(tmp_path)) == {
        "README.md",
        "dpr_reference.json",
        "dpr_reference/model.safetensors",
        "model.safetensors",
        "runs/events.out.tfevents.1",
    }
    # Transformers' own patterns alone would upload the staged checkpoint, the pickled arguments and temp files.
    assert set(files_to_push(tmp_path, safety_rules=False)) - set(files_to_push(tmp_path)) == {
        ".partial/checkpoint-4/optimizer.pt",
        ".dpr_reference.partial/model.safetensors",
        ".dpr_reference.abc.tmp",
        "training_args.bin",
    }


def test_without_safety_rules_the_selection_is_huggingface_hubs_own(tmp_path):
    write_tree(
        tmp_path, ["a/b/c.json", "_x", "checkpoint-1/y", ".partial/checkpoint-3/z", "training_args.bin", ".git/x"]
    )
    additions = HfApi()._prepare_upload_folder_additions(
        tmp_path, "", ignore_patterns=TRANSFORMERS_IGNORE_PATTERNS + DEFAULT_IGNORE_PATTERNS
    )
    assert files_to_push(tmp_path, safety_rules=False) == [op.path_in_repo for op in additions]


def test_transformers_pushes_with_the_patterns_files_to_push_mirrors(tmp_path, monkeypatch, tokenizer):
    api = RecordingApi()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: api)
    args = transformers.TrainingArguments(
        str(tmp_path / "out"), push_to_hub=True, hub_model_id="me/tiny", report_to="none", use_cpu=True
    )
    trainer = transformers.Trainer(model=build_tiny_causal_lm(tokenizer), args=args, processing_class=tokenizer)
    trainer.push_to_hub()
    assert api.uploads[-1]["ignore_patterns"] == TRANSFORMERS_IGNORE_PATTERNS
    assert "training_args.bin" in api.uploads[-1]["selected"]  # why trl_dpr pushes with its own rules


def test_transformers_checkpoint_pushes_would_upload_the_staged_checkpoint(tmp_path, monkeypatch, tokenizer):
    """With atomic checkpoints, transformers pushes while `checkpoint-N/` is still staged in `.partial/`."""
    api = RecordingApi()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: api)
    rows = [{"prompt": "What is 12+7?", "completion": " 19"}] * 4

    class StagedSFTTrainer(AtomicCheckpointsMixin, SFTTrainer):  # staged checkpoints, transformers' own pushes
        pass

    trainer = StagedSFTTrainer(
        model=build_tiny_causal_lm(tokenizer),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(rows),
        args=SFTConfig(
            output_dir=str(tmp_path / "sft"),
            max_steps=1,
            per_device_train_batch_size=4,
            save_steps=1,
            save_strategy="steps",
            push_to_hub=True,
            hub_model_id="me/tiny",
            bf16=False,
            use_cpu=True,
            report_to="none",
        ),
    )
    trainer.train()
    checkpoint_push = api.uploads[0]
    assert ".partial/checkpoint-1/optimizer.pt" in checkpoint_push["selected"]
    assert not any(name.startswith(".partial/") for name in checkpoint_push["safe"])
    assert "training_args.bin" not in checkpoint_push["safe"]


def test_deferred_pushes_keep_transformers_from_uploading_anything(tmp_path, monkeypatch, tokenizer):
    api = RecordingApi()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: api)
    args = SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=1,
        per_device_train_batch_size=4,
        save_steps=1,
        save_strategy="steps",
        push_to_hub=True,
        hub_model_id="me/tiny",
        bf16=False,
        use_cpu=True,
        report_to="none",
    )
    assert defer_push_to_hub(args) is True
    rows = [{"prompt": "What is 12+7?", "completion": " 19"}] * 4
    trainer = SafeSFTTrainer(
        model=build_tiny_causal_lm(tokenizer),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(rows),
        args=args,
    )
    trainer.train()
    trainer.save_model()  # with push_to_hub still on, this would push too
    assert api.uploads == [] and api.repos == []


def sft_trainer_that_pushes(tmp_path, tokenizer, **overrides):
    rows = [{"prompt": "What is 12+7?", "completion": " 19"}] * 4
    values = dict(
        output_dir=str(tmp_path / "sft"),
        max_steps=1,
        per_device_train_batch_size=4,
        save_steps=1,
        save_strategy="steps",
        push_to_hub=True,
        hub_model_id="me/tiny",
        bf16=False,
        use_cpu=True,
        report_to="none",
    )
    values.update(overrides)
    return SafeSFTTrainer(
        model=build_tiny_causal_lm(tokenizer),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(rows),
        args=SFTConfig(**values),
    )


@pytest.fixture
def online(monkeypatch):
    """The Hub switched on and a token present, with every upload recorded instead of sent."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtokenFORtests0123456789")
    monkeypatch.setattr(
        HfApi, "whoami", lambda self, token=None, **kwargs: {"name": "me"}
    )  # the check before training
    pushed, uploads = [], RecordingApi()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: uploads)
    monkeypatch.setattr(
        trl_dpr.running.push, "push_folder", lambda folder, repo_id, **kwargs: pushed.append((folder, repo_id, kwargs))
    )
    return pushed, uploads


def test_a_trainer_built_to_push_pushes_once_at_the_end_through_the_safe_push(tmp_path, tokenizer, online):
    pushed, uploads = online
    trainer = sft_trainer_that_pushes(tmp_path, tokenizer)
    trainer.train()
    assert uploads.uploads == [] and uploads.repos == []  # transformers never pushed (checkpoints, saves)
    assert [(folder, repo) for folder, repo, _ in pushed] == [(str(tmp_path / "sft"), "me/tiny")]
    assert (tmp_path / "sft" / "README.md").is_file()  # the card was written before the push


def test_push_to_hub_called_directly_goes_through_the_safe_push(tmp_path, tokenizer, online):
    pushed, uploads = online
    trainer = sft_trainer_that_pushes(tmp_path, tokenizer, push_to_hub=False)
    trainer.train()
    trainer.push_to_hub(commit_message="by hand", token="hf_FAKEotherTOKEN987654321")
    assert uploads.uploads == []
    ((folder, repo, kwargs),) = pushed
    assert (folder, repo) == (str(tmp_path / "sft"), "me/tiny")
    assert kwargs["commit_message"] == "by hand" and kwargs["token"] == "hf_FAKEotherTOKEN987654321"


@pytest.mark.parametrize(
    "overrides, environment, match",
    [
        ({"hub_strategy": "checkpoint"}, {}, "hub_strategy='checkpoint' uploads checkpoint folders"),
        ({"hub_strategy": "all_checkpoints"}, {}, "hub_strategy='all_checkpoints'"),
        ({}, {"offline": True}, "HF_HUB_OFFLINE"),
        ({}, {"token": False}, "no Hugging Face token"),
    ],
)
def test_a_push_that_cannot_work_is_refused_before_training(
    tmp_path, tokenizer, monkeypatch, overrides, environment, match
):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", environment.get("offline", False))
    if environment.get("token", True):
        monkeypatch.setenv("HF_TOKEN", "hf_FAKEtokenFORtests0123456789")
    else:
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(ValueError, match=match):
        sft_trainer_that_pushes(tmp_path, tokenizer, **overrides)
    assert not (tmp_path / "sft").exists() or not any((tmp_path / "sft").iterdir())


# ---- an SFT push loads as the reward model --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["full", "lora"])
def test_a_pushed_sft_output_loads_as_the_same_reward_model(layout, sft_full, sft_lora, tmp_path):
    sft_dir = {"full": sft_full, "lora": sft_lora}[layout]
    original = CheckpointRewardModel.from_pretrained(sft_dir, dtype="float32")
    expected = original.score_text([QUESTION], [ANSWER])[0]
    pushed = copy_files_to_push(sft_dir, tmp_path / "repo")
    assert "dpr_reference.json" in pushed and "training_args.bin" not in pushed
    assert any(name.startswith("dpr_reference/") and name.endswith(".safetensors") for name in pushed)

    hidden = shutil.move(sft_dir, f"{sft_dir}.hidden")  # nothing may be read from the original folder
    try:
        loaded = CheckpointRewardModel.from_pretrained(str(tmp_path / "repo"), dtype="float32")
        got = loaded.score_text([QUESTION], [ANSWER])[0]
    finally:
        shutil.move(hidden, sft_dir)
    assert loaded.reference_manifest.step == 2 and "ref" in loaded.reward.model_names
    assert (loaded.ref_adapter == "ref") if layout == "lora" else (loaded.ref_model is not loaded.sft_model)
    assert got["tokens"] == expected["tokens"]
    assert got["rewards"] == pytest.approx(expected["rewards"], abs=1e-6)
    assert max(abs(r) for r in got["rewards"]) > 1e-4  # π_SFT and π_ref really differ


def test_without_its_reference_folder_a_copy_does_not_load(sft_full, tmp_path):
    for name in files_to_push(sft_full):
        if not name.startswith("dpr_reference/"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f"{sft_full}/{name}", tmp_path / name)
    with pytest.raises((FileNotFoundError, ValueError), match="dpr_reference"):
        CheckpointRewardModel.from_pretrained(str(tmp_path))


def test_an_adapter_on_a_local_base_is_reported_and_not_pushed(sft_lora):
    problems = portability_problems(sft_lora)
    assert [p.split(" ")[0] for p in problems] == ["adapter_config.json", "dpr_reference/adapter_config.json"]
    api = RecordingApi()
    with pytest.raises(ValueError, match="local path"):
        push_folder(sft_lora, "me/tiny-sft", api=api, secrets={})
    assert api.repos == [] and api.commits == []


def test_a_full_sft_output_is_portable_and_pushed_file_by_file(sft_full):
    assert portability_problems(sft_full) == []
    api = RecordingApi()
    assert push_folder(sft_full, "me/tiny-sft", api=api, secrets={}) == "committed"
    assert api.repos == [("me/tiny-sft", {"token": None, "private": None, "exist_ok": True})]
    operations = api.commits[0]["operations"]
    assert [op.path_in_repo for op in operations] == files_to_push(sft_full)


# ---- secrets ----------------------------------------------------------------------------------------------------------


def test_a_file_holding_a_secret_of_the_environment_is_never_pushed(sft_full, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_testTOKENvalue0123456789")
    folder = tmp_path / "sft"
    shutil.copytree(sft_full, folder)
    (folder / "notes.txt").write_text("pushed with hf_testTOKENvalue0123456789")
    api = RecordingApi()
    with pytest.raises(ValueError) as error:
        push_folder(folder, "me/tiny-sft", api=api)
    assert "notes.txt:1 holds the value of HF_TOKEN" in str(error.value) and "Nothing was sent" in str(error.value)
    assert "hf_testTOKENvalue0123456789" not in str(error.value)
    assert api.repos == [] and api.commits == []


def test_training_args_bin_holds_the_hub_token_and_is_not_pushed(tmp_path):
    args = SFTConfig(output_dir=str(tmp_path), hub_token="hf_argumentTOKEN987654321", report_to="none", use_cpu=True)
    torch.save(args, tmp_path / "training_args.bin")
    assert [f.secret_name for f in scan_for_secrets([tmp_path], {"hub_token": args.hub_token})] == ["hub_token"]
    assert files_to_push(tmp_path) == []


def test_the_scan_finds_a_secret_split_across_read_chunks(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 13 + b"sk-live-abcdefgh" + b"\0" * 40)
    found = scan_for_secrets([tmp_path], {"OPENAI_API_KEY": "sk-live-abcdefgh"}, chunk_size=16)
    assert [(f.path.split("/")[-1], f.secret_name) for f in found] == [("weights.bin", "OPENAI_API_KEY")]


def test_secrets_of_the_environment_include_credential_names_and_the_saved_hf_token(tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("hf_savedBYloginABCDEFG\n")
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(token_file))
    for name in list(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setenv("WANDB_API_KEY", "wandb-key-0123456789")
    monkeypatch.setenv("JUDGE_API_KEY", "judge-key-0123456789")
    monkeypatch.setenv("GITHUB_TOKEN", "short")  # too short to scan for
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    assert secrets_from_environment() == {
        "WANDB_API_KEY": "wandb-key-0123456789",
        "JUDGE_API_KEY": "judge-key-0123456789",
        f"the Hugging Face token in {token_file}": "hf_savedBYloginABCDEFG",
    }


def test_too_short_a_secret_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="shorter than 8"):
        scan_for_secrets([tmp_path], {"X_TOKEN": "abc"})


# ---- the DPR model card -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dpr_run(sft_full, tmp_path_factory):
    root = tmp_path_factory.mktemp("dpr")
    script_args = DPRScriptArguments(
        dataset_name=EMBEDDED,
        num_train_samples=8,
        evaluation_config=demo_evaluation_yaml(root / "eval.yaml", demo_num_prompts=4),
    )
    args = DensePathConfig(
        output_dir=str(root / "dpr"),
        max_steps=1,
        per_device_train_batch_size=4,
        max_completion_length=8,
        learning_rate=1e-4,
        kl_coef=0.05,
        **COMMON,
    )
    trainer = run_dpr(script_args, args, ModelConfig(model_name_or_path=sft_full, dtype="float32"))
    return script_args, trainer, (root / "dpr" / "README.md").read_text()  # the card as run_dpr left it


def read_card(path):
    text = path.read_text()
    _, front_matter, body = text.split("---\n", 2)
    return yaml.safe_load(front_matter), body


def headings(body):
    """[(level, title, the lines up to the next heading)] of a card's markdown (not inside ``` blocks)."""
    found, fenced = [], False
    for line in body.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#+ ", line):
            found.append((len(line.split(" ")[0]), line.split(" ", 1)[1], []))
        elif found:
            found[-1][2].append(line)
    return found


def test_the_dpr_pipeline_writes_a_card_at_the_end_of_training_without_checkpoints(dpr_run):
    _, trainer, card = dpr_run  # save_strategy "no": no checkpoint ever wrote one
    assert not any(Path(trainer.args.output_dir).glob("checkpoint-*"))
    body = card.split("---\n", 2)[2]
    assert "fine-tuned version of `trl_dpr/embedded-tiny-llama` (the tiny model embedded in trl_dpr)" in body
    assert (
        "on the embedded task `trl_dpr/embedded-demo`" in body and "[None]" not in card and 'model="None"' not in card
    )


def test_the_card_metadata_is_valid_with_known_license_and_the_dpr_tags(dpr_run):
    _, trainer, card = dpr_run
    metadata = yaml.safe_load(card.split("---\n", 2)[1])
    assert "licence" not in metadata and metadata["license"] == "apache-2.0"  # the embedded base is trl_dpr's own
    assert {"trl", "dpr", "dense-path-reinforce"} <= set(metadata["tags"])
    assert "base_model" not in metadata and "datasets" not in metadata  # neither is a Hub repo
    assert metadata["library_name"] == "transformers" and metadata["pipeline_tag"] == "text-generation"


def test_the_card_quick_start_loads_the_output_with_a_prompt_of_its_data(dpr_run):
    _, trainer, card = dpr_run
    assert f'pipeline("text-generation", model="{trainer.args.output_dir}"' in card
    first_prompt = trainer.train_dataset[0]["prompt"]
    assert json.dumps(first_prompt, ensure_ascii=False) in card
    assert "time machine" not in card  # not TRL's generic question
    quick_start = card.split("```python\n", 1)[1].split("```", 1)[0]
    compile(quick_start, "the card's quick start", "exec")  # valid Python


def test_the_card_has_dprs_section_before_the_citations_and_no_empty_section(dpr_run):
    _, trainer, card = dpr_run
    titles = [title for _, title, _ in headings(card)]
    assert titles.index("Dense-Path REINFORCE") < titles.index("Citations")
    assert (
        "- **Reward**: r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t) (DPR, Eq. 5), from the SFT model `sft` "
        "(a local folder)." in card
    )
    assert "- **α**: π_ref is the SFT checkpoint at step 2 of 4 (α = 0.5)." in card
    assert "- **`kl_coef`** (the weight of the KL to π_SFT in the reward): 0.05." in card
    found = headings(card)
    for i, (level, title, lines) in enumerate(found):
        has_subsection = i + 1 < len(found) and found[i + 1][0] > level
        assert any(line.strip() for line in lines) or has_subsection, f"the card's section {title!r} is empty"


def test_dpr_model_card_has_the_tags_hyperparameters_and_citation(dpr_run):
    _, trainer, _ = dpr_run
    Path(trainer.args.output_dir, "eval_results.json").unlink(missing_ok=True)
    trainer.create_model_card(model_name="tiny-dpr")
    metadata, body = read_card(Path(trainer.args.output_dir) / "README.md")
    assert {"trl", "dpr", "dense-path-reinforce"} <= set(metadata["tags"])
    for name in ("kl_coef", "learning_rate", "max_completion_length", "gamma", "reward_granularity"):
        assert f"| `{name}` | {getattr(trainer.args, name)} |" in body
    assert "| `kl_coef` | 0.05 |" in body
    assert "@article{li2025beyond" in body and "arXiv:2510.02493" in body
    assert "π_ref is the SFT checkpoint at step 2 of 4 (α = 0.5)" in body
    assert "## Evaluation" not in body  # no eval_results.json yet


def test_dpr_model_card_carries_the_evaluation_table_when_there_is_one(dpr_run):
    script_args, trainer, _ = dpr_run
    results = evaluate_against_sft(
        script_args.evaluation_config, trainer.reward_model.sft_model_name_or_path, trainer.args.output_dir
    )
    trainer.create_model_card(model_name="tiny-dpr")
    _, body = read_card(Path(trainer.args.output_dir) / "README.md")
    assert "## Evaluation" in body and results["table_markdown"] in body
    assert body.index("## Evaluation") < body.index("## Citations")
    assert "| SFT |" in body and "| DPR |" in body


def test_a_card_written_before_the_evaluation_gets_the_table_a_card_written_after_it_has(dpr_run):
    """A finished run evaluated again by the same command has no trainer to write its card anew: its table is put where
    the trainer's card holds it."""
    _, trainer, _ = dpr_run
    folder, table = Path(trainer.args.output_dir), "| Method | accuracy % |\n|---|---|\n| DPR | 84.2 |"
    results = folder / "eval_results.json"
    before = results.read_bytes() if results.is_file() else None
    try:
        results.unlink(missing_ok=True)
        trainer.create_model_card(model_name="tiny-dpr")  # as the run's training left it
        results.write_text(json.dumps({"table_markdown": table}))
        add_evaluation_to_card(folder)
        added = (folder / "README.md").read_text()
        add_evaluation_to_card(folder)  # once only
        assert (folder / "README.md").read_text() == added
        trainer.create_model_card(model_name="tiny-dpr")  # as a run evaluated after its training writes it
        assert added == (folder / "README.md").read_text() and table in added
    finally:  # the evaluation the other tests of the run find
        if before is None:
            results.unlink()
        else:
            results.write_bytes(before)


def test_a_run_evaluated_again_replaces_only_its_own_table_and_keeps_a_note_of_yours_after_it(dpr_run, capsys):
    """The card's table, written between trl_dpr's markers, is what a run evaluated again replaces: a note of yours
    after it in the same section (no heading of its own) stays, and the new table is there once."""
    _, trainer, _ = dpr_run
    folder = Path(trainer.args.output_dir)
    results, card = folder / "eval_results.json", folder / "README.md"
    before = results.read_bytes() if results.is_file() else None
    old, new = "| Method | win |\n|---|---|\n| DPR | 55.0 |", "| Method | win |\n|---|---|\n| DPR | 60.0 |"
    try:
        results.write_text(json.dumps({"table_markdown": old}))
        trainer.create_model_card(model_name="tiny-dpr")
        note = "Note by me: judged by hand, see my blog."
        written = card.read_text()
        assert written.count(old) == 1  # under the section, after the table: where a reader of the card adds to it
        card.write_text(written.replace("\n\n### Framework versions", f"\n\n{note}\n\n### Framework versions", 1))
        results.write_text(json.dumps({"table_markdown": new}))
        add_evaluation_to_card(folder)
        _, body = read_card(card)
        assert note in body and new in body and old not in body and body.count("## Evaluation") == 1
        assert body.index(new) < body.index(note) < body.index("### Framework versions")
        assert "keeps its earlier table" not in capsys.readouterr().err
    finally:  # the evaluation the other tests of the run find
        if before is None:
            results.unlink()
        else:
            results.write_bytes(before)


def test_push_trainer_output_pushes_the_card_and_the_policy(dpr_run, monkeypatch):
    _, trainer, _ = dpr_run
    api = RecordingApi()
    monkeypatch.setattr(
        trl_dpr.running.push,
        "push_folder",
        lambda folder, repo_id, **kwargs: api.commits.append(
            {"folder": folder, "repo_id": repo_id, "files": files_to_push(folder), **kwargs}
        ),
    )
    monkeypatch.setattr(trainer.args, "hub_model_id", "me/tiny-dpr")
    push_trainer_output(trainer, dataset_name=EMBEDDED)
    pushed = api.commits[0]
    assert pushed["repo_id"] == "me/tiny-dpr" and pushed["folder"] == trainer.args.output_dir
    assert {"README.md", "model.safetensors", "config.json", "tokenizer.json"} <= set(pushed["files"])
    assert "training_args.bin" not in pushed["files"]
    metadata, body = read_card(Path(trainer.args.output_dir) / "README.md")
    assert "dense-path-reinforce" in metadata["tags"]
    assert 'pipeline("text-generation", model="me/tiny-dpr"' in body  # pushed: the quick start loads the repo


def test_push_trainer_output_can_push_an_adapter_policy_merged(sft_lora, tmp_path, monkeypatch):
    args = DensePathConfig(
        output_dir=str(tmp_path / "dpr"),
        max_steps=1,
        per_device_train_batch_size=4,
        max_completion_length=8,
        learning_rate=1e-4,
        hub_model_id="me/tiny-dpr",
        **COMMON,
    )
    script_args = DPRScriptArguments(dataset_name=EMBEDDED, num_train_samples=8)
    trainer = run_dpr(script_args, args, ModelConfig(model_name_or_path=sft_lora, dtype="float32"))
    assert Path(args.output_dir, "adapter_config.json").is_file()  # the policy adapter, on the SFT run's base
    pushed = []
    monkeypatch.setattr(
        trl_dpr.running.push, "push_folder", lambda folder, repo_id, **kwargs: pushed.append((folder, repo_id))
    )
    for _ in range(2):  # a second push replaces the merged folder
        push_trainer_output(trainer, dataset_name=EMBEDDED, merge_adapter=True)
    assert pushed == [(f"{args.output_dir}-merged", "me/tiny-dpr")] * 2
    merged = Path(f"{args.output_dir}-merged")
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    assert "dense-path-reinforce" in read_card(merged / "README.md")[0]["tags"]


def test_a_merged_push_refuses_an_existing_merged_folder_it_did_not_write_and_keeps_the_users_files(
    tmp_path, monkeypatch
):
    """Issue 42, finding 2: the push path merged with overwrite=True into `<output_dir>-merged`, whatever was there."""
    run = tmp_path / "dpr"
    run.mkdir()
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "trl_dpr/embedded-tiny-llama"}))
    notes = tmp_path / "dpr-merged" / "notes.txt"
    notes.parent.mkdir()
    notes.write_text("mine")
    pushed = []
    monkeypatch.setattr(trl_dpr.running.push, "push_folder", lambda folder, repo_id, **kwargs: pushed.append(folder))
    trainer = SimpleNamespace(
        args=SimpleNamespace(output_dir=str(run), hub_model_id="me/x", model_init_kwargs=None),
        hub_model_id=None,
        is_world_process_zero=lambda: True,
        create_model_card=lambda **_: None,
    )
    with pytest.raises(FileExistsError, match="was not written by merge_adapter_folder") as refused:
        push_trainer_output(trainer, merge_adapter=True)
    assert "\n" not in str(refused.value) and pushed == []
    assert notes.read_text() == "mine" and [p.name for p in notes.parent.iterdir()] == ["notes.txt"]


def test_a_merged_push_into_a_folder_of_the_users_is_refused_before_training(tmp_path, monkeypatch):
    from trl_dpr.running import pipeline
    from trl_dpr.running.pipeline import check_dpr_inputs

    monkeypatch.setattr(pipeline, "check_hub_push", lambda args: None)  # offline here: the real one refuses the push
    (tmp_path / "dpr-merged").mkdir()
    (tmp_path / "dpr-merged" / "notes.txt").write_text("mine")
    args = DensePathConfig(output_dir=str(tmp_path / "dpr"), push_to_hub=True, hub_model_id="me/x", **COMMON)
    with pytest.raises(
        FileExistsError, match="dpr-merged' already exists and was not written by merge_adapter_folder"
    ):
        check_dpr_inputs(DPRScriptArguments(dataset_name=EMBEDDED, num_train_samples=8, merge_adapter=True), args)
    assert (tmp_path / "dpr-merged" / "notes.txt").read_text() == "mine"


def test_a_merge_that_would_replace_a_file_of_the_users_is_refused_before_training(tmp_path):
    from trl_dpr.running.pipeline import check_dpr_inputs

    merged = tmp_path / "dpr-merged"
    merged.mkdir()
    (merged / ".trl_dpr_merged").write_text(json.dumps({"adapter": "dpr", "files": ["config.json"]}))
    for name in ("config.json", "model.safetensors", "my-model.Q8_0.gguf", "notes.txt"):
        (merged / name).write_text("mine" if name != "config.json" else "{}")
    args = DensePathConfig(output_dir=str(tmp_path / "dpr"), **COMMON)
    with pytest.raises(FileExistsError, match="dpr-merged' holds model.safetensors, which no merge wrote") as refused:
        check_dpr_inputs(DPRScriptArguments(dataset_name=EMBEDDED, num_train_samples=8, merge_adapter=True), args)
    assert "gguf" not in str(refused.value) and "notes" not in str(refused.value)
    assert (merged / "model.safetensors").read_text() == "mine"


def test_merging_a_lora_adapter_gives_the_adapted_model(sft_lora, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    merged_dir = merge_adapter_folder(sft_lora, tmp_path / "merged", dtype="float32")
    assert (
        not (tmp_path / "merged" / "adapter_config.json").exists()
        and (tmp_path / "merged" / "tokenizer.json").is_file()
    )
    base = json.loads(Path(sft_lora, "adapter_config.json").read_text())["base_model_name_or_path"]
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype="float32"), sft_lora).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype="float32").eval()
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="not a PEFT adapter"):
        merge_adapter_folder(merged_dir, tmp_path / "again")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        merge_adapter_folder(sft_lora, merged_dir)


def test_merging_again_replaces_only_the_files_the_earlier_merge_wrote(sft_lora, tmp_path):
    """Trial B, finding 4: a second merge (every merge_adapter push) deleted a GGUF the user had put in the folder."""
    merged = Path(merge_adapter_folder(sft_lora, tmp_path / "dpr-merged", dtype="float32"))
    written = sorted(p.name for p in merged.iterdir() if p.name != ".trl_dpr_merged")
    assert json.loads((merged / ".trl_dpr_merged").read_text())["files"] == written
    (merged / "my-model.Q8_0.gguf").write_text("my own export")
    (merged / "model-00002-of-00002.safetensors").write_text("a shard of an earlier, sharded merge")
    marker = json.loads((merged / ".trl_dpr_merged").read_text())
    marker["files"].append("model-00002-of-00002.safetensors")
    (merged / ".trl_dpr_merged").write_text(json.dumps(marker))
    merge_adapter_folder(sft_lora, merged, dtype="float32", overwrite=True)
    assert (merged / "my-model.Q8_0.gguf").read_text() == "my own export"
    assert sorted(p.name for p in merged.iterdir()) == sorted([*written, ".trl_dpr_merged", "my-model.Q8_0.gguf"])
    assert not list(tmp_path.glob(".dpr-merged.merging-*"))  # the staging folder is gone


def test_a_merge_refuses_to_replace_a_file_of_the_users_in_its_folder(sft_lora, tmp_path):
    merged = Path(merge_adapter_folder(sft_lora, tmp_path / "dpr-merged", dtype="float32"))
    marker = json.loads((merged / ".trl_dpr_merged").read_text())
    marker["files"].remove("tokenizer.json")  # as if the user had written it after the merge
    (merged / ".trl_dpr_merged").write_text(json.dumps(marker))
    (merged / "tokenizer.json").write_text("mine")
    before = {p.name: p.read_bytes() for p in merged.iterdir()}
    with pytest.raises(
        FileExistsError, match="holds tokenizer.json, which no merge wrote and a merge may replace"
    ) as refused:
        merge_adapter_folder(sft_lora, merged, dtype="float32", overwrite=True)
    assert "\n" not in str(refused.value)
    assert {p.name: p.read_bytes() for p in merged.iterdir()} == before


def test_a_merge_redoes_an_unfinished_one_and_sweeps_the_staging_folder_a_killed_one_left(sft_lora, tmp_path):
    """Review of deae23c, finding 4: a killed merge left `.dpr-merged.merging-*` behind, and a half-replaced folder."""
    from transformers import AutoModelForCausalLM

    merged = Path(merge_adapter_folder(sft_lora, tmp_path / "dpr-merged", dtype="float32"))
    expected = {p.name: p.read_bytes() for p in merged.iterdir() if p.name != ".trl_dpr_merged"}
    marker = json.loads((merged / ".trl_dpr_merged").read_text())
    (merged / "model.safetensors").write_bytes(b"half of another merge")  # as a crash between two moves leaves it
    (merged / ".trl_dpr_merged").write_text(json.dumps({**marker, "complete": False}))
    killed = tmp_path / ".dpr-merged.merging-k1ll3d"
    killed.mkdir()
    (killed / "model.safetensors").write_text("a killed merge's weights")
    other = tmp_path / ".other-merged.merging-abc"  # an earlier trl_dpr's (no lock): another target's, kept
    other.mkdir()
    killed_other = tmp_path / ".another-merged.merging-k1ll3d"  # another target's, its lock free: killed, swept
    killed_other.mkdir()
    (killed_other / "model.safetensors").write_text("a killed merge's weights")
    (tmp_path / f"{killed_other.name}.lock").touch()
    yours = tmp_path / ".dpr-merged.merging-notes"  # named as a staging folder, no lock, not a merge's files: kept
    yours.mkdir()
    (yours / "notes.txt").write_text("the user's own file")
    merge_adapter_folder(sft_lora, merged, dtype="float32")  # no overwrite=True: an unfinished merge is redone
    assert {p.name: p.read_bytes() for p in merged.iterdir() if p.name != ".trl_dpr_merged"} == expected
    assert json.loads((merged / ".trl_dpr_merged").read_text()) == {**marker, "complete": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == [yours.name, ".other-merged.merging-abc", "dpr-merged"]
    assert (yours / "notes.txt").read_text() == "the user's own file"
    AutoModelForCausalLM.from_pretrained(merged, dtype="float32")
    with pytest.raises(FileExistsError, match="overwrite=True"):  # a finished merge is replaced only when asked
        merge_adapter_folder(sft_lora, merged, dtype="float32")


def test_docstring_examples_run():
    # the hub's helpers are internal: their examples run in tests/running/test_helper_examples.py, in the module's namespace
    from .test_helper_examples import CASES

    for module in ("push", "secret_scan", "model_card", "merge"):
        result = doctest.testmod(importlib.import_module(f"trl_dpr.running.{module}"))
        assert result.failed == 0
    assert all(
        any(key.startswith(f"trl_dpr.running.{m}:") for key in CASES) for m in ("push", "secret_scan", "model_card")
    )
