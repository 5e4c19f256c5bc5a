"""What a push of a run's output folder uploads (to the Hub or a folder), the check every push passes, and the push.

Besides transformers' and huggingface_hub's patterns, never staging folders (`.partial/`, a merge's), `training_args.bin`
(a pickle holding `hub_token`) or temporary files; an SFT output keeps `dpr_reference/`. The run pushes once, at the end.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

from ..reference_manifest import MANIFEST_NAME
from .checkpointing import (
    PREFIX_CHECKPOINT_DIR,
    RUN_COMPLETE_NAME,
    STAGING_DIRNAME,
    _agree,
    _is_main_process,
    mark_step_done,
)
from .merge import (
    MERGED_MARKER,
    check_merge_target,
    merge_adapter_folder,
    merge_output_files,
    merged_dtype,
    merged_folder,
    sweep_killed_merges,
    unfinished_merge,
)
from .model_card import _card_loading, _looks_local
from .secret_scan import secrets_from_environment, secrets_in_file

logger = logging.getLogger(__name__)

# What `Trainer.push_to_hub` and `Trainer._push_from_checkpoint` pass to `upload_folder` (transformers 5).
TRANSFORMERS_IGNORE_PATTERNS = ["_*", f"{PREFIX_CHECKPOINT_DIR}-*"]
# trl_dpr's own rules. huggingface_hub matches with fnmatch, where `*` also matches `/`.
SAFETY_IGNORE_PATTERNS = [
    f"*{STAGING_DIRNAME}/*",  # .partial/checkpoint-N/..., .dpr_reference.partial/... (staged, not yet complete)
    "training_args.bin",  # pickled TrainingArguments: hub_token, model_init_kwargs (token=...)
    "*/training_args.bin",
    ".dpr_reference.*.tmp",  # the manifest while it is being written
    ".write-test-*",  # the output-dir probe of check_output_dir
    ".trl_dpr.lock*",  # the run's lock and its holder (PID, host name)
    MERGED_MARKER,  # merge_adapter_folder's mark on its own output
    ".*.merging-*",  # a merge's staging folder and its lock (merge.STAGING_PREFIX), for a target inside this folder
    "*/.*.merging-*",
    f"*{RUN_COMPLETE_NAME}*",  # this clone's record that the run finished (and the record while it is written)
]


def ignore_patterns() -> list[str]:
    """The `ignore_patterns` trl_dpr uploads with: transformers' own plus `SAFETY_IGNORE_PATTERNS`."""
    return TRANSFORMERS_IGNORE_PATTERNS + SAFETY_IGNORE_PATTERNS


def files_to_push(folder: str | os.PathLike, *, safety_rules: bool = True) -> list[str]:
    """The files a push of `folder` uploads (relative, `/`-separated, in huggingface_hub's order): `upload_folder`'s
    walk filtered by transformers' and huggingface_hub's patterns, plus `SAFETY_IGNORE_PATTERNS` unless `safety_rules=False`;
    in a merge's folder, only the files the merge wrote (a marker beside a run's own files is a stale one: ignored).
    """
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"Nothing to push: {str(folder)!r} is not a directory (expected a run's output_dir).")
    relative = [p.relative_to(root).as_posix() for p in sorted(root.glob("**/*")) if p.is_file()]
    patterns = (ignore_patterns() if safety_rules else list(TRANSFORMERS_IGNORE_PATTERNS)) + DEFAULT_IGNORE_PATTERNS
    files = list(filter_repo_objects(relative, ignore_patterns=patterns))
    if _is_merge_folder(root) and (merged := merge_output_files(root)) is not None:  # not a file you added there
        if unfinished_merge(root):
            raise ValueError(
                f"Not pushing {str(folder)!r}: the merge that wrote it stopped while it replaced an earlier merge's files "
                "(a mix of two merges, which loads but is neither). Merge again: trl-dpr push OUTPUT_DIR --merge_adapter "
                "(or merge_adapter_folder(..., overwrite=True))."
            )
        files = [name for name in files if name in merged]
    return files


# A run's own files, which no merge writes: beside them, a merge marker is a stale one (the folder was reused as a run's).
_RUN_FILES = ("adapter_config.json", "training_args.bin")
# What a model's weights are saved as: a push without one would not load.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".h5", ".msgpack", ".onnx")


def _is_merge_folder(root: Path) -> bool:
    return os.path.lexists(root / MERGED_MARKER) and not any((root / name).exists() for name in _RUN_FILES)


def copy_files_to_push(
    folder: str | os.PathLike,
    destination: str | os.PathLike,
    *,
    secrets: Mapping[str, str] | None = None,
    allow: Iterable[str] = (),
) -> list[str]:
    """Copy exactly `files_to_push(folder)` into a new `destination` after `check_push` (a push to a folder, or the
    dry run of a Hub push: what the repo will hold). A local base model's path is kept: this machine can load it; the
    model card's quick start loads `destination`, not `folder`."""
    destination = Path(destination)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise FileExistsError(f"{str(destination)!r} is not empty; copy the push selection into a new folder.")
    files = check_push(folder, secrets=secrets, allow=allow, portable=False)
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(folder) / name, target)
    if "README.md" in files and (card := _card_loading(destination / "README.md", str(destination))) is not None:
        (destination / "README.md").write_bytes(card)
    for name, portable in _portable_records(folder, files).items():
        (destination / name).write_bytes(portable)
    return files


def _portable_records(folder: str | os.PathLike, files: list[str]) -> dict[str, bytes]:
    """trl_dpr's own records among `files` that name local folders (π_ref's and the SFT's base model, the evaluation's
    output_dir), as a pushed copy holds them: each absolute path replaced by the folder's name (the embedded model's
    name for the shipped base); nothing loads by them. `sft_complete.json` then lists the rewritten files' sizes."""
    from ..reference_manifest import SFT_COMPLETE_NAME

    portable = {
        name: text
        for name in (MANIFEST_NAME, "eval_results.json", SFT_COMPLETE_NAME)
        if name in files and (text := _without_local_paths(Path(folder) / name)) is not None
    }
    if SFT_COMPLETE_NAME in files and set(portable) - {SFT_COMPLETE_NAME}:
        record = json.loads(portable.get(SFT_COMPLETE_NAME) or (Path(folder) / SFT_COMPLETE_NAME).read_bytes())
        listed = record.get("files") if isinstance(record, dict) else None
        if isinstance(listed, dict):
            listed.update({name: len(text) for name, text in portable.items() if name in listed})
            portable[SFT_COMPLETE_NAME] = (json.dumps(record, indent=1, ensure_ascii=False)).encode()
    return portable


# The fields of trl_dpr's records that name a local folder or file: the SFT's base model, the evaluation's settings
# (`EvaluationConfig`'s paths, and its NAME=PATH models). No other string is touched (an answer_pattern `/(\\d+)/`).
_PATH_FIELDS = frozenset(
    (
        "base_model",
        "output_dir",
        "jsonl_path",
        "alpaca_eval_path",
        "arena_hard_path",
        "lima_path",
        "mt_bench_path",
        "judge_model",
    )
)
_NAMED_PATH_FIELDS = frozenset({"baseline", "candidates"})


def _without_local_paths(path: Path) -> bytes | None:
    """The JSON file at `path` with the absolute paths of its path fields (`_PATH_FIELDS`: `/a/b/sft`;
    `_NAMED_PATH_FIELDS`: `SFT=/a/b/sft`) replaced by their last component; None when it holds none (or is no JSON:
    sent as it is). Written as the run writes its records (non-ASCII kept as it is)."""
    from .model_card import _embedded_name

    def name_of(text: str) -> str:
        return _embedded_name(text) if _embedded_name(text) != text else Path(text).name

    def portable(value, named: bool):
        if isinstance(value, list):
            return [portable(item, named) for item in value]
        if not isinstance(value, str):
            return value
        label, _, where = value.partition("=") if named else ("", "", value)
        if not os.path.isabs(where):
            return value
        return f"{label}={name_of(where)}" if named else name_of(where)

    def rewrite(value):
        if isinstance(value, list):
            return [rewrite(item) for item in value]
        if not isinstance(value, dict):
            return value
        return {
            key: portable(item, key in _NAMED_PATH_FIELDS)
            if key in _PATH_FIELDS | _NAMED_PATH_FIELDS
            else rewrite(item)
            for key, item in value.items()
        }

    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    result = rewrite(record)
    return None if result == record else (json.dumps(result, indent=2, ensure_ascii=False) + "\n").encode()


# ---- the push check -------------------------------------------------------------------------------------------------


def push_problems(folder: str | os.PathLike, files: list[str], secrets: Mapping[str, str], allow: Iterable[str] = ()):
    """Why each of `files` (relative to `folder`) must not leave the machine, one line each: a `.env*` file, a file
    that resolves outside `folder` (a link), a key by its shape or a value of `secrets` (with its line). A file in
    `allow` is vouched for by the user: only the values of `secrets`, which are this user's own keys, are refused in it.
    """
    root, allow = Path(folder).resolve(), set(allow)
    problems = []
    for name in files:
        path, vouched = Path(folder) / name, name in allow
        if not vouched and not path.resolve().is_relative_to(root):
            problems.append(f"{name} is a link to {path.resolve()}, outside the run folder")
            continue
        if not vouched and Path(name).name.startswith(".env"):
            problems.append(f"{name} is a .env file (where credentials are kept)")
        for line, what in secrets_in_file(path, secrets, shapes=not vouched):
            problems.append(f"{name}:{line} holds {what}" if line else f"{name} holds {what}")
    return problems


def check_push(
    folder: str | os.PathLike,
    *,
    secrets: Mapping[str, str] | None = None,
    token: str | None = None,
    allow: Iterable[str] = (),
    portable: bool = True,
) -> list[str]:
    """The one check before any push (to the Hub, to a folder, the dry run): `files_to_push(folder)`, returned when
    `push_problems` finds nothing (and, for the Hub, `portable`, nothing names a local path); else a `ValueError`
    naming each file, and nothing is sent.
    `secrets` defaults to `secrets_from_environment()`; a `token` given for the push is one too."""
    files = files_to_push(folder)
    if not files:
        raise ValueError(f"{str(folder)!r} holds no file to push (save the model there first: trainer.save_model()).")
    if not any(name.endswith(_WEIGHT_SUFFIXES) for name in files):
        raise ValueError(
            f"Not pushing {str(folder)!r}: no file it would send holds weights "
            f"({', '.join(f'*{s}' for s in _WEIGHT_SUFFIXES[:3])}, ...), so the copy would not load. Nothing was sent. "
            "Save the model there first (trainer.save_model())."
        )
    allow = [Path(name).as_posix() for name in allow]
    if unknown := sorted(set(allow) - set(files)):
        raise ValueError(
            f"Allowed {unknown}, but a push of {str(folder)!r} holds no such file: name files relative "
            f"to the folder, as `files_to_push` lists them."
        )
    problems = portability_problems(folder) if portable else []
    if problems:
        raise ValueError(f"Not pushing {str(folder)!r}: " + " ".join(problems))
    secrets = dict(secrets_from_environment() if secrets is None else secrets)
    if isinstance(token, str) and token:
        secrets.setdefault("the token argument", token)
    problems = push_problems(folder, files, secrets, allow)
    if problems:
        raise ValueError(
            f"Not pushing {str(folder)!r}: {'; '.join(problems)}. Nothing was sent. Remove these files or the secrets "
            "in them; a file you have checked and vouch for goes with --allow FILE (allow=[...] in Python)."
        )
    return files


# ---- portability ----------------------------------------------------------------------------------------------------


def portability_problems(folder: str | os.PathLike) -> list[str]:
    """Why a pushed copy of `folder` could not load elsewhere (an adapter naming its base by a local path, a manifest
    pointing at a reference folder that is not pushed); empty when it can.
    """
    folder = Path(folder)
    pushed = set(files_to_push(folder))
    problems = []
    for config in sorted(name for name in pushed if name.rsplit("/", 1)[-1] == "adapter_config.json"):
        base = json.loads((folder / config).read_text()).get("base_model_name_or_path") or ""
        if _looks_local(base):
            problems.append(
                f"{config} names its base model by the local path {base!r}, which nobody else can load. Train from a "
                "Hub model id (e.g. Qwen/Qwen2.5-0.5B), or push the base model and set base_model_name_or_path to "
                "its repo id."
            )
    if MANIFEST_NAME in pushed:
        reference = json.loads((folder / MANIFEST_NAME).read_text()).get("path", "")
        if not any(name.startswith(f"{reference}/") for name in pushed):
            problems.append(
                f"{MANIFEST_NAME} points to {reference}/, but no file of it would be pushed: "
                "CheckpointRewardModel.from_pretrained would not find π_ref."
            )
    return problems


# ---- pushing --------------------------------------------------------------------------------------------------------


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload with trl_dpr",
    secrets: Mapping[str, str] | None = None,
    allow: Iterable[str] = (),
    api=None,
):
    """Push exactly `files_to_push(folder)` to `repo_id` (created if needed) in one commit; returns its `CommitInfo`.

    Refused by `check_push` before anything is sent. One `create_commit` of the scanned files, not
    `upload_folder`, which walks again and would push a file written in between unscanned.
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    files = check_push(folder, secrets=secrets, token=token, allow=allow)
    api = api or HfApi()
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(Path(folder) / name)) for name in files]
    if "README.md" in files and (card := _card_loading(Path(folder) / "README.md", repo_id)) is not None:
        operations[files.index("README.md")] = CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card)
    for name, portable in _portable_records(folder, files).items():
        operations[files.index(name)] = CommitOperationAdd(path_in_repo=name, path_or_fileobj=portable)
    try:
        repo_url = api.create_repo(repo_id, token=token, private=private, exist_ok=True)
        return api.create_commit(
            repo_id=getattr(repo_url, "repo_id", repo_id),
            operations=operations,
            commit_message=commit_message,
            token=token,
            revision=revision,
        )
    except Exception as error:
        if (line := _hub_failure(error, "no commit was made", "or push to a folder (--to ./some-folder)")) is None:
            raise
        raise line from None


def _hub_failure(error: Exception, outcome: str, instead: str) -> OSError | None:
    """The one-line error for a Hub that refused the token (401) or could not be reached (httpx's `TransportError`s:
    no class of huggingface_hub, and no OSError); None for any other error. `outcome` says what did not happen,
    `instead` what else to do. Shared by every push and by the check before training."""
    from huggingface_hub import constants

    if getattr(getattr(error, "response", None), "status_code", None) == 401:  # an HfHubHTTPError
        return PermissionError(
            f"The Hub at {constants.ENDPOINT} refused the token (401 Unauthorized: it is invalid or has expired); "
            f"{outcome}. Log in again (`hf auth login`, or set HF_TOKEN to a valid write token), {instead}."
        )
    if any(cls.__name__ == "TransportError" for cls in type(error).__mro__):
        return ConnectionError(
            f"Could not reach the Hub at {constants.ENDPOINT} ({type(error).__name__}: {error}); {outcome}. Check the "
            f"network (and HF_ENDPOINT), {instead}."
        )
    return None


def defer_push_to_hub(args) -> bool:
    """Turn `args.push_to_hub` off and return whether it was on: transformers would push `output_dir`
    (`training_args.bin` included) at every save; the run pushes once with `push_trainer_output` instead.
    """
    wanted = bool(args.push_to_hub)
    args.push_to_hub = False
    return wanted


def check_hub_push(args) -> None:
    """With `push_to_hub`, check before training what would fail after it: the Hub reachable, a token it knows that
    is no read token, and a `hub_strategy` that pushes once at the end (the checkpoint strategies would upload optimizer
    state). A Hub that cannot say (429, 5xx) is a warning: the push is tried after training."""
    if not getattr(args, "push_to_hub", False):
        return
    strategy = str(
        getattr(getattr(args, "hub_strategy", "every_save"), "value", getattr(args, "hub_strategy", "every_save"))
    )
    if strategy not in ("every_save", "end"):
        raise ValueError(
            f"hub_strategy={strategy!r} uploads checkpoint folders (optimizer state, and training_args.bin, which "
            "holds hub_token). trl_dpr pushes the final model once, at the end, with its reference checkpoint and a "
            "secret scan: remove hub_strategy (or set it to end)."
        )
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE:
        raise ValueError(
            "push_to_hub is on but the Hub is switched off (HF_HUB_OFFLINE=1): the push would fail after training. "
            "Unset HF_HUB_OFFLINE, or set push_to_hub: false and push later with trl_dpr.running.push.push_folder."
        )
    if not (token := getattr(args, "hub_token", None) or get_token()):
        raise ValueError(
            "push_to_hub is on but no Hugging Face token was found (hub_token, HF_TOKEN, or `hf auth login`): the "
            "push would fail after training. Log in first, or set push_to_hub: false."
        )
    kind, line = _hub_verdict(token)
    if kind == "warning":
        return
    if kind is not None:
        raise {"PermissionError": PermissionError, "ConnectionError": ConnectionError}.get(kind, ValueError)(line)


# The main process's answer to `whoami`, per (endpoint, token): asked once per process, whoever checks.
_HUB_VERDICTS: dict[tuple[str, str], tuple[str | None, str | None]] = {}


def _hub_verdict(token: str) -> tuple[str | None, str | None]:
    """(None, None) when the Hub knows `token` and it may write; ("warning", line) when the Hub could not say (a 429
    or a 5xx: the push is tried after training, warned once); else the error's class name and its one line. Only the
    main process asks (N ranks asking at once are rate limited); the others get its answer."""
    from huggingface_hub import constants

    key = (constants.ENDPOINT, token)
    if key in _HUB_VERDICTS:
        return _HUB_VERDICTS[key]
    verdict = _ask_hub(token) if _is_main_process() else (None, None)
    if "torch" in sys.modules:  # a process group exists only where torch is loaded (`trl-dpr push` stays light)
        verdict = tuple(_agree(list(verdict)))
    _HUB_VERDICTS[key] = verdict
    if verdict[0] == "warning":
        logger.warning(verdict[1])
    return verdict


def _ask_hub(token: str) -> tuple[str | None, str | None]:
    """`whoami` for `token`, as `_hub_verdict` returns it: the one place the check asks the Hub."""
    from huggingface_hub import HfApi

    try:
        answer = HfApi().whoami(token=token)
    except Exception as error:
        outcome = "push_to_hub would fail after training, so nothing was trained"
        if (line := _hub_failure(error, outcome, "or set push_to_hub: false")) is not None:
            return type(line).__name__, str(line)
        first = (str(error).strip().splitlines() or [""])[0]
        status = getattr(getattr(error, "response", None), "status_code", None)
        return "warning", (
            f"The Hub could not check the token before training ({type(error).__name__}"
            f"{f' {status}' if status else ''}: {first}); training anyway, "
            "and the push is tried at the end (if it fails, the run is kept: push it later with trl-dpr push)."
        )
    role = ((answer or {}).get("auth") or {}).get("accessToken", {}).get("role")
    if role == "read":
        return "PermissionError", (
            "push_to_hub is on but the token is a read token: the push would fail after training, so nothing was "
            "trained. Use a write token (hub_token, HF_TOKEN or `hf auth login`), or set push_to_hub: false."
        )
    return None, None


class SafeHubPushMixin:
    """Hub pushes of a Trainer through `push_trainer_output`: checked before training, never at each save, once at the end
    of `train()`, scanned for secrets; `trainer.push_to_hub()` goes the same way.
    """

    def _take_over_hub_push(self, args) -> None:
        """Call before the parent trainer is built: transformers would create the repo and push at every save."""
        check_hub_push(args)
        self._push_when_trained = defer_push_to_hub(args)

    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        if getattr(self, "_push_when_trained", False):
            self.save_model()
            push_trainer_output(self)
        return output

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token=None,
        revision=None,
        private=None,
        **kwargs,
    ):
        """Save the model and push it with `push_trainer_output` (the card's `dataset_name` may be given)."""
        if token is not None:
            self.args.hub_token = token
        if revision is not None:
            self.args.hub_revision = revision
        if private is not None:
            self.args.hub_private_repo = private
        self.save_model()
        return push_trainer_output(
            self, dataset_name=kwargs.get("dataset_name"), commit_message=commit_message or "End of training"
        )


def push_trainer_output(
    trainer,
    *,
    dataset_name: str | None = None,
    merge_adapter: bool = False,
    commit_message: str = "End of training",
):
    """Write the trainer's model card and `push_folder` its `output_dir` to `args.hub_model_id` (main process only).

    Call it after `save_model()` and the evaluation (the card carries its table). `merge_adapter=True` pushes an adapter
    merged into its base (`merge_adapter_folder`, into `<output_dir>-merged`).
    """
    args = trainer.args
    if not trainer.is_world_process_zero():
        return None
    repo_id = args.hub_model_id or Path(args.output_dir).absolute().name
    trainer.hub_model_id = trainer.hub_model_id or repo_id  # the card's "quick start" loads the model from there
    trainer.create_model_card(model_name=repo_id.split("/")[-1], dataset_name=dataset_name)
    folder = (merge_trainer_output(trainer) if merge_adapter else None) or args.output_dir
    return push_folder(
        folder,
        repo_id,
        token=args.hub_token,
        private=args.hub_private_repo,
        revision=args.hub_revision,
        commit_message=commit_message,
    )


def merge_trainer_output(trainer) -> str | None:
    """Merge the trainer's adapter `output_dir` into `<output_dir>-merged` (`merge_adapter_folder`, main process only,
    in the dtype the run loaded its model in) and return that folder; None when there is no adapter to merge."""
    if not trainer.is_world_process_zero():
        return None
    return merge_output_dir(
        trainer.args.output_dir, (getattr(trainer.args, "model_init_kwargs", None) or {}).get("dtype")
    )


def merge_output_dir(output_dir: str, dtype: str | None = None) -> str | None:
    """Merge the adapter in a run's `output_dir` into `<output_dir>-merged` (`merge_adapter_folder`, in `dtype`, the
    run's: None is "auto") and return that folder; None, with a warning, when it holds a full model. Call it on the
    main process only: a finished run whose merge did not finish merges again here (`trl-dpr dpr`)."""
    if not (Path(output_dir) / "adapter_config.json").is_file():
        logger.warning(f"merge_adapter: {output_dir} holds a full model, not a LoRA adapter: nothing to merge.")
        return None
    merged = merge_adapter_folder(output_dir, merged_folder(output_dir), dtype=dtype or "auto", overwrite=True)
    print(f"Merged the adapter in {output_dir} into its base model: {merged}", flush=True)
    return merged


# ---- `trl-dpr push` ---------------------------------------------------------------------------------------------------


def _unfinished(folder: Path) -> str | None:
    """Why `folder` is not a finished run to push (missing, a run still writing it, no final model, π_ref missing)."""
    from ..reference_manifest import parse_manifest, sft_output_problem
    from .checkpointing import LOCK_NAME, _FolderLock

    if not folder.is_dir():
        return "the folder does not exist"
    lock = _FolderLock(folder / LOCK_NAME)
    if not lock.acquire():
        return "a run is still writing it (it holds .trl_dpr.lock); wait for it to end"
    lock.release()
    if problem := sft_output_problem(folder, stage=_stage_of(folder)):
        return problem
    if (folder / MANIFEST_NAME).is_file():
        manifest = parse_manifest((folder / MANIFEST_NAME).read_text(), str(folder / MANIFEST_NAME))
        if not (folder / manifest.path).is_dir():
            return f"{MANIFEST_NAME} points to {manifest.path}/, which is missing (π_ref would not be pushed)"
    return None


def _stage_of(folder: Path) -> str:
    """Which stage wrote the run folder `folder`, for its messages: DPR when its model card carries DPR's tag, SFT
    when it holds π_ref; else "training"."""
    from .model_card import _front_matter

    if "dense-path-reinforce" in (_front_matter(folder / "README.md").get("tags") or []):
        return "DPR"
    return "SFT" if (folder / MANIFEST_NAME).exists() or (folder / "dpr_reference").exists() else "training"


def _is_folder(destination: str) -> bool:
    """`--to` names a folder when it is a path (`./x`, `/x`, `~/x`, `a/b/c`, an existing path, or `runs/x` whose
    `runs/` exists); else it is a Hub repo id (`name` or `org/name`)."""
    return _looks_local(destination) or Path(destination.split("/")[0]).expanduser().is_dir()


def main(argv=None, prog: str = "python -m trl_dpr.running.push") -> None:
    """`trl-dpr push OUTPUT_DIR --to REPO_OR_DIR`: a finished run (an SFT run with π_ref) to a Hub repo or a new folder,
    after `check_push`."""
    from .recipe_checks import CommandParser

    parser = CommandParser(
        prog=prog,
        description="Push a finished run's output folder, π_ref included, to a Hub repo "
        "or a new local folder, after the secret check.",
    )
    parser.add_argument("output_dir", help="the output_dir of a finished `trl-dpr sft` or `trl-dpr dpr` run")
    parser.add_argument(
        "--to",
        required=True,
        metavar="REPO_OR_DIR",
        help="a Hub repo id (me/model), or a new folder: a path (./x, /x, ~/x) or one whose parent exists",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="FILE",
        help="a file of OUTPUT_DIR you have checked and vouch for: pushed though a key shape, a .env "
        "name or a link would refuse it (never with the value of one of your own credentials)",
    )
    parser.add_argument("--private", action="store_true", help="create the Hub repo private")
    parser.add_argument("--revision", help="the Hub branch to push to (default: main)")
    parser.add_argument("--commit_message", default="Upload with trl-dpr push")
    parser.add_argument(
        "--merge_adapter",
        action="store_true",
        help="a LoRA/QLoRA policy (trl-dpr dpr): push it merged into a full-precision copy of its base model, "
        "written to OUTPUT_DIR-merged first, as the recipe key merge_adapter: true does",
    )
    args = parser.parse_args(argv)
    folder = Path(args.output_dir)
    if problem := _unfinished(folder):
        raise ValueError(
            f"{args.output_dir!r} is not a finished run to push: {problem}. Expected the output_dir of a "
            "trl-dpr sft or trl-dpr dpr run that ended."
        )
    if args.merge_adapter:
        _check_mergeable(folder, args.output_dir)
    # Everything that can refuse the push is checked before the merge spends anything.
    to_folder = _is_folder(args.to)
    if to_folder:
        destination = Path(args.to).expanduser()
        for inside in (folder, Path(merged_folder(folder))) if args.merge_adapter else (folder,):
            if destination.resolve().is_relative_to(inside.resolve()):
                raise ValueError(f"--to {args.to!r} is inside {str(inside)!r}: push to a folder outside the run.")
        if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
            raise FileExistsError(f"{args.to!r} is not empty; push to a new folder.")
    else:
        _check_hub_destination(args.to)
    sweep_killed_merges(folder.parent)  # where a merge of this run stages: a killed one's copy is not left there
    source = folder
    if args.merge_adapter:  # in the dtype the run's own merge used (its arguments'), else the base's saved one
        dtype = merged_dtype(merged_folder(folder)) or "auto"
        source = merge_adapter_folder(folder, merged_folder(folder), dtype=dtype, overwrite=True)
    if to_folder:
        files = copy_files_to_push(source, destination, allow=args.allow)
        print(
            f"Pushed {len(files)} files of {source if args.merge_adapter else args.output_dir} to the folder {destination}."
        )
        return
    commit = push_folder(  # a Hub that refuses the token or cannot be reached: one line (`_hub_failure`)
        source,
        args.to,
        private=args.private or None,
        revision=args.revision,
        commit_message=args.commit_message,
        allow=args.allow,
    )
    print(
        f"Pushed {source if args.merge_adapter else args.output_dir} to https://huggingface.co/{args.to} ({getattr(commit, 'commit_url', commit)})."
    )
    try:  # a `trl-dpr dpr` run whose own push failed: its next run no longer says to push
        mark_step_done(folder, "push")
    except OSError as error:  # the push is made: a run folder this user cannot write only keeps its reminder
        print(f"(Not recorded in {folder}: {error}; `trl-dpr dpr` there may still print the push line.)")


def _check_mergeable(folder: Path, name: str) -> None:
    """`--merge_adapter`'s checks before the merge: a DPR adapter folder, and `<folder>-merged` a merge may write."""
    if not (folder / "adapter_config.json").is_file():
        raise ValueError(f"--merge_adapter: {name!r} holds a full model, not a LoRA adapter; push it without it.")
    if (folder / MANIFEST_NAME).is_file():
        raise ValueError(
            f"--merge_adapter: {name!r} is an SFT output, whose π_ref (dpr_reference/) is an adapter of the same base "
            "that a merged model would leave behind; push it without --merge_adapter."
        )
    check_merge_target(merged_folder(folder))


def _check_hub_destination(repo_id: str) -> None:
    """Before anything is sent or merged: `repo_id` is a repo id, the Hub is on and there is a token (as
    `check_hub_push` checks a recipe)."""
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"--to {repo_id!r} is neither a folder path nor a Hub repo id ({error}).") from None
    if constants.HF_HUB_OFFLINE:
        raise ValueError(
            "The Hub is switched off here (HF_HUB_OFFLINE=1): unset it to push to a Hub repo, or push to "
            "a folder (--to ./some-folder)."
        )
    if not get_token():
        raise ValueError(
            "No Hugging Face token was found (HF_TOKEN, or `hf auth login`): log in first to push to a Hub repo, or "
            "push to a folder (--to ./some-folder)."
        )


if __name__ == "__main__":
    main()
