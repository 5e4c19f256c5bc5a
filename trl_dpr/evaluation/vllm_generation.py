"""Answer generation with vLLM, when it is installed (optional: `pip install vllm`, GPU only), else transformers.

Not exercised by this repository's tests (no GPU, no vLLM on the machines they run on); the transformers path
(`TransformersAnswerGenerator`) is the tested one, and both write the same answer cache lines.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .answering import TransformersAnswerGenerator

__all__ = ["GENERATION_BACKENDS", "VLLMAnswerGenerator", "is_vllm_available", "load_answer_generator"]

GENERATION_BACKENDS = ("auto", "transformers", "vllm")


def is_vllm_available() -> bool:
    """Whether vLLM can be imported (it is an optional dependency).

    Example:
        >>> isinstance(is_vllm_available(), bool)
        True
    """
    return importlib.util.find_spec("vllm") is not None


class VLLMAnswerGenerator:
    """Sampling with vLLM's offline engine through the model's chat template (`LLM.chat`).

    PEFT adapter folders are not loaded here: merge the adapter into its base first (`model.merge_and_unload()`), or
    use the transformers backend.

    Example:
        >>> generator = VLLMAnswerGenerator("runs/llama-3.1-8b/dpr-full", temperature=0.7, max_new_tokens=1024)  # doctest: +SKIP
    """

    def __init__(self, model_path: str, temperature: float = 0.7, max_new_tokens: int = 1024, seed: int = 0, dtype: str = "auto", **llm_kwargs):
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
        self.settings = {
            "model_path": str(model_path),
            "backend": "vllm",
            "temperature": temperature,
            "max_new_tokens": max_new_tokens,
            "seed": seed,
        }

    def generate(self, conversations: list[list[dict]]) -> list[str]:
        outputs = self.llm.chat(conversations, self.sampling_params, use_tqdm=False)
        return [output.outputs[0].text for output in outputs]


def load_answer_generator(
    model_path: str,
    backend: str = "auto",
    temperature: float = 0.7,
    max_new_tokens: int = 1024,
    batch_size: int = 16,
    seed: int = 0,
    dtype: str = "auto",
):
    """A generator for `model_path`: vLLM with `backend="vllm"`, or with "auto" when vLLM and a GPU are there and the
    folder is not an adapter; transformers otherwise.

    Example:
        >>> generator = load_answer_generator("runs/demo/sft", backend="transformers")  # doctest: +SKIP
    """
    if backend not in GENERATION_BACKENDS:
        raise ValueError(f"generation_backend must be one of {GENERATION_BACKENDS}, got {backend!r}.")
    if backend == "auto":
        import torch

        is_adapter = (Path(model_path) / "adapter_config.json").is_file()
        backend = "vllm" if is_vllm_available() and torch.cuda.is_available() and not is_adapter else "transformers"
    if backend == "vllm":
        return VLLMAnswerGenerator(model_path, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, dtype=dtype)
    return TransformersAnswerGenerator.from_pretrained(
        model_path, dtype=dtype, temperature=temperature, max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed
    )
