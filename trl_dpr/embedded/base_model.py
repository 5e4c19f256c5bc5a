"""The embedded base models, built offline into a folder once and loaded from there like any checkpoint.

`trl_dpr/embedded-pretrained-llama` (the demo's base) is the shipped build, checked against its SHA-256 sums, rebuilt
into `<output_dir>/../embedded-pretrained-base` only if missing or altered; `trl_dpr/embedded-tiny-llama` is the same
architecture at random init, built into `<output_dir>/../embedded-base` in a second.
"""

from __future__ import annotations

import os
from pathlib import Path

from accelerate import PartialState

from .pretraining import SHIPPED_BASE, build_pretrained_base, shipped_base_problem
from .task import demo_corpus
from .tiny_lm import build_tiny_causal_lm, build_tokenizer

EMBEDDED_MODEL = "trl_dpr/embedded-tiny-llama"  # a tiny Llama built from a config, with an offline tokenizer
EMBEDDED_PRETRAINED_MODEL = "trl_dpr/embedded-pretrained-llama"  # the same, language-modelled on text about the task
EMBEDDED_MODELS = (EMBEDDED_MODEL, EMBEDDED_PRETRAINED_MODEL)


def build_embedded_base(path: str | os.PathLike, seed: int = 0) -> str:
    """Write the embedded tiny Llama (hidden 128, 4 layers) and its tokenizer to `path` once; return the path."""
    path = Path(path)
    if not (path / "config.json").is_file():
        if PartialState().is_main_process:
            tokenizer = build_tokenizer(demo_corpus(seed=seed), vocab_size=1200)
            model = build_tiny_causal_lm(tokenizer, "llama", hidden_size=128, num_layers=4, num_heads=4, seed=seed)
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
        PartialState().wait_for_everyone()
    return str(path)


def resolve_embedded_base(model_name_or_path: str, output_dir: str | os.PathLike, seed: int = 0) -> str:
    """The folder for `model_name_or_path`: an embedded name is built beside `output_dir` (once); any other name is
    returned unchanged (a Hub id or a local folder, loaded by transformers).
    """
    if model_name_or_path == EMBEDDED_MODEL:
        return build_embedded_base(Path(output_dir).parent / "embedded-base", seed=seed)
    if model_name_or_path == EMBEDDED_PRETRAINED_MODEL:
        problem = shipped_base_problem()
        if problem is None:
            return str(SHIPPED_BASE)
        if PartialState().is_main_process:
            print(
                f"The shipped embedded base cannot be used ({problem}): rebuilding it beside the run, about 20 min on "
                "one CPU thread.",
                flush=True,
            )
        return build_pretrained_base(Path(output_dir).parent / "embedded-pretrained-base")
    return model_name_or_path
