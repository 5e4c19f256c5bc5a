"""What a push of a run's output folder uploads to the Hugging Face Hub, and pushing exactly that, with no secret.

Besides transformers' and huggingface_hub's patterns, never `.partial/` staging folders, `training_args.bin` (a pickle
holding `hub_token`) or temporary files; an SFT output keeps `dpr_reference/`. The run pushes once, at the end.
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
    """The `ignore_patterns` trl_dpr uploads with: transformers' own plus `SAFETY_IGNORE_PATTERNS`."""
    return TRANSFORMERS_IGNORE_PATTERNS + SAFETY_IGNORE_PATTERNS


def files_to_push(folder: str | os.PathLike, *, safety_rules: bool = True) -> list[str]:
    """The files a push of `folder` uploads (relative, `/`-separated, in huggingface_hub's order): `upload_folder`'s
    walk filtered by transformers' and huggingface_hub's patterns, plus `SAFETY_IGNORE_PATTERNS` unless `safety_rules=False`.
    """
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"Nothing to push: {str(folder)!r} is not a directory (expected a run's output_dir).")
    relative = [p.relative_to(root).as_posix() for p in sorted(root.glob("**/*")) if p.is_file()]
    patterns = (ignore_patterns() if safety_rules else list(TRANSFORMERS_IGNORE_PATTERNS)) + DEFAULT_IGNORE_PATTERNS
    return list(filter_repo_objects(relative, ignore_patterns=patterns))


def copy_files_to_push(folder: str | os.PathLike, destination: str | os.PathLike) -> list[str]:
    """Copy exactly `files_to_push(folder)` into `destination` (a dry run of the push: what the Hub repo will hold)."""
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
    """A file that contains the value of a secret. Only the secret's *name* is kept, never its value."""

    path: str
    secret_name: str

    def __str__(self) -> str:
        return f"{self.path} contains the value of {self.secret_name}"


def secrets_from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Credentials visible to this process, by name: `SECRET_ENV_VARS`, any other variable named like a credential
    (`*_TOKEN`, `*_API_KEY`, `*_SECRET`, `*_PASSWORD`, `*_ACCESS_KEY`), and the Hugging Face token saved by
    `hf auth login`. Values shorter than 8 characters are left out (they would match everywhere).
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
    """Every (file, secret) pair where a file under `paths` (recursively, hidden files included) contains a secret's
    value; `secrets` is `{name: value}` or bare values. Findings name the secret, never show its value.
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
    api=None,
):
    """Push exactly `files_to_push(folder)` to `repo_id` (created if needed) in one commit; returns its `CommitInfo`.

    Refuses files that are not portable or hold a secret. One `create_commit` of the scanned files, not
    `upload_folder`, which walks again and would push a file written in between unscanned.
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
    """Turn `args.push_to_hub` off and return whether it was on: transformers would push `output_dir`
    (`training_args.bin` included) at every save; the run pushes once with `push_trainer_output` instead.
    """
    wanted = bool(args.push_to_hub)
    args.push_to_hub = False
    return wanted


def check_hub_push(args) -> None:
    """With `push_to_hub`, check before training what would fail after it: the Hub reachable, a token, and a
    `hub_strategy` that pushes once at the end (the checkpoint strategies would upload optimizer state)."""
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

    Call it after `save_model()` and the evaluation (the card carries its table). `merge_adapter=True` pushes an adapter
    merged into its base (`merge_adapter_folder`, into `<output_dir>-merged`).
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


def _front_matter(readme: Path) -> dict:
    """The YAML metadata of a model card (`README.md`), or {} when there is none or it does not parse."""
    import yaml

    if not readme.is_file():
        return {}
    parts = readme.read_text().split("---\n", 2)
    try:
        metadata = yaml.safe_load(parts[1]) if len(parts) == 3 and not parts[0].strip() else None
    except yaml.YAMLError:
        return {}
    return metadata if isinstance(metadata, dict) else {}


def recorded_base_model(folder: str | os.PathLike | None) -> str | None:
    """The model a local SFT output was trained from, as its files record it (`sft_complete.json`, the card's
    `base_model`, `adapter_config.json`, `dpr_reference.json`); None for a Hub id or a folder that records none.
    """
    from ..reference_manifest import SFT_COMPLETE_NAME

    if not folder or not Path(folder).is_dir():
        return None
    folder = Path(folder)

    def field(name: str, key: str):
        try:
            return json.loads((folder / name).read_text()).get(key) if (folder / name).is_file() else None
        except (ValueError, AttributeError):
            return None

    base = (field(SFT_COMPLETE_NAME, "base_model") or _front_matter(folder / "README.md").get("base_model")
            or field("adapter_config.json", "base_model_name_or_path") or field(MANIFEST_NAME, "base_model"))
    if isinstance(base, list):  # a card may list several bases
        base = base[0] if base else None
    return _embedded_name(str(base)) if base else None


def _embedded_name(name_or_path: str) -> str:
    """The embedded model's name for its shipped folder (where the SFT stage loaded it from); any other name as it is."""
    from ..embedded.base_model import EMBEDDED_PRETRAINED_MODEL
    from ..embedded.pretraining import SHIPPED_BASE

    if os.path.isdir(name_or_path) and Path(name_or_path).resolve() == SHIPPED_BASE.resolve():
        return EMBEDDED_PRETRAINED_MODEL
    return name_or_path


def _is_hub_id(name: str | None) -> bool:
    """A name the Hub can resolve (`name` or `org/name`): not an embedded model, not a local path."""
    from ..embedded.base_model import EMBEDDED_MODELS

    return bool(name) and name not in EMBEDDED_MODELS and not _looks_local(name)


def base_model_reference(name_or_path: str | None, kind: str = "model", unknown: str = "an unnamed model") -> str:
    """How a model card names the model a run started from: a Hub link, an embedded model's name, a local folder's
    name (its path means nothing to a reader, and may reveal a home folder), or `unknown`.
    """
    from ..embedded.base_model import EMBEDDED_MODELS

    if not name_or_path:
        return unknown
    name_or_path = _embedded_name(name_or_path)
    if name_or_path in EMBEDDED_MODELS:
        return f"`{name_or_path}` (the tiny model embedded in trl_dpr)"
    path = Path(name_or_path)
    if path.exists():  # a folder, or a file (a .gguf)
        return f"the {kind} `{path.resolve().name}` (a local {'folder' if path.is_dir() else 'file'})"
    return f"[{name_or_path}](https://huggingface.co/{name_or_path})"


def _known_license(*folders_or_names: str | None) -> str | None:
    """The license a card may state: the first one a local model folder's own card declares, or the package's (Apache
    2.0) for the embedded models it builds. None when nothing says (a Hub base's license is the Hub's to show)."""
    from ..embedded.base_model import EMBEDDED_MODELS

    for name in folders_or_names:
        if not name:
            continue
        if _embedded_name(name) in EMBEDDED_MODELS:
            return "apache-2.0"
        if Path(name).is_dir() and (found := _front_matter(Path(name) / "README.md").get("license")):
            return str(found)
    return None


def _dataset_phrase(dataset_name: str | None) -> str:
    """" on <the dataset>" for the card's first sentence: a Hub link, the embedded task, or a local file's name."""
    from ..embedded.task import EMBEDDED_DATASET

    if not dataset_name:
        return ""
    if dataset_name == EMBEDDED_DATASET:
        return f" on the embedded task `{dataset_name}` (generated offline by trl_dpr)"
    if Path(dataset_name).exists() or not _is_hub_id(dataset_name):
        return f" on the local data `{Path(dataset_name).name}`"
    return f" on the [{dataset_name}](https://huggingface.co/datasets/{dataset_name}) dataset"


def _card_prompt(dataset) -> list | str | None:
    """A prompt of the run's own data for the card's quick start: the first row's `prompt`, or its `messages` up to the
    first assistant turn. None when the data has neither (or is not indexable)."""
    try:
        row = dataset[0]
    except Exception:  # no dataset, an iterable one, an empty one
        return None
    prompt = row.get("prompt") if isinstance(row, dict) else None
    if prompt is None and isinstance(row, dict) and isinstance(row.get("messages"), list):
        messages = row["messages"]
        first_answer = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
        prompt = messages[:first_answer] or None
    return prompt if isinstance(prompt, (str, list)) and prompt else None


def _quick_start(repo: str, prompt: list | str | None, max_new_tokens: int) -> list[str]:
    if prompt is None:
        prompt = [{"role": "user", "content": "What can you do?"}]
    literal = json.dumps(prompt, ensure_ascii=False)  # JSON strings, lists and dicts of strings are Python literals
    return [
        "## Quick start", "", "```python", "from transformers import pipeline", "",
        f"prompt = {literal}  # from the training data",
        f'generator = pipeline("text-generation", model="{repo}", device_map="auto")',
        f"output = generator(prompt, max_new_tokens={max_new_tokens}, return_full_text=False)[0]",
        'print(output["generated_text"])', "```",
    ]


def _tracker_links() -> list[str]:
    """Links to the run in the experiment trackers that are recording it (TRL's own lookups), one line each."""
    from transformers import is_wandb_available
    from trl.trainer.utils import get_comet_experiment_url, get_trackio_space_url

    links = []
    if is_wandb_available():
        import wandb

        if wandb.run is not None:
            links.append(f"Weights & Biases run: {wandb.run.url}")
    if url := get_trackio_space_url():
        links.append(f"Trackio: {url}")
    if url := get_comet_experiment_url():
        links.append(f"Comet experiment: {url}")
    return links


TRL_CITATION = """@software{vonwerra2020trl,
  title   = {{TRL: Transformers Reinforcement Learning}},
  author  = {von Werra, Leandro and Belkada, Younes and Tunstall, Lewis and Beeching, Edward and Thrush, Tristan and Lambert, Nathan and Huang, Shengyi and Rasul, Kashif and Gallouédec, Quentin},
  license = {Apache-2.0},
  url     = {https://github.com/huggingface/trl},
  year    = {2020}
}"""


class BaseModelCardMixin:
    """Mix into a TRL trainer: a model card that names any start model (TRL's names only Hub ids), with a quick start
    that loads the pushed repo and the trainer's own section (`_card_sections`)."""

    def _card_base_name(self) -> str | None:
        """The name or path of the model this run started from (by default, where the model was loaded from)."""
        model = self.accelerator.unwrap_model(self.model)
        return getattr(model.config, "_name_or_path", None) or None

    def _card_base_model(self) -> str:
        """The card's words for the model this run started from."""
        return base_model_reference(self._card_base_name())

    def _card_sections(self) -> list[str]:
        """Lines the trainer adds after "Training procedure", before the framework versions and citations."""
        return []

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """Write the card to `output_dir/README.md` (main process only); see the class docstring for what it holds."""
        from huggingface_hub import ModelCard, ModelCardData

        from ..embedded.task import EMBEDDED_DATASET

        if not self.is_world_process_zero():
            return
        args = self.args
        repo = getattr(self, "hub_model_id", None) or args.output_dir  # pushed: the repo id; else where it was saved
        model_name = model_name or repo.rstrip("/").split("/")[-1]
        tags = {tags} if isinstance(tags, str) else set(tags or ())
        tags.update(self._tag_names)
        base = self._card_base_name()
        metadata = ModelCardData(
            base_model=base if _is_hub_id(base) else None,
            datasets=[dataset_name] if _is_hub_id(dataset_name) and dataset_name != EMBEDDED_DATASET else None,
            library_name="transformers",
            license=_known_license(base, getattr(getattr(self, "reward_model", None), "sft_model_name_or_path", None)),
            model_name=model_name,
            pipeline_tag="text-generation",
            tags=["trl", *sorted(tags - {"trl"})],
        )
        paper = getattr(self, "_paper", None) or {}
        method = self._name + (f", a method introduced in [{paper['title']}](https://huggingface.co/papers/{paper['id']})"
                               if paper.get("id") else "")
        max_new_tokens = getattr(args, "max_completion_length", None) or 128
        precision = _precision_phrase(args, self.accelerator.device, self.accelerator.unwrap_model(self.model))
        lines = [
            f"# {model_name}", "",
            f"This model is a fine-tuned version of {self._card_base_model()}{_dataset_phrase(dataset_name)}. "
            "It has been trained using [TRL](https://github.com/huggingface/trl) and trl_dpr.", "",
            *_quick_start(repo, _card_prompt(self.train_dataset), max_new_tokens), "",
            "## Training procedure", "", f"This model was trained with {method}, {precision}.",
            *(["", *_tracker_links()] if _tracker_links() else []),
            *self._card_sections(), "",
            "### Framework versions", "",
            *[f"- {name}: {_version(package)}" for name, package in (
                ("trl_dpr", "trl_dpr"), ("TRL", "trl"), ("Transformers", "transformers"), ("PyTorch", "torch"),
                ("Datasets", "datasets"), ("Tokenizers", "tokenizers"))], "",
            "## Citations", "",
        ]
        if paper.get("citation"):
            lines += [f"Cite {self._name} as:", "", "```bibtex", paper["citation"], "```", ""]
        lines += ["Cite TRL as:", "", "```bibtex", TRL_CITATION, "```", ""]
        card = ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines))
        card.save(Path(args.output_dir) / "README.md")


def _precision_phrase(args, device, model) -> str:
    """Where and in what precision the run computed: the device it ran on, the recipe's bf16/fp16, the weights."""
    from .placement import RunPlacement

    weights = "4-bit" if getattr(model, "is_loaded_in_4bit", False) else str(model.dtype).removeprefix("torch.")
    return f"on {'the CPU' if device.type == 'cpu' else device.type.upper()} in {RunPlacement.of(args).precision_name} (weights in {weights})"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


# Hyperparameters shown on a DPR model card: DPR's own fields and the parent fields the paper fixes (Table 5).
CARD_HYPERPARAMETERS = (
    "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size",
    "num_generations", "temperature", "kl_coef", "gamma", "epsilon", "reward_granularity", "dense_reward",
    "whiten_advantages", "max_prompt_length", "max_completion_length", "warmup_steps", "seed",
)


def dpr_model_card_section(args, reward_model) -> str:
    """The DPR part of a policy's model card (`args` a `DensePathConfig`): hyperparameters, the dense reward's source,
    and the evaluation table from `<output_dir>/eval_results.json` when there is one.
    """
    manifest, source = reward_model.reference_manifest, reward_model.sft_model_name_or_path
    reward = getattr(reward_model, "reward", None)
    rule = reward_label(reward) if reward is not None else "r̂ = log π_SFT − log π_ref"
    if source and Path(source).is_dir():  # a local path means nothing to a reader (and may reveal a home folder)
        base = recorded_base_model(source)
        origin = (f"the SFT model of {base_model_reference(base)} (saved in `{Path(source).name}`)" if base
                  else f"the SFT model `{Path(source).name}` (a local folder that records no base model)")
    else:
        origin = base_model_reference(source, kind="SFT model", unknown="the SFT model the policy started from")
    lines = ["", "## Dense-Path REINFORCE", "",
             "The policy starts from π_SFT and is trained with REINFORCE on a dense token reward recovered from "
             "supervised fine-tuning, with a KL penalty to π_SFT.", "",
             f"- **Reward**: {rule}, from {origin}."]
    if manifest:
        lines.append(f"- **α**: π_ref is the SFT checkpoint at step {manifest.step} of {manifest.total_steps} "
                     f"(α = {manifest.fraction}).")
    lines.append(f"- **λ** (`kl_coef`, the weight of the KL to π_SFT): {args.kl_coef}.")
    if getattr(args, "dense_reward", None):
        lines.append(f"- **Reward class**: `{args.dense_reward}` with `{args.dense_reward_kwargs}`"
                     + (f", models {sorted(args.dense_reward_models)}" if args.dense_reward_models else "") + ".")
    lines += ["", "| hyperparameter | value |", "|---|---|"]
    lines += [f"| `{name}` | {getattr(args, name)} |" for name in CARD_HYPERPARAMETERS]
    length = ("max_steps", args.max_steps) if args.max_steps > 0 else ("num_train_epochs", args.num_train_epochs)
    lines.append(f"| `{length[0]}` | {length[1]} |")
    results_path = Path(args.output_dir) / "eval_results.json"
    if results_path.is_file():
        table = json.loads(results_path.read_text()).get("table_markdown")
        if table:
            lines += ["", "## Evaluation", "", table]
    return "\n".join(lines) + "\n"


def merge_adapter_folder(
    adapter_dir: str | os.PathLike, output_dir: str | os.PathLike, dtype: str = "auto", overwrite: bool = False
) -> str:
    """Merge a saved LoRA adapter into a full-precision copy of its base (4-bit weights would round the update away)
    and save it with the adapter's tokenizer and card; a non-empty `output_dir` needs `overwrite=True`. Returns `output_dir`.
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
