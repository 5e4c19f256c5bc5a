"""What a run holds besides its models, shared by evaluation, the run services and SPIN/GSIL: its output folder
(checked writable before any compute, removed again when the run leaves it empty) and the accelerator's cached memory
between one model and the next."""

from __future__ import annotations

import atexit
import gc
import os
import tempfile
from pathlib import Path

# Folders `check_output_dir` created, with the PID that created them: a run that fails before it writes anything there
# leaves no empty `runs/x/` behind.
_CREATED_DIRS: list[tuple[Path, int]] = []


def check_output_dir(output_dir: str | os.PathLike) -> None:
    """Fail before any compute when `output_dir` cannot be created or written to, saying which and why."""
    try:
        folder = Path(output_dir).absolute()
        missing = [f for f in (folder, *folder.parents) if not f.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        _CREATED_DIRS.extend((f, os.getpid()) for f in missing)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".write-test-") as probe:
            probe.write(b"ok")
            probe.flush()
    except OSError as error:
        raise OSError(
            f"The output directory {str(output_dir)!r} is not writable ({error.strerror or error}). Checkpoints, the "
            "reference checkpoint and the final model go there: choose a directory you can write to (output_dir=...)."
        ) from error


@atexit.register  # a run that ended with an error, before writing: its new folders go again
def remove_created_dirs() -> None:
    """The folders this process created for a run and left empty (a run that failed before writing), removed."""
    for folder, pid in _CREATED_DIRS:
        if pid == os.getpid():
            remove_if_empty(folder)


def remove_if_empty(folder: Path) -> None:
    """`folder` removed if it is empty; a missing or non-empty folder stays as it is."""
    try:
        folder.rmdir()
    except OSError:  # missing, or not empty: a crashed save's checkpoint stays for `last_complete_checkpoint` to judge
        pass


def free_memory() -> None:
    """Return what a model that was just dropped held: Python's cycles, then the CUDA cache (between stages, models)."""
    gc.collect()
    import torch  # here: the output-folder checks above run before torch is imported

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
