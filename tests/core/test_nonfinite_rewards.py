"""A batch with non-finite rewards is skipped: no gradient, no optimizer update (momentum included), and counted."""

import torch
from transformers import TrainerCallback

from trl_dpr import CheckpointRewardModel, DensePathTrainer
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.reward_model import TokenRewardOutput

from ..conftest import dpr_config as make_config
from ..conftest import prompts_dataset


class PoisonedAt(CheckpointRewardModel):
    """Returns NaN rewards on the given scoring calls (1-based), like an overflowing log-prob would."""

    def __init__(self, *args, poisoned_calls=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.poisoned_calls, self.calls = set(poisoned_calls), 0

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        self.calls += 1
        if self.calls in self.poisoned_calls:
            return TokenRewardOutput(torch.full_like(out.rewards, float("nan")), out.sft_logps, out.ref_logps)
        return out


class WeightsAfterEachStep(TrainerCallback):
    def __init__(self):
        self.weights = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.weights.append({n: p.detach().clone() for n, p in model.named_parameters()})


def test_a_nan_batch_never_reaches_the_weights(tokenizer, tmp_path):
    reward_model = PoisonedAt(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1), poisoned_calls={2}
    )
    snapshots = WeightsAfterEachStep()
    # Adam with momentum: a zero gradient alone would still move the weights at step 2.
    trainer = DensePathTrainer(
        reward_model=reward_model,
        processing_class=tokenizer,
        train_dataset=prompts_dataset(),
        args=make_config(tmp_path, max_steps=3, learning_rate=1e-2, kl_coef=0.0),
        callbacks=[snapshots],
    )
    trainer.train()
    step1, step2, step3 = snapshots.weights
    assert all(torch.equal(step1[n], step2[n]) for n in step1)  # the poisoned step changed nothing
    assert any(not torch.equal(step2[n], step3[n]) for n in step2)  # training goes on afterwards
    assert trainer.skipped_nonfinite_batches == 1
    logged = [h["skipped_nonfinite_batches"] for h in trainer.state.log_history if "skipped_nonfinite_batches" in h]
    assert logged == [0.0, 1.0, 1.0]
