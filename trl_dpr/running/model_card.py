"""The model card of a run: which model it started from (a Hub link, the embedded model, a local folder's name), the
data, a quick start that loads the pushed repo, the precision, and DPR's section (hyperparameters, reward, evaluation).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from ..reference_manifest import MANIFEST_NAME


def _card_loading(readme: Path, repo_id: str) -> bytes | None:
    """The model card with its quick start loading `repo_id`, when it loads another name (the output folder it was
    written in, a path that means nothing on the Hub); None when it needs no change."""
    text = readme.read_text()
    card = re.sub(r'(pipeline\("text-generation", model=)"[^"]*"', lambda m: f'{m.group(1)}"{repo_id}"', text)
    return card.encode() if card != text else None


def _looks_local(name_or_path: str) -> bool:
    """A base model reference only this machine can resolve: a path, not a Hub id (`name` or `org/name`)."""
    return (
        os.path.isabs(name_or_path)
        or name_or_path.startswith((".", "~"))
        or name_or_path.count("/") > 1
        or os.path.exists(name_or_path)
    )


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

    base = (
        field(SFT_COMPLETE_NAME, "base_model")
        or _front_matter(folder / "README.md").get("base_model")
        or field("adapter_config.json", "base_model_name_or_path")
        or field(MANIFEST_NAME, "base_model")
    )
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

    return bool(name) and name not in EMBEDDED_MODELS and not _looks_local(name) and not name.lower().endswith(".gguf")


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
    if name_or_path.lower().endswith(".gguf"):  # a file, or <python package>/<file>.gguf: never a Hub id
        return f"the GGUF file `{path.name}` (converted to float32 by trl_dpr)"
    if path.exists():  # a folder, or a file
        found = f"the {kind} `{path.resolve().name}` (a local {'folder' if path.is_dir() else 'file'})"
        return found + (f", converted from the GGUF file `{source}`" if (source := _gguf_source(path)) else "")
    return f"[{name_or_path}](https://huggingface.co/{name_or_path})"


def _gguf_source(folder: Path) -> str | None:
    """The name of the GGUF file a folder was converted from, as its `gguf_source.json` records it."""
    from .gguf import PROVENANCE_FILE

    try:
        return Path(json.loads((folder / PROVENANCE_FILE).read_text())["gguf_file"]).name
    except (OSError, ValueError, KeyError, TypeError):
        return None


def sft_lineage(sft_model_name_or_path: str | None) -> str:
    """How a DPR card names where its policy comes from, the base model and the SFT model apart: "<base>, by way of
    the SFT model <sft>", or the SFT model alone when its folder records no base (a Hub SFT model records none here)."""
    source = sft_model_name_or_path
    base = recorded_base_model(source)
    if source and os.path.isdir(source) and not base:
        return f"an SFT model whose output folder (`{Path(source).name}`) records no base model"
    if not base:
        return f"{base_model_reference(source, unknown='an SFT model')}{' (an SFT model)' if source else ''}"
    return f"{base_model_reference(base)}, by way of {_sft_phrase(source)}"


def _sft_phrase(source: str | None) -> str:
    reference = base_model_reference(source, kind="SFT model", unknown="the SFT model the policy started from")
    return reference if reference.startswith("the ") else f"the SFT model {reference}"


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
    """ " on <the dataset>" for the card's first sentence: a Hub link, the embedded task, or a local file's name."""
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
        "## Quick start",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        f"prompt = {literal}  # from the training data",
        f'generator = pipeline("text-generation", model="{repo}", device_map="auto")',
        f"output = generator(prompt, max_new_tokens={max_new_tokens}, return_full_text=False)[0]",
        'print(output["generated_text"])',
        "```",
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
        method = self._name + (
            f", a method introduced in [{paper['title']}](https://huggingface.co/papers/{paper['id']})"
            if paper.get("id")
            else ""
        )
        max_new_tokens = getattr(args, "max_completion_length", None) or 128
        precision = _precision_phrase(args, self.accelerator.device, self.accelerator.unwrap_model(self.model))
        lines = [
            f"# {model_name}",
            "",
            f"This model is a fine-tuned version of {self._card_base_model()}{_dataset_phrase(dataset_name)}. "
            "It has been trained using [TRL](https://github.com/huggingface/trl) and trl_dpr.",
            "",
            *_quick_start(repo, _card_prompt(self.train_dataset), max_new_tokens),
            "",
            "## Training procedure",
            "",
            f"This model was trained with {method}, {precision}.",
            *(["", *_tracker_links()] if _tracker_links() else []),
            *self._card_sections(),
            "",
            "### Framework versions",
            "",
            *[
                f"- {name}: {_version(package)}"
                for name, package in (
                    ("trl_dpr", "trl_dpr"),
                    ("TRL", "trl"),
                    ("Transformers", "transformers"),
                    ("PyTorch", "torch"),
                    ("Datasets", "datasets"),
                    ("Tokenizers", "tokenizers"),
                )
            ],
            "",
            "## Citations",
            "",
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
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "num_generations",
    "temperature",
    "kl_coef",
    "gamma",
    "epsilon",
    "reward_granularity",
    "dense_reward",
    "whiten_advantages",
    "max_prompt_length",
    "max_completion_length",
    "warmup_steps",
    "seed",
)


# Hyperparameters shown on an SFT model card (π_SFT and π_ref come from this one run).
SFT_CARD_HYPERPARAMETERS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "packing",
    "seed",
)


def hyperparameter_table(args, names: tuple[str, ...], examples: str) -> list[str]:
    """A card's table of `args`' `names`, the run's length, its processes and its global batch: `examples` (what one
    row of a batch is) per optimizer step, per-device batch × accumulation × processes. The per-device batch alone
    hides the processes a launch adds (2 processes: twice the batch)."""
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    rows = [f"| `{name}` | {getattr(value, 'value', value)} |" for name, value in values.items()]  # an enum: its value
    length = ("max_steps", args.max_steps) if args.max_steps > 0 else ("num_train_epochs", args.num_train_epochs)
    per_device, accumulation, processes = (
        args.per_device_train_batch_size,
        args.gradient_accumulation_steps,
        getattr(args, "world_size", 1),  # a TrainingArguments' (a plain namespace has none: one process)
    )
    return [
        "| hyperparameter | value |",
        "|---|---|",
        *rows,
        f"| `{length[0]}` | {length[1]} |",
        f"| processes | {processes} |",
        f"| global batch ({examples} per optimizer step) | {per_device} × {accumulation} × {processes} = "
        f"{per_device * accumulation * processes} |",
    ]


def dpr_model_card_section(args, reward_model, outcome_rewards: list[tuple[str, float]] | None = None) -> str:
    """The DPR part of a policy's model card (`args` a `DensePathConfig`): hyperparameters, the dense reward's source,
    the outcome `reward_funcs` beside it (`outcome_rewards`: (name, weight) pairs) and the evaluation table from
    `<output_dir>/eval_results.json` when there is one.
    """
    from ..rewards import reward_label  # imports torch: not at module level (`trl-dpr push --help` loads this module)

    manifest, source = reward_model.reference_manifest, reward_model.sft_model_name_or_path
    reward = getattr(reward_model, "reward", None)
    rule = reward_label(reward) if reward is not None else "r̂ = log π_SFT − log π_ref"
    origin = _sft_phrase(source)  # a local folder by its name: its path means nothing to a reader
    lines = [
        "",
        "## Dense-Path REINFORCE",
        "",
        "The policy starts from π_SFT and is trained with REINFORCE on a dense token reward recovered from "
        "supervised fine-tuning, with a KL penalty to π_SFT.",
        "",
        f"- **Reward**: {rule}, from {origin}.",
    ]
    if manifest:
        lines.append(
            f"- **α**: π_ref is the SFT checkpoint at step {manifest.step} of {manifest.total_steps} "
            f"(α = {manifest.fraction})."
        )
    elif reference := getattr(reward_model, "ref_model_name_or_path", None):  # named rather than recorded by the SFT
        lines.append(f"- **π_ref**: {base_model_reference(reference, kind='checkpoint')} (`ref_model_name_or_path`).")
    lines.append(f"- **`kl_coef`** (the weight of the KL to π_SFT in the reward): {args.kl_coef}.")
    if getattr(args, "dense_reward", None):
        lines.append(
            f"- **Reward class**: `{args.dense_reward}` with `{args.dense_reward_kwargs}`"
            + (f", models {sorted(args.dense_reward_models)}" if args.dense_reward_models else "")
            + "."
        )
    if outcome_rewards:
        named = ", ".join(f"`{name}` (weight {weight:g})" for name, weight in outcome_rewards)
        dense_weight = args.reward_weights[0] if args.reward_weights else 1.0
        lines.append(
            f"- **Outcome rewards** (`reward_funcs`, each added at its completion's last token): {named}; r̂'s weight "
            f"{dense_weight:g}."
        )
    lines += ["", *hyperparameter_table(args, CARD_HYPERPARAMETERS, "completions")]
    if table := evaluation_table(args.output_dir):
        lines += ["", "## Evaluation", "", _evaluation_block(table)]
    return "\n".join(lines) + "\n"


# trl_dpr's own evaluation table in a card lies between these: a run evaluated again replaces only what is between them.
EVALUATION_START, EVALUATION_END = "<!-- trl_dpr evaluation -->", "<!-- /trl_dpr evaluation -->"


def _evaluation_block(table: str) -> str:
    return f"{EVALUATION_START}\n\n{table}\n\n{EVALUATION_END}"


def evaluation_table(output_dir: str | os.PathLike) -> str | None:
    """The `table_markdown` of `<output_dir>/eval_results.json`, or None (none, unreadable, or without one)."""
    try:
        table = json.loads((Path(output_dir) / "eval_results.json").read_text()).get("table_markdown")
    except (OSError, ValueError, AttributeError):
        return None
    return table if isinstance(table, str) and table else None


def add_evaluation_to_card(output_dir: str | os.PathLike, earlier_table: str | None = None) -> None:
    """Put the evaluation table of `<output_dir>/eval_results.json` into the model card `README.md` the run wrote: a
    finished run evaluated again by the same command has no trainer to write its card anew. Only trl_dpr's own table
    is replaced, so a note of yours beside it stays: the text between its markers (`EVALUATION_START`/`_END`); in a card
    an earlier trl_dpr wrote without them, the exact `earlier_table` (the old eval_results.json's, read before the
    evaluation replaced it); in a card with no evaluation section, one is added before the framework versions.
    Otherwise the card is left as it is, said in one line. No card, or no table: nothing is done."""
    readme, table = Path(output_dir) / "README.md", evaluation_table(output_dir)
    if not readme.is_file() or not table:
        return
    card, block, versions = readme.read_text(), _evaluation_block(table), "\n\n### Framework versions"
    start = card.find(EVALUATION_START)
    end = card.find(EVALUATION_END, start) if start != -1 else -1
    earlier = f"\n## Evaluation\n\n{earlier_table}\n\n" if earlier_table else None
    if end != -1:
        written = card[:start] + block + card[end + len(EVALUATION_END) :]
    elif start == -1 and earlier and card.count(earlier) == 1:
        written = card.replace(earlier, f"\n## Evaluation\n\n{block}\n\n")
    elif start == -1 and "\n## Evaluation\n" not in card and versions in card:  # evaluated for the first time
        written = card.replace(versions, f"\n\n## Evaluation\n\n{block}{versions}", 1)
    else:
        print(
            f"{readme} keeps its earlier table: trl_dpr's own table is not found in it (its markers, or the table as "
            f"it wrote it, were edited); the new one is in {Path(output_dir) / 'eval_results.json'}.",
            file=sys.stderr,
            flush=True,
        )
        return
    if written == card:
        return
    partial = readme.with_name(f".{readme.name}.partial")  # renamed: the card is whole, old or new
    partial.write_text(written)
    os.replace(partial, readme)
