"""Where an SFT run keeps its reference checkpoint π_ref, and the small manifest that records it.

Layout of an SFT output directory (local or pushed to the Hub)::

    my-sft/                      # π_SFT: the final model (or PEFT adapter) and tokenizer, as SFTTrainer saves them
    my-sft/dpr_reference/        # π_ref: the model (or adapter) at optimizer step ⌊α·N⌋, saved by ReferenceCheckpointCallback
    my-sft/dpr_reference.json    # this manifest

The manifest is what `CheckpointRewardModel.from_pretrained("my-sft")` reads to find π_ref without being told.
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
FORMAT_VERSION = 1


@dataclass
class ReferenceManifest:
    """Record of the reference checkpoint π_ref written next to an SFT model.

    Attributes:
        path: folder of π_ref, relative to the SFT output directory (default `dpr_reference`).
        fraction: α of Algorithm 1; π_ref is the model after ⌊α·N⌋ of the N optimizer steps.
        step: the optimizer step π_ref was saved at (⌊α·N⌋).
        total_steps: N, the number of optimizer steps of the SFT run.
        is_adapter: True when π_ref (and π_SFT) are PEFT adapters on a shared base model.
        base_model: the base model the SFT run started from (adapters load onto it).
        format_version: manifest schema version.

    Example:
        >>> m = ReferenceManifest(path="dpr_reference", fraction=0.5, step=50, total_steps=100)
        >>> m.step / m.total_steps
        0.5
    """

    path: str
    fraction: float
    step: int
    total_steps: int
    is_adapter: bool = False
    base_model: str | None = None
    format_version: int = FORMAT_VERSION


def write_manifest(output_dir: str | os.PathLike, manifest: ReferenceManifest) -> Path:
    """Write `dpr_reference.json` into `output_dir` atomically (a crash never leaves a half-written manifest).

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> write_manifest(d, ReferenceManifest("dpr_reference", 0.5, 5, 10)).name
        'dpr_reference.json'
    """
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
    if manifest.format_version > FORMAT_VERSION:
        raise ValueError(
            f"{source} has format_version {manifest.format_version}, newer than this trl_dpr understands "
            f"({FORMAT_VERSION}). Upgrade trl_dpr."
        )
    return manifest


def resolve_reference(
    sft_model_name_or_path: str, revision: str | None = None, token: str | bool | None = None
) -> tuple[ReferenceManifest, str]:
    """Find π_ref for an SFT output: returns the manifest and a local directory holding π_ref.

    `sft_model_name_or_path` is a local SFT output directory or a Hub repo id of one (then only the manifest and the
    reference folder are downloaded).

    Raises:
        FileNotFoundError: when there is no manifest, or the folder it names is missing, with how to fix it.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); _ = write_manifest(d, ReferenceManifest("dpr_reference", 0.5, 5, 10))
        >>> os.makedirs(os.path.join(d, "dpr_reference"))
        >>> resolve_reference(d)[1].endswith("dpr_reference")
        True
    """
    how_to_fix = (
        "Train the SFT model with `trl_dpr.ReferenceCheckpointCallback` (recipes/sft.py adds it) so the reference "
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
