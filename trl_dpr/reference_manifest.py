"""Where an SFT run keeps its reference checkpoint π_ref, and the small manifest that records it.

    my-sft/                      # π_SFT: the final model (or PEFT adapter) and tokenizer
    my-sft/dpr_reference/        # π_ref: the model at optimizer step ⌊α·N⌋ (ReferenceCheckpointCallback)
    my-sft/dpr_reference.json    # this manifest: how `CheckpointRewardModel.from_pretrained("my-sft")` finds π_ref
    my-sft/sft_complete.json     # written last by the SFT stage: the model files and their sizes

An SFT killed between π_ref and the final save is never taken for a finished one (`sft_output_problem`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "dpr_reference.json"
REFERENCE_DIRNAME = "dpr_reference"
SFT_COMPLETE_NAME = "sft_complete.json"
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
FORMAT_VERSION = 1


@dataclass
class ReferenceManifest:
    """Record of π_ref next to an SFT model: its relative folder, α, the step ⌊α·N⌋, N, and if it is an adapter."""

    path: str
    fraction: float
    step: int
    total_steps: int
    is_adapter: bool = False
    base_model: str | None = None
    format_version: int = FORMAT_VERSION


def write_manifest(output_dir: str | os.PathLike, manifest: ReferenceManifest) -> Path:
    """Write `dpr_reference.json` into `output_dir` atomically (a crash never leaves a half-written manifest)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / MANIFEST_NAME
    with tempfile.NamedTemporaryFile("w", dir=output_dir, prefix=".dpr_reference.", suffix=".tmp", delete=False) as f:
        json.dump(dataclasses.asdict(manifest), f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
        tmp_name = f.name
    os.replace(tmp_name, target)
    return target


def _leaves_folder(name) -> bool:
    """Whether a path a manifest records, relative to its folder, leads out of it (absolute, or through `..`)."""
    return (
        not isinstance(name, str) or not name or os.path.isabs(name) or ".." in Path(name).parts or name[:1] in "\\/~"
    )


def parse_manifest(text: str, source: str) -> ReferenceManifest:
    """Parse a manifest, with an error that names `source` when it is not one."""
    try:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(ReferenceManifest)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        manifest = ReferenceManifest(**data)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{source} is not a valid DPR reference manifest ({error}). It should be the JSON written by "
            "trl_dpr.ReferenceCheckpointCallback; delete it and re-run SFT with that callback, or pass the reference "
            "checkpoint explicitly with `ref_model_name_or_path=`."
        ) from None
    if _leaves_folder(manifest.path):
        raise ValueError(
            f"{source} points π_ref to {manifest.path!r}, outside the SFT model's folder; a manifest may only name a "
            f"folder inside it (such as {REFERENCE_DIRNAME!r}). Fix the manifest, or pass the reference checkpoint "
            "explicitly with `ref_model_name_or_path=`."
        )
    if manifest.format_version > FORMAT_VERSION:
        raise ValueError(
            f"{source} has format_version {manifest.format_version}, newer than this trl_dpr understands "
            f"({FORMAT_VERSION}). Upgrade trl_dpr."
        )
    return manifest


def resolve_reference(
    sft_model_name_or_path: str, revision: str | None = None, token: str | bool | None = None
) -> tuple[ReferenceManifest, str]:
    """The manifest and a local folder holding π_ref, for a local SFT output or a Hub id of one (then only those are
    downloaded); `FileNotFoundError` saying how to fix a missing manifest or folder.
    """
    how_to_fix = (
        "Train the SFT model with `trl_dpr.ReferenceCheckpointCallback` (`trl-dpr sft` adds it) so the reference "
        "checkpoint π_ref is saved next to it, or pass it explicitly: "
        "`CheckpointRewardModel.from_pretrained(sft_path, ref_model_name_or_path=...)`."
    )
    if os.path.isdir(sft_model_name_or_path):
        manifest_path = Path(sft_model_name_or_path) / MANIFEST_NAME
        if not manifest_path.is_file():
            raise FileNotFoundError(
                f"No reference checkpoint recorded for the SFT model at {sft_model_name_or_path!r}: "
                f"{MANIFEST_NAME} is missing. {how_to_fix}"
            )
        manifest = parse_manifest(manifest_path.read_text(), str(manifest_path))
        reference_dir = Path(sft_model_name_or_path) / manifest.path
        if not reference_dir.resolve().is_relative_to(Path(sft_model_name_or_path).resolve()):
            raise ValueError(
                f"{manifest_path} points to {manifest.path}/, a link out of the SFT model's folder: "
                "copy π_ref into the folder, or pass it explicitly with `ref_model_name_or_path=`."
            )
        if not reference_dir.is_dir():
            raise FileNotFoundError(
                f"{manifest_path} points to the reference checkpoint {str(reference_dir)!r}, which does not exist "
                f"(moved or deleted?). Copy the whole SFT output directory, including {manifest.path}/. {how_to_fix}"
            )
        return manifest, str(reference_dir)

    # A Hub repo id: fetch the manifest, then only the reference folder it names.
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        manifest_file = hf_hub_download(sft_model_name_or_path, MANIFEST_NAME, revision=revision, token=token)
    except (EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError) as error:
        raise FileNotFoundError(
            f"No reference checkpoint recorded for {sft_model_name_or_path!r}: it is not a local directory and "
            f"{MANIFEST_NAME} could not be fetched from the Hub ({type(error).__name__}). {how_to_fix}"
        ) from None
    manifest = parse_manifest(Path(manifest_file).read_text(), f"{sft_model_name_or_path}/{MANIFEST_NAME}")
    local_root = snapshot_download(
        sft_model_name_or_path, revision=revision, token=token, allow_patterns=[f"{manifest.path}/*"]
    )
    reference_dir = Path(local_root) / manifest.path
    if not reference_dir.is_dir():
        raise FileNotFoundError(
            f"{sft_model_name_or_path}/{MANIFEST_NAME} points to {manifest.path}/, which the repository does not "
            f"contain. Push the whole SFT output directory. {how_to_fix}"
        )
    return manifest, str(reference_dir)


def _model_files(output_dir: Path) -> dict[str, int]:
    """The files that make up a saved model and its reference (not cards, logs or checkpoints), with their sizes."""
    files = {}
    for path in sorted(output_dir.rglob("*")):
        relative = path.relative_to(output_dir)
        top = relative.parts[0]
        if (
            not path.is_file()
            or top.startswith((".", "checkpoint-", "runs"))
            or relative.name in ("README.md", "training_args.bin", SFT_COMPLETE_NAME)
        ):
            continue
        if len(relative.parts) > 1 and top != REFERENCE_DIRNAME:
            continue
        files[relative.as_posix()] = path.stat().st_size
    return files


def mark_sft_complete(
    output_dir: str | os.PathLike, base_model: str | None = None, conversational: bool | None = None
) -> Path:
    """Write `sft_complete.json` after the final save: what "the SFT is done" means, its `base_model`, and whether it
    trained on chat messages (`conversational`: how π_SFT reads a string prompt, `sft_trained_on_messages`)."""
    output_dir = Path(output_dir)
    with tempfile.NamedTemporaryFile("w", dir=output_dir, prefix=".sft_complete.", suffix=".tmp", delete=False) as f:
        record = {"format_version": FORMAT_VERSION, "files": _model_files(output_dir)}
        if base_model:
            record["base_model"] = base_model
        if conversational is not None:
            record["conversational"] = conversational
        json.dump(record, f, indent=1)
        tmp_name = f.name
    os.replace(tmp_name, output_dir / SFT_COMPLETE_NAME)
    return output_dir / SFT_COMPLETE_NAME


def sft_trained_on_messages(
    path: str | os.PathLike | None, revision: str | None = None, token: str | bool | None = None
) -> bool | None:
    """Whether the SFT output `path` (a folder, or a Hub id it was pushed to: at the `revision`, with the `token`, π_SFT
    loads with) was trained on chat messages (True) or raw text (False), as its `sft_complete.json` records; None when
    nothing says (an SFT trained elsewhere, or before)."""
    if not path:
        return None
    marker = Path(path) / SFT_COMPLETE_NAME
    if not Path(path).is_dir() and str(path).count("/") == 1:  # a Hub id: `trl-dpr sft` pushes the record too
        from huggingface_hub import hf_hub_download

        try:
            marker = Path(hf_hub_download(str(path), SFT_COMPLETE_NAME, revision=revision, token=token))
        except (OSError, ValueError):  # offline and not cached, no such file or repo
            return None
    if not marker.is_file():
        return None
    try:
        recorded = json.loads(marker.read_text()).get("conversational")
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if isinstance(recorded, bool) else None


def sft_output_problem(path: str | os.PathLike, stage: str = "SFT") -> str | None:
    """What keeps `path` from being a finished SFT output, or None: every file `sft_complete.json` lists, full size, or
    without it (an SFT run from Python) weights, a config and a tokenizer. `stage` names the run that writes `path` in
    the message (`trl-dpr push` asks it of a DPR run's folder too).
    """
    path = Path(path)
    if not path.is_dir():
        return "the folder does not exist"
    marker = path / SFT_COMPLETE_NAME
    if marker.is_file():
        try:
            files = json.loads(marker.read_text())["files"]
        except (ValueError, KeyError, TypeError):
            return f"{SFT_COMPLETE_NAME} is unreadable"
        return files_problem(path, files)
    if not any((path / name).is_file() for name in _WEIGHTS):
        return (
            f"no final model (model.safetensors or adapter_model.safetensors): the {stage} stage did not finish its "
            "final save"
        )
    if not ((path / "config.json").is_file() or (path / "adapter_config.json").is_file()):
        return "no config.json or adapter_config.json next to the weights"
    if not any((path / name).is_file() for name in _TOKENIZER):
        return "no tokenizer files (tokenizer.json / tokenizer_config.json): save the tokenizer with the model"
    return None


def files_problem(folder: str | os.PathLike, files: dict[str, int]) -> str | None:
    """The first of `files` (relative path → size written) that is missing from `folder` or has another size."""
    for name, size in files.items():
        if _leaves_folder(name):
            return f"it lists {name!r}, outside the folder (a manifest names only files inside it)"
        file = Path(folder) / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} were written"
    return None


def check_model_source(path: str, what: str = "Model") -> None:
    """Fail early when `path` is meant as a local model folder that is missing or holds no model; a path that can be a
    Hub id passes (offline: it must be cached).
    """
    folder = Path(path).expanduser()
    if folder.is_dir():
        if not ((folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()):
            raise FileNotFoundError(
                f"{what}: {path!r} exists but holds no model (no config.json or adapter_config.json). Point it at the "
                "output_dir of `trl-dpr sft` or `trl-dpr dpr`, or at a model folder."
            )
        return
    could_be_hub_id = (
        path.count("/") == 1 and not path.startswith((".", "/", "~")) and not Path(path.split("/")[0]).is_dir()
    )
    if could_be_hub_id:
        from huggingface_hub import constants, try_to_load_from_cache

        if not constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(path, "config.json"), str):
            return
        raise FileNotFoundError(
            f"{what}: {path!r} is neither a local folder nor in the Hugging Face cache, and the Hub is switched off "
            "(HF_HUB_OFFLINE=1). Download it once online, or give a local folder."
        )
    hint = " Train it first: `make demo` writes runs/demo/sft and runs/demo/dpr." if "runs/demo" in path else ""
    raise FileNotFoundError(
        f"{what}: the folder {path!r} does not exist. Expected the output_dir of `trl-dpr sft` or `trl-dpr dpr` (a "
        f"folder with config.json or adapter_config.json), or a Hub model id.{hint}"
    )
