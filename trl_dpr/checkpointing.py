"""Checkpoints that are either complete or invisible, and resuming from the newest complete one.

`transformers.Trainer` writes `checkpoint-N/` in place (weights, then optimizer, scheduler, RNG states, and
`trainer_state.json` last), and `resume_from_checkpoint=True` picks the highest-numbered folder. A crash mid-save leaves
a `checkpoint-N/` that is picked anyway: without `trainer_state.json` the resume fails; without `optimizer.pt` it
silently restarts the optimizer. Here a checkpoint is written under `.partial/checkpoint-N/` and renamed into place only
once every process has finished writing it, so a `checkpoint-N/` that exists is complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

__all__ = ["AtomicCheckpointsMixin", "check_output_dir", "is_complete_checkpoint", "last_complete_checkpoint"]

_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
STAGING_DIRNAME = ".partial"


def is_complete_checkpoint(path: str | os.PathLike) -> bool:
    """A checkpoint is complete when its `trainer_state.json` (written last by Trainer) exists and parses.

    Example:
        >>> import tempfile
        >>> is_complete_checkpoint(tempfile.mkdtemp())
        False
    """
    state = Path(path) / "trainer_state.json"
    try:
        json.loads(state.read_text())
    except (OSError, ValueError):
        return False
    return True


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete `checkpoint-N` in `output_dir` (None if there is none); incomplete ones are skipped.

    Example:
        >>> import tempfile
        >>> last_complete_checkpoint(tempfile.mkdtemp()) is None
        True
    """
    if not os.path.isdir(output_dir):
        return None
    steps = sorted(
        (int(match.group(1)), name)
        for name in os.listdir(output_dir)
        if (match := _CHECKPOINT.match(name)) and os.path.isdir(os.path.join(output_dir, name))
    )
    for _, name in reversed(steps):
        if is_complete_checkpoint(os.path.join(output_dir, name)):
            return os.path.join(output_dir, name)
    return None


def check_output_dir(output_dir: str | os.PathLike) -> None:
    """Fail before any compute when `output_dir` cannot be created or written to, saying which and why.

    Example:
        >>> import tempfile
        >>> check_output_dir(tempfile.mkdtemp())  # writable: no error
    """
    try:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".write-test-") as probe:
            probe.write(b"ok")
            probe.flush()
    except OSError as error:
        raise OSError(
            f"The output directory {str(output_dir)!r} is not writable ({error.strerror or error}). Checkpoints, the "
            "reference checkpoint and the final model go there: choose a directory you can write to (output_dir=...)."
        ) from error


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


class AtomicCheckpointsMixin:
    """Mix into a `transformers.Trainer` subclass: checkpoints are staged, then renamed into place.

    `resume_from_checkpoint=True` resumes from the newest *complete* checkpoint (see `last_complete_checkpoint`).

    Example:
        ```python
        from trl import SFTTrainer
        from trl_dpr.checkpointing import AtomicCheckpointsMixin

        class SafeSFTTrainer(AtomicCheckpointsMixin, SFTTrainer):
            pass
        ```
    """

    def _save_checkpoint(self, model, trial):
        run_dir = self._get_output_dir(trial=trial)
        staging_root = os.path.join(run_dir, STAGING_DIRNAME)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:
            shutil.rmtree(os.path.join(staging_root, name), ignore_errors=True)  # leftovers of an earlier crash
        _barrier()
        # Trainer (and TRL) write the checkpoint under `_get_output_dir()`: point it at the staging folder meanwhile.
        original = self._get_output_dir
        self._get_output_dir = lambda trial=None: staging_root
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._get_output_dir = original
        _barrier()  # every process has written its part (weights, shards, RNG states)
        if self.args.should_save:
            final = os.path.join(run_dir, name)
            if os.path.isdir(final):
                shutil.rmtree(final)
            os.replace(os.path.join(staging_root, name), final)
            if self.state.best_model_checkpoint and self.state.best_model_checkpoint.startswith(staging_root):
                self.state.best_model_checkpoint = self.state.best_model_checkpoint.replace(staging_root, run_dir, 1)
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )
        _barrier()

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"resume_from_checkpoint=True but {self.args.output_dir!r} holds no complete checkpoint "
                    "(checkpoint-N/ with a trainer_state.json). Start without resume_from_checkpoint, or point it at "
                    "a checkpoint folder."
                )
        return super().train(resume_from_checkpoint, *args, **kwargs)
