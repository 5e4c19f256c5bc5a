"""Answers of each model to a prompt set, turn by turn, cached line by line so an interrupted run resumes.

    AnswerGenerator: TransformersAnswerGenerator (batched `generate_answers`, works everywhere) or VLLMAnswerGenerator
    answer_prompts: the answers of one model, read back from its JSONL cache or generated and cached chunk by chunk

One JSONL line per answer (`{"model", "prompt_id", "turn", "answer", "settings"}`); a rerun generates only the missing
(prompt, turn) pairs. Second turns follow the model's own first answer. The vLLM path is not exercised by the tests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Protocol

from tqdm.auto import tqdm

from .cache import JsonlCache
from .prompt_sets import EvalPrompt
from .sampling import generate_answers

GENERATION_BACKENDS = ("auto", "transformers", "vllm")


class AnswerGenerator(Protocol):
    """Samples one answer per conversation (or raw-text prompt). `settings` identifies what produced the answers."""

    settings: dict

    def generate(self, conversations: list[list[dict]]) -> list[str]: ...


class TransformersAnswerGenerator:
    """Batched sampling with transformers (`generate_answers`): the path that works everywhere, CPU included.

    Every call starts from `seed` and leaves the caller's random state untouched; `model_path` and the weights saved
    there (`weights_fingerprint`) go into the cache settings, so answers of another model are never mixed in.
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
        self.model_path = model_path

    @cached_property
    def settings(self) -> dict:
        """What made the answers, for `answer_cache`; on first use only: `trl-dpr evaluate` keys its caches itself,
        and the weights fingerprint may cost a Hub lookup."""
        return {
            "model_path": self.model_path or getattr(self.model.config, "name_or_path", None),
            "weights": weights_fingerprint(self.model_path) if self.model_path else None,
            "backend": "transformers",
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
        }

    @classmethod
    def from_pretrained(
        cls, path: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False, **kwargs
    ) -> TransformersAnswerGenerator:
        """Load a model folder or Hub id (a PEFT adapter folder loads on its base) onto `device` ("auto": the GPU when
        there is one).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
        model.to(resolve_device(device))
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
    """The answer file of one model on one prompt set: lines keyed by (model, prompt_id, turn). Answers of other
    weights at the same path (a retrained model) are stale: they are generated again (`JsonlCache`'s `renewed_by`)."""
    return JsonlCache(path, ("model", "prompt_id", "turn"), settings=generator.settings, renewed_by=("weights",))


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def weights_fingerprint(model_path: str, _seen: frozenset = frozenset()) -> str | None:
    """A cheap digest of the weights `model_path` loads, so cached answers never outlive them (`rm -r` and retrain,
    `--overwrite_output_dir`): a folder's weight files by name, size and mtime (not its checkpoints, config or card),
    an adapter's base too; a Hub id's commit (the Hub's when online, else the cached one). Not a digest of the bytes
    (gigabytes to read): weights copied or rewritten unchanged count as other weights, and are answered again. None
    when unknown (a folder or an adapter's base gone, a Hub id neither reachable nor cached): cached answers stand."""
    folder = Path(model_path).expanduser()
    if folder.is_dir():
        files = [
            (f.name, f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(folder.iterdir())
            if f.is_file() and f.suffix in _WEIGHT_SUFFIXES and f.name != "training_args.bin"
        ]
        base = _adapter_base(folder)
        seen = _seen | {str(folder.resolve())}
        if base is not None and str(Path(base).expanduser().resolve()) not in seen:
            base_weights = weights_fingerprint(base, seen)
            if base_weights is None:  # its base moved, deleted or not reachable: the weights are unknown, not other
                return None
            files.append(("base", base, base_weights))
        return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]
    revision = _hub_revision(model_path)
    return f"hub:{revision}" if revision else None


def _adapter_base(folder: Path) -> str | None:
    try:
        return json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):  # not an adapter, or a config we cannot read (loading says so)
        return None


def _hub_revision(model_id: str) -> str | None:
    """The commit a Hub id loads: the Hub's `main` when online, else the snapshot this machine has cached (of a model or
    of an adapter). None for what is not shaped like a Hub id: a folder that is not there (moved, deleted) has no
    weights to fingerprint, and its answers are read back while none is missing (loading it would say it is gone)."""
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(model_id)
    except (HFValidationError, ValueError):
        return None
    if not constants.HF_HUB_OFFLINE:
        try:
            return HfApi().model_info(model_id, timeout=10).sha
        except Exception:  # no network, a private repo without a token: the cached commit, if any
            pass
    for name in ("config.json", "adapter_config.json"):
        cached = try_to_load_from_cache(model_id, name)
        if isinstance(cached, str):
            return Path(cached).parent.name
    return None


def answer_prompts(
    generator: AnswerGenerator,
    model_name: str,
    prompts: Sequence[EvalPrompt],
    cache: JsonlCache,
    chunk_size: int = 64,
    show_progress: bool = True,
) -> dict[tuple[str, int], str]:
    """Every turn's answer of `model_name` to `prompts`: cached ones read back, missing ones generated and cached.

    Each chunk of `chunk_size` is cached as soon as it is done. Returns `{(prompt_id, turn): answer}`, turns 0-based.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    num_turns = max((len(p.turns) for p in prompts), default=0)
    for turn in range(num_turns):
        todo = [p for p in prompts if len(p.turns) > turn and (model_name, p.prompt_id, turn) not in cache]
        chunks = range(0, len(todo), chunk_size)
        for start in tqdm(
            chunks, desc=f"{model_name}: turn {turn + 1} answers", disable=not show_progress or not todo
        ):
            chunk = todo[start : start + chunk_size]
            conversations = [p.model_input(_previous_answers(cache, model_name, p, turn)) for p in chunk]
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


# ---- vLLM, when it is installed (optional: `pip install "trl_dpr[vllm]"`, GPU only) ---------------------------------
def resolve_device(device: str = "auto") -> str:
    """The torch device of an evaluation's `device` setting: "auto" is the GPU when there is one, else the CPU."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}.")
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def is_vllm_available() -> bool:
    """Whether vLLM can be imported (it is an optional dependency)."""
    return importlib.util.find_spec("vllm") is not None


class VLLMAnswerGenerator:
    """Sampling with vLLM's offline engine through the model's chat template (`LLM.chat`).

    PEFT adapter folders are not loaded here: merge the adapter into its base first (`model.merge_and_unload()`), or
    use the transformers backend.
    """

    def __init__(
        self,
        model_path: str,
        temperature: float = 0.7,
        max_new_tokens: int = 1024,
        seed: int = 0,
        dtype: str = "auto",
        **llm_kwargs,
    ):
        if not is_vllm_available():
            raise ImportError("generation_backend='vllm' needs vLLM: `pip install vllm` (GPU), or use 'transformers'.")
        if (Path(model_path) / "adapter_config.json").is_file():
            raise ValueError(
                f"{model_path} is a PEFT adapter; vLLM needs full weights. Merge it into its base "
                "(PeftModel.merge_and_unload().save_pretrained(...)) or use generation_backend='transformers'."
            )
        from vllm import LLM, SamplingParams

        self.llm = LLM(model=model_path, dtype=dtype, seed=seed, **llm_kwargs)
        self.sampling_params = SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=seed)
        self.model_path = str(model_path)
        self.temperature, self.max_new_tokens, self.seed = temperature, max_new_tokens, seed

    @cached_property
    def settings(self) -> dict:
        """As `TransformersAnswerGenerator.settings`: on first use only."""
        return {
            "model_path": self.model_path,
            "weights": weights_fingerprint(self.model_path),
            "backend": "vllm",
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
        }

    def generate(self, conversations: list[str | list[dict]]) -> list[str]:
        """Raw-text prompts (`EvalPrompt.as_text`) through `LLM.generate`, messages through `LLM.chat` (its template);
        a chunk may hold both, answered in its own order."""
        answers = [""] * len(conversations)
        for as_text, call in ((True, self.llm.generate), (False, self.llm.chat)):
            indices = [i for i, c in enumerate(conversations) if isinstance(c, str) == as_text]
            if indices:
                outputs = call([conversations[i] for i in indices], self.sampling_params, use_tqdm=False)
                for i, output in zip(indices, outputs, strict=True):
                    answers[i] = output.outputs[0].text
        return answers


def load_answer_generator(
    model_path: str,
    backend: str = "auto",
    temperature: float = 0.7,
    max_new_tokens: int = 1024,
    batch_size: int = 16,
    seed: int = 0,
    dtype: str = "auto",
    device: str = "auto",
    trust_remote_code: bool = False,
):
    """A generator for `model_path`: vLLM with `backend="vllm"`, or with "auto" when vLLM and a GPU are there (and
    `device` is not "cpu") and the folder is not an adapter; transformers otherwise, on `device`.
    """
    if backend not in GENERATION_BACKENDS:
        raise ValueError(f"generation_backend must be one of {GENERATION_BACKENDS}, got {backend!r}.")
    if backend == "auto":
        import torch

        is_adapter = (Path(model_path) / "adapter_config.json").is_file()
        on_gpu = device != "cpu" and torch.cuda.is_available()
        backend = "vllm" if is_vllm_available() and on_gpu and not is_adapter else "transformers"
    if backend == "vllm":
        return VLLMAnswerGenerator(
            model_path,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            seed=seed,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
        )
    return TransformersAnswerGenerator.from_pretrained(
        model_path,
        dtype=dtype,
        device=device,
        trust_remote_code=trust_remote_code,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
    )
