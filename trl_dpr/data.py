"""Demonstration data for the recipes: loading, OpenOrca → TRL conversational format, prompt extraction for RL.

SFT needs demonstrations (`messages`, or `prompt` + `completion`); DPR needs the same prompts without answers (the
paper uses the same 100k OpenOrca prompts for SFT and RL, §4.1). Both stages load through `load_demonstrations` with
the same name, sample count and seed, so they see the same prompts.
"""

from __future__ import annotations

import os

from datasets import Dataset, DatasetDict, load_dataset

from .embedded.task import EMBEDDED_DATASET, build_demo_dataset

__all__ = [
    "openorca_to_conversation",
    "load_demonstrations",
    "check_sft_dataset",
    "check_prompt_dataset",
    "drop_long_prompts",
    "prompts_for_rl",
]



def openorca_to_conversation(example: dict) -> dict:
    """Map an OpenOrca row (`system_prompt`, `question`, `response`) to TRL's conversational prompt/completion.

    The system prompt becomes a system message when it is not empty; the question is the user turn and the response
    the assistant turn.

    Example:
        >>> row = {"system_prompt": "You are helpful.", "question": "2+2?", "response": "4"}
        >>> openorca_to_conversation(row)["prompt"]
        [{'role': 'system', 'content': 'You are helpful.'}, {'role': 'user', 'content': '2+2?'}]
    """
    prompt = []
    if (example.get("system_prompt") or "").strip():
        prompt.append({"role": "system", "content": example["system_prompt"]})
    prompt.append({"role": "user", "content": example["question"]})
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": example["response"]}]}


def _columns(dataset) -> set[str]:
    return set(dataset.column_names or [])


def check_sft_dataset(dataset: Dataset, name: str) -> None:
    """SFT needs `messages` or `prompt` + `completion`; anything else is an error that says what to map it to.

    Example:
        >>> check_sft_dataset(Dataset.from_dict({"text": ["hi"]}), "my-data")
        Traceback (most recent call last):
        ...
        ValueError: Dataset 'my-data' has columns ['text']; SFT needs a `messages` column ...
    """
    columns = _columns(dataset)
    if "messages" in columns or {"prompt", "completion"} <= columns:
        return
    raise ValueError(
        f"Dataset {name!r} has columns {sorted(columns)}; SFT needs a `messages` column (conversations) or `prompt` "
        "and `completion` columns. Map it first (OpenOrca-style `system_prompt`/`question`/`response` is handled with "
        "dataset_format: openorca)."
    )


def check_prompt_dataset(dataset, name: str) -> None:
    """DPR samples a completion for each row's `prompt`: say so before any model is loaded when there is none.

    Example:
        >>> check_prompt_dataset(Dataset.from_dict({"question": ["2+2?"]}), "train_dataset")
        Traceback (most recent call last):
        ...
        ValueError: train_dataset has no `prompt` column (columns: ['question']). ...
    """
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{name} has no `prompt` column (columns: {sorted(columns)}). DPR samples a completion for each prompt: "
            "map your data to a `prompt` column (a string or a list of chat messages), e.g. with "
            "trl_dpr.data.prompts_for_rl for `messages` or prompt/completion datasets."
        )


def drop_long_prompts(dataset, tokenizer, max_prompt_length: int, name: str = "train", **chat_template_kwargs):
    """Drop the rows whose prompt renders to more than `max_prompt_length` tokens (as GRPOTrainer renders it).

    Dropping, not truncating: a truncated prompt loses its instruction or its context and would be another prompt.
    Streaming datasets and datasets without a `prompt` column are returned unchanged.

    Returns:
        `(dataset, number_dropped)`.

    Example:
        >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
        >>> tok = build_tokenizer(["short long prompt"])
        >>> kept, dropped = drop_long_prompts(Dataset.from_dict({"prompt": ["short", "long " * 50]}), tok, 10)
        >>> kept.num_rows, dropped
        (1, 1)
    """
    from .tokens import render_prompts

    if not isinstance(dataset, Dataset) or "prompt" not in dataset.column_names:
        return dataset, 0

    def prompt_length(batch):
        return {"_dpr_prompt_length": [len(ids) for ids in render_prompts(tokenizer, batch["prompt"], **chat_template_kwargs)]}

    lengths = dataset.map(prompt_length, batched=True, desc=f"Measuring {name} prompts")["_dpr_prompt_length"]
    keep = [i for i, n in enumerate(lengths) if n <= max_prompt_length]
    if not keep:
        raise ValueError(
            f"Every {name} prompt is longer than max_prompt_length={max_prompt_length} tokens (shortest: "
            f"{min(lengths)}). Raise max_prompt_length or shorten the prompts."
        )
    dropped = len(lengths) - len(keep)
    return (dataset if dropped == 0 else dataset.select(keep)), dropped


def prompts_for_rl(dataset: Dataset, name: str) -> Dataset:
    """The prompts of a demonstration dataset, as the `prompt` column GRPO/DPR samples from.

    `prompt`/`completion` rows keep their prompt; `messages` rows become everything before the final assistant turn.

    Example:
        >>> ds = Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}])
        >>> prompts_for_rl(ds, "toy")[0]["prompt"] == [{"role": "user", "content": "hi"}]
        True
    """
    columns = _columns(dataset)
    if "prompt" in columns:
        return dataset
    if "messages" in columns:

        def strip_last_answer(example):
            messages = example["messages"]
            if not messages or messages[-1]["role"] != "assistant" or len(messages) < 2:
                raise ValueError(
                    f"A `messages` row of {name!r} does not end with an assistant turn after a prompt: {messages!r}"
                )
            return {"prompt": messages[:-1]}

        return dataset.map(strip_last_answer, remove_columns=["messages"])
    raise ValueError(
        f"Dataset {name!r} has no prompts: its columns are {sorted(columns)}. DPR needs a `prompt` column (or "
        "`messages` conversations whose last turn is the assistant's answer)."
    )


def load_demonstrations(
    dataset_name: str,
    dataset_config: str | None = None,
    split: str = "train",
    num_samples: int | None = None,
    seed: int = 0,
    dataset_format: str = "auto",
) -> Dataset:
    """Load a demonstration split: a Hub dataset, a local JSON/JSONL file, or `trl_dpr/embedded-demo`.

    Args:
        dataset_name: Hub id (e.g. `Open-Orca/OpenOrca`), a `.json`/`.jsonl` path, or `trl_dpr/embedded-demo`.
        dataset_config: the dataset's configuration name, if any.
        split: split to load.
        num_samples: keep a random subsample of this many rows (shuffled with `seed`), e.g. the paper's 100k.
        seed: subsample seed; SFT and DPR use the same so they see the same prompts.
        dataset_format: `auto` (detect), `openorca`, `messages` or `prompt_completion`.

    Example:
        >>> load_demonstrations("trl_dpr/embedded-demo", split="test", num_samples=3).num_rows
        3
    """
    if dataset_format not in ("auto", "openorca", "messages", "prompt_completion"):
        raise ValueError(
            f"dataset_format must be auto, openorca, messages or prompt_completion, got {dataset_format!r}."
        )
    if dataset_name == EMBEDDED_DATASET:
        dataset = build_demo_dataset(seed=seed)[split]
    elif dataset_name.endswith((".json", ".jsonl")) and os.path.isfile(dataset_name):
        dataset = load_dataset("json", data_files={split: dataset_name})[split]
    else:
        loaded = load_dataset(dataset_name, name=dataset_config, split=split)
        dataset = loaded[split] if isinstance(loaded, DatasetDict) else loaded

    if num_samples is not None:
        if num_samples > dataset.num_rows:
            raise ValueError(f"num_samples={num_samples} but {dataset_name!r}:{split} has {dataset.num_rows} rows.")
        dataset = dataset.shuffle(seed=seed).select(range(num_samples))

    columns = _columns(dataset)
    is_openorca = {"question", "response"} <= columns
    if dataset_format == "openorca" or (dataset_format == "auto" and is_openorca and "messages" not in columns):
        if not is_openorca:
            raise ValueError(f"dataset_format: openorca needs `question` and `response` columns; got {sorted(columns)}.")
        dataset = dataset.map(openorca_to_conversation, remove_columns=sorted(columns))
    check_sft_dataset(dataset, dataset_name)
    return dataset
