"""DensePathTrainer runs on tiny models: the advantages the loss uses are DPR's, per token, and the policy learns."""

import pytest
import torch
from datasets import Dataset

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.tiny_lm import build_tiny_causal_lm

from .reference import dpr_advantages_by_hand, strip_padding, unpadded_logprobs


def prompts_dataset(n=16):
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(n)]})


def make_config(tmp_path, **overrides):
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


def make_trainer(tokenizer, tmp_path, architecture="llama", reward_kwargs=None, **config):
    sft = build_tiny_causal_lm(tokenizer, architecture, seed=0)
    ref = build_tiny_causal_lm(tokenizer, architecture, seed=1)
    args = make_config(tmp_path, **config)
    reward_model = CheckpointRewardModel(
        sft, ref if args.use_baseline else None, use_baseline=args.use_baseline, eliminate_value=args.eliminate_value,
        **(reward_kwargs or {}),
    )
    trainer = DensePathTrainer(
        model=None, reward_model=reward_model, args=args, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    used = []
    compute_loss = trainer._compute_loss

    def recording_compute_loss(model, inputs):
        used.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_compute_loss
    return trainer, used, sft, ref


def test_config_defaults_are_the_papers():
    args = DensePathConfig(output_dir="unused", report_to="none", bf16=False)
    assert args.num_generations == 1 and type(args.num_generations) is int
    assert (args.learning_rate, args.kl_coef, args.gamma, args.epsilon, args.temperature, args.beta) == (
        5e-7, 1e-5, 1.0, 0.2, 1.0, 0.0,
    )
    assert args.reward_granularity == "token" and args.use_baseline and args.eliminate_value and args.whiten_advantages
    assert args.warmup_steps == 0.03


@pytest.mark.parametrize(
    "overrides,match",
    [({"gamma": 0.0}, "gamma"), ({"gamma": 1.2}, "gamma"), ({"kl_coef": -1.0}, "kl_coef"),
     ({"reward_granularity": "episode"}, "reward_granularity")],
)
def test_config_rejects_bad_values(overrides, match):
    with pytest.raises(ValueError, match=match):
        DensePathConfig(output_dir="unused", report_to="none", bf16=False, **overrides)


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_training_uses_per_token_dpr_advantages_and_updates_the_policy(tokenizer, tmp_path, architecture):
    trainer, used, sft, ref = make_trainer(tokenizer, tmp_path, architecture, kl_coef=0.0)
    policy = trainer.model
    initial = {name: p.detach().clone() for name, p in policy.named_parameters()}
    assert all(torch.equal(initial[n], p) for n, p in sft.named_parameters())  # starts from π_SFT
    trainer.train()

    assert any(not torch.equal(initial[n], p) for n, p in policy.named_parameters())
    assert all(not p.requires_grad for p in sft.parameters())
    assert all(torch.equal(initial[n], p) for n, p in sft.named_parameters())  # π_SFT stays frozen

    first = used[0]  # the batch of step 1: scored before any update, by the models above
    advantages, mask = first["advantages"], first["completion_mask"]
    assert advantages.shape == first["completion_ids"].shape
    assert torch.all(advantages[mask == 0] == 0)

    rewards = []
    for b in range(mask.size(0)):
        prompt = strip_padding(first["prompt_ids"][b], first["prompt_mask"][b])
        completion = strip_padding(first["completion_ids"][b], mask[b])
        sft_lp, ref_lp = unpadded_logprobs(sft, prompt, completion), unpadded_logprobs(ref, prompt, completion)
        rewards.append([s - r for s, r in zip(sft_lp, ref_lp)])
    expected = dpr_advantages_by_hand(rewards)
    for b, row in enumerate(expected):
        assert advantages[b, : len(row)].tolist() == pytest.approx(row, abs=1e-4)


def test_kl_to_sft_is_zero_while_the_policy_still_equals_sft(tokenizer, tmp_path):
    trainer, used, _, _ = make_trainer(tokenizer, tmp_path, kl_coef=0.5, max_steps=1)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["kl_sft"] == pytest.approx(0.0, abs=1e-6)
    # GRPO's tied-group share is always 1 with one sample per prompt: not logged (it would read as "no signal")
    assert "frac_reward_zero_std" not in logged and "reward" in logged


def test_sentence_granularity_gives_every_token_of_a_completion_the_same_advantage(tokenizer, tmp_path):
    trainer, used, _, _ = make_trainer(tokenizer, tmp_path, reward_granularity="sentence", kl_coef=0.0)
    trainer.train()
    advantages, mask = used[0]["advantages"], used[0]["completion_mask"].bool()
    for row, valid in zip(advantages, mask):
        assert torch.allclose(row[valid], row[valid][0].expand(int(valid.sum())), atol=1e-6)


def test_without_baseline_the_reward_is_the_sft_log_likelihood(tokenizer, tmp_path):
    trainer, used, sft, _ = make_trainer(tokenizer, tmp_path, use_baseline=False, kl_coef=0.0, max_steps=1)
    assert trainer.reward_model.ref_model is None
    trainer.train()
    first = used[0]
    rewards = []
    for b in range(first["completion_mask"].size(0)):
        prompt = strip_padding(first["prompt_ids"][b], first["prompt_mask"][b])
        completion = strip_padding(first["completion_ids"][b], first["completion_mask"][b])
        rewards.append(unpadded_logprobs(sft, prompt, completion))
    for b, row in enumerate(dpr_advantages_by_hand(rewards)):
        assert first["advantages"][b, : len(row)].tolist() == pytest.approx(row, abs=1e-4)


def test_the_policy_cannot_be_the_frozen_sft_model(tokenizer, tmp_path):
    sft = build_tiny_causal_lm(tokenizer, seed=0)
    reward_model = CheckpointRewardModel(sft, build_tiny_causal_lm(tokenizer, seed=1))
    with pytest.raises(ValueError, match="same object"):
        DensePathTrainer(model=sft, reward_model=reward_model, args=make_config(tmp_path), train_dataset=prompts_dataset())


def test_reward_model_flags_must_match_the_config(tokenizer, tmp_path):
    reward_model = CheckpointRewardModel(build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1))
    with pytest.raises(ValueError, match="eliminate_value"):
        DensePathTrainer(
            reward_model=reward_model, args=make_config(tmp_path, eliminate_value=False), train_dataset=prompts_dataset()
        )


def test_model_card_has_the_dpr_tags_and_citation(tokenizer, tmp_path):
    trainer, _, _, _ = make_trainer(tokenizer, tmp_path, max_steps=1)
    trainer.create_model_card()  # what push_to_hub and every checkpoint save write
    card = (tmp_path / "dpr" / "README.md").read_text()
    for expected in ("dpr", "dense-path-reinforce", "trl", "2510.02493", "Beyond Imitation"):
        assert expected in card
