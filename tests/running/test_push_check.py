"""The one check before every push (to the Hub, to a folder, the dry run): issue 42's reproductions, each planted in a
real run folder. The shell here holds none of the planted keys (`secrets={}`, or the variables removed): the check must
find them by their shape, in plain, compressed and base64 form, and refuse `.env` files and links out of the folder."""

import base64
import bz2
import gzip
import json
import os
import zipfile
from types import SimpleNamespace

import pytest

from trl_dpr.running.push import check_push, copy_files_to_push, push_folder

# Fake keys, built so that no test file holds one whole (a scan of this repository finds none).
HF_KEY = "hf_" + "FakeHubTokenNotInTheEnvironment" + "XyZ"  # hf_ and 34 letters, as Hugging Face tokens are
OPENAI_KEY = "sk-" + "proj-FakeKey0123456789abcdefABCDEF"
WANDB_KEY = "0123456789abcdef" * 2 + "01234567"  # 40 hex digits


class StandInHub:
    """Stands in for HfApi: records what would be created and committed (nothing may be, when the check refuses)."""

    def __init__(self):
        self.repos, self.commits = [], []

    def create_repo(self, repo_id, **kwargs):
        self.repos.append(repo_id)
        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, **kwargs):
        self.commits.append(kwargs)
        return "committed"


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A finished run's folder, in a shell without any credential variable (the push that missed everything)."""
    for name in [n for n in os.environ if n.endswith(("_TOKEN", "_API_KEY", "_SECRET", "_PASSWORD", "_ACCESS_KEY"))]:
        monkeypatch.delenv(name)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-token"))
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "README.md").write_text(
        "# A model\n\nTrained with scikit-learn-free code; risk-assessment-framework-2024.\n"
    )
    (folder / "trainer_state.json").write_text(json.dumps({"git_commit": "a" * 40, "log_history": []}, indent=1))
    return folder


def refused(folder, **kwargs) -> str:
    """The one line a Hub push of `folder` is refused with; the stand-in Hub shows that nothing was sent."""
    hub = StandInHub()
    with pytest.raises(ValueError) as error:
        push_folder(folder, "me/model", api=hub, **kwargs)
    assert hub.repos == [] and hub.commits == []
    message = str(error.value)
    assert "\n" not in message and message.startswith("Not pushing") and "Nothing was sent" in message
    for key in (HF_KEY, OPENAI_KEY, WANDB_KEY):
        assert key not in message  # the refusal names the file and line, never the value
    return message


def test_an_ordinary_run_folder_passes_the_check_and_is_pushed(run):
    hub = StandInHub()
    assert push_folder(run, "me/model", api=hub) == "committed"
    assert sorted(op.path_in_repo for op in hub.commits[0]["operations"]) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "trainer_state.json",
    ]


def test_a_push_without_weights_is_refused_in_one_line(run, tmp_path):
    """Review of deae23c, finding 6: a push that sent a model card and a config, and no model."""
    (run / "model.safetensors").unlink()
    (run / "training_args.bin").write_bytes(b"never pushed")
    message = refused(run)
    assert f"Not pushing '{run}': no file it would send holds weights" in message and "save_model()" in message
    with pytest.raises(ValueError, match="no file it would send holds weights"):
        copy_files_to_push(run, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_a_dotenv_file_is_refused_whatever_it_holds(run):
    (run / ".env").write_text(f"HF_TOKEN={HF_KEY}\n")
    (run / "sub").mkdir()
    (run / "sub" / ".env.local").write_text("NOTHING=here\n")
    message = refused(run)
    assert ".env is a .env file" in message and "sub/.env.local is a .env file" in message
    assert ".env:1 holds a Hugging Face token (hf_...)" in message


def test_a_hugging_face_token_not_in_the_environment_is_found_by_its_shape_with_its_line(run):
    (run / "eval_results.json").write_text(json.dumps({"judge": "exact", "token": HF_KEY}, indent=1))
    assert "eval_results.json:3 holds a Hugging Face token (hf_...)" in refused(run)


def test_an_openai_style_key_and_a_wandb_key_beside_wandb_are_found(run):
    (run / "notes.md").write_text(f"judge key: {OPENAI_KEY}\n")
    (run / "setup.log").write_text(f"step 1\nwandb login {WANDB_KEY}\n")
    message = refused(run)
    assert "notes.md:1 holds an API key (sk-...)" in message
    assert "setup.log:2 holds a W&B API key (40 hex digits beside 'wandb')" in message
    assert "trainer_state.json" not in message and "README.md" not in message  # a commit hash, hyphenated words


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".zip"])
def test_a_key_in_a_compressed_log_is_found(run, suffix):
    text = f"step 1\nstep 2 token={HF_KEY}\n".encode()
    path = run / f"train.log{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("train.log", text)
    else:
        path.write_bytes({".gz": gzip.compress, ".bz2": bz2.compress}[suffix](text))
    assert f"train.log{suffix}:2 holds a Hugging Face token (hf_...) (decompressed)" in refused(run)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_a_key_in_a_utf16_or_utf32_text_file_is_found_with_its_line(run, encoding):
    """Trial B, finding 8: a token in a UTF-16 file (Windows' editors, PowerShell's `>`) was pushed."""
    (run / "notes.txt").write_bytes(f"first line\ntoken: {HF_KEY}\n".encode(encoding))  # "utf-16"/"utf-32": a BOM
    assert HF_KEY.encode() not in (run / "notes.txt").read_bytes()  # not found as UTF-8
    assert "notes.txt:2 holds a Hugging Face token (hf_...)" in refused(run)
    (run / "notes.txt").write_bytes(f"the secret: {'Xq9-private-passphrase-77'}\n".encode(encoding))
    assert "notes.txt:1 holds the value of MY_PASSWORD" in refused(
        run, secrets={"MY_PASSWORD": "Xq9-private-passphrase-77"}
    )


def test_a_key_in_a_compressed_utf16_log_is_found(run):
    (run / "train.log.gz").write_bytes(gzip.compress(f"step 1\ntoken={HF_KEY}\n".encode("utf-16")))
    assert "train.log.gz:2 holds a Hugging Face token (hf_...) (decompressed)" in refused(run)


def test_a_key_in_the_second_utf16_member_of_a_zip_is_found_with_its_member_and_line(run):
    """Review of deae23c, finding 2: the members were joined before decoding; past the first, UTF-16 was misread."""
    with zipfile.ZipFile(run / "logs.zip", "w") as archive:
        archive.writestr("a.log", "first member\n".encode("utf-16"))
        archive.writestr("b.log", f"step 1\ntoken={HF_KEY}\n".encode("utf-16"))
    assert "logs.zip:2 holds a Hugging Face token (hf_...) (decompressed) in its member b.log" in refused(run)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32-be"])
def test_a_key_in_a_utf16_or_utf32_text_file_too_big_to_read_whole_is_found_with_its_line(run, monkeypatch, encoding):
    """Review of deae23c, finding 3: past `_READ_WHOLE_MAX` (64 MiB) a UTF-16/32 file was scanned as raw bytes only.
    The threshold is lowered here to 64 KiB, so that a 2 MiB file (two 1 MiB read chunks and more) is over it."""
    monkeypatch.setattr("trl_dpr.running.secret_scan._READ_WHOLE_MAX", 64 << 10)
    lines = ["x" * 999] * 1100 + [f"token={HF_KEY}"]
    (run / "big.log").write_bytes("\n".join(lines).encode(encoding))
    assert (run / "big.log").stat().st_size > 2 << 20 and HF_KEY.encode() not in (run / "big.log").read_bytes()
    assert "big.log:1101 holds a Hugging Face token (hf_...)" in refused(run)


def test_a_key_split_between_two_read_chunks_of_a_big_utf16_file_is_found(tmp_path, monkeypatch):
    from trl_dpr.running.secret_scan import secrets_in_file

    monkeypatch.setattr("trl_dpr.running.secret_scan._READ_WHOLE_MAX", 1 << 10)
    text = "line\n" * 300 + "the secret: Xq9-private-passphrase-77\n"
    (tmp_path / "big.log").write_bytes(text.encode("utf-16"))
    at = (tmp_path / "big.log").read_bytes().find("passphrase".encode("utf-16-le"))
    for chunk_size in (at - 1, at, at + 1, 1001):  # the value's characters, and one character's bytes, cut in two
        assert secrets_in_file(
            tmp_path / "big.log", {"MY_PASSWORD": "Xq9-private-passphrase-77"}, chunk_size=chunk_size
        ) == [(301, "the value of MY_PASSWORD")]


def test_a_base64_copy_of_a_key_is_found(run):
    encoded = base64.b64encode(f"Bearer {HF_KEY}".encode()).decode()
    (run / "request.json").write_text(json.dumps({"headers": {"Authorization": encoded}}))
    assert "request.json:1 holds a Hugging Face token (hf_...), base64-encoded" in refused(run)


def test_a_value_of_this_shells_credentials_is_still_found_by_its_value(run):
    (run / "log.txt").write_text("logged in as someone with Xq9-private-passphrase-77\n")
    assert "log.txt:1 holds the value of MY_PASSWORD" in refused(
        run, secrets={"MY_PASSWORD": "Xq9-private-passphrase-77"}
    )


def test_a_file_that_links_outside_the_run_folder_is_refused(run, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (run / "id_rsa").symlink_to(outside / "id_rsa")
    assert f"id_rsa is a link to {outside / 'id_rsa'}, outside the run folder" in refused(run)


def test_the_dry_run_and_a_push_to_a_folder_go_through_the_same_check(run, tmp_path):
    (run / ".env").write_text(f"HF_TOKEN={HF_KEY}\n")
    with pytest.raises(ValueError, match=r"\.env is a \.env file"):
        copy_files_to_push(run, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()  # nothing copied


def test_a_file_the_user_vouches_for_is_pushed_but_never_with_their_own_key(run, tmp_path):
    (run / "wandb_example.md").write_text(f"An example W&B key (revoked): wandb {WANDB_KEY}\n")
    with pytest.raises(ValueError, match="wandb_example.md:1 holds a W&B API key"):
        check_push(run, secrets={})
    copied = copy_files_to_push(run, tmp_path / "copy", secrets={}, allow=["wandb_example.md"])
    assert "wandb_example.md" in copied and (tmp_path / "copy" / "wandb_example.md").is_file()
    with pytest.raises(ValueError, match="wandb_example.md:1 holds the value of WANDB_API_KEY"):
        check_push(run, secrets={"WANDB_API_KEY": WANDB_KEY}, allow=["wandb_example.md"])
    with pytest.raises(ValueError, match=r"Allowed \['nope.md'\], but a push of .* holds no such file"):
        check_push(run, secrets={}, allow=["nope.md"])
