"""The embedded demo's base model: a tiny Llama and its offline tokenizer, written once to a folder.

`model_name_or_path: trl_dpr/embedded-tiny-llama` in a recipe stands for this model; the recipes build it into
`<output_dir>/../embedded-base` on first use (main process only) and load it from there like any checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

from accelerate import PartialState

from .task import demo_corpus
from .tiny_lm import build_tiny_causal_lm, build_tokenizer

__all__ = ["EMBEDDED_MODEL", "build_embedded_base"]

EMBEDDED_MODEL = "trl_dpr/embedded-tiny-llama"  # a tiny Llama built from a config, with an offline tokenizer


def build_embedded_base(path: str | os.PathLike, seed: int = 0) -> str:
    """Write the embedded tiny Llama (hidden 128, 4 layers) and its tokenizer to `path` once; return the path.

    Example:
        >>> import contextlib, io, tempfile
        >>> with contextlib.redirect_stdout(io.StringIO()):  # accelerate's device notice
        ...     folder = build_embedded_base(tempfile.mkdtemp() + "/base")
        >>> sorted(p.name for p in Path(folder).iterdir())[:2]
        ['chat_template.jinja', 'config.json']
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        if PartialState().is_main_process:
            tokenizer = build_tokenizer(demo_corpus(seed=seed), vocab_size=1200)
            model = build_tiny_causal_lm(tokenizer, "llama", hidden_size=128, num_layers=4, num_heads=4, seed=seed)
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
        PartialState().wait_for_everyone()
    return str(path)
