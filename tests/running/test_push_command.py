"""`trl-dpr push OUTPUT_DIR --to REPO_OR_DIR` as a user's shell runs it (a forked process: exit code, stdout, stderr),
on a real SFT run of the embedded tiny model: the copy holds π_ref and loads as the same reward model; a run that is
not finished, or holds a secret, exits 2 with one line and copies nothing."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trl import ModelConfig

from trl_dpr import CheckpointRewardModel, DensePathConfig
from trl_dpr.running.checkpointing import release_output_dir
from trl_dpr.running.pipeline import DPRScriptArguments, run_dpr
from trl_dpr.running.push import _is_folder, files_to_push

from .test_cli_process import CLI, ENV, ROOT, trl_dpr_forked
from .test_hub import ANSWER, COMMON, EMBEDDED, QUESTION, tiny_sft


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    return Path(tiny_sft(tmp_path_factory.mktemp("push-command"), use_peft=False))


@pytest.fixture(scope="module")
def sft_lora_sft(tmp_path_factory):
    return Path(tiny_sft(tmp_path_factory.mktemp("push-command-lora"), use_peft=True))


@pytest.fixture(scope="module")
def sft_lora_run(sft_lora_sft):
    """A LoRA DPR policy trained with `merge_adapter: true` and no push (as `trl-dpr dpr` runs it, minus its stages)."""
    output_dir = sft_lora_sft.parent / "dpr"
    args = DensePathConfig(
        output_dir=str(output_dir), max_steps=1, per_device_train_batch_size=4, max_completion_length=8, **COMMON
    )
    script_args = DPRScriptArguments(dataset_name=EMBEDDED, num_train_samples=8, merge_adapter=True)
    run_dpr(script_args, args, ModelConfig(model_name_or_path=str(sft_lora_sft), dtype="float32"))
    release_output_dir(output_dir)
    return output_dir


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
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "a token")  # checked before anything is sent
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


def test_a_hub_push_of_a_run_whose_own_push_failed_clears_that_push_from_its_record(sft_run, tmp_path, monkeypatch):
    """`trl-dpr dpr` again on that run then no longer prints `Not pushed yet`; a push to a folder leaves it pending."""
    import huggingface_hub

    from trl_dpr.running.checkpointing import mark_run_finished, pending_steps
    from trl_dpr.running.push import main

    from .test_push_check import StandInHub

    run = shutil.copytree(sft_run, tmp_path / "run")
    mark_run_finished(run, "fingerprint", ["push"])  # as `trl-dpr dpr` leaves a run whose push failed
    main([str(run), "--to", str(tmp_path / "copy")])
    assert pending_steps(run) == ["push"]  # a copy on this machine is not the recipe's push
    hub = StandInHub()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda: hub)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "a token")
    main([str(run), "--to", "me/tiny-sft"])
    assert len(hub.commits) == 1 and pending_steps(run) == []
    assert "run_complete.json" not in {op.path_in_repo for op in hub.commits[0]["operations"]}


def test_a_push_to_a_folder_carries_a_card_whose_quick_start_loads_that_folder(sft_run, tmp_path):
    """Trial B, finding 9: the copy's card loaded the source folder (model="runs/x"), not the copy."""
    before = (sft_run / "README.md").read_text()
    result = trl_dpr_forked("push", str(sft_run), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    card = (tmp_path / "pushed" / "README.md").read_text()
    assert f'pipeline("text-generation", model="{tmp_path / "pushed"}"' in card and str(sft_run) not in card
    assert card == before.replace(f'model="{sft_run}"', f'model="{tmp_path / "pushed"}"')
    assert (sft_run / "README.md").read_text() == before  # the run's own card is left as it is


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "No Hugging Face token was found (HF_TOKEN, or `hf auth login`)"),
        (
            {"HF_TOKEN": "not-a-real-token", "HF_ENDPOINT": "http://127.0.0.1:9"},
            "Could not reach the Hub at http://127.0.0.1:9 (ConnectError",
        ),
    ],
    ids=["no token", "Hub unreachable"],
)
def test_a_hub_push_without_a_token_or_a_reachable_hub_ends_with_one_line(sft_run, tmp_path, env, message):
    """Trial B, finding 7: online and without a token, `trl-dpr push` ended with httpx's 79-line traceback. A fresh
    interpreter: huggingface_hub reads HF_HUB_OFFLINE and HF_ENDPOINT when it is imported."""
    home = {"HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN_PATH": str(tmp_path / "no-token"), "HF_HUB_OFFLINE": "0"}
    environment = {k: v for k, v in ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")}
    result = subprocess.run(
        [sys.executable, "-c", CLI, "push", str(sft_run), "--to", "me/tiny-sft"],
        cwd=ROOT,
        env={**environment, **home, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 2  # the line, then --debug's hint


def test_a_hub_push_with_a_token_the_hub_refuses_says_to_log_in_again_in_one_line(tmp_path):
    """Review of deae23c, finding 7: a 401 (an invalid or expired token) ended with huggingface_hub's 4-line error.
    A stand-in Hub on this machine answers 401 to every request, as the Hub does to a revoked token."""
    import http.server
    import threading

    class Refusing(http.server.BaseHTTPRequestHandler):
        def refuse(self):
            body = json.dumps({"error": "Invalid credentials in Authorization header"}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_HEAD = do_PUT = refuse

        def log_message(self, *args):
            pass

    hub = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    run = tmp_path / "run"
    run.mkdir()
    for name, text in (
        ("config.json", '{"model_type": "llama"}'),
        ("model.safetensors", "x"),
        ("tokenizer.json", "{}"),
    ):
        (run / name).write_text(text)
    endpoint = f"http://127.0.0.1:{hub.server_address[1]}"
    environment = {k: v for k, v in ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")}
    try:
        result = subprocess.run(
            [sys.executable, "-c", CLI, "push", str(run), "--to", "me/tiny-sft"],
            cwd=ROOT,
            env={
                **environment,
                "HF_HOME": str(tmp_path / "hf-home"),
                "HF_HUB_OFFLINE": "0",
                "HF_TOKEN": "not-a-valid-token",
                "HF_ENDPOINT": endpoint,
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        hub.shutdown()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"The Hub at {endpoint} refused the token (401 Unauthorized" in result.stderr
    assert "Log in again (`hf auth login`" in result.stderr and len(result.stderr.strip().splitlines()) == 2


def test_merge_adapter_without_a_push_merges_at_the_end_and_trl_dpr_push_merges_too(sft_lora_run, tmp_path):
    """Trial B, finding 5: `merge_adapter: true` without push_to_hub was ignored, and no command merged an adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    dpr_dir = sft_lora_run
    merged = Path(f"{dpr_dir}-merged")
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    base = json.loads((dpr_dir / "adapter_config.json").read_text())["base_model_name_or_path"]
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype="float32"), str(dpr_dir))
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = adapted.eval()(ids).logits
        torch.testing.assert_close(
            AutoModelForCausalLM.from_pretrained(merged, dtype="float32").eval()(ids).logits, expected
        )
    (merged / "my-model.Q8_0.gguf").write_text("my own export")
    result = trl_dpr_forked(
        "push", str(dpr_dir), "--to", str(tmp_path / "pushed"), "--merge_adapter", tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr
    pushed = tmp_path / "pushed"
    assert not (pushed / "adapter_config.json").exists() and not (pushed / ".trl_dpr_merged").exists()
    with torch.no_grad():
        torch.testing.assert_close(
            AutoModelForCausalLM.from_pretrained(pushed, dtype="float32").eval()(ids).logits, expected
        )
    assert f'model="{pushed}"' in (pushed / "README.md").read_text()
    assert (merged / "my-model.Q8_0.gguf").read_text() == "my own export"  # kept by the merge, and never pushed:
    own = json.loads((merged / ".trl_dpr_merged").read_text())["files"]
    assert sorted(p.name for p in pushed.iterdir()) == sorted(own) and "my-model.Q8_0.gguf" not in own


def test_the_merged_folders_card_loads_the_merged_folder_not_the_adapter(sft_lora_run):
    """Review of deae23c, finding 7: `OUTPUT_DIR-merged/README.md`'s quick start loaded the adapter folder."""
    adapter_card = (sft_lora_run / "README.md").read_text()
    merged = Path(f"{sft_lora_run}-merged")
    assert f'pipeline("text-generation", model="{sft_lora_run}"' in adapter_card
    assert (merged / "README.md").read_text() == adapter_card.replace(f'model="{sft_lora_run}"', f'model="{merged}"')


def test_push_merge_adapter_merges_in_the_dtype_of_the_runs_own_merge(sft_lora_run, tmp_path):
    """Review of deae23c, finding 7: `trl-dpr push --merge_adapter` merged in the base's saved dtype ("auto"), the end
    of the run in the run's: the run's merge records its dtype, and a merge again of the run uses it. Here the record
    is set to bfloat16 (the tiny base is float32, so "auto" would give float32)."""
    runs = tmp_path / "runs"
    shutil.copytree(sft_lora_run, runs / "dpr")
    shutil.copytree(f"{sft_lora_run}-merged", runs / "dpr-merged")
    marker = json.loads((runs / "dpr-merged" / ".trl_dpr_merged").read_text())
    assert marker["dtype"] == "float32"  # the run's model_args.dtype
    (runs / "dpr-merged" / ".trl_dpr_merged").write_text(json.dumps({**marker, "dtype": "bfloat16"}))
    # A fresh interpreter, not a fork: a float32 → bfloat16 load in a fork of this process (torch's OpenMP pool
    # started) failed with "Invalid thread pool!" in 2 of 6 runs.
    result = subprocess.run(
        [sys.executable, "-c", CLI, "push", str(runs / "dpr"), "--to", str(runs / "pushed"), "--merge_adapter"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((runs / "pushed" / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((runs / "dpr-merged" / ".trl_dpr_merged").read_text())["dtype"] == "bfloat16"


def test_push_merge_adapter_refuses_a_full_model_or_an_sft_output_before_merging(sft_run, sft_lora_sft, tmp_path):
    for run, expected in (
        (sft_run, "holds a full model, not a LoRA adapter"),
        (sft_lora_sft, "is an SFT output, whose π_ref (dpr_reference/) is an adapter"),
    ):
        result = trl_dpr_forked(
            "push", str(run), "--to", str(tmp_path / "pushed"), "--merge_adapter", tmp_path=tmp_path
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"--merge_adapter: '{run}' {expected}" in result.stderr
        assert not (tmp_path / "pushed").exists() and not Path(f"{run}-merged").exists()


def test_push_merge_adapter_refuses_a_destination_inside_the_merged_folder(sft_lora_run, tmp_path):
    merged = Path(f"{sft_lora_run}-merged")
    before = sorted(p.name for p in merged.iterdir())
    result = trl_dpr_forked(
        "push", str(sft_lora_run), "--to", str(merged / "copy"), "--merge_adapter", tmp_path=tmp_path
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--to '{merged / 'copy'}' is inside '{merged}'" in result.stderr
    assert sorted(p.name for p in merged.iterdir()) == before


def test_push_merge_adapter_reuses_an_unchanged_merge_and_refuses_to_replace_an_edited_card(sft_lora_run, tmp_path):
    """Trial C, finding 4: every `trl-dpr push --merge_adapter` merged again, and a line the user had added to the
    merged card was replaced without a word (and the unedited card pushed). Each run's own copy of the folders."""
    runs = tmp_path / "runs"
    shutil.copytree(sft_lora_run, runs / "dpr")
    shutil.copytree(f"{sft_lora_run}-merged", runs / "dpr-merged")
    merged = runs / "dpr-merged"
    weights = (merged / "model.safetensors").stat()
    result = trl_dpr_forked(
        "push", str(runs / "dpr"), "--to", str(runs / "pushed"), "--merge_adapter", tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr
    again = (merged / "model.safetensors").stat()
    assert (again.st_ino, again.st_mtime_ns) == (weights.st_ino, weights.st_mtime_ns)  # kept, not written again
    card = (merged / "README.md").read_text() + "MY HAND-EDITED CARD\n"
    (merged / "README.md").write_text(card)
    before = {p.name: p.read_bytes() for p in merged.iterdir()}
    result = trl_dpr_forked(
        "push", str(runs / "dpr"), "--to", str(runs / "pushed-2"), "--merge_adapter", tmp_path=tmp_path
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"'{merged}' holds README.md, which a merge wrote and which changed since" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the line, then --debug's hint
    assert {p.name: p.read_bytes() for p in merged.iterdir()} == before and not (runs / "pushed-2").exists()


class HubKnowingTheToken:
    """A Hub on this machine that knows the token (`whoami` answers) and refuses every other request with 401, as the
    Hub does to a read-only token asked to create a repo: the check before training passes, the push after it fails."""

    def __init__(self):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                known = self.path.startswith("/api/whoami")
                body = json.dumps({"name": "me", "type": "user"} if known else {"error": "Unauthorized"}).encode()
                self.send_response(200 if known else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = do_PUT = answer

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def dpr_recipe_that_pushes(folder: Path, tokenizer) -> None:
    """A 1-step DPR recipe in `folder` (dpr.yaml) on a planted SFT output, pushing to me/tiny at the end."""
    import yaml

    from ..conftest import save_sft_output

    save_sft_output(folder / "sft", tokenizer)
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"sft_config": None, "model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None}
    pushes = {"push_to_hub": True, "hub_model_id": "me/tiny", "max_steps": 1, "per_device_train_batch_size": 4}
    (folder / "dpr.yaml").write_text(yaml.safe_dump({**recipe, **changes, **pushes, "max_completion_length": 8}))


def hub_environment(tmp_path, **values) -> dict:
    home = {"HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN_PATH": str(tmp_path / "no-token"), "HF_HUB_OFFLINE": "0"}
    return {"HF_TOKEN": "hf_fakefakefakefakefakefakefakefake12", **home, **values}


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"HF_ENDPOINT": "http://127.0.0.1:9"},
            "error (ConnectionError): Could not reach the Hub at http://127.0.0.1:9 (ConnectError",
        ),
        ({"HF_HUB_OFFLINE": "1"}, "push_to_hub is on but the Hub is switched off (HF_HUB_OFFLINE=1)"),
    ],
    ids=["Hub unreachable", "Hub switched off"],
)
def test_a_dpr_run_whose_push_cannot_reach_the_hub_is_refused_before_training_in_one_line(
    tmp_path, tokenizer, values, message
):
    """Trial C, finding 5: with a token and no reachable Hub, `trl-dpr dpr ... push_to_hub` trained and evaluated, then
    ended with 40 lines of httpx traceback. HF_HUB_OFFLINE=1 keeps its own refusal."""
    dpr_recipe_that_pushes(tmp_path, tokenizer)
    environment = {k: v for k, v in ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")}
    result = subprocess.run(
        [sys.executable, "-c", CLI, "dpr", "--config", "dpr.yaml"],
        cwd=tmp_path,
        env={**environment, **hub_environment(tmp_path, **values)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count(message) == 1 and "Traceback" not in result.stderr
    assert "Dense-Path REINFORCE from" not in result.stdout and not list((tmp_path / "dpr").glob("*.safetensors"))


def test_a_push_that_fails_after_training_ends_in_the_same_line_as_trl_dpr_push(tmp_path, tokenizer):
    """Trial C, finding 5: the in-run push re-raised huggingface_hub's error (a traceback per rank) where `trl-dpr push`
    says one line. Here the Hub knows the token but refuses the push (401)."""
    hub = HubKnowingTheToken()
    dpr_recipe_that_pushes(tmp_path, tokenizer)
    environment = {k: v for k, v in ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")}
    env = {**environment, **hub_environment(tmp_path, HF_ENDPOINT=hub.endpoint)}
    try:
        run = subprocess.run(
            [sys.executable, "-c", CLI, "dpr", "--config", "dpr.yaml"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        push = subprocess.run(
            [sys.executable, "-c", CLI, "push", "dpr", "--to", "me/tiny"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        hub.server.shutdown()
    assert run.returncode == 2 and push.returncode == 2, run.stderr[-3000:]
    assert (tmp_path / "dpr" / "model.safetensors").is_file()  # trained, kept
    line = f"error (PermissionError): The Hub at {hub.endpoint} refused the token (401 Unauthorized"
    (said,) = [text for text in push.stderr.splitlines() if text.startswith(line)]
    assert "Traceback" not in run.stderr and run.stderr.count(said) == 1
    assert "The push did not finish; the trained run is kept, finished. Push it: trl-dpr push dpr --to me/tiny" in (
        run.stderr
    )


def test_a_lora_policy_on_a_relative_sft_path_merges_from_any_folder(tmp_path, tokenizer):
    """Trial C, finding 6: a LoRA DPR run started with `model_name_or_path: runs/A/sft` recorded that relative path as
    its adapter's base, and `trl-dpr push RUN --merge_adapter` from another folder failed with a Hub repo-id error. A
    run records the absolute path; an older run's relative one is found above the adapter's folder, else one line."""
    import yaml
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from ..conftest import save_sft_output

    save_sft_output(tmp_path / "runs" / "A" / "sft", tokenizer)
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"sft_config": None, "model_name_or_path": "runs/A/sft", "evaluation_config": None, "max_steps": 1}
    sizes = {"per_device_train_batch_size": 4, "max_completion_length": 8, "output_dir": "runs/Q/dpr"}
    (tmp_path / "dpr.yaml").write_text(yaml.safe_dump({**recipe, **changes, **sizes}))
    trained = trl_dpr_forked(
        "dpr", "--config", "dpr.yaml", "--use_peft", "true", "--lora_r", "4", cwd=tmp_path, tmp_path=tmp_path
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    run, elsewhere = tmp_path / "runs" / "Q" / "dpr", tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = json.loads((run / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tmp_path / "runs" / "A" / "sft")
    sft = AutoModelForCausalLM.from_pretrained(tmp_path / "runs" / "A" / "sft", dtype="float32")
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = PeftModel.from_pretrained(sft, str(run)).eval()(ids).logits
    (run / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "runs/A/sft"}))  # older
    for destination in ("pushed", "pushed-again"):
        pushed = trl_dpr_forked(
            "push", str(run), "--to", f"./{destination}", "--merge_adapter", cwd=elsewhere, tmp_path=tmp_path
        )
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        merged = AutoModelForCausalLM.from_pretrained(elsewhere / destination, dtype="float32")
        with torch.no_grad():
            torch.testing.assert_close(merged.eval()(ids).logits, expected)
        shutil.rmtree(f"{run}-merged")  # the second push merges again, from the adapter
        (run / "adapter_config.json").write_text(json.dumps(config))
    shutil.move(tmp_path / "runs" / "A" / "sft", tmp_path / "moved-sft")
    (run / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "runs/A/sft"}))
    missing = trl_dpr_forked(
        "push", str(run), "--to", "./pushed-3", "--merge_adapter", cwd=elsewhere, tmp_path=tmp_path
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert f"'{run / 'adapter_config.json'}' names its base model by the path 'runs/A/sft', relative to" in (
        missing.stderr
    )


def test_pushed_records_name_local_folders_without_their_absolute_paths(sft_run, tmp_path, monkeypatch):
    """Trial C, finding 10: a pushed copy carried this machine's paths: dpr_reference.json's base_model, the evaluation's
    output_dir in eval_results.json. The run's own files keep them; the copy and the Hub commit name the folders."""
    import huggingface_hub

    from trl_dpr.running.push import main

    from .test_push_check import StandInHub

    run = shutil.copytree(sft_run, tmp_path / "run")
    manifest = json.loads((run / "dpr_reference.json").read_text())
    assert manifest["base_model"] == str(sft_run.parent / "embedded-base")  # where the SFT stage built its base
    evaluation = {"baseline": "SFT", "settings": {"output_dir": str(tmp_path / "eval" / "dpr"), "candidates": []}}
    evaluation["settings"]["candidates"] = [f"DPR={tmp_path / 'runs' / 'dpr'}", "SFT=runs/A/sft"]
    (run / "eval_results.json").write_text(json.dumps(evaluation))
    kept = {name: (run / name).read_bytes() for name in ("dpr_reference.json", "eval_results.json")}
    result = trl_dpr_forked("push", str(run), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    hub = StandInHub()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda: hub)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "a token")
    main([str(run), "--to", "me/tiny-sft"])
    (commit,) = hub.commits
    sent = {op.path_in_repo: op.path_or_fileobj for op in commit["operations"]}
    for name in ("dpr_reference.json", "eval_results.json"):
        pushed = (tmp_path / "pushed" / name).read_bytes()
        assert b"/tmp/" not in pushed and sent[name] == pushed
    assert json.loads((tmp_path / "pushed" / "dpr_reference.json").read_text()) == {
        **manifest,
        "base_model": "embedded-base",
    }
    settings = json.loads((tmp_path / "pushed" / "eval_results.json").read_text())["settings"]
    assert settings == {"output_dir": "dpr", "candidates": ["DPR=dpr", "SFT=runs/A/sft"]}
    assert {name: (run / name).read_bytes() for name in kept} == kept
    expected = CheckpointRewardModel.from_pretrained(str(run), dtype="float32").score_text([QUESTION], [ANSWER])[0]
    copied = CheckpointRewardModel.from_pretrained(str(tmp_path / "pushed"), dtype="float32")
    got = copied.score_text([QUESTION], [ANSWER])[0]  # the copy still loads as the same reward model
    assert got["rewards"] == pytest.approx(expected["rewards"], abs=1e-6)


def test_push_of_an_interrupted_dpr_run_names_the_dpr_stage(sft_lora_run, tmp_path):
    """Trial C, finding 9: `trl-dpr push` on a DPR run with no final model said "the SFT stage did not finish its final
    save". The run's copy without its final weights and record, as a DPR run stopped before its final save."""
    run = shutil.copytree(sft_lora_run, tmp_path / "dpr")
    for name in ("adapter_model.safetensors", "run_complete.json"):
        (run / name).unlink(missing_ok=True)
    result = trl_dpr_forked("push", str(run), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no final model (model.safetensors or adapter_model.safetensors): the DPR stage did not finish" in (
        result.stderr
    )
    assert not (tmp_path / "pushed").exists()


def table_rows(card: str) -> dict[str, str]:
    """A model card's `| name | value |` rows."""
    return {
        cells[0].strip("` "): cells[1].strip()
        for line in card.splitlines()
        if line.startswith("| ") and len(cells := line.strip("|").split("|")) == 2
    }


def test_two_process_cards_state_the_processes_the_global_batch_and_the_sft_hyperparameters(tmp_path):
    """Trial C, finding 13: the DPR card never said how many processes trained it, nor the global batch (a 2-process
    launch doubles it); the SFT card had no hyperparameters at all. One `trl-dpr dpr` with its SFT stage, 2 processes."""
    import yaml

    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    sft = {"output_dir": "sft", "max_steps": 2, "per_device_train_batch_size": 3, "learning_rate": 3.0e-4}
    (tmp_path / "sft.yaml").write_text(
        yaml.safe_dump({**sft_recipe, **sft, "max_length": 96, "num_train_samples": 24})
    )
    dpr_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    dpr = {"sft_config": "sft.yaml", "model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None}
    sizes = {"max_steps": 1, "per_device_train_batch_size": 2, "max_completion_length": 8}
    (tmp_path / "dpr.yaml").write_text(
        yaml.safe_dump({**dpr_recipe, **dpr, **sizes, "gradient_accumulation_steps": 2})
    )
    result = trl_dpr_forked(
        "dpr", "--config", "dpr.yaml", "--accelerate_config", "cpu_ddp", cwd=tmp_path, tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sft_rows = table_rows((tmp_path / "sft" / "README.md").read_text())
    assert sft_rows["processes"] == "2" and sft_rows["learning_rate"] == "0.0003"
    assert sft_rows["max_steps"] == "2" and sft_rows["max_length"] == "96" and sft_rows["seed"] == "0"
    assert sft_rows["global batch (sequences per optimizer step)"] == "3 × 1 × 2 = 6"
    dpr_rows = table_rows((tmp_path / "dpr" / "README.md").read_text())
    assert (
        dpr_rows["processes"] == "2" and dpr_rows["global batch (completions per optimizer step)"] == "2 × 2 × 2 = 8"
    )


class HubAnsweringWhoami:
    """A Hub on this machine whose `whoami` answers `status` with `body` (every other request: 401), counting the
    calls."""

    def __init__(self, status: int, body: dict):
        import http.server
        import threading

        calls = self.calls = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                calls.append(self.path)
                whoami = self.path.startswith("/api/whoami")
                data = json.dumps(body if whoami else {"error": "Unauthorized"}).encode()
                self.send_response(status if whoami else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_HEAD = do_PUT = answer

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def hub_check_against(monkeypatch, hub):
    """`check_hub_push` as a fresh process runs it against `hub` (huggingface_hub reads the endpoint when imported)."""
    from types import SimpleNamespace

    from huggingface_hub import constants

    from trl_dpr.running import push

    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(push, "_HUB_VERDICTS", {}, raising=False)  # this process asked no other Hub
    args = SimpleNamespace(push_to_hub=True, hub_strategy="every_save", hub_token="hf_fakefakefakefakefakefake12")
    return lambda: push.check_hub_push(args)


@pytest.mark.parametrize("status", [429, 503])
def test_a_rate_limited_or_failing_hub_warns_once_and_training_goes_on(monkeypatch, caplog, status):
    """Review of the Hub check, finding 1: a 429 or a 5xx from whoami aborted the launch (HfHubHTTPError); the Hub
    could not say, so the run trains and the push is tried at the end. The pipeline and the trainer both check: one ask."""
    hub = HubAnsweringWhoami(status, {"error": "Too many requests" if status == 429 else "Service unavailable"})
    check = hub_check_against(monkeypatch, hub)
    try:
        with caplog.at_level("WARNING", logger="trl_dpr.running.push"):
            check()
            check()
    finally:
        hub.server.shutdown()
    assert len([path for path in hub.calls if path.startswith("/api/whoami")]) == 1
    (warning,) = [r.getMessage() for r in caplog.records if "could not check the token" in r.getMessage()]
    assert f"(HfHubHTTPError {status}: " in warning and "the push is tried at the end" in warning


def test_a_dpr_run_whose_hub_check_is_rate_limited_trains_with_one_warning(tmp_path, tokenizer):
    """`trl-dpr dpr` with push_to_hub and a Hub answering whoami 429: one warning, trained, the push tried at the end
    (here refused: 401), the run kept with the line that pushes it."""
    hub = HubAnsweringWhoami(429, {"error": "Too many requests"})
    dpr_recipe_that_pushes(tmp_path, tokenizer)
    environment = {k: v for k, v in ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")}
    try:
        result = subprocess.run(
            [sys.executable, "-c", CLI, "dpr", "--config", "dpr.yaml"],
            cwd=tmp_path,
            env={**environment, **hub_environment(tmp_path, HF_ENDPOINT=hub.endpoint)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        hub.server.shutdown()
    assert result.stderr.count("The Hub could not check the token before training (HfHubHTTPError 429") == 1
    assert len([path for path in hub.calls if path.startswith("/api/whoami")]) == 1
    assert (tmp_path / "dpr" / "model.safetensors").is_file() and "Traceback" not in result.stderr
    assert result.returncode == 2 and "Push it: trl-dpr push dpr --to me/tiny" in result.stderr


def test_the_hub_is_asked_once_per_process_whoever_checks(monkeypatch):
    """Review of the Hub check, finding 1: check_dpr_inputs and the trainer each called whoami (on every rank)."""
    hub = HubAnsweringWhoami(200, {"name": "me", "type": "user", "auth": {"accessToken": {"role": "write"}}})
    check = hub_check_against(monkeypatch, hub)
    try:
        check()
        check()
    finally:
        hub.server.shutdown()
    assert len(hub.calls) == 1


@pytest.mark.parametrize("role, refused", [("read", True), ("write", False), ("fineGrained", False)])
def test_a_read_token_is_refused_before_training_and_a_fine_grained_one_is_not(monkeypatch, role, refused):
    """Review of the Hub check, finding 1: a read token passed the check and the push failed after training. A
    fine-grained token may hold the repo's write right: not refused."""
    hub = HubAnsweringWhoami(200, {"name": "me", "type": "user", "auth": {"accessToken": {"role": role}}})
    check = hub_check_against(monkeypatch, hub)
    try:
        if refused:
            with pytest.raises(PermissionError, match="the token is a read token"):
                check()
        else:
            check()
    finally:
        hub.server.shutdown()


def test_a_dpr_run_with_a_read_token_is_refused_in_one_line_before_training(tmp_path, tokenizer):
    """`trl-dpr dpr` with push_to_hub and a read token: exit 2, one line, nothing trained."""
    hub = HubAnsweringWhoami(200, {"name": "me", "type": "user", "auth": {"accessToken": {"role": "read"}}})
    dpr_recipe_that_pushes(tmp_path, tokenizer)
    environment = {k: v for k, v in ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")}
    try:
        result = subprocess.run(
            [sys.executable, "-c", CLI, "dpr", "--config", "dpr.yaml"],
            cwd=tmp_path,
            env={**environment, **hub_environment(tmp_path, HF_ENDPOINT=hub.endpoint)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        hub.server.shutdown()
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("push_to_hub is on but the token is a read token") == 1
    assert "Traceback" not in result.stderr and not list((tmp_path / "dpr").glob("*.safetensors"))


def test_a_pushed_evaluation_record_keeps_every_string_that_is_not_a_path_field(sft_run, tmp_path):
    """Review of the pushed records, finding 2: every absolute-looking string was cut to its last component (an
    answer_pattern `/(\\d+)/` became `(\\d+)`) and non-ASCII text became \\u escapes. Only the path fields change."""
    run = shutil.copytree(sft_run, tmp_path / "run")
    settings = {
        "output_dir": str(tmp_path / "eval" / "dpr"),
        "jsonl_path": str(tmp_path / "data" / "test.jsonl"),
        "baseline": f"SFT={tmp_path / 'runs' / 'sft'}",
        "answer_pattern": "/(\\d+)/",
        "system_prompt": "Réponds en français : /réponse/",
        "judge": "/usr/bin/judge=strict",
    }
    (run / "eval_results.json").write_text(json.dumps({"settings": settings, "note": "/(\\d+)/"}, ensure_ascii=False))
    result = trl_dpr_forked("push", str(run), "--to", str(tmp_path / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    pushed = (tmp_path / "pushed" / "eval_results.json").read_text(encoding="utf-8")
    expected = {**settings, "output_dir": "dpr", "jsonl_path": "test.jsonl", "baseline": "SFT=sft"}
    assert json.loads(pushed) == {"settings": expected, "note": "/(\\d+)/"}
    assert "Réponds en français" in pushed and "\\u" not in pushed


def test_push_merge_adapter_merges_again_when_the_base_was_retrained_in_place(sft_lora_run, tmp_path):
    """Review of merge reuse, finding 3: the reuse check hashed the adapter and the dtype, not the base: an SFT retrained
    at the same path left the merge of the old base in place, pushed as the new one. Each run's own copy of the base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    runs = tmp_path / "runs"
    shutil.copytree(sft_lora_run, runs / "dpr")
    config = json.loads((runs / "dpr" / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype="float32")
    base.save_pretrained(runs / "base")
    (runs / "dpr" / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": str(runs / "base")})
    )
    merged = runs / "dpr-merged"

    def push(to: str) -> None:
        result = trl_dpr_forked(
            "push", str(runs / "dpr"), "--to", str(runs / to), "--merge_adapter", tmp_path=tmp_path
        )
        assert result.returncode == 0, result.stderr[-2000:]

    push("pushed-1")
    first = (merged / "model.safetensors").stat()
    push("pushed-2")
    assert (merged / "model.safetensors").stat().st_mtime_ns == first.st_mtime_ns  # unchanged: reused
    with torch.no_grad():  # the SFT trained again, saved where it was
        base.get_input_embeddings().weight.add_(0.5)
    base.save_pretrained(runs / "base")
    push("pushed-3")
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    retrained = AutoModelForCausalLM.from_pretrained(runs / "base", dtype="float32")
    with torch.no_grad():
        expected = PeftModel.from_pretrained(retrained, str(runs / "dpr")).eval()(ids).logits
        for folder in (merged, runs / "pushed-3"):
            got = AutoModelForCausalLM.from_pretrained(folder, dtype="float32").eval()(ids).logits
            torch.testing.assert_close(got, expected)


def test_push_merge_adapter_of_a_moved_runs_folder_finds_its_base_by_the_paths_last_components(sft_lora_run, tmp_path):
    """Review of absolute base paths, finding 4: a runs folder moved elsewhere kept its adapter's absolute base path,
    which no longer exists: the merge ended in from_pretrained's unclear error. The base is found where it moved to;
    a base that is nowhere is one line, before anything loads."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    runs = tmp_path / "moved" / "runs"
    shutil.copytree(sft_lora_run, runs / "dpr")
    config = json.loads((runs / "dpr" / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype="float32")
    base.save_pretrained(runs / "base")
    before_the_move = tmp_path / "gone" / "runs" / "base"
    (runs / "dpr" / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": str(before_the_move)})
    )
    result = trl_dpr_forked(
        "push", str(runs / "dpr"), "--to", str(tmp_path / "pushed"), "--merge_adapter", tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = PeftModel.from_pretrained(base, str(runs / "dpr")).eval()(ids).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "pushed", dtype="float32").eval()(ids).logits
    torch.testing.assert_close(got, expected)

    nowhere = tmp_path / "gone" / "elsewhere" / "sft-7"
    (runs / "dpr" / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(nowhere)}))
    shutil.rmtree(f"{runs / 'dpr'}-merged")
    result = trl_dpr_forked(
        "push", str(runs / "dpr"), "--to", str(tmp_path / "pushed-2"), "--merge_adapter", tmp_path=tmp_path
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"names its base model by the path '{nowhere}', which does not exist (moved or deleted?)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2 and not (tmp_path / "pushed-2").exists()
    assert not Path(f"{runs / 'dpr'}-merged").exists()


def test_push_merge_adapter_reads_each_file_of_an_unchanged_merge_once(sft_lora_run, tmp_path, monkeypatch):
    """Review of merge reuse, finding 5: `trl-dpr push --merge_adapter` hashed the whole merged model three times (its
    check, the merge's check, the reuse check) before reusing it. Counted here: the bytes the merge module hashes."""
    import hashlib

    from trl_dpr.running import merge
    from trl_dpr.running.push import main

    runs = tmp_path / "runs"
    shutil.copytree(sft_lora_run, runs / "dpr")
    shutil.copytree(f"{sft_lora_run}-merged", runs / "dpr-merged")
    weights = (runs / "dpr-merged" / "model.safetensors").stat()
    hashed = []

    class CountingHashlib:
        @staticmethod
        def sha256(data=b""):
            real = hashlib.sha256(data)

            class Counting:
                def update(self, block):
                    hashed.append(len(block))
                    real.update(block)

                def hexdigest(self):
                    return real.hexdigest()

            return Counting()

    monkeypatch.setattr(merge, "hashlib", CountingHashlib)
    main([str(runs / "dpr"), "--to", str(tmp_path / "pushed"), "--merge_adapter"])
    again = (runs / "dpr-merged" / "model.safetensors").stat()
    assert (again.st_ino, again.st_mtime_ns) == (weights.st_ino, weights.st_mtime_ns)  # reused
    once = sum(p.stat().st_size for folder in ("dpr", "dpr-merged") for p in (runs / folder).iterdir() if p.is_file())
    assert weights.st_size < sum(hashed) <= once
