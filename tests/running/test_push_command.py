"""`trl-dpr push OUTPUT_DIR --to REPO_OR_DIR` as a user's shell runs it (a forked process: exit code, stdout, stderr),
on a real SFT run of the embedded tiny model: the copy holds π_ref and loads as the same reward model; a run that is
not finished, or holds a secret, exits 2 with one line and copies nothing."""

import os
import shutil
from pathlib import Path

import pytest

from trl_dpr import CheckpointRewardModel
from trl_dpr.running.push import _is_folder, files_to_push

from .test_cli_process import trl_dpr_forked
from .test_hub import ANSWER, QUESTION, tiny_sft


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    return Path(tiny_sft(tmp_path_factory.mktemp("push-command"), use_peft=False))


def test_push_to_a_folder_copies_the_run_with_pi_ref_and_it_loads_as_the_same_reward_model(sft_run, tmp_path):
    expected = CheckpointRewardModel.from_pretrained(str(sft_run), dtype="float32").score_text([QUESTION], [ANSWER])[0]
    result = trl_dpr_forked("push", str(sft_run), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    copied = sorted(
        p.relative_to(tmp_path / "pushed").as_posix() for p in (tmp_path / "pushed").rglob("*") if p.is_file()
    )
    assert copied == sorted(files_to_push(sft_run)) and "dpr_reference/model.safetensors" in copied
    assert f"Pushed {len(copied)} files of {sft_run} to the folder {tmp_path / 'pushed'}." in result.stdout
    hidden = shutil.move(sft_run, f"{sft_run}.hidden")  # the copy alone: nothing may be read from the run folder
    try:
        got = CheckpointRewardModel.from_pretrained(str(tmp_path / "pushed"), dtype="float32").score_text(
            [QUESTION], [ANSWER]
        )[0]
    finally:
        shutil.move(hidden, sft_run)
    assert got["rewards"] == pytest.approx(expected["rewards"], abs=1e-6)


def test_push_refuses_a_run_holding_a_key_with_one_line_and_copies_nothing(sft_run, tmp_path):
    leaked = tmp_path / "run"
    shutil.copytree(sft_run, leaked)
    (leaked / "notes.txt").write_text("first line\nhf_" + "FakeHubTokenNotInTheEnvironmentXyZ\n")
    result = trl_dpr_forked("push", str(leaked), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "notes.txt:2 holds a Hugging Face token (hf_...)" in result.stderr and "--allow FILE" in result.stderr
    assert not (tmp_path / "pushed").exists()
    allowed = trl_dpr_forked(
        "push", str(leaked), "--to", str(tmp_path / "pushed"), "--allow", "notes.txt", tmp_path=tmp_path
    )
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "pushed" / "notes.txt").is_file()


def test_push_refuses_a_folder_that_is_not_a_finished_run(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "checkpoint-2").mkdir()
    result = trl_dpr_forked("push", str(tmp_path / "half"), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"'{tmp_path / 'half'}' is not a finished run to push: no final model" in result.stderr
    assert not (tmp_path / "pushed").exists()


def test_to_names_a_folder_by_its_path_and_a_hub_repo_by_its_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("runs")
    assert _is_folder("./x") and _is_folder("/tmp/x") and _is_folder("runs/pushed") and _is_folder("a/b/c")
    assert not _is_folder("me/tiny-sft") and not _is_folder("tiny-sft")


def test_push_to_a_hub_repo_sends_the_card_loading_the_repo_not_the_local_folder(sft_run, monkeypatch, capsys):
    """The stand-in Hub of test_push_check.py records the commit; the user's own README.md is left as it is."""
    import huggingface_hub

    from trl_dpr.running.push import main

    from .test_push_check import StandInHub

    hub = StandInHub()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda: hub)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    before = (sft_run / "README.md").read_text()
    assert f'model="{sft_run}"' in before  # written at the end of training, not pushed: it loads the output folder
    main([str(sft_run), "--to", "me/tiny-sft"])
    (commit,) = hub.commits
    sent = {op.path_in_repo: op for op in commit["operations"]}
    assert sorted(sent) == sorted(files_to_push(sft_run)) and hub.repos == ["me/tiny-sft"]
    card = sent["README.md"].path_or_fileobj.decode()
    assert 'model="me/tiny-sft"' in card and str(sft_run) not in card
    assert (sft_run / "README.md").read_text() == before
    assert "Pushed" in capsys.readouterr().out
