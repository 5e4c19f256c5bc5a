"""Answers of one model to a prompt set, turn by turn, cached line by line so an interrupted run resumes.

The paper samples evaluation answers at temperature 0.7 with a fixed maximum length. Each answer is one JSONL line
`{"model", "prompt_id", "turn", "answer", "settings"}`; a rerun generates only the (prompt, turn) pairs that are not
in the file yet. Second turns (MT-Bench) are generated after first turns, from the conversation so far with the
model's own first answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tqdm.auto import tqdm

from .generation import generate_answers
from .jsonl_cache import JsonlCache
from .prompt_sets import EvalPrompt

__all__ = ["AnswerGenerator", "TransformersAnswerGenerator", "answer_cache", "answer_prompts"]


class AnswerGenerator(Protocol):
    """Samples one answer per conversation. `settings` identifies what produced the answers (for the cache)."""

    settings: dict

    def generate(self, conversations: list[list[dict]]) -> list[str]: ...


class TransformersAnswerGenerator:
    """Batched sampling with transformers (`generate_answers`): the path that works everywhere, CPU included.

    Args:
        model, tokenizer: a causal LM and its tokenizer (with a chat template).
        temperature: sampling temperature (paper: 0.7).
        max_new_tokens: the fixed maximum answer length.
        batch_size: conversations per `generate` call.
        seed: sampling seed (every `generate` call starts from it, leaving the caller's random state untouched).
        model_path: recorded in the cache settings, so answers of another model are never mixed in.

    Example:
        >>> from trl_dpr.tiny_lm import build_tiny_causal_lm, build_tokenizer
        >>> tok = build_tokenizer(["hello"])
        >>> generator = TransformersAnswerGenerator(build_tiny_causal_lm(tok), tok, max_new_tokens=3, model_path="tiny")
        >>> len(generator.generate([[{"role": "user", "content": "hello"}]]))
        1
    """

    def __init__(
        self,
        model,
        tokenizer,
        temperature: float = 0.7,
        max_new_tokens: int = 1024,
        batch_size: int = 16,
        seed: int = 0,
        model_path: str | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.seed = seed
        self.settings = {
            "model_path": model_path or getattr(model.config, "name_or_path", None),
            "backend": "transformers",
            "temperature": temperature,
            "max_new_tokens": max_new_tokens,
            "seed": seed,
        }

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "auto", **kwargs) -> TransformersAnswerGenerator:
        """Load a model folder or Hub id (a PEFT adapter folder loads on its base) onto the GPU when there is one.

        Example:
            >>> generator = TransformersAnswerGenerator.from_pretrained("runs/demo/dpr", temperature=0.7)  # doctest: +SKIP
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        model.to("cuda" if torch.cuda.is_available() else "cpu")
        return cls(model, tokenizer, model_path=str(path), **kwargs)

    def generate(self, conversations: list[list[dict]]) -> list[str]:
        return generate_answers(
            self.model,
            self.tokenizer,
            conversations,
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            seed=self.seed,
            show_progress=False,
        )


def answer_cache(path: str | Path, generator: AnswerGenerator) -> JsonlCache:
    """The answer file of one model on one prompt set: lines keyed by (model, prompt_id, turn)."""
    return JsonlCache(path, ("model", "prompt_id", "turn"), settings=generator.settings)


def answer_prompts(
    generator: AnswerGenerator,
    model_name: str,
    prompts: Sequence[EvalPrompt],
    cache: JsonlCache,
    chunk_size: int = 64,
    show_progress: bool = True,
) -> dict[tuple[str, int], str]:
    """Every turn's answer of `model_name` to `prompts`: cached ones read back, missing ones generated and cached.

    Generation goes `chunk_size` conversations at a time, each chunk written to the cache as soon as it is done, so
    an interruption loses at most one chunk.

    Returns:
        `{(prompt_id, turn): answer}` for every prompt and turn (turns 0-based).

    Example:
        >>> import tempfile, os
        >>> class Shout:
        ...     settings = {"model_path": "shout"}
        ...     def generate(self, conversations):
        ...         return [c[-1]["content"].upper() for c in conversations]
        >>> cache = answer_cache(os.path.join(tempfile.mkdtemp(), "a.jsonl"), Shout())
        >>> answer_prompts(Shout(), "shout", [EvalPrompt("1", ("hi", "bye"))], cache, show_progress=False)
        {('1', 0): 'HI', ('1', 1): 'BYE'}
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    num_turns = max((len(p.turns) for p in prompts), default=0)
    for turn in range(num_turns):
        todo = [p for p in prompts if len(p.turns) > turn and (model_name, p.prompt_id, turn) not in cache]
        chunks = range(0, len(todo), chunk_size)
        for start in tqdm(chunks, desc=f"{model_name}: turn {turn + 1} answers", disable=not show_progress or not todo):
            chunk = todo[start : start + chunk_size]
            conversations = [p.conversation(_previous_answers(cache, model_name, p, turn)) for p in chunk]
            answers = generator.generate(conversations)
            if len(answers) != len(chunk):
                raise RuntimeError(f"The generator returned {len(answers)} answers for {len(chunk)} prompts.")
            cache.add_many(
                {"model": model_name, "prompt_id": p.prompt_id, "turn": turn, "answer": answer}
                for p, answer in zip(chunk, answers)
            )
    return {
        (p.prompt_id, turn): cache.get((model_name, p.prompt_id, turn))["answer"]
        for p in prompts
        for turn in range(len(p.turns))
    }


def _previous_answers(cache: JsonlCache, model_name: str, prompt: EvalPrompt, turn: int) -> list[str]:
    return [cache.get((model_name, prompt.prompt_id, t))["answer"] for t in range(turn)]
