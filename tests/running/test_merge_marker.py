"""A merge's marker (`.trl_dpr_merged`) names the files a later merge may replace or remove and the files a push of the
merged folder sends. These tests need no model: a merge's last step (`_replace_merge`) moves a staging folder written
here, and `trl-dpr push --merge_adapter` refuses before it loads anything."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from trl_dpr.running.merge import MERGED_MARKER, _replace_merge, check_merge_target
from trl_dpr.running.push import files_to_push

from .test_cli_process import trl_dpr_forked


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path under `root`: a file's bytes, a link's target (not followed)."""
    return {
        p.relative_to(root).as_posix(): (f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def staged(root: Path, names=("config.json", "model.safetensors"), tag: str = "test") -> Path:
    """A merge's staging folder, as save_pretrained leaves it."""
    staging = root / f".dpr-merged.merging-{tag}"
    staging.mkdir()
    for name in names:
        (staging / name).write_text(f"new {name}")
    return staging


def marker_outside(root: Path, merged: Path):
    (root / "victim.txt").write_text("a file of the user's, beside the merged folder")
    return ["config.json", "../victim.txt"], "'../victim.txt', which is not a path inside the folder"


def marker_absolute(root: Path, merged: Path):
    (root / "victim.txt").write_text("a file of the user's, anywhere")
    return ["config.json", str(root / "victim.txt")], "which is not a path inside the folder"


def marker_through_a_linked_folder(root: Path, merged: Path):
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "weights.bin").write_text("the user's weights")
    os.symlink(root / "elsewhere", merged / "sub")
    return ["config.json", "sub/weights.bin"], "'sub/weights.bin', which is under a link"


def marker_listing_a_link(root: Path, merged: Path):
    (root / "mine.safetensors").write_text("the user's weights")
    os.symlink(root / "mine.safetensors", merged / "model.safetensors")
    return ["config.json", "model.safetensors"], "'model.safetensors', which is a link"


def marker_files_a_string(root: Path, merged: Path):
    (merged / "c").write_text("a file of the user's named c")  # "config.json" iterated: c, o, n, f, ...
    return "config.json", '"files" is not a list of file names'


@pytest.mark.parametrize(
    "make",
    [
        marker_outside,
        marker_absolute,
        marker_through_a_linked_folder,
        marker_listing_a_link,
        marker_files_a_string,
    ],
)
def test_a_marker_no_merge_wrote_is_refused_before_any_file_is_touched(tmp_path, make):
    """Review of deae23c, finding 1: a merge removed the files its marker listed, wherever they were."""
    merged = tmp_path / "dpr-merged"
    merged.mkdir()
    (merged / "config.json").write_text("{}")
    files, problem = make(tmp_path, merged)
    (merged / MERGED_MARKER).write_text(json.dumps({"adapter": "dpr", "files": files}))
    staging = staged(tmp_path)
    before = snapshot(tmp_path)
    for step in (check_merge_target, files_to_push, lambda folder: _replace_merge(staging, folder, "dpr")):
        with pytest.raises(ValueError, match="holds a merge marker") as refused:
            step(merged)
        message = str(refused.value)
        assert problem in message and "remove that folder" in message and "\n" not in message
        assert snapshot(tmp_path) == before


def test_trl_dpr_push_merge_adapter_refuses_a_marker_no_merge_wrote_in_one_line(tmp_path):
    root = tmp_path / "runs"
    run = root / "dpr"
    run.mkdir(parents=True)
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "trl_dpr/embedded-tiny-llama"}))
    (run / "adapter_model.safetensors").write_text("x")
    (run / "tokenizer_config.json").write_text("{}")
    merged = root / "dpr-merged"
    merged.mkdir()
    files, _ = marker_outside(root, merged)
    (merged / MERGED_MARKER).write_text(json.dumps({"adapter": "dpr", "files": files}))
    before = snapshot(root)
    result = trl_dpr_forked("push", str(run), "--to", str(root / "pushed"), "--merge_adapter", tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"'{merged}' holds a merge marker ({MERGED_MARKER}) that no merge wrote" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the line, then --debug's hint
    assert snapshot(root) == before


def test_a_merge_interrupted_while_replacing_is_refused_by_a_push_and_redone_by_the_next_merge(tmp_path, monkeypatch):
    """Review of deae23c, finding 4: a Ctrl-C between two moves left a mix of two merges that loaded and pushed."""
    root = tmp_path / "runs"
    root.mkdir()
    merged = root / "dpr-merged"
    _replace_merge(staged(root, ["config.json", "model.safetensors", "tokenizer.json"], "first"), merged, "dpr")
    assert json.loads((merged / MERGED_MARKER).read_text())["complete"] is True
    names = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tokenizer.json"]
    second = staged(root, names, "second")
    real, moves = os.replace, []

    def interrupted(source, target):
        if Path(source).parent == second and len(moves) == 2:
            raise KeyboardInterrupt  # after two of the four files
        moves.append(target)
        real(source, target)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _replace_merge(second, merged, "dpr")
    monkeypatch.setattr(os, "replace", real)
    marker = json.loads((merged / MERGED_MARKER).read_text())
    assert marker["complete"] is False and set(marker["files"]) == {*names, "model.safetensors"}
    with pytest.raises(ValueError, match="the merge that wrote it stopped while it replaced") as refused:
        files_to_push(merged)
    assert "\n" not in str(refused.value)
    result = trl_dpr_forked("push", str(merged), "--to", str(root / "pushed"), tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and not (root / "pushed").exists()
    assert "Merge again: trl-dpr push OUTPUT_DIR --merge_adapter" in result.stderr
    _replace_merge(staged(root, names, "third"), merged, "dpr")  # the next merge replaces the mix whole
    assert sorted(p.name for p in merged.iterdir()) == sorted([*names, MERGED_MARKER])
    assert all((merged / name).read_text() == f"new {name}" for name in names)
    hashes = {name: hashlib.sha256(f"new {name}".encode()).hexdigest() for name in names}  # each file's, as written
    assert json.loads((merged / MERGED_MARKER).read_text()) == {
        "adapter": "dpr",
        "files": names,
        "complete": True,
        "hashes": hashes,
    }
    assert sorted(files_to_push(merged)) == names


def test_a_merge_over_an_older_merges_folder_replaces_the_files_named_as_a_merges_are(tmp_path):
    """Review of deae23c, finding 5: over an older marker (the adapter's name), a sharded merge kept the stale
    model.safetensors beside its shards, and transformers loads that one."""
    merged = tmp_path / "dpr-merged"
    merged.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "notes.txt", "my-model.Q8_0.gguf"):
        (merged / name).write_text(f"old {name}")
    (merged / MERGED_MARKER).write_text("dpr")  # what a merge wrote before markers listed files
    assert sorted(files_to_push(merged)) == ["config.json", "model.safetensors", "tokenizer.json"]
    check_merge_target(merged)
    names = [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
    ]
    _replace_merge(staged(tmp_path, names), merged, "dpr")
    assert sorted(p.name for p in merged.iterdir()) == sorted(
        [*names, "notes.txt", "my-model.Q8_0.gguf", MERGED_MARKER]
    )
    assert (merged / "notes.txt").read_text() == "old notes.txt" and sorted(files_to_push(merged)) == names


def test_a_stale_merge_marker_in_a_runs_output_dir_leaves_the_runs_adapter_in_the_push(tmp_path):
    """Review of deae23c, finding 6: a marker left in a folder later reused as a run's output_dir (overwrite_output_dir
    keeps it) limited the push to the files it listed, and the adapter's weights were left out."""
    run = tmp_path / "dpr"
    run.mkdir()
    names = ["README.md", "adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "training_args.bin"]
    for name in names:
        (run / name).write_text(f"the run's {name}")
    (run / MERGED_MARKER).write_text(json.dumps({"adapter": "x", "files": ["README.md", "model.safetensors"]}))
    assert files_to_push(run) == [name for name in names if name != "training_args.bin"]


def test_only_a_file_at_the_top_named_as_a_merges_files_are_refused_before_merging(tmp_path):
    """Review of deae23c, finding 8: `tokenizer*` matched `tokenizer_backup/notes.txt` (fnmatch's `*` matches `/`)
    and `model*.safetensors*` matched `model_notes.safetensors.txt`; a remote-code model's `.py` files were missed."""
    merged = tmp_path / "dpr-merged"
    (merged / "tokenizer_backup").mkdir(parents=True)
    (merged / MERGED_MARKER).write_text(json.dumps({"adapter": "dpr", "files": ["config.json"], "complete": True}))
    yours = [
        "tokenizer_backup/notes.txt",
        "model_notes.safetensors.txt",
        "my-model.Q8_0.gguf",
        "tokenizer_backup/c.py",
    ]
    for name in ["config.json", *yours]:
        (merged / name).write_text("x")
    check_merge_target(merged)
    for name in ("modeling_custom.py", "model-00001-of-00002.safetensors", "tokenizer_config.json"):
        (merged / name).write_text("yours")
        with pytest.raises(FileExistsError, match=f"holds {name}, which no merge wrote"):
            check_merge_target(merged)
        (merged / name).unlink()


# ---- a killed merge's staging folder -----------------------------------------------------------------------------------


def killed_merge(root: Path, target: str) -> Path:
    """The staging folder of a merge into `root/target` whose process was killed (SIGKILL) while it held it."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time\nfrom pathlib import Path\nfrom trl_dpr.running.merge import _new_staging\n"
        "staging, lock = _new_staging(Path(sys.argv[1]))\n(staging / 'model.safetensors').write_bytes(b'w' * 100)\n"
        "print(staging, flush=True)\ntime.sleep(600)\n"
    )
    merge = subprocess.Popen([sys.executable, "-c", code, str(root / target)], stdout=subprocess.PIPE, text=True)
    staging = Path(merge.stdout.readline().strip())
    merge.send_signal(signal.SIGKILL)
    merge.wait(timeout=60)
    merge.stdout.close()
    return staging


def left_by_a_killed_merge(root: Path, target: str) -> Path:
    """What a merge into `root/target` killed midway leaves (as `killed_merge`, without its process): its staging
    folder with weights in it, and its lock file, which no process holds."""
    staging = root / f".{target}.merging-k1ll3d"
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"w" * 100)
    (root / f"{staging.name}.lock").touch()
    return staging


def test_a_killed_merges_staging_folder_is_swept_beside_any_target_and_a_running_ones_is_kept(tmp_path):
    """A killed merge's full-precision copy stayed, hidden, until a merge into the same target; a merge of another
    target never removed it. Now any sweep beside it does, and never a merge that is still running."""
    from trl_dpr.running.merge import _new_staging, sweep_killed_merges

    killed = killed_merge(tmp_path, "dpr-merged")
    assert killed.is_dir() and killed.name.startswith(".dpr-merged.merging-")
    running, lock = _new_staging(tmp_path / "other-merged")  # held by this process: a merge still running
    try:
        assert sweep_killed_merges(tmp_path) == [killed.name]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, f"{running.name}.lock"])
        assert sweep_killed_merges(tmp_path) == []
    finally:
        lock.release()


def test_a_sweep_keeps_folders_and_links_named_as_locks_and_folders_of_yours_and_still_sweeps_a_killed_merge(tmp_path):
    """A folder named as a lock (before: IsADirectoryError), a link named as one (before: followed, its target created)
    and a folder of yours named as a staging folder beside a free lock file (before: deleted) stay as they were; the
    killed merge beside them is swept."""
    from trl_dpr.running.merge import sweep_killed_merges

    (tmp_path / ".notes.merging-2024").mkdir()
    (tmp_path / ".notes.merging-2024" / "a.txt").write_text("mine")
    (tmp_path / ".notes.merging-2024.lock").mkdir()
    (tmp_path / ".linked.merging-1.lock").symlink_to(tmp_path / "elsewhere.lock")
    (tmp_path / ".mine.merging-2").mkdir()
    (tmp_path / ".mine.merging-2" / "draft.txt").write_text("mine too")
    (tmp_path / ".mine.merging-2.lock").touch()
    killed = left_by_a_killed_merge(tmp_path, "dpr-merged")
    before = snapshot(tmp_path)
    assert sweep_killed_merges(tmp_path) == [killed.name]
    assert snapshot(tmp_path) == {
        name: value for name, value in before.items() if not name.startswith(f"{killed.name}")
    }
    assert not (tmp_path / "elsewhere.lock").exists()


def test_a_push_never_sends_a_merges_staging_folder_or_its_lock(tmp_path):
    """A merge into a folder inside the run's (`merge_adapter_folder(run, run / "sub-merged")`) stages there: before,
    a push of the run listed the staging folder's weights."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.safetensors").write_text("the run's weights")
    killed = left_by_a_killed_merge(run, "sub-merged")
    (killed / "nested").mkdir()
    (killed / "nested" / "config.json").write_text("{}")
    assert files_to_push(run) == ["model.safetensors"]


def test_trl_dpr_push_removes_a_killed_merges_staging_folder_beside_the_run_and_says_so(tmp_path, tokenizer):
    from trl_dpr.reference_manifest import mark_sft_complete

    from ..conftest import save_sft_output
    from .test_cli_process import trl_dpr

    run = mark_sft_complete(save_sft_output(tmp_path / "sft", tokenizer)).parent
    killed = left_by_a_killed_merge(tmp_path, "dpr-merged")
    result = trl_dpr("push", str(run), "--to", str(tmp_path / "pushed"))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"Removed {killed}: the staging folder of a merge that was killed." in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pushed", "sft"]
