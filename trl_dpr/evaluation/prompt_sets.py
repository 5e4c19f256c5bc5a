"""The paper's evaluation prompts (AlpacaEval, Arena-Hard v0.1, LIMA test, MT-Bench), the embedded task's and your
own (`jsonl`: prompts with answers), as `EvalPrompt`s, from the Hub or from a local JSON / JSONL file.

The sources, and the local files to use when the Hub copy cannot be (offline, gated, script repos), with their
fields: docs/evaluation.md. A local file is `.jsonl` or a `.json` list of objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..data import read_json_rows

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalPrompt:
    """One evaluation prompt: its user turns (1, or 2 for MT-Bench), category and reference answers (one per turn)."""

    prompt_id: str
    turns: tuple[str, ...]
    category: str | None = None
    references: tuple[str, ...] = ()
    system: str | None = None
    conversational: bool = False  # written as chat messages (TRL's conversational format), not as a string
    as_text: bool = False  # a string prompt the models read as raw text (π_SFT trained on raw text: `data.py`)

    def as_written(self) -> str | list[dict]:
        """The prompt in its file's format, as TRL would pass it to a reward function: messages, or the text."""
        return self.conversation([]) if self.conversational else self.turns[0]

    def model_input(self, previous_answers: list[str]) -> str | list[dict]:
        """What a model is given for its next answer: the raw text of an `as_text` prompt, else the conversation."""
        return self.turns[0] if self.as_text and not previous_answers else self.conversation(previous_answers)

    def conversation(self, previous_answers: list[str]) -> list[dict]:
        """The chat up to the next user turn: user turn 1, answer 1, ..., user turn len(previous_answers) + 1."""
        if len(previous_answers) >= len(self.turns):
            raise ValueError(f"Prompt {self.prompt_id} has {len(self.turns)} turns; all are answered already.")
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for question, answer in zip(self.turns, previous_answers):
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        return messages + [{"role": "user", "content": self.turns[len(previous_answers)]}]


@dataclass(frozen=True)
class PromptSetSource:
    """Where a benchmark's prompts come from, and how many the paper used (a different count is warned about)."""

    name: str
    display_name: str
    expected_rows: int | None
    hub: str
    local_fields: str
    load: Callable[..., list[EvalPrompt]]


def _require(row: dict, fields: tuple[str, ...], source: str, index: int) -> None:
    missing = [f for f in fields if f not in row]
    if missing:
        raise ValueError(
            f"Row {index} of {source} lacks {missing}; it has {sorted(row)}. "
            f"See trl_dpr.evaluation.prompt_sets for the fields each benchmark file needs."
        )


def _text_turns(turns: list, source: str, index: int) -> tuple[str, ...]:
    """Turns given as strings or as `{"content": ...}` messages (Arena-Hard)."""
    texts = tuple(t["content"] if isinstance(t, dict) else t for t in turns)
    if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError(f"Row {index} of {source} has empty or non-text turns: {turns!r:.200}.")
    return texts


def _hub_json_file(repo: str, filename: str, name: str) -> list[dict]:
    """Download one file of a Hub dataset repo (for script-based repos that `datasets` no longer runs)."""
    from huggingface_hub import hf_hub_download

    try:
        return read_json_rows(hf_hub_download(repo, filename, repo_type="dataset"))
    except Exception as error:
        raise RuntimeError(_hub_failure(name, f"{repo} ({filename})", error)) from error


def _hub_split(repo: str, split: str, name: str) -> list[dict]:
    from datasets import load_dataset

    try:
        return list(load_dataset(repo, split=split))
    except Exception as error:
        raise RuntimeError(_hub_failure(name, f"{repo} (split {split})", error)) from error


def _hub_failure(name: str, what: str, error: Exception) -> str:
    return (
        f"Could not fetch the {name} prompts from the Hub: {what}: {type(error).__name__}: {str(error)[:300]}. "
        f"Offline, gated or script-based copies fail this way: download the file yourself (see "
        f"trl_dpr.evaluation.prompt_sets) and pass its path as `{name}_path`."
    )


def load_alpaca_eval(path: str | None = None) -> list[EvalPrompt]:
    """AlpacaEval's 805 instructions (single turn); ids are row numbers, categories the source sets."""
    source = path or "tatsu-lab/alpaca_eval"
    rows = read_json_rows(path) if path else _hub_json_file("tatsu-lab/alpaca_eval", "alpaca_eval.json", "alpaca_eval")
    prompts = []
    for i, row in enumerate(rows):
        _require(row, ("instruction",), source, i)
        prompts.append(EvalPrompt(str(i), _text_turns([row["instruction"]], source, i), category=row.get("dataset")))
    return prompts


def load_arena_hard(path: str | None = None) -> list[EvalPrompt]:
    """Arena-Hard v0.1's 500 questions (first user turn); categories are the topic clusters."""
    source = path or "lmarena-ai/arena-hard-auto-v0.1"
    rows = read_json_rows(path) if path else _hub_split("lmarena-ai/arena-hard-auto-v0.1", "train", "arena_hard")
    prompts = []
    for i, row in enumerate(rows):
        _require(row, ("question_id", "turns"), source, i)
        turns = _text_turns(row["turns"], source, i)
        prompts.append(
            EvalPrompt(str(row["question_id"]), turns[:1], category=row.get("cluster") or row.get("category"))
        )
    return prompts


def load_lima(path: str | None = None) -> list[EvalPrompt]:
    """LIMA's 300 test prompts (the first element of `conversations`); categories are the sources."""
    source = path or "GAIR/lima"
    rows = read_json_rows(path) if path else _hub_json_file("GAIR/lima", "test.jsonl", "lima")
    prompts = []
    for i, row in enumerate(rows):
        _require(row, ("conversations",), source, i)
        turns = _text_turns(row["conversations"], source, i)
        prompts.append(EvalPrompt(str(i), turns[:1], category=row.get("source")))
    return prompts


def load_mt_bench(path: str | None = None) -> list[EvalPrompt]:
    """MT-Bench's 80 two-turn questions with their categories and, for math / reasoning / coding, reference answers.

    Accepts FastChat's `question.jsonl` (`question_id`, `turns`) and HuggingFaceH4's copy (`prompt_id`, `prompt`).
    """
    source = path or "HuggingFaceH4/mt_bench_prompts"
    rows = read_json_rows(path) if path else _hub_split("HuggingFaceH4/mt_bench_prompts", "train", "mt_bench")
    prompts = []
    for i, row in enumerate(rows):
        turns_field = "turns" if "turns" in row else "prompt"
        id_field = "question_id" if "question_id" in row else "prompt_id"
        _require(row, (turns_field, id_field, "category"), source, i)
        references = tuple(r for r in (row.get("reference") or []) if isinstance(r, str))
        prompts.append(
            EvalPrompt(str(row[id_field]), _text_turns(row[turns_field], source, i), row["category"], references)
        )
    return prompts


def load_demo_prompts(num_prompts: int = 100, seed: int = 0) -> list[EvalPrompt]:
    """Held-out prompts of the embedded task, with the exact answer as reference (for `ExactAnswerJudge`)."""
    from ..embedded.task import held_out_split

    held_out = held_out_split(num_prompts, seed)
    return [
        EvalPrompt(str(i), (row["prompt"][-1]["content"],), row["kind"], (row["answer"],))
        for i, row in enumerate(held_out)
    ]


def load_jsonl_prompts(path: str | None = None) -> list[EvalPrompt]:
    """Your own prompts with their answers (`benchmarks: [jsonl]`, `jsonl_path:`): rows of `prompt` + `answer`, or the
    demonstrations SFT trains on (`prompt` + `completion`, `messages`), whose answer is then the demonstration's text.
    An `id` column names the rows (else their numbers); a `kind` or `category` column groups the accuracy."""
    from ..data import prompt_and_demonstration

    if not path:
        raise ValueError(
            "benchmarks: [jsonl] needs jsonl_path: your .jsonl file of `prompt` + `answer` (or messages) rows."
        )
    prompts = []
    for i, row in enumerate(read_json_rows(path)):
        if not isinstance(row, dict):
            raise ValueError(f"Row {i} of {path} is not a JSON object: {row!r:.100}.")
        prompt, demonstration = prompt_and_demonstration(row, path)
        answer = row.get("answer", demonstration)
        if answer is None:
            raise ValueError(
                f"Row {i} of {path} has a `prompt` but no `answer` (or `completion`) to check answers by."
            )
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        system = [m["content"] for m in messages if m.get("role") == "system"]
        turns = [m["content"] for m in messages if m.get("role") != "system"]
        if len(turns) != 1 or messages[-1].get("role") != "user" or len(system) > 1:
            raise ValueError(
                f"Row {i} of {path}: a prompt is one user message (after at most one system message); got roles "
                f"{[m.get('role') for m in messages]}."
            )
        category = row.get("kind") or row.get("category")
        prompts.append(
            EvalPrompt(
                str(row.get("id", i)),
                _text_turns(turns, path, i),
                category,
                (str(answer),),
                system[0] if system else None,
                conversational=not isinstance(prompt, str),
            )
        )
    return prompts


PROMPT_SETS: dict[str, PromptSetSource] = {
    source.name: source
    for source in (
        PromptSetSource(
            "alpaca_eval",
            "AlpacaEval",
            805,
            "tatsu-lab/alpaca_eval: alpaca_eval.json",
            "instruction",
            load_alpaca_eval,
        ),
        PromptSetSource(
            "arena_hard",
            "Arena-Hard",
            500,
            "lmarena-ai/arena-hard-auto-v0.1 (train)",
            "question_id, turns",
            load_arena_hard,
        ),
        PromptSetSource("lima", "LIMA", 300, "GAIR/lima: test.jsonl (gated)", "conversations", load_lima),
        PromptSetSource(
            "mt_bench",
            "MT-Bench",
            80,
            "HuggingFaceH4/mt_bench_prompts (train)",
            "turns, category, reference",
            load_mt_bench,
        ),
        PromptSetSource("demo", "Embedded task", None, "generated by trl_dpr.embedded.task", "—", load_demo_prompts),
        PromptSetSource(
            "jsonl", "Your prompts", None, "your file (jsonl_path)", "prompt + answer, or messages", load_jsonl_prompts
        ),
    )
}


def load_prompt_set(name: str, path: str | None = None, limit: int | None = None, **kwargs) -> list[EvalPrompt]:
    """The prompts of benchmark `name` (from `path` when given, else the Hub), optionally only the first `limit`."""
    if name not in PROMPT_SETS:
        raise ValueError(f"Unknown benchmark {name!r}; expected one of {sorted(PROMPT_SETS)}.")
    source = PROMPT_SETS[name]
    if name == "demo":
        if path:
            raise ValueError("The embedded task's prompts are generated; it takes no file path.")
        prompts = source.load(**kwargs)
    else:
        prompts = source.load(path)
    ids = [p.prompt_id for p in prompts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name} has duplicate prompt ids; each row needs a distinct id to cache answers by.")
    if source.expected_rows is not None and len(prompts) != source.expected_rows:
        logger.warning(f"{name}: {len(prompts)} prompts, the paper's set has {source.expected_rows}.")
    if not prompts:
        raise ValueError(f"{name} has no prompts ({path or source.hub}).")
    return prompts[:limit] if limit is not None else prompts
