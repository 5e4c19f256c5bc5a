"""Checkpoints are complete or invisible; a killed run resumes to the same weights; π_ref is written exactly once.

The runs that are killed, resumed or refused are real processes, SIGKILLed as a preempted job is: each is forked from
this test process (tests/conftest.py's `Run`), which has imported torch and TRL already, so a run starts in a fraction
of a second instead of the ~13 s a new interpreter spends importing them here.
"""

import errno
import importlib.util
import itertools
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from trl_dpr.reference_manifest import MANIFEST_NAME
from trl_dpr.running.checkpointing import (
    RUN_COMPLETE_NAME,
    OutputDirInUse,
    checkpoint_problem,
    claim_output_dir,
    evaluation_changed,
    finished_run,
    last_complete_checkpoint,
    mark_evaluated,
    mark_run_finished,
    mark_step_done,
    pending_steps,
    release_output_dir,
    run_fingerprint,
    start_writing,
    write_checkpoint_manifest,
)

from ..conftest import Run
from ..conftest import dpr_trainer as make_trainer
from ..core.test_reference_checkpoint import run_sft

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tiny_run", ROOT / "tests" / "scripts" / "tiny_run.py")
tiny_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny_run)


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


def _checkpoint(folder, step):
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "model.safetensors").write_bytes(b"w" * 1000)
    (folder / "optimizer.pt").write_bytes(b"o" * 2000)
    write_checkpoint_manifest(folder)


def test_resume_skips_a_half_written_checkpoint(tmp_path):
    complete, unfinished = tmp_path / "checkpoint-4", tmp_path / "checkpoint-8"
    _checkpoint(complete, 4)
    unfinished.mkdir()
    (unfinished / "trainer_state.json").write_text(json.dumps({"global_step": 8}))  # no manifest: the save never ended
    assert last_complete_checkpoint(tmp_path) == str(complete)


@pytest.mark.parametrize("damage", ["truncate model", "truncate optimizer", "delete optimizer", "only rng and state"])
def test_resume_skips_a_damaged_newest_checkpoint_and_says_why(tmp_path, damage, caplog, monkeypatch):
    from accelerate.state import PartialState

    # As `trl-dpr dpr` on an unfinished SFT folder runs it: before any trainer has set up accelerate's state.
    monkeypatch.setattr(PartialState, "_shared_state", {})
    complete, damaged = tmp_path / "checkpoint-4", tmp_path / "checkpoint-8"
    _checkpoint(complete, 4)
    _checkpoint(damaged, 8)
    if damage == "truncate model":
        (damaged / "model.safetensors").write_bytes(b"w" * 10)
    elif damage == "truncate optimizer":
        (damaged / "optimizer.pt").write_bytes(b"")
    elif damage == "delete optimizer":
        (damaged / "optimizer.pt").unlink()
    else:  # what two runs on one folder used to leave: a folder that looked complete
        for name in ("model.safetensors", "optimizer.pt", "checkpoint_manifest.json"):
            (damaged / name).unlink()
        (damaged / "rng_state.pth").write_bytes(b"r")
    problem = checkpoint_problem(damaged)
    assert problem is not None and (
        "optimizer.pt" in problem or "model.safetensors" in problem or "manifest" in problem
    )
    with caplog.at_level("WARNING"):
        assert last_complete_checkpoint(tmp_path) == str(complete)
    assert f"Skipping {damaged} for resuming" in caplog.text


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


RUN_NUMBERS = itertools.count()


def start(stage, output_dir, *extra, step_seconds=0.0):
    argv = [stage, str(output_dir), *extra, *(["--step-seconds", str(step_seconds)] if step_seconds else [])]
    return Run(tiny_run.tiny_run, argv, log=f"{output_dir}.{next(RUN_NUMBERS)}.log")


def run_to_completion(stage, output_dir, *extra):
    run = start(stage, output_dir, *extra)
    assert run.wait() == 0, run.stderr()[-3000:]


def kill_after_checkpoint(stage, output_dir, step, *extra):
    """Start a run, SIGKILL it as soon as checkpoint-`step` is in place (mid-training), like a preempted job."""
    run = start(stage, output_dir, *extra, step_seconds=0.5)
    deadline = time.time() + 300
    while not (Path(output_dir) / f"checkpoint-{step}").is_dir():
        assert run.alive(), f"run ended before checkpoint-{step}: {run.stderr()[-3000:]}"
        assert time.time() < deadline, "no checkpoint appeared in time"
        time.sleep(0.05)
    assert run.kill() == -signal.SIGKILL
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


@pytest.fixture(scope="module")
def uninterrupted_dpr(uninterrupted_sft):
    """The DPR run every killed, resumed or shared DPR run below must end like (one run, compared by several tests)."""
    output_dir = uninterrupted_sft.parent / "dpr-uninterrupted"
    run_to_completion("dpr", output_dir, "--sft-dir", str(uninterrupted_sft))
    return output_dir


@pytest.mark.slow
def test_killed_sft_resumes_to_the_same_weights_and_writes_the_reference_once(uninterrupted_sft):
    """Killed before the reference step ⌊0.5·12⌋ = 6 (at checkpoint-4), resumed and killed again after it (at
    checkpoint-8), resumed to the end: the reference is written by the first resumed run, never again, and both end as
    the uninterrupted run (one chain of runs checks both kills)."""
    output_dir = uninterrupted_sft.parent / "sft-killed"
    reference_weights = output_dir / "dpr_reference" / "model.safetensors"
    kill_after_checkpoint("sft", output_dir, 4)
    assert not reference_weights.exists()  # killed before the reference step: not written yet

    kill_after_checkpoint("sft", output_dir, 8, "--resume")
    assert reference_weights.exists()  # the resumed run passed the reference step and wrote it
    written_before_resume = reference_weights.stat().st_mtime_ns

    run_to_completion("sft", output_dir, "--resume")
    assert_same_weights(final_weights(output_dir), final_weights(uninterrupted_sft))
    assert_same_weights(
        final_weights(output_dir / "dpr_reference"), final_weights(uninterrupted_sft / "dpr_reference")
    )
    manifest = json.loads((output_dir / MANIFEST_NAME).read_text())
    assert (manifest["step"], manifest["total_steps"]) == (6, 12)
    assert reference_weights.stat().st_mtime_ns == written_before_resume  # not written a second time


@pytest.mark.slow
def test_killed_dpr_resumes_to_the_same_weights(uninterrupted_sft, uninterrupted_dpr):
    killed = uninterrupted_sft.parent / "dpr-killed"
    kill_after_checkpoint("dpr", killed, 2, "--sft-dir", str(uninterrupted_sft))
    run_to_completion("dpr", killed, "--sft-dir", str(uninterrupted_sft), "--resume")
    assert_same_weights(final_weights(killed), final_weights(uninterrupted_dpr))


@pytest.mark.slow
def test_a_second_run_on_the_same_folder_is_refused_at_once_and_the_first_ends_as_a_solo_run(
    uninterrupted_sft, uninterrupted_dpr
):
    solo = uninterrupted_dpr  # the same DPR run, alone on its folder
    shared = uninterrupted_sft.parent / "dpr-shared"
    argv = ["dpr", str(shared), "--sft-dir", str(uninterrupted_sft)]
    go = uninterrupted_sft.parent / "dpr-shared-go"  # the first run waits after its first step until this exists
    first = Run(tiny_run.tiny_run, [*argv, "--wait-for", str(go)], log=f"{shared}.first.log")
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # the first run has claimed the folder: its lock names it
            lock = shared / ".trl_dpr.lock.json"  # who holds the lock
            if lock.is_file() and f'"pid": {first.pid}' in lock.read_text():
                break
            assert first.alive(), f"the first run ended before claiming its folder: {first.stderr()[-3000:]}"
            time.sleep(0.2)
        else:
            pytest.fail("the first run never claimed its folder")
        started = time.monotonic()
        second = Run(tiny_run.tiny_run, argv, log=f"{shared}.second.log")
        assert second.wait(300) == 2 and f"PID {first.pid} on host" in second.stderr(), second.stderr()[-2000:]
        refused_after = time.monotonic() - started
        assert "Traceback" not in second.stderr()
        assert first.alive(), "the first run should still be training when the second is refused"
        go.touch()
        assert first.wait() == 0, first.stderr()[-3000:]
    finally:
        if first.alive():
            first.kill()
    assert refused_after < 60  # before loading anything: the lock is taken before the models
    assert_same_weights(final_weights(shared), final_weights(solo))


def hold_the_folder(folder, claimed):
    claim_output_dir(folder)
    Path(claimed).touch()
    time.sleep(600)


@pytest.mark.slow
def test_a_folder_held_by_a_live_run_is_refused_naming_the_holder_and_freed_when_it_dies(tmp_path):
    folder, claimed = tmp_path / "run", tmp_path / "claimed"
    folder.mkdir()
    holder = Run(hold_the_folder, folder, claimed, log=tmp_path / "holder.log")
    try:
        deadline = time.monotonic() + 120
        while not claimed.exists():
            assert holder.alive() and time.monotonic() < deadline, holder.stderr()
            time.sleep(0.05)
        with pytest.raises(OutputDirInUse, match=f"PID {holder.pid} on host"):
            claim_output_dir(folder)
    finally:
        holder.kill()  # a killed run cannot release anything itself: the OS does
    claim_output_dir(folder)  # the lock died with its holder


def test_a_fresh_run_refuses_a_folder_holding_a_finished_run(tmp_path):
    (tmp_path / "trainer_state.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ValueError, match="already holds a run.*model.safetensors.*overwrite_output_dir"):
        claim_output_dir(tmp_path)
    claim_output_dir(tmp_path, resuming=True)
    claim_output_dir(tmp_path, overwrite=True)


@dataclass
class Recipe:
    kl_coef: float = 1.0
    model_init_kwargs: dict | None = None
    overwrite_output_dir: bool = False


def test_a_run_is_finished_for_the_arguments_it_recorded_while_its_model_is_there(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    assert not finished_run(tmp_path, run_fingerprint(Recipe()))  # no record: another version's run, or a killed one
    mark_run_finished(tmp_path, run_fingerprint(Recipe()))
    assert finished_run(tmp_path, run_fingerprint(Recipe()))
    assert finished_run(tmp_path, run_fingerprint(Recipe(overwrite_output_dir=True)))  # how it starts, not what it is
    assert not finished_run(tmp_path, run_fingerprint(Recipe(kl_coef=0.5)))
    (tmp_path / "model.safetensors").unlink()
    assert not finished_run(tmp_path, run_fingerprint(Recipe()))  # its model removed: nothing finished to show


@dataclass
class Pipeline:
    sft_config: str | None = None
    evaluation_config: str | None = None


def test_an_edited_config_file_the_recipe_names_is_another_run_and_the_same_text_is_the_same(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    sft = tmp_path / "sft.yaml"
    sft.write_text("learning_rate: 2.0e-05\n")
    mark_run_finished(tmp_path, run_fingerprint(Pipeline(str(sft))))
    assert finished_run(tmp_path, run_fingerprint(Pipeline(str(sft))))
    sft.write_text("learning_rate: 1.0e-05\n")  # same path, other settings: another π_SFT
    assert not finished_run(tmp_path, run_fingerprint(Pipeline(str(sft))))
    sft.write_text("learning_rate: 2.0e-05\n")
    assert finished_run(tmp_path, run_fingerprint(Pipeline(str(sft))))
    assert run_fingerprint(Pipeline(None)) == run_fingerprint(Pipeline(None))  # no file named: the arguments alone


def test_the_evaluation_settings_are_not_the_run_but_a_change_to_them_is_told(tmp_path):
    """An evaluation YAML edited (or another one named, or one added) leaves the finished run the same run, evaluated
    with other settings than recorded (`evaluation_changed`) until `mark_evaluated` records them."""
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    evaluation = tmp_path / "evaluation.yaml"
    evaluation.write_text("max_new_tokens: 96\n")
    recorded = run_fingerprint(Pipeline(evaluation_config=str(evaluation)))
    mark_run_finished(tmp_path, recorded, ["evaluation"])
    assert evaluation_changed(tmp_path, recorded) is None
    evaluation.write_text("max_new_tokens: 128\n")  # fixed after its evaluation failed
    edited = run_fingerprint(Pipeline(evaluation_config=str(evaluation)))
    assert finished_run(tmp_path, edited) and evaluation_changed(tmp_path, edited) == "changed"
    mark_evaluated(tmp_path, edited)
    assert pending_steps(tmp_path) == [] and evaluation_changed(tmp_path, edited) is None
    copy = tmp_path / "copy.yaml"
    copy.write_text(evaluation.read_text())  # the same text elsewhere: the same evaluation
    assert evaluation_changed(tmp_path, run_fingerprint(Pipeline(evaluation_config=str(copy)))) is None
    assert finished_run(tmp_path, run_fingerprint(Pipeline()))  # none now: nothing to evaluate, the same run
    assert evaluation_changed(tmp_path, run_fingerprint(Pipeline())) is None
    mark_run_finished(tmp_path, run_fingerprint(Pipeline()))  # finished without an evaluation, then one is named
    assert evaluation_changed(tmp_path, edited) == "new"


def test_a_run_finished_by_an_earlier_trl_dpr_that_counted_its_evaluation_yaml_is_still_finished(tmp_path):
    """run_complete.json of a trl_dpr whose digest held the evaluation YAML: the same command again is that run, its
    evaluation not taken for changed; a changed argument is refused naming the arguments alone."""
    import hashlib

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    evaluation = tmp_path / "evaluation.yaml"
    evaluation.write_text("max_new_tokens: 96\n")
    arguments = {  # what the earlier run_fingerprint digested
        "Pipeline": {"sft_config": None, "evaluation_config": str(evaluation)},
        "config files": {"Pipeline.evaluation_config": hashlib.sha256(evaluation.read_bytes()).hexdigest()},
    }
    earlier = hashlib.sha256(json.dumps(arguments, default=str, sort_keys=True).encode()).hexdigest()
    parts = {
        part: hashlib.sha256(json.dumps(value, default=str, sort_keys=True).encode()).hexdigest()
        for part, value in (
            ("arguments", {"Pipeline": arguments["Pipeline"]}),
            ("config files", arguments["config files"]),
        )
    }
    (tmp_path / RUN_COMPLETE_NAME).write_text(json.dumps({"arguments_sha256": earlier, "parts": parts}) + "\n")
    now = run_fingerprint(Pipeline(evaluation_config=str(evaluation)))
    assert finished_run(tmp_path, now) and evaluation_changed(tmp_path, now) is None
    assert not finished_run(tmp_path, run_fingerprint(Pipeline("other.yaml", str(evaluation))))
    with pytest.raises(ValueError, match=r"finished with other arguments; its model is left as it is"):
        claim_output_dir(tmp_path)
    release_output_dir(tmp_path)


def _earlier_record(folder, fields: dict, config_files: dict) -> None:
    """run_complete.json as the trl_dpr before this one wrote it: its digests held the evaluation YAML's text."""
    import hashlib

    def digest(value):
        return hashlib.sha256(json.dumps(value, default=str, sort_keys=True).encode()).hexdigest()

    arguments = {"Pipeline": fields, "config files": config_files}
    parts = {"arguments": digest({"Pipeline": fields}), "config files": digest(config_files)}
    (folder / RUN_COMPLETE_NAME).write_text(json.dumps({"arguments_sha256": digest(arguments), "parts": parts}))


def test_a_run_finished_by_an_earlier_trl_dpr_whose_evaluation_yaml_alone_was_edited_is_finished_evaluation_changed(
    tmp_path,
):
    """Its record cannot say which config file changed; when the evaluation YAML is the only one the run names, it is
    that one: the same trained run, evaluated again. With an SFT recipe named too, it is refused as before."""
    import hashlib

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    evaluation, sft = tmp_path / "evaluation.yaml", tmp_path / "sft.yaml"
    evaluation.write_text("max_new_tokens: 96\n")
    sft.write_text("learning_rate: 1.0e-4\n")

    def sha(path):
        return hashlib.sha256(path.read_bytes()).hexdigest()

    _earlier_record(
        tmp_path,
        {"sft_config": None, "evaluation_config": str(evaluation)},
        {"Pipeline.evaluation_config": sha(evaluation)},
    )
    evaluation.write_text("max_new_tokens: 128\n")  # edited after that run was evaluated
    now = run_fingerprint(Pipeline(evaluation_config=str(evaluation)))
    assert finished_run(tmp_path, now) and evaluation_changed(tmp_path, now) == "changed"
    mark_evaluated(tmp_path, now)  # evaluated again with it: the same command again only shows its table
    assert finished_run(tmp_path, now) and evaluation_changed(tmp_path, now) is None

    config_files = {"Pipeline.sft_config": sha(sft), "Pipeline.evaluation_config": sha(evaluation)}
    _earlier_record(tmp_path, {"sft_config": str(sft), "evaluation_config": str(evaluation)}, config_files)
    evaluation.write_text("max_new_tokens: 64\n")
    now = run_fingerprint(Pipeline(str(sft), str(evaluation)))
    assert not finished_run(tmp_path, now)  # the SFT recipe may be the file that changed: another run
    with pytest.raises(ValueError, match=r"finished with other config files"):
        claim_output_dir(tmp_path)
    release_output_dir(tmp_path)


@dataclass
class Data:
    dataset_name: str


def test_an_edited_local_dataset_is_another_run_and_a_hub_dataset_is_its_name(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    train = tmp_path / "train.jsonl"
    train.write_text('{"prompt": "1 km in m?"}\n')
    mark_run_finished(tmp_path, run_fingerprint(Data(str(train))))
    assert finished_run(tmp_path, run_fingerprint(Data(str(train))))  # untouched: the same run
    with open(train, "a") as f:
        f.write('{"prompt": "2 km in m?"}\n')  # one row more: other training data, another run
    assert not finished_run(tmp_path, run_fingerprint(Data(str(train))))
    mark_run_finished(tmp_path, run_fingerprint(Data(str(train))))
    train.write_text('{"prompt": "3 km in m?"}\n{"prompt": "4 km in m?"}\n')  # as many bytes, saved a second later
    later = train.stat().st_mtime_ns + 1_000_000_000
    os.utime(train, ns=(later, later))
    assert not finished_run(tmp_path, run_fingerprint(Data(str(train))))
    assert run_fingerprint(Data("owner/data")) == run_fingerprint(Data("owner/data"))  # a Hub id: its name alone


def test_a_file_edited_in_a_local_dataset_folder_is_another_run(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "part-0.jsonl").write_text('{"prompt": "1 km in m?"}\n')
    mark_run_finished(tmp_path, run_fingerprint(Data(str(data))))
    (data / ".cache").mkdir()
    (data / ".cache" / "index").write_text("a tool's cache, not the data")
    assert finished_run(tmp_path, run_fingerprint(Data(str(data))))
    with open(data / "train" / "part-0.jsonl", "a") as f:  # the folder's own mtime does not change: its file's does
        f.write('{"prompt": "2 km in m?"}\n')
    assert not finished_run(tmp_path, run_fingerprint(Data(str(data))))


def test_a_finished_runs_folder_is_refused_naming_what_changed_not_offered_to_resume(tmp_path):
    """A finished run has nothing to resume: the refusal says it is finished, what differs from it, and how to train
    again; its model stays."""
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    train = tmp_path / "train.jsonl"
    train.write_text('{"prompt": "1 km in m?"}\n')
    mark_run_finished(tmp_path, run_fingerprint(Data(str(train))))
    later = train.stat().st_mtime_ns + 1_000_000_000
    os.utime(train, ns=(later, later))  # touched: the same bytes, saved again
    assert not finished_run(tmp_path, run_fingerprint(Data(str(train))))
    with pytest.raises(ValueError) as refused:
        claim_output_dir(tmp_path)
    message = str(refused.value)
    assert "already holds a run (model.safetensors), finished with other data (the dataset_name files" in message
    assert "--overwrite_output_dir true" in message and "Resume" not in message and "arguments" not in message
    assert (tmp_path / "model.safetensors").read_bytes() == b"weights"

    mark_run_finished(tmp_path, run_fingerprint(Recipe()))
    assert not finished_run(tmp_path, run_fingerprint(Recipe(kl_coef=0.5)))
    with pytest.raises(ValueError, match=r"finished with other arguments; its model is left as it is"):
        claim_output_dir(tmp_path)
    release_output_dir(tmp_path)


def test_a_run_finished_by_an_earlier_trl_dpr_that_did_not_count_the_data_is_still_finished(tmp_path):
    """run_complete.json of a trl_dpr that digested the arguments alone (no data files, no parts): the same command
    again is `Already finished` while its arguments are the same, not refused for data it never recorded."""
    import hashlib

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    train = tmp_path / "train.jsonl"
    train.write_text('{"prompt": "1 km in m?"}\n')
    arguments = {"Data": {"dataset_name": str(train)}}  # what the earlier run_fingerprint digested
    earlier = hashlib.sha256(json.dumps(arguments, default=str, sort_keys=True).encode()).hexdigest()
    (tmp_path / RUN_COMPLETE_NAME).write_text(json.dumps({"arguments_sha256": earlier}) + "\n")
    assert finished_run(tmp_path, run_fingerprint(Data(str(train))))
    assert not finished_run(tmp_path, run_fingerprint(Data(str(tmp_path / "other.jsonl"))))  # other arguments
    with pytest.raises(ValueError, match=r"finished with other arguments or data \(or an earlier trl_dpr made it\)"):
        claim_output_dir(tmp_path)
    release_output_dir(tmp_path)


def test_a_local_dataset_folder_costs_one_stat_a_data_file_and_its_hidden_folders_are_not_walked(
    tmp_path, monkeypatch
):
    from trl_dpr.running import checkpointing

    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "part-0.jsonl").write_text('{"prompt": "1 km in m?"}\n')
    (data / "test.jsonl").write_text('{"prompt": "2 km in m?"}\n')
    (data / ".git" / "objects").mkdir(parents=True)
    for i in range(20):  # a repository's history next to the data: not the data, not read
        (data / ".git" / "objects" / f"{i}").write_text("blob")
    real_stat, stats = os.stat, []
    monkeypatch.setattr(
        checkpointing.os, "stat", lambda path, *a, **kw: stats.append(str(path)) or real_stat(path, *a, **kw)
    )
    state = checkpointing._files_state(data)
    monkeypatch.undo()
    assert sorted(stats) == [str(data), str(data / "test.jsonl"), str(data / "train" / "part-0.jsonl")]
    expected = [
        (name, (data / name).stat().st_size, (data / name).stat().st_mtime_ns)
        for name in ("test.jsonl", "train/part-0.jsonl")
    ]
    assert state == expected


def test_a_step_done_leaves_the_rest_pending_in_order_and_the_run_finished(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    fingerprint = run_fingerprint(Data(str(tmp_path / "model.safetensors")))  # with its parts: data files
    mark_run_finished(tmp_path, fingerprint, ["evaluation", "merge", "push"])
    mark_step_done(tmp_path, "merge")
    assert pending_steps(tmp_path) == ["evaluation", "push"]
    mark_step_done(tmp_path, "merge")  # done already: nothing changes
    mark_step_done(tmp_path, "evaluation")
    assert pending_steps(tmp_path) == ["push"]
    record = json.loads((tmp_path / RUN_COMPLETE_NAME).read_text())
    assert record == {
        "arguments_sha256": fingerprint,
        "parts": fingerprint.parts,
        "evaluation_sha256": None,  # no evaluation_config
        "pending": ["push"],
    }
    assert finished_run(tmp_path, fingerprint)
    assert [p.name for p in tmp_path.iterdir() if "run_complete" in p.name] == [RUN_COMPLETE_NAME]  # no partial left


def test_a_record_without_pending_steps_lists_none_and_a_step_done_leaves_it_as_it_was(tmp_path):
    mark_run_finished(tmp_path, run_fingerprint(Recipe()))  # as trl-dpr sft and earlier versions record
    written = (tmp_path / RUN_COMPLETE_NAME).read_text()
    assert "pending" not in json.loads(written) and pending_steps(tmp_path) is None
    mark_step_done(tmp_path, "evaluation")
    assert (tmp_path / RUN_COMPLETE_NAME).read_text() == written
    assert pending_steps(tmp_path / "nothing-here") is None


def test_the_record_of_a_finished_run_holds_no_argument_in_clear(tmp_path):
    mark_run_finished(tmp_path, run_fingerprint(Recipe(model_init_kwargs={"token": "hf_FAKEtokenINaRECIPE"})))
    assert "hf_FAKE" not in (tmp_path / RUN_COMPLETE_NAME).read_text()


def test_a_run_that_starts_over_in_a_finished_runs_folder_removes_its_record_of_being_finished(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    mark_run_finished(tmp_path, run_fingerprint(Recipe()))
    claim_output_dir(tmp_path, overwrite=True)
    start_writing(tmp_path)
    release_output_dir(tmp_path)  # killed here: not taken for the finished run
    assert not finished_run(tmp_path, run_fingerprint(Recipe()))


def plant_finished_sft(folder: Path) -> None:
    """A finished SFT output as `trl-dpr sft` leaves it: π_SFT (sharded), π_ref and its manifest, a checkpoint, the
    marker last, and the run's record; beside them a file of the user's."""
    from trl_dpr.reference_manifest import mark_sft_complete

    (folder / "dpr_reference").mkdir(parents=True)
    for name in (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "dpr_reference/model.safetensors",
    ):
        (folder / name).write_bytes(b"old weights")
    (folder / "model.safetensors.index.json").write_text("{}")
    for name in ("config.json", "tokenizer.json", "trainer_state.json", "dpr_reference/config.json"):
        (folder / name).write_text("{}")
    (folder / MANIFEST_NAME).write_text('{"path": "dpr_reference", "step": 6, "total_steps": 12}')
    _checkpoint(folder / "checkpoint-6", 6)
    mark_sft_complete(folder)
    mark_run_finished(folder, run_fingerprint(Recipe()))
    (folder / "notes.txt").write_text("the user's own file")
    (folder / "my_model.safetensors").write_bytes(b"the user's weights, not a name the run writes")


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_run_started_over_keeps_the_old_run_whole_until_it_starts_writing(tmp_path):
    """--overwrite_output_dir true on a finished SFT, then a mistake found after the claim (the data, the push, an
    evaluation or SFT recipe): released before it wrote, the old run is there byte for byte, still finished. Before the
    fix its model, π_ref and markers were deleted at the claim."""
    from trl_dpr.running.pipeline import has_sft_output

    plant_finished_sft(tmp_path)
    before = folder_bytes(tmp_path)
    claim_output_dir(tmp_path, overwrite=True)
    claim_output_dir(tmp_path, overwrite=True)  # the trainer's own claim, before its `start_writing`
    release_output_dir(tmp_path)  # a check failed
    assert folder_bytes(tmp_path) == before and has_sft_output(str(tmp_path))
    assert finished_run(tmp_path, run_fingerprint(Recipe()))


def test_a_run_started_over_deletes_the_old_runs_model_marker_and_checkpoints_when_it_starts_writing(tmp_path):
    """--overwrite_output_dir true on a finished SFT: once it starts writing (a run killed before it saved anything)
    nothing of the old run passes for the new one (not a finished SFT output, no checkpoint to resume); the user's
    files stay. Before the fix only run_complete.json went, and has_sft_output stayed True."""
    from trl_dpr.running.pipeline import has_sft_output

    plant_finished_sft(tmp_path)
    assert has_sft_output(str(tmp_path)) and last_complete_checkpoint(tmp_path)
    claim_output_dir(tmp_path, overwrite=True)
    start_writing(tmp_path)
    release_output_dir(tmp_path)  # killed here
    left = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    assert left == ["config.json", "my_model.safetensors", "notes.txt", "tokenizer.json"]
    assert (tmp_path / "notes.txt").read_text() == "the user's own file"
    assert not has_sft_output(str(tmp_path)) and last_complete_checkpoint(tmp_path) is None
    claim_output_dir(tmp_path)  # a fresh run is not refused: no run is there any more
    (tmp_path / "model.safetensors").write_bytes(b"new weights")  # the new run's final save, then its marker
    from trl_dpr.reference_manifest import mark_sft_complete

    mark_sft_complete(tmp_path)
    release_output_dir(tmp_path)
    assert has_sft_output(str(tmp_path))


def test_a_resumed_run_and_a_later_claim_by_the_same_run_keep_the_folders_outputs(tmp_path):
    """Resuming keeps the checkpoints it resumes; the trainer's own claim, after `run_sft` claimed with overwrite,
    keeps what the run wrote in between."""
    plant_finished_sft(tmp_path)
    claim_output_dir(tmp_path, overwrite=True, resuming=True)
    release_output_dir(tmp_path)
    assert (tmp_path / "checkpoint-6").is_dir() and (tmp_path / "model-00001-of-00002.safetensors").is_file()
    claim_output_dir(tmp_path, overwrite=True)
    start_writing(tmp_path)
    _checkpoint(tmp_path / "checkpoint-2", 2)  # this run's
    claim_output_dir(tmp_path, overwrite=True)
    start_writing(tmp_path)  # once per claim: what this run wrote stays
    release_output_dir(tmp_path)
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")


def test_a_resumed_run_keeps_the_finished_runs_record_and_table_until_it_starts_writing(tmp_path):
    """--resume_from_checkpoint true on a finished run with other arguments, then a mistake found after the claim:
    its record and evaluation table stay (before the fix the claim deleted them); once it writes, they go."""
    plant_finished_sft(tmp_path)
    (tmp_path / "eval_results.json").write_text('{"table_markdown": "| DPR | 1 |"}')
    before = folder_bytes(tmp_path)
    claim_output_dir(tmp_path, resuming=True)
    release_output_dir(tmp_path)  # a check failed
    assert folder_bytes(tmp_path) == before and finished_run(tmp_path, run_fingerprint(Recipe()))
    claim_output_dir(tmp_path, resuming=True)
    start_writing(tmp_path)
    release_output_dir(tmp_path)
    assert not (tmp_path / RUN_COMPLETE_NAME).exists() and not (tmp_path / "eval_results.json").exists()
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-6")  # what it resumes stays


def test_a_model_the_run_reads_is_refused_where_the_run_writes_and_allowed_beside_it(tmp_path):
    """π_SFT as output_dir (or through a link to it), π_ref in one of its checkpoints: refused; π_SFT in a subfolder
    the run never writes nor deletes (runs/demo/sft beside runs/demo's own outputs): allowed."""
    from trl_dpr.running.checkpointing import check_output_dir_apart

    (tmp_path / "sft").mkdir()
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "iteration-0").mkdir()
    (tmp_path.parent / f"{tmp_path.name}-link").symlink_to(tmp_path)
    check_output_dir_apart(tmp_path, **{"π_SFT": str(tmp_path / "sft"), "π_ref": None})
    with pytest.raises(ValueError, match=r"is π_SFT \('.*-link'\), which this run reads"):
        check_output_dir_apart(tmp_path, **{"π_SFT": str(tmp_path.parent / f"{tmp_path.name}-link")})
    with pytest.raises(ValueError, match=r"holds π_ref \('.*checkpoint-3'\)"):
        check_output_dir_apart(tmp_path, **{"π_ref": str(tmp_path / "checkpoint-3")})
    with pytest.raises(ValueError, match=r"holds π_0"):
        check_output_dir_apart(tmp_path, ("iteration-*",), **{"π_0": str(tmp_path / "iteration-0")})


def test_a_run_that_fails_before_writing_leaves_no_empty_folder_it_created(tmp_path):
    from trl_dpr.running.checkpointing import _release_all

    (tmp_path / "runs" / "kept").mkdir(parents=True)
    claim_output_dir(tmp_path / "runs" / "x" / "dpr")  # runs/ existed, runs/x and runs/x/dpr are the run's
    _release_all()  # what the process's exit does after an error
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["kept"]


def test_trainer_refuses_to_train_over_a_finished_run_and_resumes_from_a_command_line_true(tokenizer, tmp_path):
    import shutil

    first, _, _, _ = make_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    first.train()
    second, _, _, _ = make_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    with pytest.raises(ValueError, match="already holds a run"):
        second.train()
    assert second.state.global_step == 0
    shutil.rmtree(tmp_path / "dpr" / "checkpoint-4")  # as if killed after checkpoint-2
    third, _, _, _ = make_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    third.train(resume_from_checkpoint="true")  # what `--resume_from_checkpoint true` delivers
    assert third.state.global_step == 4


def checkpoint_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_resume_with_other_training_arguments_is_refused_before_a_step_naming_them(tokenizer, tmp_path, capsys):
    """The field tester resumed a run of lr 1e-4 and 30 steps with lr 5e-5 and 20: it went on silently as neither run
    (its schedule the new one's, from the old one's step) and its card and record named the new arguments only."""
    import shutil

    first, _, _, _ = make_trainer(tokenizer, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    first.train()
    shutil.rmtree(tmp_path / "dpr" / "checkpoint-4")  # as if killed after checkpoint-2
    checkpoint = tmp_path / "dpr" / "checkpoint-2"
    saved = checkpoint_bytes(checkpoint)
    other = dict(max_steps=6, learning_rate=5e-4, save_strategy="steps", save_steps=2)
    resumed, _, _, _ = make_trainer(tokenizer, tmp_path, **other)
    with pytest.raises(ValueError) as refused:
        resumed.train(resume_from_checkpoint=True)
    assert str(refused.value) == (
        f"Cannot resume from {checkpoint}: its run had other learning_rate, max_steps; resumed, it would continue as "
        "neither run. Resume with the arguments it started with, or start over: --overwrite_output_dir true without "
        "--resume_from_checkpoint (or another --output_dir)."
    )
    assert resumed.state.global_step == 0 and checkpoint_bytes(checkpoint) == saved
    # What does not change the weights it trains to may differ: the folder (a copy), what is logged and saved.
    shutil.copytree(tmp_path / "dpr", tmp_path / "copy" / "dpr")
    same, _, _, _ = make_trainer(
        tokenizer, tmp_path / "copy", max_steps=4, save_strategy="steps", save_steps=1, logging_steps=2
    )
    same.train(resume_from_checkpoint=True)
    assert same.state.global_step == 4
    assert f"Resuming from {tmp_path / 'copy' / 'dpr' / 'checkpoint-2'}" in capsys.readouterr().out


def test_a_resume_with_another_number_of_processes_is_refused_and_an_older_checkpoint_resumes_with_a_warning(
    tmp_path, caplog
):
    """A run of 2 processes resumed on 1 would halve its global batch (8 → 4) silently. A checkpoint an earlier
    trl_dpr saved records no run: it resumes as it did, with one warning."""
    from trl_dpr.running.checkpointing import _resume_problem, _resume_record

    class Arguments(SimpleNamespace):  # as TrainingArguments: world_size is no field of its to_dict()
        def __init__(self, learning_rate=1e-4, output_dir="runs/K/dpr", world_size=2):
            super().__init__(learning_rate=learning_rate, output_dir=output_dir, world_size=world_size)

        def to_dict(self):
            return {key: value for key, value in vars(self).items() if key != "world_size"}

    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    write_checkpoint_manifest(checkpoint, run=_resume_record(Arguments()))
    assert _resume_problem(checkpoint, Arguments(output_dir="runs/K3/dpr")) is None
    assert _resume_problem(checkpoint, Arguments(world_size=1)).startswith(
        f"Cannot resume from {checkpoint}: its run had other the number of processes (2, now 1); "
    )
    write_checkpoint_manifest(checkpoint)  # as an earlier trl_dpr wrote it
    with caplog.at_level("WARNING", logger="trl_dpr.running.checkpointing"):
        assert _resume_problem(checkpoint, Arguments(world_size=1, learning_rate=1.0)) is None
    assert caplog.messages == [
        f"{checkpoint} records no arguments of its run (an earlier trl_dpr saved it): resuming without checking that "
        "they are the same."
    ]


# ---- a finished run leaves only its outputs -------------------------------------------------------------------------


def test_a_finished_sft_run_leaves_no_lock_and_no_staging_folder(tmp_path):
    from trl import ModelConfig, SFTConfig

    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    output_dir = tmp_path / "sft"
    run_sft(
        SFTScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=8),
        SFTConfig(
            output_dir=str(output_dir),
            max_steps=2,
            save_strategy="steps",
            save_steps=1,
            per_device_train_batch_size=4,
            max_length=64,
            bf16=False,
            use_cpu=True,
            report_to="none",
            seed=0,
        ),
        ModelConfig(model_name_or_path="trl_dpr/embedded-tiny-llama", dtype="float32"),
    )
    assert (output_dir / "checkpoint-2").is_dir() and (output_dir / "model.safetensors").is_file()
    assert sorted(p.name for p in output_dir.iterdir() if p.name.startswith(".")) == []
    claim_output_dir(output_dir, resuming=True)  # the folder is free for the next run


def hold_lock(folder) -> int:
    """Lock `folder`'s lock file through a descriptor of its own, as another process would; returns it."""
    import fcntl

    fd = os.open(Path(folder) / ".trl_dpr.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def is_locked(folder) -> bool:
    import fcntl

    probe = os.open(Path(folder) / ".trl_dpr.lock", os.O_RDWR)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(probe)
    return False


def test_a_folder_whose_lock_file_is_held_is_refused_and_claimed_once_it_is_not(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(OutputDirInUse, match="Another run is using"):
            claim_output_dir(tmp_path)
    finally:
        os.close(holder)
    claim_output_dir(tmp_path)
    assert is_locked(tmp_path)
    release_output_dir(tmp_path)
    assert not (tmp_path / ".trl_dpr.lock").exists()


def test_a_run_that_opened_the_lock_file_of_a_run_just_ending_locks_the_file_that_replaces_it(tmp_path, monkeypatch):
    """A run that ends deletes its lock file while holding it. A run starting that opened the file just before would
    lock a file no longer in the folder, and a third run could lock a new one beside it: it must lock the new one."""
    lock_path = tmp_path / ".trl_dpr.lock"
    holder, real_open, opened = hold_lock(tmp_path), os.open, []

    def open_as_the_holder_ends(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        if Path(path) == lock_path:
            if not opened:  # the holder ends between this open and the flock: it deletes its file, then releases it
                lock_path.unlink()
                os.close(holder)
            opened.append(fd)
        return fd

    monkeypatch.setattr(os, "open", open_as_the_holder_ends)
    claim_output_dir(tmp_path)
    monkeypatch.undo()
    assert len(opened) == 2  # the deleted file, then the one now at the path
    assert is_locked(tmp_path)  # the folder's lock file is held: the next run is refused
    release_output_dir(tmp_path)
