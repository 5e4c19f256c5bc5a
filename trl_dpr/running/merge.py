"""A LoRA adapter merged into its base, so that the pushed repo loads as a plain model."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

MERGED_MARKER = ".trl_dpr_merged"  # written last into a merge's folder: this one may be replaced


def merged_folder(output_dir: str | os.PathLike) -> str:
    """Where a merged push of the run in `output_dir` writes its merged model: `<output_dir>-merged`."""
    return f"{str(output_dir).rstrip('/')}-merged"


def check_merge_target(folder: str | os.PathLike) -> None:
    """A `FileExistsError` (one line) when `folder` exists, is not empty and was not written by a merge."""
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


def merge_adapter_folder(
    adapter_dir: str | os.PathLike, output_dir: str | os.PathLike, dtype: str = "auto", overwrite: bool = False
) -> str:
    """Merge a saved LoRA adapter into a full-precision copy of its base (4-bit weights would round the update away)
    and save it with the adapter's tokenizer and card; `overwrite=True` replaces an earlier merge's folder, never any
    other non-empty `output_dir`. Returns `output_dir`.
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
        if not overwrite:
            raise FileExistsError(f"{str(output_dir)!r} is not empty; pass overwrite=True to replace what is there.")
        shutil.rmtree(output_dir)
    base_name = json.loads(config_path.read_text())["base_model_name_or_path"]
    base = AutoModelForCausalLM.from_pretrained(base_name, dtype=dtype)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(output_dir)
    tokenizer_source = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base_name
    AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(output_dir)
    for name in ("README.md", "eval_results.json"):
        if (adapter_dir / name).is_file():
            shutil.copy2(adapter_dir / name, output_dir / name)
    (output_dir / MERGED_MARKER).write_text(adapter_dir.name)
    return str(output_dir)
