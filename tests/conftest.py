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

from trl_dpr.embedded.tiny_lm import build_tokenizer  # noqa: E402

CORPUS = [
    "What is 12+7? 12+7=19. The answer is 19.",
    "Reverse the word cat: tac",
    "hello world, the cat sat on the mat",
    "Sort 3 1 2: 1 2 3",
]


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(CORPUS)


# ---- DPR builders shared by the trainer tests --------------------------------------------------------------------


def save_sft_output(path, tokenizer, sft_seed: int = 0, ref_seed: int = 1):
    """An SFT output folder as recipes/sft.py leaves it: π_SFT, its tokenizer, π_ref in dpr_reference/ and the manifest
    (tiny random Llamas: π_SFT seed `sft_seed`, π_ref seed `ref_seed`). Returns the folder."""
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
    from trl_dpr.reference_manifest import ReferenceManifest, write_manifest

    build_tiny_causal_lm(tokenizer, seed=sft_seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    build_tiny_causal_lm(tokenizer, seed=ref_seed).save_pretrained(path / "dpr_reference")
    tokenizer.save_pretrained(path / "dpr_reference")
    write_manifest(path, ReferenceManifest("dpr_reference", fraction=0.5, step=5, total_steps=10))
    return path


def demo_evaluation_yaml(path, **overrides):
    """A recipes/evaluate.py YAML for the embedded task with the exact judge, small enough for a test; returns its path."""
    import yaml

    values = {"output_dir": str(path.parent / "eval"), "baseline": "SFT=unused", "candidates": ["DPR=unused"],
              "benchmarks": ["demo"], "demo_num_prompts": 6, "max_new_tokens": 8, "generation_batch_size": 8,
              "generation_backend": "transformers", "dtype": "float32", "judge": "exact", "bootstrap_resamples": 200}
    values.update(overrides)
    path.write_text(yaml.safe_dump(values))
    return str(path)


def prompts_dataset(n: int = 16):
    """`n` conversational prompts in TRL's `prompt` column format."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(n)]})


def dpr_config(tmp_path, **overrides):
    """A DensePathConfig for a short CPU run writing to tmp_path/dpr; keyword arguments override any field."""
    from trl_dpr import DensePathConfig

    values = dict(
        output_dir=str(tmp_path / "dpr"),
        per_device_train_batch_size=4,
        max_steps=2,
        max_completion_length=6,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    values.update(overrides)
    return DensePathConfig(**values)


def dpr_trainer(
    tokenizer, tmp_path, architecture="llama", reward_kwargs=None, train_dataset=None, eval_dataset=None, **config
):
    """A DensePathTrainer on tiny models (π_SFT seed 0, π_ref seed 1), recording the inputs of every loss call.

    Returns `(trainer, used, sft, ref)`: `used` collects, per `_compute_loss` call, the batch tensors the loss saw.
    """
    from trl_dpr import CheckpointRewardModel, DensePathTrainer
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

    sft = build_tiny_causal_lm(tokenizer, architecture, seed=0)
    ref = build_tiny_causal_lm(tokenizer, architecture, seed=1)
    args = dpr_config(tmp_path, **config)
    reward_model = CheckpointRewardModel(
        sft, ref if args.use_baseline else None, use_baseline=args.use_baseline, eliminate_value=args.eliminate_value,
        **(reward_kwargs or {}),
    )
    trainer = DensePathTrainer(
        model=None, reward_model=reward_model, args=args, processing_class=tokenizer,
        train_dataset=prompts_dataset() if train_dataset is None else train_dataset, eval_dataset=eval_dataset,
    )
    used = []
    compute_loss = trainer._compute_loss

    def recording_compute_loss(model, inputs):
        used.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_compute_loss
    return trainer, used, sft, ref


@pytest.fixture
def make_config(tmp_path):
    """`make_config(**overrides)`: a DensePathConfig for a short CPU run in this test's tmp_path."""
    return lambda **overrides: dpr_config(tmp_path, **overrides)


@pytest.fixture
def make_trainer(tokenizer, tmp_path):
    """`make_trainer(**config)`: `(trainer, used, sft, ref)` on tiny models, see `dpr_trainer`."""
    return lambda **kwargs: dpr_trainer(tokenizer, tmp_path, **kwargs)
