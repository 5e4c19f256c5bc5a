"""The pretrained base shipped in the package (trl_dpr/embedded/pretrained_base/) is what the code declares: the
files its record lists, unaltered; the architecture and settings of `PretrainingSettings`; the tokenizer the corpus
rebuilds; a trained model (its held-out loss, recomputed here, is the recorded one and far below an untrained model's);
and the first steps of a rebuild reproduce the recorded losses. The demo resolves its base name to this folder."""

import json
import shutil
from dataclasses import asdict

import pytest
import torch

from trl_dpr.embedded import EMBEDDED_PRETRAINED_MODEL, resolve_embedded_base
from trl_dpr.embedded.pretraining import (
    SHIPPED_BASE,
    PretrainingSettings,
    _packed_blocks,
    _pretrain,
    held_out_loss,
    pretraining_corpus,
    shipped_base_problem,
)
from trl_dpr.embedded.task import demo_corpus
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer

RECORD = json.loads((SHIPPED_BASE / "shipped.json").read_text())
BUILD = json.loads((SHIPPED_BASE / "pretraining.json").read_text())


def test_the_shipped_files_are_the_recorded_ones_and_an_altered_file_is_caught(tmp_path):
    assert shipped_base_problem() is None
    assert set(RECORD["sha256"]) >= {"config.json", "model.safetensors", "tokenizer.json", "pretraining.json"}
    copy = tmp_path / "base"
    shutil.copytree(SHIPPED_BASE, copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    assert "model.safetensors differs" in shipped_base_problem(copy)
    shutil.copy(SHIPPED_BASE / "model.safetensors", copy / "model.safetensors")
    assert shipped_base_problem(copy) is None
    (copy / "tokenizer.json").unlink()
    assert "tokenizer.json is missing" in shipped_base_problem(copy)


def test_the_demo_base_name_resolves_to_the_shipped_folder(tmp_path):
    assert resolve_embedded_base(EMBEDDED_PRETRAINED_MODEL, tmp_path / "sft") == str(SHIPPED_BASE)
    assert not (tmp_path / "embedded-pretrained-base").exists()  # nothing rebuilt


def test_the_shipped_settings_and_architecture_are_the_declared_ones():
    from transformers import AutoTokenizer

    settings = PretrainingSettings()
    assert BUILD["settings"] == asdict(settings)
    config = json.loads((SHIPPED_BASE / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == (
        "llama",
        settings.hidden_size,
        settings.num_layers,
    )
    # vocab_size is the BPE's ceiling: the task's small alphabet runs out of merges before it (592 of 1200)
    assert config["vocab_size"] == len(AutoTokenizer.from_pretrained(SHIPPED_BASE)) <= settings.vocab_size


def test_the_shipped_tokenizer_is_the_one_its_corpus_rebuilds():
    from transformers import AutoTokenizer

    settings = PretrainingSettings()
    # pretraining_corpus draws documents one after another from one stream: its first 20 000 are the build's.
    rebuilt = build_tokenizer(
        pretraining_corpus(20_000, seed=settings.seed) + demo_corpus(seed=settings.seed), settings.vocab_size
    )
    shipped = AutoTokenizer.from_pretrained(SHIPPED_BASE)
    assert rebuilt.get_vocab() == shipped.get_vocab()
    text = "Mia has 23 apples. She gets 5 more. 23 + 5 = 28. The answer is 28."
    assert rebuilt(text)["input_ids"] == shipped(text)["input_ids"]


def test_the_shipped_model_is_trained_its_held_out_loss_is_the_recorded_one():
    from transformers import AutoTokenizer

    loss = held_out_loss(SHIPPED_BASE)
    assert loss == pytest.approx(RECORD["held_out_loss"], rel=1e-4)
    untrained = build_tiny_causal_lm(
        AutoTokenizer.from_pretrained(SHIPPED_BASE), "llama", hidden_size=128, num_layers=4, num_heads=4, seed=0
    )
    ids = torch.tensor([AutoTokenizer.from_pretrained(SHIPPED_BASE)(pretraining_corpus(1, seed=1)[0])["input_ids"]])
    with torch.no_grad():
        assert untrained(input_ids=ids, labels=ids).loss.item() > 5 * loss


@pytest.mark.slow
def test_the_first_steps_of_a_rebuild_reproduce_the_recorded_losses():
    """Two steps of the build from its seeded init on its packed corpus: the recorded step-1 loss, to float noise."""
    from transformers import AutoTokenizer

    settings = PretrainingSettings()
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_BASE)
    blocks = _packed_blocks(
        tokenizer, pretraining_corpus(settings.num_documents, seed=settings.seed), settings.block_size
    )
    assert len(blocks) == BUILD["num_blocks"]
    model = build_tiny_causal_lm(
        tokenizer,
        "llama",
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        num_heads=4,
        seed=settings.seed,
    )
    short = PretrainingSettings(max_steps=settings.max_steps)  # same schedule; the loop is stopped after 2 steps below
    losses = _pretrain(model, blocks, short, stop_after=1)
    assert losses[0][0] == 1 and losses[0][1] == pytest.approx(BUILD["losses"][0][1], abs=2e-4)
