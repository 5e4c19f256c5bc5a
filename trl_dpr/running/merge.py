"""A LoRA adapter merged into its base, so that the pushed repo loads as a plain model."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from .model_card import _card_loading

# Written into a merge's folder: the files that merge wrote (JSON), the only ones a later merge may replace or remove,
# and whether it finished ("complete": false while it replaces them: a crash then leaves a mix of two merges); with
# each file's SHA-256 ("hashes": one changed since is the user's edit, never replaced) and the adapter's ("source": the
# same adapter in the same dtype reuses the merge).
MERGED_MARKER = ".trl_dpr_merged"
# A merge's sibling staging folder, beside its lock `<staging folder>.lock`, held while the merge runs: the folder of a
# killed merge (its lock free) is removed by the next merge or `trl-dpr push` beside it (`sweep_killed_merges`).
STAGING_PREFIX = ".{name}.merging-"
_STAGING_LOCK = ".lock"


def merged_folder(output_dir: str | os.PathLike) -> str:
    """Where a merged push of the run in `output_dir` writes its merged model: `<output_dir>-merged`."""
    return f"{str(output_dir).rstrip('/')}-merged"


# The names a merge's save_pretrained (model, tokenizer, a trust_remote_code model's code) and card copy write, all at
# the top of its folder: a file of yours named so there is in the way (checked again, exactly, when merging).
_MERGE_WRITES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "*.model",  # a sentencepiece tokenizer: tokenizer.model, spiece.model, ...
    "chat_template.jinja",
    "chat_template.json",
    "*.py",  # a trust_remote_code model's modeling_*.py, configuration_*.py, tokenization_*.py
    "README.md",
    "eval_results.json",
)


def _named_as_merged(folder: Path, name: str) -> bool:
    """Whether `name` (relative to `folder`) is a file at its top named as a merge's files are (`_MERGE_WRITES`)."""
    path = folder / name
    return (
        "/" not in name
        and path.is_file()
        and not path.is_symlink()
        and any(fnmatchcase(name, pattern) for pattern in _MERGE_WRITES)
    )


def check_merge_target(folder: str | os.PathLike) -> None:
    """A `FileExistsError` (one line) when `folder` exists, is not empty and was not written by a merge, or holds a
    file that its merge did not write named as a merge's files are (checked again, exactly, when merging)."""
    folder = Path(folder)
    if (
        folder.exists()
        and not (folder.is_dir() and not any(folder.iterdir()))
        and not (folder / MERGED_MARKER).is_file()
    ):
        raise FileExistsError(
            f"{str(folder)!r} already exists and was not written by merge_adapter_folder; move it away or "
            "merge into another folder (trl_dpr never replaces a folder it did not create)."
        )
    if (own := merge_output_files(folder)) is not None:
        foreign = [name for name in _files_of(folder) if name not in own and _named_as_merged(folder, name)]
        if foreign:
            raise _foreign_files(folder, foreign)
        if edited := _edited_files(folder):
            raise FileExistsError(
                f"{str(folder)!r} holds {', '.join(edited)}, which a merge wrote and which changed since (an edit of "
                "yours, which a merge would replace): move them away, or merge into another folder."
            )


def _check_merge_target_on_main(folder: str | os.PathLike) -> None:
    """`check_merge_target` run by the main process only (it reads every file of a merged model), its refusal raised on
    every process: before training, N ranks hashing one folder read it N times."""
    from .checkpointing import _agree, _is_main_process

    refusal = None
    if _is_main_process():
        try:
            check_merge_target(folder)
        except (FileExistsError, ValueError) as error:
            refusal = [type(error).__name__, str(error)]
    if "torch" in sys.modules:
        refusal = _agree(refusal)
    if refusal is not None:
        raise (FileExistsError if refusal[0] == "FileExistsError" else ValueError)(refusal[1])


# SHA-256s this process computed, by file and its (inode, size, modification time): a merged model's files are checked
# before the merge, by the reuse check and by a push; each is read once while it is unchanged.
_HASHED: dict[tuple[str, int, int, int], str] = {}


def _sha256(path: Path) -> str:
    status = path.stat()
    key = (os.path.realpath(path), status.st_ino, status.st_size, status.st_mtime_ns)
    if key not in _HASHED:
        digest = hashlib.sha256()
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        _HASHED[key] = digest.hexdigest()
    return _HASHED[key]


def _edited_files(folder: Path) -> list[str]:
    """The files the finished merge in `folder` wrote whose contents differ from its record (missing ones are not
    edits: a merge writes them again); none for a merge that recorded no hashes."""
    record = _merge_record(folder)
    if record is None or not record[1]:
        return []
    return [
        name
        for name, digest in sorted(record[3].items())
        if (folder / name).is_file() and _sha256(folder / name) != digest
    ]


def _source_digest(adapter_dir: Path, dtype: str) -> str:
    """One SHA-256 over what a merge reads from `adapter_dir` (weights, config, tokenizer, card, evaluation), its base
    (`_base_state`) and the `dtype` it merges in: equal digests merge to the same files ("auto" matches no merge's
    record)."""
    digest = hashlib.sha256(dtype.encode())
    digest.update(f"\0base\0{_base_state(adapter_dir)}".encode())
    for path in sorted(adapter_dir.iterdir()):
        if path.is_file() and (path.name.startswith("adapter_") or _named_as_merged(adapter_dir, path.name)):
            digest.update(f"\0{path.name}\0{_sha256(path)}".encode())
    return digest.hexdigest()


def _base_state(adapter_dir: Path) -> str:
    """The adapter's base as a merge's record names it: a local folder by its config and weight files' names, sizes and
    modification times (an SFT retrained in place is merged again; its bytes are not read), a Hub id with its revision."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    base = config.get("base_model_name_or_path") or ""
    try:
        base = _base_of(adapter_dir, base)
    except FileNotFoundError:  # the merge says so in one line
        return base
    if not os.path.isdir(base):
        return f"{base}@{config.get('revision') or ''}"
    files = [
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(Path(base).iterdir())
        if p.is_file() and (p.name == "config.json" or p.name.endswith((".safetensors", ".bin")))
    ]
    return json.dumps([str(Path(base).resolve()), files])


def _reusable_merge(folder: Path, source: str) -> bool:
    """Whether `folder` holds a finished merge of the same adapter in the same dtype (`source`), every file it wrote
    there and unchanged: merging again would write the same files."""
    if (record := _merge_record(folder)) is None or not record[1]:
        return False
    hashes = record[3]
    return (
        json.loads((folder / MERGED_MARKER).read_text()).get("source") == source
        and set(hashes) == record[0]
        and all((folder / name).is_file() and _sha256(folder / name) == digest for name, digest in hashes.items())
    )


def _foreign_files(folder: Path, names: list[str]) -> FileExistsError:
    return FileExistsError(
        f"{str(folder)!r} holds {', '.join(names)}, which no merge wrote and a merge may replace: move them away or "
        "merge into another folder (trl_dpr never replaces a file it did not write)."
    )


def merge_adapter_folder(
    adapter_dir: str | os.PathLike, output_dir: str | os.PathLike, dtype: str = "auto", overwrite: bool = False
) -> str:
    """Merge a saved LoRA adapter into a full-precision copy of its base (4-bit weights would round the update away)
    and save it with the adapter's tokenizer and card; `overwrite=True` replaces the files an earlier merge wrote into
    `output_dir` (its marker lists them) and leaves every other file there; any other non-empty `output_dir` is refused,
    and so is a file the earlier merge wrote that changed since (a user's edit). A finished merge of the same adapter in
    the same dtype, unchanged, is kept as it is; one that did not finish is redone, `overwrite` or not. Returns
    `output_dir`.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    config_path = adapter_dir / "adapter_config.json"
    if not config_path.is_file():
        raise ValueError(
            f"{str(adapter_dir)!r} holds no adapter_config.json: it is not a PEFT adapter (a full model needs no "
            "merging; push it as it is)."
        )
    if output_dir.resolve() == adapter_dir.resolve():
        raise ValueError("output_dir must differ from adapter_dir: the merged model would overwrite the adapter.")
    if output_dir.exists() and not (output_dir.is_dir() and not any(output_dir.iterdir())):
        check_merge_target(output_dir)
        if overwrite and dtype != "auto" and _reusable_merge(output_dir, _source_digest(adapter_dir, dtype)):
            return str(output_dir)
        if not overwrite and not unfinished_merge(output_dir):
            raise FileExistsError(f"{str(output_dir)!r} is not empty; pass overwrite=True to replace what is there.")
    base_name = _base_of(adapter_dir, json.loads(config_path.read_text())["base_model_name_or_path"])
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    sweep_killed_merges(output_dir.parent)
    prefix = STAGING_PREFIX.format(name=output_dir.name)
    for stale in output_dir.parent.iterdir():  # an earlier trl_dpr's, without a lock: a killed merge's
        if stale.name.startswith(prefix) and not os.path.lexists(_lock_of(stale)) and _looks_like_staging(stale):
            shutil.rmtree(stale, ignore_errors=True)
    # Merged into a sibling staging folder first: what the merge writes is known before anything in output_dir is touched.
    staging, lock = _new_staging(output_dir)
    try:
        base = AutoModelForCausalLM.from_pretrained(base_name, dtype=dtype)
        merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
        merged.save_pretrained(staging)
        tokenizer_source = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base_name
        AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(staging)
        for name in ("README.md", "eval_results.json"):
            if (adapter_dir / name).is_file():
                shutil.copy2(adapter_dir / name, staging / name)
        # The adapter's card loads the adapter folder; this copy's quick start loads the merged model (a push of it
        # rewrites the name again, to the repo or the folder it goes to).
        if (staging / "README.md").is_file() and (card := _card_loading(staging / "README.md", str(output_dir))):
            (staging / "README.md").write_bytes(card)
        merged_in = str(merged.dtype).removeprefix("torch.")
        _replace_merge(
            staging, output_dir, adapter_dir.name, dtype=merged_in, source=_source_digest(adapter_dir, merged_in)
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock.release()  # deletes the lock file
    return str(output_dir)


def _lock_of(staging: Path) -> Path:
    return staging.with_name(staging.name + _STAGING_LOCK)


def _looks_like_staging(folder: Path) -> bool:
    """Whether `folder` is a folder (not a link) holding only files named as a merge writes them (`_MERGE_WRITES`):
    what a merge's staging folder holds, unlike a folder of yours that happens to be named as one."""
    try:
        return stat.S_ISDIR(folder.lstat().st_mode) and all(_named_as_merged(folder, p.name) for p in folder.iterdir())
    except OSError:
        return False


def _new_staging(output_dir: Path):
    """A new staging folder beside `output_dir` and its lock, taken before the folder exists: a sweep never finds this
    merge's folder unlocked. Returns (folder, lock); the caller removes the folder, then releases the lock."""
    from .checkpointing import _FolderLock

    handle, lock_path = tempfile.mkstemp(
        prefix=STAGING_PREFIX.format(name=output_dir.name), suffix=_STAGING_LOCK, dir=output_dir.parent
    )
    os.close(handle)
    lock = _FolderLock(Path(lock_path))
    while not lock.acquire():  # a sweep holds it for a moment (and deletes it: acquire makes it again)
        time.sleep(0.1)
    staging = Path(lock_path.removesuffix(_STAGING_LOCK))
    staging.mkdir()
    return staging, lock


def sweep_killed_merges(folder: str | os.PathLike) -> list[str]:
    """Remove from `folder` the staging folders of merges into any target there that are no longer running (killed:
    their lock is free) and their locks; a running merge's stay. Returns the names removed, each said on the console.
    Without it, a killed merge's full-precision copy of the model stayed, hidden, until a merge of the same target."""
    from .checkpointing import _FolderLock

    removed = []
    for lock_path in sorted(Path(folder).glob(f".*.merging-*{_STAGING_LOCK}")):
        staging = lock_path.with_name(lock_path.name.removesuffix(_STAGING_LOCK))
        try:  # a lock is a file a merge made, beside its staging folder (or none): anything else is someone else's
            if not stat.S_ISREG(lock_path.lstat().st_mode) or (
                os.path.lexists(staging) and not _looks_like_staging(staging)
            ):
                continue
            lock = _FolderLock(lock_path)
            if not lock.acquire():  # its merge is running
                continue
        except OSError:  # gone meanwhile, unreadable, or made a link since (the lock opens no link)
            continue
        try:
            if _looks_like_staging(staging):
                shutil.rmtree(staging, ignore_errors=True)
                removed.append(staging.name)
                print(f"Removed {staging}: the staging folder of a merge that was killed.", flush=True)
        finally:
            lock.release()
    return removed


def _base_of(adapter_dir: Path, base: str) -> str:
    """The adapter's base as a merge loads it: a Hub id or a path that exists from here as it is; a path that does not
    is looked for under the folders above the adapter's (a relative one as it is: an older run recorded its base
    relative to where it started; an absolute one by its last components, longest first: the runs folder was moved);
    else a `FileNotFoundError` (one line), before anything is loaded."""
    if not base or os.path.exists(base):
        return base
    parts = Path(base).parts
    tails = [Path(*parts[i:]) for i in range(1, len(parts))] if os.path.isabs(base) else [Path(base)]
    for tail in tails:
        for above in adapter_dir.resolve().parents:
            if (above / tail / "config.json").is_file():
                return str(above / tail)
    if os.path.isabs(base):
        raise FileNotFoundError(
            f"{str(adapter_dir / 'adapter_config.json')!r} names its base model by the path {base!r}, which does not "
            "exist (moved or deleted?), and no folder above the adapter holds it: set base_model_name_or_path there to "
            "the base model's path now."
        )
    if not (base.startswith((".", "~")) or base.count("/") > 1):  # a Hub id: `name` or `org/name`
        return base
    raise FileNotFoundError(
        f"{str(adapter_dir / 'adapter_config.json')!r} names its base model by the path {base!r}, relative to the "
        "folder its run started in, and there is no such folder from here: run this from that folder, or set "
        "base_model_name_or_path there to the base model's absolute path."
    )


def merge_output_files(folder: str | os.PathLike) -> set[str] | None:
    """The files the merge in `folder` wrote, as its marker lists them; None when `folder` holds no merge. An older
    merge's marker (the adapter's name, from before markers listed files) counts the files there named as a merge's
    files are (`_MERGE_WRITES`): that merge replaced the whole folder. A `ValueError` (one line) when the marker is not
    one a merge writes: a list of names of files inside `folder`, none of them a link or under one (a merge removes
    the files listed, so an entry such as `../f` would delete a file that is not the merge's)."""
    record = _merge_record(Path(folder))
    return None if record is None else record[0]


def unfinished_merge(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a merge that stopped while it replaced an earlier one's files (its marker says
    `"complete": false`): a mix of two merges, which loads without a word but is neither. A merge redoes it."""
    record = _merge_record(Path(folder))
    return record is not None and not record[1]


def merged_dtype(folder: str | os.PathLike) -> str | None:
    """The dtype the finished merge in `folder` was made in, as its marker records it (`float32`, `bfloat16`,
    `float16`); None when there is none. A merge again of the same run uses it: the end of a run merges in the dtype
    the run loaded its model in, which only its arguments knew."""
    try:
        record = _merge_record(Path(folder))
    except ValueError:  # a marker no merge wrote: the merge refuses it
        return None
    return record[2] if record is not None and record[1] else None


def _merge_record(folder: Path) -> tuple[set[str], bool, str | None, dict[str, str]] | None:
    """(files, complete, dtype, hashes) of the marker in `folder`, checked (see `merge_output_files`); None without
    one."""
    marker = folder / MERGED_MARKER
    if not os.path.lexists(marker):
        return None
    if marker.is_symlink():
        raise _invalid_marker(folder, "the marker is a link (a merge writes it as a file)")
    try:
        text = marker.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise _invalid_marker(folder, f"it cannot be read ({type(error).__name__})") from None
    if not text.lstrip().startswith("{"):  # an older merge's marker: the adapter's name
        return {p.name for p in folder.iterdir() if _named_as_merged(folder, p.name)}, True, None, {}
    try:
        record = json.loads(text)
    except ValueError:
        raise _invalid_marker(folder, "it is not valid JSON") from None
    if not isinstance(record, dict):
        raise _invalid_marker(folder, "it is not a JSON object")
    files, complete = record.get("files"), record.get("complete", True)  # markers before "complete": finished ones
    if not isinstance(files, list) or not all(isinstance(name, str) for name in files):
        raise _invalid_marker(folder, 'its "files" is not a list of file names')
    if not isinstance(complete, bool):
        raise _invalid_marker(folder, 'its "complete" is not true or false')
    for name in files:
        if problem := _unsafe_name(folder, name):
            raise _invalid_marker(folder, f"it lists {name!r}, {problem}")
    dtype = record.get("dtype")  # from a merge that recorded it; any other value is no dtype to merge in
    hashes = record.get("hashes", {})  # markers before "hashes": no file can be told edited
    if not isinstance(hashes, dict) or not all(isinstance(digest, str) for digest in hashes.values()):
        raise _invalid_marker(folder, 'its "hashes" is not a map of file names to their SHA-256')
    hashes = {name: digest for name, digest in hashes.items() if name in files}  # a name no longer listed: not ours
    return set(files), complete, dtype if dtype in ("float32", "bfloat16", "float16") else None, hashes


def _unsafe_name(folder: Path, name: str) -> str | None:
    """Why `name` is not a file a merge may write or remove in `folder`: not relative, `..`, a link or under one."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
        return "which is not a path inside the folder"
    path = folder
    for part in parts:
        path = path / part
        if path.is_symlink():
            return "which is a link" if path == folder.joinpath(*parts) else "which is under a link"
    if os.path.lexists(path) and not path.resolve().is_relative_to(folder.resolve()):
        return "which resolves outside the folder"
    return None


def _invalid_marker(folder: Path, problem: str) -> ValueError:
    return ValueError(
        f"{str(folder)!r} holds a merge marker ({MERGED_MARKER}) that no merge wrote: {problem}. Nothing was changed: "
        "remove that folder to merge again (or only the marker, to keep the folder as yours: a merge then refuses it)."
    )


def _files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def _replace_merge(
    staging: Path, output_dir: Path, adapter_name: str, dtype: str | None = None, source: str | None = None
) -> None:
    """Move the merge in `staging` into `output_dir`, replacing and removing only files an earlier merge wrote (listed
    in its marker): a `FileExistsError` (one line), before any change, if a file the merge writes is someone else's."""
    new = _files_of(staging)
    marker = output_dir / MERGED_MARKER
    earlier = merge_output_files(output_dir)
    if earlier is None:  # a new folder
        earlier = set(new)
    # A file of yours, or a folder that is a link (the merge would write through it): refused before any change.
    if foreign := [
        name
        for name in new
        if (os.path.lexists(output_dir / name) and name not in earlier) or _unsafe_name(output_dir, name)
    ]:
        raise _foreign_files(output_dir, foreign)
    output_dir.mkdir(exist_ok=True)
    # Until the end, the marker lists both merges' files and says the merge is not complete: after a crash, a push
    # refuses the mix and the next merge replaces all of it.
    _write_marker(marker, {"adapter": adapter_name, "files": sorted(earlier | set(new)), "complete": False})
    for name in new:
        (output_dir / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / name, output_dir / name)
    for name in sorted(earlier - set(new)):  # an earlier merge's file this one did not write again (another shard)
        if name != MERGED_MARKER and (output_dir / name).is_file():
            (output_dir / name).unlink()
    hashes = {name: _sha256(output_dir / name) for name in new}
    _write_marker(
        marker,
        {
            "adapter": adapter_name,
            "files": new,
            "complete": True,
            **({"dtype": dtype} if dtype else {}),
            "hashes": hashes,
            **({"source": source} if source else {}),
        },
    )


def _write_marker(marker: Path, record: dict) -> None:
    """Write the marker whole or not at all (a crash mid-write would leave one no merge could read)."""
    partial = marker.with_name(f"{marker.name}.tmp")
    partial.write_text(json.dumps(record))
    os.replace(partial, marker)
