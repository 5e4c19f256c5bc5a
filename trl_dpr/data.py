"""Demonstration data for the recipes: loading, OpenOrca → TRL conversational format, prompts for RL.

SFT and DPR load through `load_demonstrations` with the same name, count and seed, so DPR samples from the SFT's
prompts (the paper uses the same 100k OpenOrca prompts for both, §4.1).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from datasets import Dataset, DatasetDict, IterableDataset, LargeList, List, Value, load_dataset

from .reference_manifest import sft_trained_on_messages

logger = logging.getLogger(__name__)


def read_json_rows(path: str | os.PathLike) -> list[dict]:
    """Rows of a local `.jsonl` (one object per line) or `.json` (a list of objects, or one object per line) file. A
    line that is not a JSON object is a `ValueError` naming the file and the line: the one reader of a user's JSON rows
    (the demonstrations are checked with it before `datasets` reads them; the evaluation's prompt sets read them)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist.")
    # utf-8-sig: a file saved with a byte-order mark (Notepad) reads as `datasets` reads it. Lines are split on "\n"
    # only: str.splitlines would also split at U+2028 or U+0085, which json.dumps(ensure_ascii=False) leaves in strings.
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            first = next((line for line in text.split("\n") if line.strip()), "")
            if not first.lstrip().startswith("{") or _one_object(first) is None:  # not JSON lines in a .json either
                raise ValueError(
                    f"{path}:{error.lineno} is not valid JSON ({error.msg}); expected a list of objects."
                ) from None
        else:
            if isinstance(rows, dict) and isinstance(rows.get("data"), list):
                rows = rows["data"]
            if not isinstance(rows, list):
                raise ValueError(f"{path} must hold a JSON list of objects (one per row), got {type(rows).__name__}.")
            return rows
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{path}:{number} is not a JSON object ({error.msg}); expected one object per line."
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}:{number} is not a JSON object (a {type(row).__name__}); expected one object per line."
                )
            rows.append(row)
    return rows


def _one_object(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def openorca_to_conversation(example: dict) -> dict:
    """An OpenOrca row as TRL's conversational prompt/completion (a non-empty system prompt becomes a system message)."""
    prompt = []
    if (example.get("system_prompt") or "").strip():
        prompt.append({"role": "system", "content": example["system_prompt"]})
    prompt.append({"role": "user", "content": example["question"]})
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": example["response"]}]}


def _columns(dataset) -> set[str]:
    return set(dataset.column_names or [])


def check_sft_dataset(dataset: Dataset, name: str) -> None:
    """SFT needs `messages` or `prompt` + `completion`; anything else is an error that says what to map it to."""
    columns = _columns(dataset)
    if "messages" in columns:
        _check_assistant_turns(dataset["messages"], name)
        return
    if {"prompt", "completion"} <= columns:
        return
    needs = "; a `prompt` + `answer` file is for the preview, DPR and evaluation" if "answer" in columns else ""
    raise ValueError(
        f"Dataset {name!r} has columns {sorted(columns)}; SFT needs a `messages` column (conversations) or `prompt` "
        "and `completion` columns. Map it first (OpenOrca-style `system_prompt`/`question`/`response` is handled with "
        f"dataset_format: openorca){needs}."
    )


def _as_declared_format(dataset: Dataset, dataset_format: str, stage: str, name: str) -> Dataset:
    """`dataset` in the form `dataset_format` declares: its columns are checked (a recipe that says `messages` must not
    train on something else), and the other form's columns, when the file has both, dropped so that no reader takes
    them instead. Prompts for RL (`stage` rl) need only `prompt`."""
    columns = _columns(dataset)
    needed = (
        {"messages"} if dataset_format == "messages" else {"prompt", "completion"} if stage == "sft" else {"prompt"}
    )
    if not needed <= columns:
        named = " and ".join(f"`{column}`" for column in sorted(needed))
        raise ValueError(
            f"dataset_format: {dataset_format} needs {named} column{'s' * (len(needed) > 1)}, but {name!r} has "
            f"{sorted(columns)}. Set dataset_format to the form of the file (auto detects it), or map the file first."
        )
    other = {"prompt", "completion"} if dataset_format == "messages" else {"messages"}
    return dataset.remove_columns(sorted(other & columns)) if other & columns else dataset


def _check_assistant_turns(conversations: list, name: str) -> None:
    """Every conversation holds an assistant turn: without one SFT trains on the prompts alone, and no error says so."""
    missing = [
        i
        for i, messages in enumerate(conversations)
        if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages or [])
    ]
    if missing:
        roles = [m.get("role") for m in conversations[missing[0]] or [] if isinstance(m, dict)]
        raise ValueError(
            f"{len(missing)} of {len(conversations)} `messages` rows of {name!r} have no assistant turn (one has "
            f"roles {roles}): SFT would learn to write the prompts, not the answers. Give each "
            'conversation the answer as {"role": "assistant", "content": ...}, or drop those rows.'
        )


def check_prompt_dataset(dataset, name: str, strings_as_chat: bool | Callable[[], bool] = False) -> None:
    """DPR samples a completion for each row's `prompt`: say so before any model is loaded when there is none. A column
    mixing strings and messages is refused too (TRL reads a batch in its first row's form), unless `strings_as_chat`
    (π_SFT's record says messages, so every string becomes a user turn first; a callable is asked only then: it may
    read the Hub)."""
    if isinstance(dataset, Dataset) and dataset.num_rows == 0:
        raise ValueError(
            f"{name} is empty: DPR needs prompts to sample completions for (a run on none would save π_SFT)."
        )
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{name} has no `prompt` column (columns: {sorted(columns)}). DPR samples a completion for each prompt: "
            "map your data to a `prompt` column (a string or a list of chat messages), e.g. with "
            "trl_dpr.data.prompts_for_rl for `messages` or prompt/completion datasets."
        )
    if not isinstance(dataset, Dataset) or _prompt_kinds(dataset) != {str, list}:
        return
    if not (strings_as_chat() if callable(strings_as_chat) else strings_as_chat):
        raise ValueError(
            f"{name} mixes string prompts and chat messages, and no `trl-dpr sft` record says π_SFT was trained on "
            "messages (TRL reads each batch in its first prompt's form): write every prompt one way, as messages "
            '([{"role": "user", "content": ...}]) for a chat model or as strings for a raw-text one.'
        )


def _prompt_kinds(dataset: Dataset) -> set[type]:
    """`{str}`, `{list}` or both: the forms of `dataset`'s prompts, from its features when they say, else read from
    every row (`datasets` reads a file mixing strings and messages as one `Json` column)."""
    feature = dataset.features.get("prompt")
    if isinstance(feature, Value):
        return {str}
    if isinstance(feature, (List, LargeList, list)):
        return {list}
    return {str if isinstance(prompt, str) else list for prompt in dataset["prompt"]}


def check_chat_template(tokenizer, dataset, name: str) -> None:
    """Conversational rows (chat messages) are rendered with the tokenizer's chat template: without one, say so before
    a model is loaded, not at the first training step.
    """
    from trl.data_utils import is_conversational

    if getattr(tokenizer, "chat_template", None) or not isinstance(dataset, Dataset) or dataset.num_rows == 0:
        return
    if is_conversational(dataset[0]):
        raise ValueError(
            f"{name} holds chat messages but the tokenizer ({getattr(tokenizer, 'name_or_path', '') or 'given'}) has no "
            "chat template. Set chat_template_path in the SFT recipe (e.g. the instruct sibling's tokenizer, as the "
            "Llama and Mistral recipes do), or give plain-text prompts."
        )


def drop_long_prompts(dataset, tokenizer, max_prompt_length: int, name: str = "train", **chat_template_kwargs):
    """`(dataset, number_dropped)`: rows whose prompt renders (as GRPOTrainer renders it) to more than
    `max_prompt_length` tokens are dropped, not truncated: a truncated prompt is another prompt.
    """
    from .token_batches import render_prompts

    if not isinstance(dataset, Dataset) or "prompt" not in dataset.column_names:
        return dataset, 0

    def prompt_length(batch):
        return {
            "_dpr_prompt_length": [
                len(ids) for ids in render_prompts(tokenizer, batch["prompt"], **chat_template_kwargs)
            ]
        }

    lengths = dataset.map(prompt_length, batched=True, desc=f"Measuring {name} prompts")["_dpr_prompt_length"]
    keep = [i for i, n in enumerate(lengths) if n <= max_prompt_length]
    if not keep:
        raise ValueError(
            f"Every {name} prompt is longer than max_prompt_length={max_prompt_length} tokens (shortest: "
            f"{min(lengths)}). Raise max_prompt_length or shorten the prompts."
        )
    dropped = len(lengths) - len(keep)
    return (dataset if dropped == 0 else dataset.select(keep)), dropped


def string_prompts_as_chat(
    sft_model_name_or_path,
    tokenizer,
    prompts: Sequence,
    stage: str,
    revision: str | None = None,
    token=None,
    baseline: str | None = None,
) -> bool:
    """Whether `prompts`' strings go to π_SFT as one user turn of its chat template: the one rule of DPR, the preview and
    the evaluation (whose `baseline` π_SFT decides for every model). TRL reads a string as raw text, and a π_SFT trained
    on messages has never seen its prompts that way (it answers with its end-of-turn token): its `sft_complete.json`
    says which, said in one line. Without a record, raw text, said once per process when the tokenizer has a chat
    template (a pipeline's evaluation reads its prompts before training and again after)."""
    if not any(isinstance(prompt, str) for prompt in prompts):
        return False
    on_messages = sft_trained_on_messages(sft_model_name_or_path, revision, token)  # the Hub copy π_SFT loads
    if on_messages:
        logger.warning(
            f"{stage}: π_SFT ({sft_model_name_or_path}) was trained on chat messages, so each string prompt goes to "
            "it as one user turn of its chat template."
        )
        return True
    if on_messages is None and getattr(tokenizer, "chat_template", None):
        readers, source = ("every model", f"baseline {baseline}") if baseline else ("π_SFT", "π_SFT")
        _say_once(
            f"{stage}: string prompts go to {readers} as raw text because {source} ({sft_model_name_or_path}) has no "
            "`trl-dpr sft` record (a Hub or Python SFT, or a `trl-dpr sft` from before this version); for a chat "
            'model write them as messages ([{"role": "user", "content": ...}]), or add "conversational": true to its '
            "sft_complete.json (trl_dpr.reference_manifest.mark_sft_complete writes one for a Python SFT)."
        )
    return False


_SAID: set[str] = set()


def _say_once(message: str) -> None:
    """`logger.warning(message)`, the first time in this process only."""
    if message not in _SAID:
        _SAID.add(message)
        logger.warning(message)


def as_user_turns(prompts: Sequence) -> list:
    """Each string prompt as a one-turn conversation `[{"role": "user", "content": prompt}]`; messages as they are."""
    return [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]


def prompts_as_sft_reads_them(
    dataset, sft_model_name_or_path, tokenizer, name: str, revision: str | None = None, token=None
):
    """`dataset` with its string prompts as user turns when `string_prompts_as_chat` says so (what the trainer then
    samples from, and what reward functions get as `prompts`), else unchanged. A `Dataset` is judged by all its rows
    (a column may mix strings and messages); an `IterableDataset` by its first, and mapped as it streams."""
    if isinstance(dataset, IterableDataset):
        first = next(iter(dataset), None)
        if first is None or "prompt" not in first:
            return dataset
        seen = [first["prompt"]]
    elif isinstance(dataset, Dataset) and dataset.num_rows and "prompt" in dataset.column_names:
        seen = [""] if str in _prompt_kinds(dataset) else []  # the rule asks only whether a string is there
    else:
        return dataset
    as_chat = string_prompts_as_chat(sft_model_name_or_path, tokenizer, seen, name, revision, token)  # said once

    def as_turns(batch):
        return {"prompt": as_user_turns(batch["prompt"])}

    if isinstance(dataset, IterableDataset):  # its later rows may be strings when its first is not
        streams_as_chat = as_chat or sft_trained_on_messages(sft_model_name_or_path, revision, token)
        return dataset.map(as_turns, batched=True) if streams_as_chat else dataset
    return dataset.map(as_turns, batched=True, desc=f"{name}: prompts as user turns") if as_chat else dataset


def prompts_for_rl(dataset: Dataset, name: str) -> Dataset:
    """The `prompt` column DPR samples from: a `prompt` row's prompt, or a `messages` row up to its final assistant turn.
    A demonstration's final assistant text is kept as `answer` when the file has none: TRL passes it to reward
    functions (the answer check the evaluation reads the same way)."""
    columns = _columns(dataset)
    keep_answer = "answer" not in columns
    if "prompt" in columns:
        if not keep_answer or "completion" not in columns:
            return dataset

        def with_answer(example):
            return {"answer": prompt_and_demonstration(example, name)[1]}

        return dataset.map(with_answer)
    if "messages" in columns:

        def strip_last_answer(example):
            prompt, answer = prompt_and_demonstration({"messages": example["messages"]}, name)
            return {"prompt": prompt, "answer": answer} if keep_answer else {"prompt": prompt}

        return dataset.map(strip_last_answer, remove_columns=["messages"])
    raise ValueError(
        f"Dataset {name!r} has no prompts: its columns are {sorted(columns)}. DPR needs a `prompt` column (or "
        "`messages` conversations whose last turn is the assistant's answer)."
    )


def split_at_last_answer(messages: list[dict], name: str) -> tuple[list[dict], dict]:
    """A `messages` conversation as `(its prompt, the assistant's final message)`: one line when it does not end with
    an assistant turn after a prompt. The stages that read demonstrations (DPR, self-play, preview, evaluation) agree."""
    if len(messages) < 2 or not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
        raise ValueError(
            f"A `messages` row of {name!r} does not end with an assistant turn after a prompt ({messages!r:.200}): "
            "give each conversation its assistant answer last."
        )
    return messages[:-1], messages[-1]


def prompt_and_demonstration(row: dict, name: str) -> tuple[str | list[dict], str | None]:
    """`(prompt, demonstration text or None)` of one row, in any format the stages take: `prompt` (+ `completion`), or
    `messages` whose last turn is the assistant's answer. What the preview and `trl-dpr evaluate` read a row as."""
    if "prompt" in row:
        completion = row.get("completion")
        if isinstance(completion, list):  # conversational: the assistant's message(s)
            completion = completion[-1]["content"] if completion else None
        return row["prompt"], completion
    messages = row.get("messages")
    if isinstance(messages, list):
        prompt, answer = split_at_last_answer(messages, name)
        return prompt, answer["content"]
    raise ValueError(
        f"A row of {name!r} has columns {sorted(row)}; it needs `prompt` (with `answer` or `completion`) or `messages` "
        "(a conversation ending with the assistant's answer)."
    )


# The local files `datasets` reads with a builder of its own, by suffix: JSON (one object per line, or a list), CSV, Parquet.
_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _is_local_file(dataset_name: str) -> bool:
    """A `dataset_name` meant as one local file: a file, or a data suffix, or an absolute or ./ path, not a folder."""
    if os.path.isdir(dataset_name):
        return False
    suffixed = dataset_name.lower().endswith(tuple(_FILE_BUILDERS))
    return suffixed or os.path.isfile(dataset_name) or os.path.isabs(dataset_name) or dataset_name[:1] == "."


def _load_local_file(path: str, split: str, file_splits: Sequence[str], split_key: str) -> Dataset:
    """The rows of one local JSON/JSONL/CSV/Parquet file, all of split `train` (a file has no other; `file_splits`: the
    names it answers to): a mistake in the path, the suffix, the split (set by `split_key`) or the contents is one line
    naming it, before any model loads."""
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Dataset file {path!r} does not exist. Give a .json / .jsonl / .csv / .parquet file that exists, a folder "
            "of them, a Hub dataset id, or trl_dpr/embedded-demo (the embedded task)."
        )
    builder = _FILE_BUILDERS.get(Path(path).suffix.lower())
    if builder is None:
        raise ValueError(
            f"Dataset file {path!r} is not a .json, .jsonl, .csv or .parquet file, the local files trl_dpr reads (a "
            "folder of them and Hub datasets load too). Convert it to one of those, or rename it if it is one."
        )
    # `datasets` names a file's one split after any value given: another split would be the whole file, silently.
    if split not in file_splits:
        raise ValueError(
            f"The split {split!r} ({split_key}) is not in {path!r}: a single file is all of split 'train'. "
            f"Remove {split_key} (or set it to {file_splits[-1]}), or give a folder or a Hub dataset with that split."
        )
    if os.path.getsize(path) == 0 or (builder != "parquet" and not open(path, "rb").read(4096).strip()):
        kind = {"json": "one JSON object per line (or a JSON list)", "csv": "a header line, then one row per line"}
        raise ValueError(f"Dataset file {path!r} is empty: it needs {kind.get(builder, 'rows')}.")
    try:
        return load_dataset(builder, data_files={"train": path}, split="train")
    except Exception as error:  # noqa: BLE001 - a broken line: one message naming it, not `datasets`' traceback
        if builder == "json":
            read_json_rows(path)  # read only now: a good file is not parsed twice (a 200 MB file: +2.7 s)
            raise
        raise ValueError(
            f"Could not read {path!r} as {builder.upper()}: {type(error).__name__}: {str(error)[:300]}"
        ) from error


def load_demonstrations(
    dataset_name: str,
    dataset_config: str | None = None,
    split: str = "train",
    num_samples: int | None = None,
    seed: int = 0,
    dataset_format: str = "auto",
    stage: str = "sft",
    rows: Dataset | None = None,
    file_splits: Sequence[str] = ("train",),
    split_key: str = "dataset_train_split",
    samples_key: str = "num_train_samples",
) -> Dataset:
    """A demonstration split: a Hub dataset, a local folder, a `.json`/`.jsonl`/`.csv`/`.parquet` file (all of split
    `train`), or `rows` already built (named `dataset_name`).

    `num_samples` keeps a `seed`-shuffled subsample (`samples_key`: the recipe key that set it, for the messages);
    `dataset_format` is `auto`, `openorca`, `messages` or `prompt_completion`; `stage` `sft` needs demonstrations, `rl`
    prompts (or demonstrations to take them from). A single file answers to the splits `file_splits` only (the
    preview's held-out `test` too); another `split` is refused, naming the recipe key `split_key` that set it.
    """
    if dataset_format not in ("auto", "openorca", "messages", "prompt_completion"):
        raise ValueError(
            f"dataset_format must be auto, openorca, messages or prompt_completion, got {dataset_format!r}."
        )
    if stage not in ("sft", "rl"):
        raise ValueError(f"stage must be 'sft' or 'rl', got {stage!r}.")
    if num_samples is not None and num_samples < 1:
        raise ValueError(
            f"num_train_samples / num_samples must be a positive number of rows or unset (all), got {num_samples}."
        )
    if rows is not None:
        dataset = rows
    elif _is_local_file(dataset_name):
        dataset = _load_local_file(dataset_name, split, file_splits, split_key)
    else:  # a Hub id, or a local folder (`datasets` reads its files and their splits: train.jsonl, test.parquet)
        try:
            loaded = load_dataset(dataset_name, name=dataset_config, split=split)
        except Exception as error:  # offline, gated, misspelled: say which dataset and what to check
            offline = (
                " (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set: only cached datasets load)"
                if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "")
                or os.environ.get("HF_DATASETS_OFFLINE", "0") not in ("0", "")
                else ""
            )
            raise ValueError(
                f"Could not load dataset {dataset_name!r} (split {split!r}){offline}: {type(error).__name__}: "
                f"{str(error)[:300]}. Check the name and split, log in for gated datasets, or give a local .jsonl file."
            ) from error
        dataset = loaded[split] if isinstance(loaded, DatasetDict) else loaded
    if dataset.num_rows == 0:
        raise ValueError(f"{dataset_name!r} (split {split!r}) has no rows: there is nothing to train on.")

    if num_samples is not None:
        if num_samples > dataset.num_rows:
            raise ValueError(
                f"{samples_key}: {num_samples} is more than the {dataset.num_rows} rows of {dataset_name!r} (split "
                f"{split!r}): lower it to at most {dataset.num_rows}."
            )
        dataset = dataset.shuffle(seed=seed).select(range(num_samples))

    columns = _columns(dataset)
    is_openorca = {"question", "response"} <= columns
    if dataset_format == "openorca" or (dataset_format == "auto" and is_openorca and "messages" not in columns):
        if not is_openorca:
            raise ValueError(
                f"dataset_format: openorca needs `question` and `response` columns; got {sorted(columns)}."
            )
        dataset = dataset.map(openorca_to_conversation, remove_columns=sorted(columns))
    elif dataset_format in ("messages", "prompt_completion"):
        dataset = _as_declared_format(dataset, dataset_format, stage, dataset_name)
    if stage == "sft":
        check_sft_dataset(dataset, dataset_name)
    return dataset
