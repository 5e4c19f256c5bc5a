"""Shared fixtures: everything is built offline, in-process (no Hub access: HF_HUB_OFFLINE=1)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny models are dominated by per-op overhead: one thread is as fast, and two processes x two threads on a 2-core
# machine (a subprocess test, a background job) slow each other down many times over.
torch.set_num_threads(1)

from trl_dpr.tiny_lm import build_tokenizer  # noqa: E402

CORPUS = [
    "What is 12+7? 12+7=19. The answer is 19.",
    "Reverse the word cat: tac",
    "hello world, the cat sat on the mat",
    "Sort 3 1 2: 1 2 3",
]


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(CORPUS)
