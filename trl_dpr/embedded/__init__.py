"""The embedded default: an LfD task, a tiny pretrained model and an exact judge that run offline on CPU.

    task         generated instructions with expert step-by-step answers that can be checked exactly, and the
                 demonstrations loader that knows its name (`load_demonstrations`)
    tiny_lm      tiny causal LMs and byte-level BPE tokenizers built from a config and a corpus (no download)
    pretraining  a plain-text corpus about the task and the tiny Llama language-modelled on it (the demo's base)
    base_model   the names recipes use for the embedded bases, each built once per folder

Recipes name the task `dataset_name: trl_dpr/embedded-demo` and the base `model_name_or_path:
trl_dpr/embedded-pretrained-llama` (or `trl_dpr/embedded-tiny-llama`, random init); nothing is downloaded.
"""

# Re-exported for the recipes, the README and the experiments (importable, not advertised: no `__all__`).
from .base_model import EMBEDDED_MODEL as EMBEDDED_MODEL
from .base_model import EMBEDDED_PRETRAINED_MODEL as EMBEDDED_PRETRAINED_MODEL
from .base_model import build_embedded_base as build_embedded_base
from .base_model import resolve_embedded_base as resolve_embedded_base
from .pretraining import PretrainingSettings as PretrainingSettings
from .pretraining import build_pretrained_base as build_pretrained_base
from .pretraining import pretraining_corpus as pretraining_corpus
from .task import EMBEDDED_DATASET as EMBEDDED_DATASET
from .task import KINDS as KINDS
from .task import build_demo_dataset as build_demo_dataset
from .task import extract_answer as extract_answer
from .task import held_out_split as held_out_split
from .task import is_correct as is_correct
from .task import load_demonstrations as load_demonstrations
from .task import make_example as make_example
