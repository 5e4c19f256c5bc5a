"""ReferenceCheckpointCallback: π_ref is the model after exactly ⌊α·N⌋ optimizer steps, written once, by one process."""

import json
import math

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers import TrainerCallback
from trl import SFTConfig, SFTTrainer

from trl_dpr import ReferenceCheckpointCallback
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.reference_manifest import MANIFEST_NAME


class SnapshotEveryStep(TrainerCallback):
    """Independent record of the weights after each optimizer step."""

    def __init__(self):
        self.weights = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.weights[state.global_step] = {k: v.detach().clone() for k, v in model.state_dict().items()}


def demonstrations(n=24):
    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": f"What is {i}+7?"}],
                "completion": [{"role": "assistant", "content": f"{i}+7={i + 7}"}],
            }
            for i in range(n)
        ]
    )


def run_sft(tokenizer, output_dir, fraction=0.5, **config):
    values = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        learning_rate=5e-3,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        logging_steps=100,
        gradient_checkpointing=False,
        seed=0,
        max_length=64,
    )
    values.update(config)
    snapshots = SnapshotEveryStep()
    trainer = SFTTrainer(
        model=build_tiny_causal_lm(tokenizer, seed=0),
        args=SFTConfig(**values),
        train_dataset=demonstrations(),
        processing_class=tokenizer,
        callbacks=[ReferenceCheckpointCallback(fraction), snapshots],
    )
    trainer.train()
    return trainer, snapshots


def assert_reference_is_step(output_dir, snapshots, step):
    saved = load_file(str(output_dir / "dpr_reference" / "model.safetensors"))
    expected = snapshots.weights[step]
    assert set(saved) <= set(expected)
    for name, tensor in saved.items():
        assert torch.equal(tensor, expected[name]), name
    # and not the weights of the neighbouring steps
    for other in (step - 1, step + 1):
        if other in snapshots.weights:
            assert any(not torch.equal(saved[n], snapshots.weights[other][n]) for n in saved)


@pytest.mark.parametrize(
    "config,fraction",
    [
        ({"max_steps": 7, "gradient_accumulation_steps": 2}, 0.5),  # ⌊0.5·7⌋ = 3, accumulation over 2 micro-batches
        ({"num_train_epochs": 2, "gradient_accumulation_steps": 3}, 0.5),  # 24 rows / (2·3) = 4 steps/epoch → N = 8
        ({"max_steps": 10}, 0.3),
    ],
)
def test_reference_is_the_model_after_floor_alpha_n_steps(tokenizer, tmp_path, config, fraction):
    trainer, snapshots = run_sft(tokenizer, tmp_path, fraction=fraction, **config)
    total = trainer.state.max_steps
    step = math.floor(fraction * total)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert (manifest["step"], manifest["total_steps"], manifest["fraction"]) == (step, total, fraction)
    assert manifest["is_adapter"] is False
    assert_reference_is_step(tmp_path, snapshots, step)
    assert (tmp_path / "dpr_reference" / "tokenizer.json").is_file()


def test_two_epochs_counts_optimizer_steps_not_epochs(tokenizer, tmp_path):
    trainer, _ = run_sft(tokenizer, tmp_path, num_train_epochs=2, gradient_accumulation_steps=3)
    assert trainer.state.max_steps == 8
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["step"] == 4


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_fraction_outside_the_open_unit_interval_is_rejected(fraction):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        ReferenceCheckpointCallback(fraction)


def test_a_fresh_run_replaces_a_reference_left_by_an_earlier_run(tokenizer, tmp_path):
    """An SFT killed after π_ref was saved, then run again from scratch: the new run's π_ref is its own.
    (A resumed run keeps its π_ref: tests/running/test_checkpoint_safety.py kills and resumes real runs.)"""
    run_sft(tokenizer, tmp_path, max_steps=4)
    weights = tmp_path / "dpr_reference" / "model.safetensors"
    first_write = weights.stat().st_mtime_ns
    run_sft(tokenizer, tmp_path, max_steps=4)
    assert weights.stat().st_mtime_ns != first_write


def test_reference_of_a_peft_run_is_the_adapter(tokenizer, tmp_path):
    from peft import LoraConfig

    trainer = SFTTrainer(
        model=build_tiny_causal_lm(tokenizer, seed=0),
        args=SFTConfig(
            output_dir=str(tmp_path),
            max_steps=4,
            per_device_train_batch_size=2,
            report_to="none",
            bf16=False,
            use_cpu=True,
            save_strategy="no",
            gradient_checkpointing=False,
            max_length=64,
        ),
        train_dataset=demonstrations(),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        callbacks=[ReferenceCheckpointCallback(0.5)],
    )
    trainer.train()
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["is_adapter"] is True and manifest["step"] == 2
    assert (tmp_path / "dpr_reference" / "adapter_config.json").is_file()
    assert not (tmp_path / "dpr_reference" / "model.safetensors").exists()
