"""Checkpoints are complete or invisible; a killed run resumes to the same weights; π_ref is written exactly once."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trl_dpr.checkpointing import last_complete_checkpoint
from trl_dpr.reference_manifest import MANIFEST_NAME

from .conftest import dpr_trainer as make_trainer
from .test_reference_callback import run_sft

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "tiny_run.py"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def test_a_crash_while_saving_leaves_no_checkpoint_that_looks_complete(tokenizer, tmp_path, monkeypatch):
    trainer, _, _, _ = make_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)

    def crash_after_the_weights(self, output_dir):
        raise OSError(errno.ENOSPC, "No space left on device (simulated mid-save)")

    # The weights are written, then saving the optimizer fails, as a full disk or a kill would interrupt it.
    monkeypatch.setattr(type(trainer), "_save_optimizer_and_scheduler", crash_after_the_weights)
    with pytest.raises(OSError, match="No space left"):
        trainer.train()
    output_dir = tmp_path / "dpr"
    assert not (output_dir / "checkpoint-2").exists()  # the half-written checkpoint stays out of sight
    assert (output_dir / ".partial" / "checkpoint-2" / "model.safetensors").exists()
    assert last_complete_checkpoint(output_dir) is None


def test_resume_skips_a_half_written_checkpoint(tmp_path):
    complete, broken = tmp_path / "checkpoint-4", tmp_path / "checkpoint-8"
    complete.mkdir()
    (complete / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    broken.mkdir()
    (broken / "trainer_state.json").write_text('{"global_st')  # cut mid-write
    assert last_complete_checkpoint(tmp_path) == str(complete)


def test_a_full_disk_while_saving_the_reference_fails_loudly_and_publishes_nothing(tokenizer, tmp_path, monkeypatch):
    # A real full disk cannot be arranged here (no permission to mount a small filesystem): the model save raises
    # ENOSPC as it would, and we check the error surfaces and no manifest points at a partial reference.
    from transformers import PreTrainedModel

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_sft(tokenizer, tmp_path, max_steps=4)
    assert not (tmp_path / MANIFEST_NAME).exists()
    assert not (tmp_path / "dpr_reference").exists()


def launch(stage, output_dir, *extra, step_seconds=0.0):
    command = [sys.executable, str(SCRIPT), stage, str(output_dir), *extra]
    if step_seconds:
        command += ["--step-seconds", str(step_seconds)]
    return command


def run_to_completion(stage, output_dir, *extra):
    result = subprocess.run(launch(stage, output_dir, *extra), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def kill_after_checkpoint(stage, output_dir, step, *extra):
    """Start a run, SIGKILL it as soon as checkpoint-`step` is in place (mid-training), like a preempted job."""
    process = subprocess.Popen(launch(stage, output_dir, *extra, step_seconds=0.5), env=ENV, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (Path(output_dir) / f"checkpoint-{step}").is_dir():
        assert process.poll() is None, f"run ended before checkpoint-{step}: {process.stderr.read()[-3000:]}"
        assert time.time() < deadline, "no checkpoint appeared in time"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (Path(output_dir) / "model.safetensors").exists()  # it really stopped mid-run


def final_weights(output_dir):
    return load_file(str(Path(output_dir) / "model.safetensors"))


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        # Same seed, same data order, restored optimizer / scheduler / RNG: bitwise equal on CPU with one thread.
        assert torch.equal(a[name], b[name]), name


@pytest.fixture(scope="module")
def uninterrupted_sft(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("runs") / "sft-uninterrupted"
    run_to_completion("sft", output_dir)
    return output_dir


@pytest.mark.parametrize("kill_at", [4, 8])  # before and after the reference step ⌊0.5·12⌋ = 6
def test_killed_sft_resumes_to_the_same_weights_and_writes_the_reference_once(uninterrupted_sft, kill_at):
    output_dir = uninterrupted_sft.parent / f"sft-killed-at-{kill_at}"
    kill_after_checkpoint("sft", output_dir, kill_at)
    reference_weights = output_dir / "dpr_reference" / "model.safetensors"
    written_before_resume = reference_weights.stat().st_mtime_ns if reference_weights.exists() else None
    assert (written_before_resume is not None) == (kill_at > 6)

    run_to_completion("sft", output_dir, "--resume")
    assert_same_weights(final_weights(output_dir), final_weights(uninterrupted_sft))
    assert_same_weights(final_weights(output_dir / "dpr_reference"), final_weights(uninterrupted_sft / "dpr_reference"))
    manifest = json.loads((output_dir / MANIFEST_NAME).read_text())
    assert (manifest["step"], manifest["total_steps"]) == (6, 12)
    if written_before_resume is not None:
        assert reference_weights.stat().st_mtime_ns == written_before_resume  # not written a second time


def test_killed_dpr_resumes_to_the_same_weights(uninterrupted_sft):
    uninterrupted = uninterrupted_sft.parent / "dpr-uninterrupted"
    run_to_completion("dpr", uninterrupted, "--sft-dir", str(uninterrupted_sft))
    killed = uninterrupted_sft.parent / "dpr-killed"
    kill_after_checkpoint("dpr", killed, 2, "--sft-dir", str(uninterrupted_sft))
    run_to_completion("dpr", killed, "--sft-dir", str(uninterrupted_sft), "--resume")
    assert_same_weights(final_weights(killed), final_weights(uninterrupted))
