"""A run owns its output folder, and its checkpoints are complete or invisible.

Why: `transformers.Trainer` resumes from a checkpoint a crash cut mid-save (the optimizer then silently restarts), and
two runs on one folder mix files. Here one run holds the folder (an OS lock), and checkpoints are staged in
`.partial/`, get a manifest of file sizes written last, and are renamed into place.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fnmatch
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock, Timeout

from ..reference_manifest import MANIFEST_NAME, REFERENCE_DIRNAME, SFT_COMPLETE_NAME, files_problem
from ..resources import check_output_dir, remove_created_dirs, remove_if_empty

# The standard logger, not accelerate's: these functions also run before any trainer has set up accelerate's state
# (`trl-dpr dpr` looking for an unfinished SFT's checkpoint), where accelerate's logger raises.
logger = logging.getLogger(__name__)

# torch and transformers are imported where they are used: `trl-dpr push` reads this module's names and checks its
# arguments in about a second. transformers' `trainer_utils.PREFIX_CHECKPOINT_DIR`, pinned by a test to theirs.
PREFIX_CHECKPOINT_DIR = "checkpoint"
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
STAGING_DIRNAME = ".partial"
CHECKPOINT_MANIFEST = "checkpoint_manifest.json"
LOCK_NAME = ".trl_dpr.lock"
LOCK_HOLDER_NAME = ".trl_dpr.lock.json"  # who holds the lock; a file of its own (Windows locks the lock file's bytes)
# What a finished or checkpointed run leaves in its folder (a fresh run must not silently replace it).
_RUN_OUTPUTS = ("trainer_state.json", "model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")
# Written once a recipe's run has trained and saved its model: a digest of the arguments it ran with, and the
# steps still to do after it ("pending": evaluation, merge, push), each cleared once done (`mark_step_done`). The
# same command run again finds it, says the run is finished (`finished_run`) and does only what is pending
# (`stages.finished_already`).
RUN_COMPLETE_NAME = "run_complete.json"
EVAL_RESULTS_NAME = "eval_results.json"  # the evaluation a pipeline ran on the run's model
# Arguments that say how a run is started, not what it produces: a re-run that differs only in them is the same run.
_NOT_THE_RUN = ("overwrite_output_dir", "resume_from_checkpoint", "local_rank", "hub_token")
# Arguments added after runs were recorded, left out while they hold their default (None, empty): a run an earlier
# trl_dpr finished had no such field, and the same command again is still that run. Set, they are digested as any other.
_ADDED_LATER = ("reward_funcs",)
# Arguments that say only how the trained model is evaluated (the YAML named, and its text): not what identifies the
# run, but digested apart (`RunFingerprint.evaluation`), so the same command with an evaluation fixed after it failed,
# or changed since, evaluates the finished run again rather than calling it another run (`stages.finished_already`).
_EVALUATION_ONLY = ("evaluation_config",)
# What a run writes in its folder and a run started over there deletes first (`start_writing`): a killed new run
# must not leave the old π_SFT, its marker or its checkpoints beside its own π_ref. Only these names: a file of the
# user's in the folder stays.
_OWN_OUTPUTS = (
    SFT_COMPLETE_NAME,
    MANIFEST_NAME,
    REFERENCE_DIRNAME,
    "trainer_state.json",
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "pytorch_model.bin",
    "pytorch_model-*-of-*.bin",
    "pytorch_model.bin.index.json",
)


# ---- checkpoint completeness --------------------------------------------------------------------------------------


def write_checkpoint_manifest(path: str | os.PathLike, run: dict | None = None) -> None:
    """Record every file of the checkpoint folder `path` with its size, in `checkpoint_manifest.json` (written last),
    and the `run` that saved it (`_resume_record`: a resume with other arguments is refused)."""
    path = Path(path)
    files = {
        str(file.relative_to(path)): file.stat().st_size
        for file in sorted(path.rglob("*"))
        if file.is_file() and file.name != CHECKPOINT_MANIFEST
    }
    with tempfile.NamedTemporaryFile("w", dir=path, prefix=".manifest-", suffix=".tmp", delete=False) as tmp:
        json.dump({"format_version": 1, "files": files, **({"run": run} if run else {})}, tmp, indent=1)
    os.replace(tmp.name, path / CHECKPOINT_MANIFEST)


def checkpoint_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with checkpoint `path` (a file missing or truncated, or no manifest: an interrupted save), or None."""
    path = Path(path)
    try:
        manifest = json.loads((path / CHECKPOINT_MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        return f"no {CHECKPOINT_MANIFEST} (the save did not finish)"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{CHECKPOINT_MANIFEST} is unreadable"
    if "trainer_state.json" not in files:
        return "its manifest lists no trainer_state.json"
    return files_problem(path, files)


# Training arguments a resume may change: where the run is (a copied folder resumes under its new name) and what is
# logged, saved and pushed, not the weights it trains to.
_NOT_THE_TRAINING = (*_NOT_THE_RUN, "output_dir", "logging_dir", "logging_steps", "logging_first_step", "report_to")
_NOT_THE_TRAINING_PREFIXES = ("save_", "hub_", "push_to_hub")
_FROM_THE_WORLD_SIZE = ("generation_batch_size",)  # GRPOConfig's default counts the processes: not named beside them


def _resume_record(args) -> dict:
    """What a checkpoint records of the run that saved it: a digest of each training argument (not its value: one may
    hold a token) but `_NOT_THE_TRAINING`, and the number of processes (with the batch per device, the global batch)."""
    fields = args.to_dict() if hasattr(args, "to_dict") else asdict(args)
    arguments = {
        key: _digest(value)
        for key, value in fields.items()
        if key not in _NOT_THE_TRAINING and not key.startswith(_NOT_THE_TRAINING_PREFIXES)
    }
    return {"arguments": arguments, "world_size": int(getattr(args, "world_size", 1))}


def _resume_problem(checkpoint: str | os.PathLike, args) -> str | None:
    """Why `checkpoint` cannot be resumed with `args` (other training arguments, or another number of processes: the
    run would continue as another one, with a learning-rate schedule or a global batch of neither), or None. A
    checkpoint of an earlier trl_dpr records neither: resumed as before, with a warning."""
    try:
        recorded = json.loads((Path(checkpoint) / CHECKPOINT_MANIFEST).read_text()).get("run")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("arguments"), dict):
        if _is_main_process():
            logger.warning(
                f"{checkpoint} records no arguments of its run (an earlier trl_dpr saved it): resuming without "
                "checking that they are the same."
            )
        return None
    now = _resume_record(args)
    before = recorded["arguments"]
    changed = sorted(
        key for key in before.keys() | now["arguments"].keys() if before.get(key) != now["arguments"].get(key)
    )
    if recorded.get("world_size") not in (None, now["world_size"]):
        changed = [key for key in changed if key not in _FROM_THE_WORLD_SIZE]
        changed.append(f"the number of processes ({recorded['world_size']}, now {now['world_size']})")
    if not changed:
        return None
    return (
        f"Cannot resume from {checkpoint}: its run had other {', '.join(changed)}; resumed, it would continue as "
        "neither run. Resume with the arguments it started with, or start over: --overwrite_output_dir true without "
        "--resume_from_checkpoint (or another --output_dir)."
    )


def is_complete_checkpoint(path: str | os.PathLike) -> bool:
    """A checkpoint is complete when every file its manifest lists is there with the size that was written."""
    return checkpoint_problem(path) is None


def _checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, str]]:
    if not os.path.isdir(output_dir):
        return []
    return sorted(
        (int(match.group(1)), os.path.join(output_dir, name))
        for name in os.listdir(output_dir)
        if (match := _CHECKPOINT.match(name)) and os.path.isdir(os.path.join(output_dir, name))
    )


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete `checkpoint-N` in `output_dir` (None if there is none); newer broken ones are skipped, and
    what is wrong with each is logged.
    """
    for _, path in reversed(_checkpoints(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        if int(os.environ.get("RANK", "0")) == 0:  # once per job, not once per process
            logger.warning(f"Skipping {path} for resuming: {problem}. Trying the previous checkpoint.")
    return None


def parse_resume_from_checkpoint(value) -> bool | str | None:
    """`resume_from_checkpoint` as the command line, a YAML file or Python give it: True / a path / None."""
    if value is None or value is False:
        return None
    if value is True:
        return True
    text = str(value).strip()
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no", "none", ""):
        return None
    return text


# ---- one run per folder -------------------------------------------------------------------------------------------


class OutputDirInUse(RuntimeError):
    """Another live run holds the output folder's lock."""


class _FolderLock:
    """An exclusive lock on one file, held until `release` or the end of the process (the OS drops it however the
    process ends). `release` deletes the file while still holding it, so a finished folder keeps no lock file."""

    def __init__(self, path: Path):
        self.path, self._fd, self._filelock = path, None, None

    def acquire(self) -> bool:
        """Take the lock now, or return False when another process holds it."""
        if os.name == "nt":  # msvcrt locks, through filelock (which deletes the file on release when it can)
            self._filelock = FileLock(self.path, thread_local=False)
            try:
                self._filelock.acquire(blocking=False)
            except Timeout:
                return False
            return True
        import fcntl

        while True:
            fd = os.open(
                self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644
            )  # never a link's target
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(fd)
                if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    return False
                raise
            # A run that ends deletes its lock file while holding it: opened just before, this is a file no longer at
            # `path`, and a third run could lock a new one there. Hold the lock only of the file at `path`.
            try:
                if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                    self._fd = fd
                    return True
            except FileNotFoundError:
                pass
            os.close(fd)

    def release(self) -> None:
        if self._filelock is not None:
            self._filelock.release()
        elif self._fd is not None:
            self.path.unlink(missing_ok=True)  # first: whoever locks after this locks a new file (see `acquire`)
            os.close(self._fd)
        self._fd = self._filelock = None


# realpath → (folder, lock, PID of the process that took it): re-entrant per process. A forked child inherits the
# entries, not the right to release them.
_HELD_LOCKS: dict[str, tuple[Path, _FolderLock, int]] = {}


def _is_main_process() -> bool:
    torch = sys.modules.get("torch")  # never imported: no process group (`trl-dpr push` stays light)
    return (
        torch is None
        or not (torch.distributed.is_available() and torch.distributed.is_initialized())
        or torch.distributed.get_rank() == 0
    )


def _agree(error: str | None) -> str | None:
    """Every process gets the main process's verdict (so a refused run stops everywhere, not only on rank 0)."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        verdict = [error]
        torch.distributed.broadcast_object_list(verdict, src=0)
        return verdict[0]
    return error


def _lock(output_dir: Path) -> str | None:
    """Take the folder's lock until the run ends; the reason it cannot be taken, or None."""
    key = os.path.realpath(output_dir)
    if key in _HELD_LOCKS:
        return None
    lock = _FolderLock(output_dir / LOCK_NAME)
    if not lock.acquire():
        try:
            info = json.loads((output_dir / LOCK_HOLDER_NAME).read_text())
            who = f"PID {info.get('pid')} on host {info.get('host')}, started {info.get('started')}"
        except (OSError, ValueError, AttributeError):  # not written yet, or by an older version
            who = "another process"
        return (
            f"Another run is using {str(output_dir)!r} ({who}). Two runs writing one folder corrupt each other's "
            "checkpoints. Wait for it to finish, stop it, or give this run another output_dir."
        )
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    (output_dir / LOCK_HOLDER_NAME).write_text(json.dumps(holder))
    _HELD_LOCKS[key] = (output_dir, lock, os.getpid())
    return None


def _unlock(key: str) -> None:
    """Remove what the run kept in its folder for itself (the lock holder's record, an empty staging folder), then
    delete and release the lock: last, so no other run writes here before this one is done with the folder."""
    _CONTINUING.discard(key)
    _STARTING_OVER.discard(key)  # never started writing: the earlier run stays
    output_dir, lock, _ = _HELD_LOCKS.pop(key)
    (output_dir / LOCK_HOLDER_NAME).unlink(missing_ok=True)
    remove_if_empty(output_dir / STAGING_DIRNAME)
    lock.release()


@atexit.register  # a run that ends without release_output_dir (an error, the end of a notebook)
def _release_all() -> None:
    for key in [key for key, (*_, pid) in _HELD_LOCKS.items() if pid == os.getpid()]:
        try:
            _unlock(key)
        except OSError:  # the folder went away, or a full disk: the OS releases the lock with the process anyway
            pass
    remove_created_dirs()


def release_output_dir(output_dir: str | os.PathLike) -> None:
    """End this run's claim on `output_dir` (lock, holder record, empty `.partial/` removed); every process calls it,
    and the end of the process does it too.
    """
    _barrier()  # every process has written its last file
    key = os.path.realpath(output_dir)
    if key in _HELD_LOCKS and _HELD_LOCKS[key][2] == os.getpid():  # the main process's
        _unlock(key)
    _barrier()


@contextlib.contextmanager
def releasing_output_dir(output_dir: str | os.PathLike):
    """Release `output_dir` when the block ends, also when it fails (the folder is free for the next run), but not on
    Ctrl-C: the process's end releases it then, once `cli.run` has named the checkpoint it holds (`_interrupted`)."""
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        release_output_dir(output_dir)
        raise
    release_output_dir(output_dir)


def is_claimed(output_dir: str | os.PathLike) -> bool:
    """Whether this process holds `output_dir`, claimed (`claim_output_dir`) and not released: it was checked then."""
    held = _HELD_LOCKS.get(os.path.realpath(output_dir))
    return held is not None and held[2] == os.getpid()


def _previous_run(output_dir: Path) -> str | None:
    found = [name for name in _RUN_OUTPUTS if (output_dir / name).exists()]
    found += [os.path.basename(path) for _, path in _checkpoints(output_dir)][-1:]
    return ", ".join(found) if found else None


# Folders claimed whose earlier run goes when this run starts writing (`start_writing`), not at the claim, so that a
# mistake found by a check after the claim (the push, the data, self-play's settings, an evaluation or SFT recipe)
# leaves it whole: all of it when claimed to start over (`overwrite`); only its record of being finished and its
# evaluation table, which no longer describe the folder, when claimed to resume or continue it (`_CONTINUING`).
_STARTING_OVER: set[str] = set()
_CONTINUING: set[str] = set()


def interrupted_before_writing() -> str | None:
    """The line a Ctrl-C ends with (`cli._interrupted`) while a folder this process holds keeps an earlier run, as it
    was: claimed, nothing written there yet (its record, if any, is not this run's). None when there is none."""
    held = {key: folder for key, (folder, _, pid) in _HELD_LOCKS.items() if pid == os.getpid()}
    kept = [
        key
        for key, folder in held.items()
        if key in _CONTINUING or (key in _STARTING_OVER and (_previous_run(folder) or _has_record(folder)))
    ]
    if not kept:
        return None
    line = f"Interrupted before training; the earlier run in {', '.join(str(held[key]) for key in kept)} is kept as it was."
    others = [(folder, last_complete_checkpoint(folder)) for key, folder in held.items() if key not in kept]
    if saved := "; ".join(f"{folder}: {checkpoint}" for folder, checkpoint in others if checkpoint):  # an SFT stage's
        line += f" Saved: {saved}. Resume with the same command and --resume_from_checkpoint true."
    return line


def _has_record(output_dir: Path) -> bool:
    return any((output_dir / name).is_file() for name in (RUN_COMPLETE_NAME, EVAL_RESULTS_NAME))


def start_writing(output_dir: str | os.PathLike, outputs: tuple[str, ...] = ()) -> None:
    """Called by a run right before its first write into `output_dir` (the trainer's `train`): the earlier run's
    record of being finished and its table go now, and, claimed to start over, its outputs (`_remove_own_outputs`, and
    the caller's own `outputs`, glob patterns: self-play's iterations); once per claim. Every process calls it."""
    key = os.path.realpath(output_dir)
    if _is_main_process() and (key in _STARTING_OVER or key in _CONTINUING):
        _CONTINUING.discard(key)
        for stale in (RUN_COMPLETE_NAME, EVAL_RESULTS_NAME):  # first: a run killed midway is not taken as finished
            (Path(output_dir) / stale).unlink(missing_ok=True)
        if key in _STARTING_OVER:
            _STARTING_OVER.discard(key)
            _remove_own_outputs(Path(output_dir), outputs)
    _barrier()


def _remove_own_outputs(output_dir: Path, outputs: tuple[str, ...] = ()) -> None:
    """Delete an earlier run's outputs (`_OWN_OUTPUTS` and `outputs`, its `checkpoint-N/`) from `output_dir`, before
    this run writes: killed midway, it leaves no old model that passes for its own, no old checkpoint to resume."""
    stale = [path for pattern in (*_OWN_OUTPUTS, *outputs) for path in output_dir.glob(pattern)]
    stale += [Path(path) for _, path in _checkpoints(output_dir)]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def check_output_dir_apart(output_dir: str | os.PathLike, outputs: tuple[str, ...] = (), **reads: str | None) -> None:
    """A `ValueError` (one line) when a model the run reads (`reads`: what → its path, e.g. π_SFT's folder) is
    `output_dir` or lies in what the run writes there (`_OWN_OUTPUTS`, `checkpoint-N/`, the caller's `outputs`): its
    saves, and an overwrite's deletions (`start_writing`), would replace it. Before the claim and any model loads."""
    out = os.path.realpath(output_dir)
    for what, path in reads.items():
        model = os.path.realpath(path) if path else None
        if model is None or (model != out and not (os.path.exists(path) and Path(model).is_relative_to(out))):
            continue
        top = Path(model).relative_to(out).parts[:1]
        if model == out or any(
            fnmatch.fnmatchcase(top[0], name) for name in (*_OWN_OUTPUTS, "checkpoint-*", *outputs)
        ):
            raise ValueError(
                f"output_dir {str(output_dir)!r} {'is' if model == out else 'holds'} {what} ({path!r}), which this run "
                "reads: its saves would replace it, and overwrite_output_dir would delete it. Give the run another "
                "output_dir."
            )


def claim_output_dir(
    output_dir: str | os.PathLike, *, resuming: bool = False, overwrite: bool = False, evaluating: bool = False
) -> None:
    """Make `output_dir` this run's before any compute: `OSError` when not writable, `OutputDirInUse` naming a live
    holder, `ValueError` for a finished run's folder unless resuming or overwriting. Every process gets the same verdict.
    `evaluating`: the finished run in it is only evaluated again (`finished_already`), so its record stays.
    `overwrite` (not resuming): the earlier run stays until this one starts writing (`start_writing` deletes it);
    resuming or continuing: its record of being finished and its table stay until then.
    """
    output_dir = Path(output_dir)
    check_output_dir(output_dir)
    error = None
    if _is_main_process():
        key = os.path.realpath(output_dir)
        first_claim = key not in _HELD_LOCKS  # later claims of this run keep what it wrote
        error = _lock(output_dir)
        previous = None if error or resuming or overwrite or evaluating else _previous_run(output_dir)
        changed = _FINISHED_WITH_OTHER.pop(os.path.realpath(output_dir), None)  # known when the CLI compared it
        if previous and (output_dir / RUN_COMPLETE_NAME).is_file():  # finished: nothing to resume
            other = f" with other {' and '.join(changed)}" if changed else ""
            error = (
                f"{str(output_dir)!r} already holds a run ({previous}), finished{other}; "
                "its model is left as it is. To train again: --overwrite_output_dir true (or overwrite_output_dir: "
                "true in the recipe), or another --output_dir."
            )
        elif previous:
            error = (
                f"{str(output_dir)!r} already holds a run ({previous}). A fresh run would replace its checkpoints and "
                "model. Resume it (--resume_from_checkpoint true), choose another --output_dir, or start over in "
                "this folder: --overwrite_output_dir true (or overwrite_output_dir: true in the recipe)."
            )
        if not error and overwrite and not resuming and not evaluating and first_claim:
            _STARTING_OVER.add(key)  # the earlier run, its record included, goes when this one starts writing
        elif not error and not evaluating and first_claim and _has_record(output_dir):
            _CONTINUING.add(key)  # its record and table (`Already finished`, the model card) go then
    error = _agree(error)
    if error:
        raise (OutputDirInUse if error.startswith("Another run") else ValueError)(error)


class RunFingerprint(str):
    """`run_fingerprint`'s digest of a whole run, with the digests of its `parts` (arguments, config files, data files):
    a finished run of other ones can say which changed. `evaluation`: the digest of its evaluation settings (None: no
    evaluation), not part of the run's. `earlier`: the digests an earlier trl_dpr recorded for the same run (with the
    evaluation settings; before that, without the data files), and `earlier_parts` the parts it recorded."""

    parts: dict
    evaluation: str | None
    earlier: tuple[str, ...]
    earlier_parts: dict


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, default=str, sort_keys=True).encode()).hexdigest()


def run_fingerprint(*parsed) -> RunFingerprint:
    """A digest of a recipe's parsed arguments (its dataclasses: TRL's configs, the script's), of the text of the
    config files they name (`*_config`: an edited SFT recipe is another run), of the `reward_funcs` files in the folder
    it runs from, and of the state of a local `dataset_name` (its files' names, sizes and mtimes: an edited train.jsonl
    is another run): what `run_complete.json` records and a re-run compares. The evaluation settings
    (`_EVALUATION_ONLY`) are digested apart, in `evaluation`. A digest, not the values: they may hold a token
    (`model_init_kwargs`)."""
    arguments, evaluation = {}, None
    for values in parsed:
        fields = values.to_dict() if hasattr(values, "to_dict") else asdict(values)  # to_dict: TrainingArguments' own
        arguments[type(values).__name__] = {
            key: value
            for key, value in fields.items()
            if key not in _NOT_THE_RUN and not (key in _ADDED_LATER and value in (None, [], ()))
        }
        data = fields.get("dataset_name")
        if isinstance(data, str) and data and os.path.exists(data):  # a local file or folder, not a Hub id
            arguments.setdefault("data files", {})[f"{type(values).__name__}.dataset_name"] = _files_state(Path(data))
        for key, value in fields.items():  # a config file the recipe names (sft_config): its text is the run too
            if key.endswith("_config") and isinstance(value, str) and value and Path(value).is_file():
                digest = hashlib.sha256(Path(value).read_bytes()).hexdigest()
                arguments.setdefault("config files", {})[f"{type(values).__name__}.{key}"] = digest
            if key in _EVALUATION_ONLY and value:
                evaluation = _evaluation_digest(str(value))
        # A reward function in the user's folder (reward_funcs: [my_checks.right_answer]): its file is the run too.
        for spec in fields.get("reward_funcs") or []:
            if files := _own_module_files(spec):
                code = arguments.setdefault("reward function files", {})
                code[f"{type(values).__name__}.reward_funcs {spec}"] = {
                    file.relative_to(Path.cwd()).as_posix(): hashlib.sha256(file.read_bytes()).hexdigest()
                    for file in files
                }
    # What identifies the trained model: the arguments less the evaluation's, and less its file; `arguments` whole is
    # what an earlier trl_dpr digested.
    trained = {
        part: {key: value for key, value in values.items() if key.split(".")[-1] not in _EVALUATION_ONLY}
        for part, values in arguments.items()
    }
    trained = {part: values for part, values in trained.items() if values or part not in _PART_FILES}
    fingerprint = RunFingerprint(_digest(trained))
    fingerprint.parts = _parts(trained)
    fingerprint.evaluation = evaluation
    fingerprint.earlier = (_digest(arguments), _digest({k: v for k, v in arguments.items() if k != "data files"}))
    fingerprint.earlier_parts = _parts(arguments)
    return fingerprint


_PART_FILES = ("config files", "data files", "reward function files")


def _parts(arguments: dict) -> dict:
    parts = {"arguments": _digest({k: v for k, v in arguments.items() if k not in _PART_FILES})}
    parts.update({part: _digest(arguments[part]) for part in _PART_FILES if part in arguments})
    return parts


def _evaluation_digest(evaluation_config: str) -> str:
    """The digest of the evaluation YAML's text (found as the evaluation stage finds it: a file, or a shipped recipe's
    name), wherever it lies; of its name when there is none (the evaluation stage then says so)."""
    from .recipe_checks import find_recipe_file

    try:
        return hashlib.sha256(Path(find_recipe_file(evaluation_config, subfolder="evaluate")).read_bytes()).hexdigest()
    except OSError:
        return _digest(evaluation_config)


def _own_module_files(spec: str) -> list[Path]:
    """The files in the folder the command runs from that a `reward_funcs` entry imports (`my_checks.py` and the local
    modules it imports, or every file of a package), [] for an installed module's (TRL's): found, nothing imported."""
    from ..rewards import _local_source_files, reward_func_source

    module_name = reward_func_source(spec)[0]
    return _local_source_files(module_name) if module_name and not module_name.startswith(".") else []


def _files_state(path: Path) -> list:
    """(name, size, mtime) of a file, or of every file in a folder: cheap, unlike its bytes (one stat a file). Hidden
    files and folders (.git, .cache) are not the data: left out, and not walked."""
    if path.is_file():
        status = path.stat()
        return [(path.name, status.st_size, status.st_mtime_ns)]
    files = []
    for folder, subfolders, names in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        for name in names:
            if name.startswith("."):
                continue
            try:
                status = os.stat(os.path.join(folder, name))  # a link: its target's, as the loader reads it
            except OSError:  # a broken link: nothing the data loads
                continue
            if stat.S_ISREG(status.st_mode):
                relative = Path(folder, name).relative_to(path).as_posix()
                files.append((relative, status.st_size, status.st_mtime_ns))
    return sorted(files, key=lambda file: file[0].split("/"))  # by folder, then name: as recorded before


def mark_run_finished(output_dir: str | os.PathLike, fingerprint: str, pending: list[str] | None = None) -> None:
    """Record that the run in `output_dir` trained to its end with the arguments of `fingerprint`, and the steps still
    to do after it (`pending`, in order: `mark_step_done` clears each; None: no record of them); main process."""
    if _is_main_process():
        parts = getattr(fingerprint, "parts", None)
        record = {"arguments_sha256": fingerprint, **({"parts": parts} if parts else {})}
        if hasattr(fingerprint, "evaluation"):  # the settings its evaluation runs with (`mark_evaluated`)
            record["evaluation_sha256"] = fingerprint.evaluation
        _write_run_record(Path(output_dir), record if pending is None else {**record, "pending": list(pending)})


def mark_step_done(output_dir: str | os.PathLike, step: str) -> None:
    """Clear `step` from the pending steps of the finished run in `output_dir` (main process): the same command again
    no longer does it. Nothing to clear (no record, or one without that step): nothing is written."""
    if _is_main_process():
        record = _run_record(Path(output_dir))
        pending = record.get("pending") if record else None
        if isinstance(pending, list) and step in pending:
            _write_run_record(Path(output_dir), {**record, "pending": [name for name in pending if name != step]})


def mark_step_pending(output_dir: str | os.PathLike, step: str) -> None:
    """Add `step` to the pending steps of the finished run in `output_dir` (main process), before it is redone: a
    failure leaves it for the same command again. No record: nothing is written."""
    if _is_main_process():
        record = _run_record(Path(output_dir))
        pending = record.get("pending") if record else None
        if record and (not isinstance(pending, list) or step not in pending):
            _write_run_record(Path(output_dir), {**record, "pending": [*(pending or []), step]})


def mark_evaluated(output_dir: str | os.PathLike, fingerprint: RunFingerprint) -> None:
    """Record that the finished run in `output_dir` was evaluated with the evaluation settings of `fingerprint` (main
    process): its pending evaluation is done, and the same command again evaluates it only once they change
    (`evaluation_changed`). No record: nothing is written."""
    if _is_main_process():
        record = _run_record(Path(output_dir))
        if record:
            pending = record.get("pending")
            if isinstance(pending, list):
                record["pending"] = [name for name in pending if name != "evaluation"]
            _write_run_record(Path(output_dir), {**record, "evaluation_sha256": fingerprint.evaluation})


def evaluation_changed(output_dir: str | os.PathLike, fingerprint: RunFingerprint) -> str | None:
    """How the evaluation settings of `fingerprint` differ from those the finished run in `output_dir` was evaluated
    with (`mark_evaluated`): "changed", "new" (it had none), or None (the same; no evaluation now; a record of an
    earlier trl_dpr, whose evaluation settings were part of the run's, unless `finished_run` found only its evaluation
    YAML edited). Every process gets the main process's answer."""
    changed = None
    if _is_main_process() and getattr(fingerprint, "evaluation", None) is not None:
        record = _run_record(Path(output_dir)) or {}
        if "evaluation_sha256" in record and record["evaluation_sha256"] != fingerprint.evaluation:
            changed = "new" if record["evaluation_sha256"] is None else "changed"
        elif "evaluation_sha256" not in record and os.path.realpath(output_dir) in _EVALUATION_EDITED:
            changed = "changed"
    return _agree(changed)


def pending_steps(output_dir: str | os.PathLike) -> list[str] | None:
    """The steps the finished run in `output_dir` still has to do (`mark_run_finished`), in order; None for a record
    that lists none (an earlier trl_dpr's, or none at all). Every process gets the main process's answer."""
    pending = None
    if _is_main_process():
        record = _run_record(Path(output_dir))
        found = record.get("pending") if record else None
        if isinstance(found, list) and all(isinstance(step, str) for step in found):
            pending = json.dumps(found)
    pending = _agree(pending)
    return None if pending is None else json.loads(pending)


def _run_record(output_dir: Path) -> dict | None:
    try:
        record = json.loads((output_dir / RUN_COMPLETE_NAME).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_run_record(output_dir: Path, record: dict) -> None:
    _write_whole(output_dir / RUN_COMPLETE_NAME, json.dumps(record) + "\n")


def write_eval_results(output_dir: str | os.PathLike, results: dict) -> None:
    """Write the evaluation report `results` to `<output_dir>/eval_results.json`, whole or not at all: a run killed,
    or a full disk, while an evaluation done again writes it leaves the earlier report as it was."""
    _write_whole(Path(output_dir) / EVAL_RESULTS_NAME, json.dumps(results, indent=2))


def _write_whole(path: Path, text: str) -> None:
    # A temporary file of its own, renamed: a reader never sees half a file, and two writers (a `trl-dpr push` clearing
    # its step while the same run's command runs again) never share one.
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as f:
            f.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def finished_run(output_dir: str | os.PathLike, fingerprint: str) -> bool:
    """Whether `output_dir` holds a run that got to its end with the arguments of `fingerprint` and still has its
    model: the same command again has nothing to do. When it finished with others, what changed is kept for the
    refusal of `claim_output_dir` (SPIN and GSIL claim to continue instead). Every process gets the main process's
    answer."""
    finished = None
    if _is_main_process():
        try:
            record = json.loads((Path(output_dir) / RUN_COMPLETE_NAME).read_text())
            changed = _changes(record, fingerprint)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none, or not one we can read: unfinished
            changed = None
        edited = bool(changed) and _only_evaluation_yaml_edited(record, fingerprint)  # evaluated again, not trained
        (_EVALUATION_EDITED.add if edited else _EVALUATION_EDITED.discard)(os.path.realpath(output_dir))
        changed = [] if edited else changed
        _FINISHED_WITH_OTHER[os.path.realpath(output_dir)] = changed or None
        finished = "yes" if changed == [] and _previous_run(Path(output_dir)) else None
    return _agree(finished) == "yes"


def _recorded_changes(output_dir: Path, fingerprint: str) -> list[str] | None:
    """`_changes` of the run record in `output_dir`; None when it has none we can read."""
    try:
        return _changes(json.loads((output_dir / RUN_COMPLETE_NAME).read_text()), fingerprint)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def finished_with_other(output_dir: str | os.PathLike, fingerprint: str) -> str | None:
    """How the finished run in `output_dir` differs from `fingerprint`, as `claim_output_dir` says it ("'runs/sft'
    already holds a run (model.safetensors), finished with other arguments"); "" when it is this run, None when the
    folder holds no run record (a run from Python, an earlier trl_dpr) or no model. Every process gets the main
    process's answer."""
    said = None
    if _is_main_process():
        changed = _recorded_changes(Path(output_dir), fingerprint)
        previous = _previous_run(Path(output_dir))
        if changed is not None and previous:
            said = f"{str(output_dir)!r} already holds a run ({previous}), finished with other {' and '.join(changed)}"
            said = json.dumps(said if changed else "")
    said = _agree(said)
    return None if said is None else json.loads(said)


# What differs from the run that finished in a folder (`finished_run`), by folder: its refusal names it.
_FINISHED_WITH_OTHER: dict[str, list[str] | None] = {}

_CHANGED = {
    "arguments": "arguments",
    "config files": "config files (the *_config files it names)",
    "data files": "data (the dataset_name files: edited, replaced or touched)",
    "reward function files": "reward functions (the reward_funcs files in the folder it runs from: edited)",
}


def _changes(record: dict, fingerprint: str) -> list[str]:
    """What differs between a finished run's `record` (run_complete.json) and `fingerprint`: [] when it is this run.
    A record of an earlier trl_dpr matches its digests (`RunFingerprint.earlier`: with the evaluation settings, or
    without the data) and is compared with its parts."""
    recorded = record.get("parts")
    if record["arguments_sha256"] in (fingerprint, *getattr(fingerprint, "earlier", ())):
        return []
    ours = (getattr(fingerprint, "parts", None), getattr(fingerprint, "earlier_parts", None))
    candidates = [parts for parts in ours if parts]
    if isinstance(recorded, dict) and candidates:  # the fewest changes: against this trl_dpr's parts or the last one's
        changes = [
            [n for n in _CHANGED if (n in recorded or n != "data files") and recorded.get(n) != parts.get(n)]
            for parts in candidates
        ]
        return [_CHANGED[n] for n in min(changes, key=len)]
    return ["arguments or data (or an earlier trl_dpr made it)"]


def _only_evaluation_yaml_edited(record: dict, fingerprint: str) -> bool:
    """Whether a record of an earlier trl_dpr (its digests held the evaluation YAML's text) differs from `fingerprint`'s
    earlier parts only in the config files, when the only `*_config` file named is the evaluation YAML (this trl_dpr's
    parts then have no config files): only the evaluation YAML was edited, so the run is evaluated again."""
    recorded, earlier = record.get("parts"), getattr(fingerprint, "earlier_parts", None)
    if not isinstance(recorded, dict) or not earlier or "config files" in (getattr(fingerprint, "parts", None) or {}):
        return False
    differ = [n for n in _CHANGED if (n in recorded or n != "data files") and recorded.get(n) != earlier.get(n)]
    return differ == ["config files"] and "config files" in earlier


# Folders whose finished run differs from this command only in its evaluation YAML's text, as a record of an earlier
# trl_dpr says (`_only_evaluation_yaml_edited`): `evaluation_changed` calls that changed.
_EVALUATION_EDITED: set[str] = set()


def _barrier() -> None:
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


class AtomicCheckpointsMixin:
    """Mix into a `transformers.Trainer`: the run claims its folder, checkpoints are staged, verified and renamed, and
    `train(resume_from_checkpoint=True)` resumes from the newest complete one.
    """

    _claims_output_dir = True  # honours overwrite_output_dir (`claim_output_dir`, `start_writing`)

    def _save_checkpoint(self, model, trial):
        from transformers.trainer_utils import rotate_checkpoints

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
            staged = os.path.join(staging_root, name)
            # last: a folder without it, or not matching it, is not a checkpoint
            write_checkpoint_manifest(staged, run=_resume_record(self.args))
            final = os.path.join(run_dir, name)
            if os.path.isdir(final):
                shutil.rmtree(final)
            os.replace(staged, final)
            remove_if_empty(Path(staging_root))  # the next save stages here again
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
        resume_from_checkpoint = parse_resume_from_checkpoint(resume_from_checkpoint)
        claim_output_dir(
            self.args.output_dir,
            resuming=resume_from_checkpoint is not None,
            overwrite=bool(getattr(self.args, "overwrite_output_dir", False)),
        )
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"resume_from_checkpoint=True but {self.args.output_dir!r} holds no complete checkpoint "
                    f"(checkpoint-N/ whose files match its {CHECKPOINT_MANIFEST}). Start without "
                    "resume_from_checkpoint, or point it at a checkpoint folder."
                )
        elif resume_from_checkpoint is not None:
            problem = (
                checkpoint_problem(resume_from_checkpoint)
                if os.path.isdir(resume_from_checkpoint)
                else "it is not a folder"
            )
            if problem and not problem.startswith("no checkpoint_manifest"):
                raise ValueError(f"Cannot resume from {resume_from_checkpoint!r}: {problem}.")
        if resume_from_checkpoint is not None and (problem := _resume_problem(resume_from_checkpoint, self.args)):
            if not self.is_world_process_zero():  # every process finds it; one says it
                raise SystemExit(2)
            raise ValueError(problem)
        if resume_from_checkpoint is not None and self.is_world_process_zero():
            print(f"Resuming from {resume_from_checkpoint}", flush=True)
        start_writing(self.args.output_dir)  # a run started over: the earlier one goes now, every check passed
        return super().train(resume_from_checkpoint, *args, **kwargs)
