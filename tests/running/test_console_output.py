"""What a run prints: no deprecation warning the user cannot act on, metrics as numbers, the checkpoint a resume
starts from, and one flat sequence of stage banners."""

import ast
import copy
import importlib
import re
import warnings
from pathlib import Path

import pytest

from trl_dpr.embedded.task import demo_corpus
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
from trl_dpr.lfd import SPINConfig, SPINTrainer

from ..conftest import demo_evaluation_yaml, dpr_trainer, save_sft_output
from ..lfd.test_spin_gsil import run_args, sampled_pairs

ROOT = Path(__file__).resolve().parents[2]


def checkpointing_deprecations(caught) -> list[str]:
    """The deprecation warnings about (gradient / activation) checkpointing among `caught`."""
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, (FutureWarning, DeprecationWarning)) and "checkpointing" in str(w.message)
    ]


@pytest.mark.parametrize("stage", ["sft", "dpr", "spin", "gsil"])
def test_the_demo_recipes_parse_without_a_checkpointing_deprecation_warning(stage):
    # The stage's module (`trl_dpr.scripts.<stage>`), as `trl-dpr <stage>` parses it before launching.
    parser = importlib.import_module(f"trl_dpr.scripts.{stage}").make_parser()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parser.parse_args_and_config(["--config", str(ROOT / "recipes" / "demo" / f"{stage}.yaml")])
    assert checkpointing_deprecations(caught) == []


def test_a_dpr_run_warns_nothing_about_checkpointing(tokenizer, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, *_ = dpr_trainer(tokenizer, tmp_path, max_steps=1)  # TRL's default: activation checkpointing on
        trainer.train()
    assert checkpointing_deprecations(caught) == []


def test_a_self_play_run_warns_nothing_about_checkpointing(tmp_path):
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    model = build_tiny_causal_lm(tok, seed=0)
    pairs = sampled_pairs(tok, model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = run_args(SPINConfig, tmp_path, max_steps=1, gradient_checkpointing=True)
        SPINTrainer(
            model=model, ref_model=copy.deepcopy(model), args=args, train_dataset=pairs, processing_class=tok
        ).train()
    assert checkpointing_deprecations(caught) == []


def printed_logs(text: str) -> list[dict]:
    """The log dicts the trainer printed (`{'loss': ..., ...}`), read back as Python literals."""
    return [ast.literal_eval(match) for match in re.findall(r"\{'[^{}]*\}", text)]


@pytest.mark.parametrize("disable_tqdm", [False, True], ids=["progress bar", "no progress bar"])
def test_the_console_log_prints_metrics_as_numbers(tokenizer, tmp_path, capsys, disable_tqdm):
    trainer, *_ = dpr_trainer(tokenizer, tmp_path, max_steps=1, disable_tqdm=disable_tqdm)
    trainer.train()
    logs = printed_logs(capsys.readouterr().out)
    step, summary = logs[0], logs[-1]
    assert "loss" in step and "train_runtime" in summary
    for entry in (step, summary):
        assert all(isinstance(value, (int, float)) for value in entry.values()), entry
    assert step["loss"] == pytest.approx(trainer.state.log_history[0]["loss"], rel=1e-3, abs=1e-12)  # 4 digits kept


def test_a_resumed_run_says_which_checkpoint_it_resumes_from(tokenizer, tmp_path, capsys):
    import shutil

    first, *_ = dpr_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    first.train()
    assert "Resuming from" not in capsys.readouterr().out  # a fresh run
    shutil.rmtree(tmp_path / "dpr" / "checkpoint-4")  # as if killed after checkpoint-2
    resumed, *_ = dpr_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    resumed.train(resume_from_checkpoint=True)
    assert f"Resuming from {tmp_path / 'dpr' / 'checkpoint-2'}\n" in capsys.readouterr().out


def test_a_self_play_recipe_prints_one_flat_sequence_of_stage_banners(tokenizer, tmp_path, capsys):
    from trl_dpr.lfd.self_play import recipe_main

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml", demo_num_prompts=2, samples_per_prompt=1)
    recipe_main(
        SPINConfig,
        [
            "--config",
            str(ROOT / "recipes" / "demo" / "spin.yaml"),
            "--model_name_or_path",
            str(sft),
            "--sft_config",
            "",
            "--evaluation_config",
            evaluation,
            "--output_dir",
            str(tmp_path / "spin"),
            "--num_train_samples",
            "3",
            "--num_iterations",
            "2",
            "--max_steps",
            "1",
            "--max_new_tokens",
            "4",
            "--per_device_train_batch_size",
            "3",
            "--generation_batch_size",
            "3",
            "--disable_tqdm",
            "true",
        ],
    )
    banners = [
        (int(i), int(n)) for i, n in re.findall(r"^  Stage (\d+)/(\d+): ", capsys.readouterr().out, re.MULTILINE)
    ]
    total = banners[0][1]
    assert banners == [(i, total) for i in range(1, total + 1)]  # each stage once, in order, out of one total
