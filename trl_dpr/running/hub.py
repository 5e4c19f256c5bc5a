"""What a push of a run's output folder uploads to the Hugging Face Hub, and pushing exactly that, with no secret.

`Trainer.push_to_hub` uploads `output_dir` with `upload_folder(ignore_patterns=["_*", "checkpoint-*"])`, and
huggingface_hub adds its own (`.git/`, `.cache/huggingface/`). On top of those, trl_dpr never uploads:

- the staging folders of unfinished checkpoints (`.partial/`, `.dpr_reference.partial/`, see `trl_dpr.running.checkpointing`).
  Transformers pushes at every save while the staged checkpoint still sits in `.partial/checkpoint-N/`, so without this
  rule each push uploads that checkpoint's optimizer state as well;
- `training_args.bin`: a pickle of the training arguments, `hub_token` and `model_init_kwargs` included, which runs
  arbitrary code when loaded. The model card and the experiment tracker hold the hyperparameters;
- half-written temporary files (`.dpr_reference.*.tmp`, `.write-test-*`).

An SFT output keeps its reference checkpoint: `dpr_reference/` and `dpr_reference.json` are pushed with the model, so
`CheckpointRewardModel.from_pretrained("user/model")` finds π_ref for anyone. Transformers' own pushes are turned off
(`defer_push_to_hub`) and the run pushes once, at the end (`push_trainer_output`).

    from trl_dpr.running.hub import files_to_push, push_folder

    files_to_push("runs/sft")                      # what a push would upload, relative paths
    push_folder("runs/sft", "me/qwen2.5-0.5b-sft")  # refuses when a file holds a token or key of the environment
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..reference_manifest import MANIFEST_NAME
from ..rewards import reward_label
from .checkpointing import STAGING_DIRNAME

__all__ = [
    "SAFETY_IGNORE_PATTERNS",
    "SECRET_ENV_VARS",
    "TRANSFORMERS_IGNORE_PATTERNS",
    "BaseModelCardMixin",
    "SafeHubPushMixin",
    "SecretFinding",
    "base_model_reference",
    "check_hub_push",
    "copy_files_to_push",
    "defer_push_to_hub",
    "dpr_model_card_section",
    "files_to_push",
    "ignore_patterns",
    "merge_adapter_folder",
    "portability_problems",
    "push_folder",
    "push_trainer_output",
    "scan_for_secrets",
    "secrets_from_environment",
]

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
]
# Environment variables that hold credentials a run may see; any other `*_TOKEN`, `*_API_KEY`, `*_SECRET`,
# `*_PASSWORD`, `*_ACCESS_KEY` variable is treated as one too.
SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "WANDB_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TRACKIO_WRITE_TOKEN",
)
_SECRET_NAME = re.compile(r"(^|_)(TOKEN|API_KEY|SECRET|SECRET_KEY|PASSWORD|ACCESS_KEY)$")
MIN_SECRET_LENGTH = 8  # shorter values ("1", "true") would match everywhere


def ignore_patterns() -> list[str]:
    """The `ignore_patterns` trl_dpr uploads with: transformers' own plus `SAFETY_IGNORE_PATTERNS`.

    Example:
        >>> "training_args.bin" in ignore_patterns(), "checkpoint-*" in ignore_patterns()
        (True, True)
    """
    return TRANSFORMERS_IGNORE_PATTERNS + SAFETY_IGNORE_PATTERNS


def files_to_push(folder: str | os.PathLike, *, safety_rules: bool = True) -> list[str]:
    """The files a push of `folder` uploads: paths relative to it, `/`-separated, in huggingface_hub's order.

    The selection is huggingface_hub's `upload_folder` (every file under `folder`, hidden ones included) filtered by
    transformers' patterns and huggingface_hub's defaults; with `safety_rules` (default) also by
    `SAFETY_IGNORE_PATTERNS`. `safety_rules=False` is what `Trainer.push_to_hub` alone would upload.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> for name in ("model.safetensors", "training_args.bin", "checkpoint-2/optimizer.pt", ".partial/checkpoint-4/optimizer.pt"):
        ...     (d / name).parent.mkdir(parents=True, exist_ok=True)
        ...     _ = (d / name).write_text("x")
        >>> files_to_push(d)
        ['model.safetensors']
        >>> files_to_push(d, safety_rules=False)
        ['.partial/checkpoint-4/optimizer.pt', 'model.safetensors', 'training_args.bin']
    """
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"Nothing to push: {str(folder)!r} is not a directory (expected a run's output_dir).")
    relative = [p.relative_to(root).as_posix() for p in sorted(root.glob("**/*")) if p.is_file()]
    patterns = (ignore_patterns() if safety_rules else list(TRANSFORMERS_IGNORE_PATTERNS)) + DEFAULT_IGNORE_PATTERNS
    return list(filter_repo_objects(relative, ignore_patterns=patterns))


def copy_files_to_push(folder: str | os.PathLike, destination: str | os.PathLike) -> list[str]:
    """Copy exactly `files_to_push(folder)` into `destination` (a dry run of the push: what the Hub repo will hold).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "config.json").write_text("{}"), (d / "training_args.bin").write_text("x")
        >>> copy_files_to_push(d, d.parent / (d.name + "-pushed"))
        ['config.json']
    """
    destination = Path(destination)
    if destination.exists() and any(destination.iterdir()):
        raise FileExistsError(f"{str(destination)!r} is not empty; copy the push selection into a new folder.")
    files = files_to_push(folder)
    for name in files:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(folder) / name, target)
    return files


# ---- secrets --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretFinding:
    """A file that contains the value of a secret. Only the secret's *name* is kept, never its value.

    Example:
        >>> str(SecretFinding(path="run/trainer_state.json", secret_name="HF_TOKEN"))
        'run/trainer_state.json contains the value of HF_TOKEN'
    """

    path: str
    secret_name: str

    def __str__(self) -> str:
        return f"{self.path} contains the value of {self.secret_name}"


def secrets_from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Credentials visible to this process, by name: `SECRET_ENV_VARS`, any other variable named like a credential
    (`*_TOKEN`, `*_API_KEY`, `*_SECRET`, `*_PASSWORD`, `*_ACCESS_KEY`), and the Hugging Face token saved by
    `hf auth login`. Values shorter than 8 characters are left out (they would match everywhere).

    Example:
        >>> secrets_from_environment({"HF_TOKEN": "hf_abcdefghijkl", "TOKENIZERS_PARALLELISM": "false", "MY_API_KEY": "x"})
        {'HF_TOKEN': 'hf_abcdefghijkl'}
    """
    use_os = environ is None
    environ = os.environ if environ is None else environ
    found = {
        name: value
        for name, value in environ.items()
        if (name in SECRET_ENV_VARS or _SECRET_NAME.search(name)) and len(value.strip()) >= MIN_SECRET_LENGTH
    }
    if use_os:
        from huggingface_hub import constants

        token_file = Path(constants.HF_TOKEN_PATH)
        stored = token_file.read_text().strip() if token_file.is_file() else ""
        if len(stored) >= MIN_SECRET_LENGTH and stored not in found.values():
            found[f"the Hugging Face token in {token_file}"] = stored
    return found


def _files_under(paths: Iterable[str | os.PathLike]) -> list[Path]:
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"Cannot scan {str(path)!r}: no such file or directory.")
    return files


def scan_for_secrets(
    paths: Iterable[str | os.PathLike], secrets: Mapping[str, str] | Iterable[str], chunk_size: int = 1 << 20
) -> list[SecretFinding]:
    """Every (file, secret) pair where a file under `paths` (files, or folders scanned recursively, hidden files
    included) contains a secret's value as UTF-8 bytes. Large files are read in chunks.

    Args:
        paths: files and folders to scan.
        secrets: `{name: value}` (e.g. `secrets_from_environment()`) or bare values (named `secret #i`).

    Returns:
        The findings, naming the secret, never showing its value; empty when the files are clean.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "log.txt").write_text("key=sk-test-1234567890")
        >>> [str(f).split("/")[-1] for f in scan_for_secrets([d], {"OPENAI_API_KEY": "sk-test-1234567890"})]
        ['log.txt contains the value of OPENAI_API_KEY']
        >>> scan_for_secrets([d], {"HF_TOKEN": "hf_not_there_at_all"})
        []
    """
    named = dict(secrets) if isinstance(secrets, Mapping) else {f"secret #{i}": v for i, v in enumerate(secrets)}
    needles = {}
    for name, value in named.items():
        if not value:
            continue
        if len(value) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"The value of {name} is {len(value)} characters long; values shorter than {MIN_SECRET_LENGTH} would "
                "match ordinary text. Pass the full secret."
            )
        needles[name] = value.encode("utf-8")
    if not needles:
        return []
    overlap = max(len(n) for n in needles.values()) - 1
    findings = []
    for file in _files_under(paths):
        remaining = dict(needles)
        tail = b""
        with open(file, "rb") as handle:
            while remaining and (chunk := handle.read(chunk_size)):
                window = tail + chunk
                for name in [n for n, needle in remaining.items() if needle in window]:
                    findings.append(SecretFinding(str(file), name))
                    del remaining[name]
                tail = window[-overlap:] if overlap else b""
    return findings


# ---- portability ----------------------------------------------------------------------------------------------------


def _looks_local(name_or_path: str) -> bool:
    """A base model reference only this machine can resolve: a path, not a Hub id (`name` or `org/name`)."""
    return (
        os.path.isabs(name_or_path)
        or name_or_path.startswith((".", "~"))
        or name_or_path.count("/") > 1
        or os.path.exists(name_or_path)
    )


def portability_problems(folder: str | os.PathLike) -> list[str]:
    """Why a pushed copy of `folder` could not be loaded on another machine; empty when it can.

    Checks that a PEFT adapter (the model, and its `dpr_reference/` in an SFT output) names its base model by a Hub id,
    not by a local path, and that an SFT output's manifest points to a reference folder that is pushed with it.

    Example:
        >>> import tempfile, pathlib, json
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/home/me/base"}))
        >>> portability_problems(d)[0].startswith("adapter_config.json names its base model by the local path")
        True
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
    api=None,
):
    """Push exactly `files_to_push(folder)` to the model repo `repo_id` (created if needed), in one commit.

    Before anything is sent it checks that the files are loadable elsewhere (`portability_problems`) and that none
    contains a secret (`secrets`, by default `secrets_from_environment()`, plus `token`); either finding is an error
    that names the files and the secrets, never their values.

    The selection is huggingface_hub's own (`files_to_push`: its `filter_repo_objects` and `DEFAULT_IGNORE_PATTERNS`,
    the walk of `upload_folder`, pinned by tests/test_hub.py), but the upload is one `create_commit` of exactly the
    files that were scanned, not `upload_folder`: `upload_folder` walks the folder again when it uploads, so a file
    written in between (a late checkpoint, a log) would be pushed without the secret scan.

    Args:
        folder: the output folder (an SFT output with `dpr_reference/`, or a DPR policy).
        repo_id: `name` or `org/name`.
        token, private, revision: as `HfApi.create_repo` / `create_commit` take them.
        api: an `HfApi` (default: a new one).

    Returns:
        The `CommitInfo` of the upload.

    Example:
        ```python
        push_folder("runs/quickstart/sft", "me/qwen2.5-0.5b-sft")
        CheckpointRewardModel.from_pretrained("me/qwen2.5-0.5b-sft")  # π_SFT and π_ref, on any machine
        ```
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    files = files_to_push(folder)
    if not files:
        raise ValueError(f"{str(folder)!r} holds no file to push (save the model there first: trainer.save_model()).")
    problems = portability_problems(folder)
    if problems:
        raise ValueError(f"Not pushing {str(folder)!r}: " + " ".join(problems))
    secrets = dict(secrets_from_environment() if secrets is None else secrets)
    if isinstance(token, str) and token:
        secrets.setdefault("the token argument", token)
    findings = scan_for_secrets([Path(folder) / name for name in files], secrets)
    if findings:
        listed = "; ".join(str(f) for f in findings)
        raise ValueError(f"Not pushing {str(folder)!r}: {listed}. Remove the secret from these files and push again.")

    api = api or HfApi()
    repo_url = api.create_repo(repo_id, token=token, private=private, exist_ok=True)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(Path(folder) / name)) for name in files]
    return api.create_commit(
        repo_id=getattr(repo_url, "repo_id", repo_id),
        operations=operations,
        commit_message=commit_message,
        token=token,
        revision=revision,
    )


def defer_push_to_hub(args) -> bool:
    """Keep transformers from pushing by itself, and return whether the run asked to push (`args.push_to_hub`).

    With `push_to_hub=True` a Trainer uploads `output_dir` with its own patterns at every checkpoint save (while the
    staged checkpoint sits in `.partial/`), at every `save_model()` call and at `push_to_hub()`; each upload includes
    `training_args.bin`. Call this before building the trainer, then push once with `push_trainer_output`.

    Example:
        >>> from transformers import TrainingArguments
        >>> args = TrainingArguments("out", push_to_hub=True, hub_model_id="me/model", report_to="none", use_cpu=True)
        >>> defer_push_to_hub(args), args.push_to_hub
        (True, False)
    """
    wanted = bool(args.push_to_hub)
    args.push_to_hub = False
    return wanted


def check_hub_push(args) -> None:
    """With `push_to_hub`, what would only fail after training is checked before it starts: the Hub is reachable in
    principle (not switched off by `HF_HUB_OFFLINE`), a token is there (`hub_token`, `HF_TOKEN` or `hf auth login`), and
    the `hub_strategy` is one trl_dpr keeps: it pushes once, at the end, through `push_trainer_output` (`every_save`,
    transformers' default, and `end` both mean that). `checkpoint` / `all_checkpoints` would upload checkpoint folders
    (optimizer state, `training_args.bin` with `hub_token`) and are refused.

    Example:
        >>> from types import SimpleNamespace
        >>> check_hub_push(SimpleNamespace(push_to_hub=False))  # nothing to check
        >>> check_hub_push(SimpleNamespace(push_to_hub=True, hub_strategy="all_checkpoints", hub_token="hf_x"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: hub_strategy='all_checkpoints' uploads checkpoint folders ...
    """
    if not getattr(args, "push_to_hub", False):
        return
    strategy = str(getattr(getattr(args, "hub_strategy", "every_save"), "value", getattr(args, "hub_strategy", "every_save")))
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
            "Unset HF_HUB_OFFLINE, or set push_to_hub: false and push later with trl_dpr.running.hub.push_folder."
        )
    if not (getattr(args, "hub_token", None) or get_token()):
        raise ValueError(
            "push_to_hub is on but no Hugging Face token was found (hub_token, HF_TOKEN, or `hf auth login`): the "
            "push would fail after training. Log in first, or set push_to_hub: false."
        )


class SafeHubPushMixin:
    """Hub pushes of a Trainer through trl_dpr's safe push (`push_trainer_output`): the model, its card and, for an SFT
    output, its reference checkpoint, scanned for secrets, uploaded once.

    `trainer.push_to_hub()` saves the model and pushes it that way. A trainer built with `push_to_hub=True` checks the
    push before training (`check_hub_push`), keeps transformers from pushing at each save, and pushes once when
    `train()` ends. (The recipes push after their evaluation instead, so the card carries its table.)

    Example:
        ```python
        class SafeSFTTrainer(SafeHubPushMixin, AtomicCheckpointsMixin, SFTTrainer):
            ...
        trainer.push_to_hub()   # push_trainer_output(trainer), not transformers' upload of output_dir
        ```
    """

    def _take_over_hub_push(self, args) -> None:
        """Call before the parent trainer is built: transformers would create the repo and push at every save. (A
        pipeline that checked the push and deferred it before loading anything hands over `push_to_hub` off: nothing
        is checked twice.)"""
        check_hub_push(args)
        self._push_when_trained = defer_push_to_hub(args)

    def train(self, *args, **kwargs):
        output = super().train(*args, **kwargs)
        if getattr(self, "_push_when_trained", False):
            self.save_model()
            push_trainer_output(self)
        return output

    def push_to_hub(self, commit_message: str | None = "End of training", blocking: bool = True, token=None, revision=None,
                    private=None, **kwargs):
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

    Use it instead of `trainer.push_to_hub()` (see `defer_push_to_hub`), after `trainer.save_model()` and after the
    evaluation that writes `eval_results.json`. For a `DensePathTrainer` the card holds the DPR tags, hyperparameters,
    the reward source, the evaluation table and the citation. With `merge_adapter=True` an adapter output is pushed merged into its base model (`merge_adapter_folder`,
    written to `<output_dir>-merged`, in `args.model_init_kwargs["dtype"]`); a full model is pushed as it is.

    Example:
        ```python
        trainer.train()
        trainer.save_model()
        push_trainer_output(trainer, dataset_name="Open-Orca/OpenOrca", merge_adapter=True)
        ```
    """
    args = trainer.args
    if not trainer.is_world_process_zero():
        return None
    repo_id = args.hub_model_id or Path(args.output_dir).absolute().name
    trainer.hub_model_id = trainer.hub_model_id or repo_id  # the card's "quick start" loads the model from there
    trainer.create_model_card(model_name=repo_id.split("/")[-1], dataset_name=dataset_name)
    folder = args.output_dir
    if merge_adapter and (Path(folder) / "adapter_config.json").is_file():
        dtype = (getattr(args, "model_init_kwargs", None) or {}).get("dtype", "auto")
        folder = merge_adapter_folder(folder, f"{str(folder).rstrip('/')}-merged", dtype=dtype, overwrite=True)
    return push_folder(
        folder,
        repo_id,
        token=args.hub_token,
        private=args.hub_private_repo,
        revision=args.hub_revision,
        commit_message=commit_message,
    )


# ---- the model card ---------------------------------------------------------------------------------------------------


def base_model_reference(name_or_path: str | None, kind: str = "model", unknown: str = "an unnamed model") -> str:
    """How a model card names the model a run started from: a Hub link, an embedded model's name, a local folder's
    name (its path means nothing to a reader, and may reveal a home folder), or `unknown`.

    Example:
        >>> base_model_reference("Qwen/Qwen2.5-0.5B")
        '[Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B)'
        >>> base_model_reference("trl_dpr/embedded-tiny-llama")
        '`trl_dpr/embedded-tiny-llama` (the tiny model embedded in trl_dpr)'
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp(), "sft"); folder.mkdir()
        >>> base_model_reference(str(folder), kind="SFT model"), base_model_reference(None)
        ('the SFT model `sft` (a local folder)', 'an unnamed model')
    """
    from ..embedded.base_model import EMBEDDED_MODELS

    if not name_or_path:
        return unknown
    if name_or_path in EMBEDDED_MODELS:
        return f"`{name_or_path}` (the tiny model embedded in trl_dpr)"
    path = Path(name_or_path)
    if path.exists():  # a folder, or a file (a .gguf)
        return f"the {kind} `{path.resolve().name}` (a local {'folder' if path.is_dir() else 'file'})"
    return f"[{name_or_path}](https://huggingface.co/{name_or_path})"


class BaseModelCardMixin:
    """Mix into a TRL trainer: its model card names the model the run started from, and loads this one by a name.

    TRL's card names the base model from the model's config, and only when that is a Hub id; its quick start loads
    `hub_model_id`, unset until a push. A run from a local folder or an embedded model, and every card written at a
    checkpoint save, would read "a fine-tuned version of [None]" and `pipeline(model="None")`. Here the base is
    `_card_base_model()` (`base_model_reference`), and the quick start loads the card's `model_name` (the output
    folder's name, which a push uses as the repository name).

    Example:
        ```python
        class SafeSFTTrainer(BaseModelCardMixin, SFTTrainer):
            pass
        trainer.create_model_card(model_name="qwen-sft")   # "fine-tuned version of [Qwen/Qwen2.5-0.5B](...)"
        ```
    """

    # TRL's template (trl/templates/lm_model_card.md) with base_model=None and hub_model_id=None.
    _UNKNOWN_BASE = "[None](https://huggingface.co/None)"
    _UNKNOWN_REPO = 'model="None"'

    def _card_base_model(self) -> str:
        """The card's words for the model this run started from (by default, where the model was loaded from)."""
        model = self.accelerator.unwrap_model(self.model)
        return base_model_reference(getattr(model.config, "_name_or_path", None))

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if self.is_world_process_zero():
            path = Path(self.args.output_dir) / "README.md"
            repo = self.hub_model_id or model_name or Path(self.args.output_dir).absolute().name
            card = path.read_text().replace(self._UNKNOWN_BASE, self._card_base_model())
            path.write_text(card.replace(self._UNKNOWN_REPO, f'model="{repo}"'))


# Hyperparameters shown on a DPR model card: DPR's own fields and the parent fields the paper fixes (Table 5).
CARD_HYPERPARAMETERS = (
    "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size",
    "num_generations", "temperature", "kl_coef", "gamma", "epsilon", "reward_granularity", "use_baseline",
    "eliminate_value", "whiten_advantages", "max_prompt_length", "max_completion_length", "warmup_steps", "seed",
)


def dpr_model_card_section(args, reward_model) -> str:
    """The DPR part of a policy's model card: hyperparameters, where the dense reward came from, the evaluation.

    `args` is the run's `DensePathConfig`; `reward_model` its `CheckpointRewardModel`. The evaluation table is read from
    `<output_dir>/eval_results.json` when a run wrote one.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> args = NS(output_dir="/nonexistent", max_steps=10, **{name: 0 for name in CARD_HYPERPARAMETERS})
        >>> "| `kl_coef` | 0 |" in dpr_model_card_section(args, NS(reference_manifest=None, sft_model_name_or_path=None))
        True
    """
    lines = ["", "## Dense-Path REINFORCE", "", "| hyperparameter | value |", "|---|---|"]
    lines += [f"| `{name}` | {getattr(args, name)} |" for name in CARD_HYPERPARAMETERS]
    length = ("max_steps", args.max_steps) if args.max_steps > 0 else ("num_train_epochs", args.num_train_epochs)
    lines.append(f"| `{length[0]}` | {length[1]} |")
    manifest, source = reward_model.reference_manifest, reward_model.sft_model_name_or_path
    if source:
        # A Hub id is useful to readers; a local path is not (and may reveal a home directory): keep its name.
        source = Path(source).name if Path(source).is_dir() else source
        reference = f" (π_ref: step {manifest.step}/{manifest.total_steps}, α = {manifest.fraction})" if manifest else ""
        reward = getattr(reward_model, "reward", None)
        rule = reward_label(reward) if reward is not None else "r̂ = log π_SFT − log π_ref"
        lines += ["", f"Dense reward {rule}, from the SFT model `{source}`{reference}."]
    if getattr(args, "dense_reward", None):
        lines += ["", f"Reward class `{args.dense_reward}` with `{args.dense_reward_kwargs}`"
                  + (f", models {sorted(args.dense_reward_models)}" if args.dense_reward_models else "") + "."]
    results_path = Path(args.output_dir) / "eval_results.json"
    if results_path.is_file():
        table = json.loads(results_path.read_text()).get("table_markdown")
        if table:
            lines += ["", "## Evaluation", "", table]
    return "\n".join(lines) + "\n"


def merge_adapter_folder(
    adapter_dir: str | os.PathLike, output_dir: str | os.PathLike, dtype: str = "auto", overwrite: bool = False
) -> str:
    """Merge a saved LoRA adapter into a full-precision copy of its base model and save the result, with the tokenizer
    and the model card (`README.md`, `eval_results.json`) of `adapter_dir`. Returns `output_dir`.

    The base is loaded again without quantisation (merging into 4-bit weights would round the update away). A
    non-empty `output_dir` is an error unless `overwrite=True`, which empties it first (no stale weight shard stays).

    Example:
        ```python
        merge_adapter_folder("runs/dpr", "runs/dpr-merged", dtype="bfloat16")
        push_folder("runs/dpr-merged", "me/qwen2.5-0.5b-dpr")
        ```
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
    if output_dir.is_dir() and any(output_dir.iterdir()):
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
    return str(output_dir)
