"""The recipe's `model_revision` reaches every load of π_SFT that can name a Hub id: DPR's tokenizer, the preview's π_ref
manifest. Offline, π_SFT is a local folder, for which transformers and huggingface_hub ignore `revision`: so these tests
load the real folder through a spy on the call and check the revision it was given (a Hub load cannot run here)."""

import json

import pytest
from transformers import AutoTokenizer
from trl import ModelConfig

import trl_dpr.reference_manifest
import trl_dpr.running.pipeline
from trl_dpr.reward_model import CheckpointRewardModel
from trl_dpr.running.pipeline import DPRScriptArguments, run_dpr

from ..conftest import dpr_config, save_sft_output


class Loaded(Exception):
    """Raised where the models would load: the calls before it are what a test checks."""


def stop(*args, **kwargs):
    raise Loaded


def test_run_dpr_loads_the_sft_tokenizer_at_the_recipes_model_revision(tokenizer, tmp_path, monkeypatch):
    sft = str(save_sft_output(tmp_path / "sft", tokenizer))
    from_pretrained, revisions = AutoTokenizer.from_pretrained, []

    def spy(name, *args, **kwargs):
        if str(name) == sft:
            revisions.append(kwargs.get("revision"))
        return from_pretrained(name, *args, **kwargs)  # the real load of the local folder

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", spy)
    monkeypatch.setattr(trl_dpr.running.pipeline, "load_reward_model", stop)
    with pytest.raises(Loaded):
        run_dpr(
            DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=8),
            dpr_config(tmp_path),
            ModelConfig(model_name_or_path=sft, model_revision="v1", dtype="float32"),
        )
    assert revisions == ["v1"]


def test_the_preview_reads_the_pi_ref_manifest_at_the_sft_revision(tokenizer, tmp_path, monkeypatch):
    from trl_dpr.analysis.preview import PreviewConfig, run_preview

    sft = str(save_sft_output(tmp_path / "sft", tokenizer))
    prompts = tmp_path / "held_out.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"What is {i}+{i}?", "answer": str(2 * i)}) + "\n" for i in range(4))
    )
    resolve_reference, calls = trl_dpr.reference_manifest.resolve_reference, []

    def spy(path, *args, **kwargs):
        calls.append((path, *args, *kwargs.values()))
        return resolve_reference(path, *args, **kwargs)  # the real manifest of the local folder

    monkeypatch.setattr(trl_dpr.reference_manifest, "resolve_reference", spy)
    monkeypatch.setattr(CheckpointRewardModel, "from_pretrained", stop)
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"),
        dataset_name=str(prompts),
        dataset_split="train",
        num_prompts=4,
        variants={"DPR": {}},  # reads π_ref: from the manifest π_SFT records
        answer_pattern=r"(-?[0-9]+)",
        plot=False,
    )
    with pytest.raises(Loaded):
        run_preview(config, sft, {"dtype": "float32", "revision": "v1", "token": "hf_x"}, show_progress=False)
    assert calls == [(sft, "v1", "hf_x")]


def test_the_preview_gives_the_sft_revision_to_no_other_model(tokenizer, tmp_path, monkeypatch):
    """π_SFT's revision names a branch of π_SFT's repo: a policy (or π_ref, a reward's model) loads at its own default,
    as `load_frozen_models` loads them, and its context is read there too."""
    import trl.trainer.utils

    import trl_dpr.field_checks
    from trl_dpr.analysis.preview import PreviewConfig, run_preview

    sft = str(save_sft_output(tmp_path / "sft", tokenizer))
    policy = str(save_sft_output(tmp_path / "policy", tokenizer, sft_seed=2))
    prompts = tmp_path / "held_out.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"What is {i}+{i}?", "answer": str(2 * i)}) + "\n" for i in range(4))
    )
    model_config_of, create_model_from_path = (
        trl_dpr.field_checks.model_config_of,
        trl.trainer.utils.create_model_from_path,
    )
    revisions = []

    def reading(path, revision=None, *args, **kwargs):
        revisions.append(("config", str(path), revision))
        return model_config_of(path, revision, *args, **kwargs)

    def loading(path, **kwargs):
        revisions.append(("model", str(path), kwargs.get("revision")))
        if str(path) == policy:
            raise Loaded  # the last load; what came before was checked
        return create_model_from_path(path, **kwargs)

    monkeypatch.setattr(trl_dpr.field_checks, "model_config_of", reading)
    monkeypatch.setattr(trl.trainer.utils, "create_model_from_path", loading)
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"),
        dataset_name=str(prompts),
        dataset_split="train",
        num_prompts=4,
        samples_per_prompt=2,
        min_ess=1.0,
        max_new_tokens=4,
        variants={"wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}},  # reads π_SFT alone
        kl_coefs=[float("inf"), 1.0],
        answer_pattern=r"(-?[0-9]+)",
        bootstrap_resamples=20,
        policies=[f"DPR={policy}"],
        plot=False,
    )
    with pytest.raises(Loaded):
        run_preview(config, sft, {"dtype": "float32", "revision": "v1"}, show_progress=False)
    assert ("config", sft, "v1") in revisions and ("model", sft, "v1") in revisions
    assert [r for r in revisions if r[1] == policy] == [("config", policy, None), ("model", policy, None)]
