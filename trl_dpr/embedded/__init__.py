"""The embedded default: an LfD task, a tiny pretrained model and an exact judge that run offline on CPU.

    task         generated instructions with expert step-by-step answers that can be checked exactly, and the
                 demonstrations loader that knows its name (`load_demonstrations`)
    tiny_lm      tiny causal LMs and byte-level BPE tokenizers built from a config and a corpus (no download)
    pretraining  a plain-text corpus about the task and the tiny Llama language-modelled on it (the demo's base)
    base_model   the names recipes use for the embedded bases, each built once per folder

Its evaluation is `trl-dpr evaluate`'s (`benchmarks: [demo]`, `judge: exact`: `trl_dpr.evaluation.ExactAnswerJudge`
and each model's accuracy), the one path `make demo`, `trl-dpr evaluate` and the experiments all take.

Recipes name the task `dataset_name: trl_dpr/embedded-demo` and the base `model_name_or_path:
trl_dpr/embedded-pretrained-llama` (or `trl_dpr/embedded-tiny-llama`, random init); nothing is downloaded.
"""

from .base_model import EMBEDDED_MODEL, EMBEDDED_PRETRAINED_MODEL, build_embedded_base, resolve_embedded_base
from .pretraining import PretrainingSettings, build_pretrained_base, pretraining_corpus
from .task import (
    EMBEDDED_DATASET,
    KINDS,
    build_demo_dataset,
    extract_answer,
    held_out_split,
    is_correct,
    load_demonstrations,
    make_example,
)

__all__ = [
    "EMBEDDED_DATASET",
    "EMBEDDED_MODEL",
    "EMBEDDED_PRETRAINED_MODEL",
    "KINDS",
    "PretrainingSettings",
    "build_demo_dataset",
    "build_embedded_base",
    "build_pretrained_base",
    "extract_answer",
    "held_out_split",
    "is_correct",
    "load_demonstrations",
    "make_example",
    "pretraining_corpus",
    "resolve_embedded_base",
]
