"""The reward interface: any `DenseReward` plugs into the scorer, the trainer, recipes, the preview and TRL's own
GRPOTrainer. Rewards are checked against float64 forwards of each model (tests/reference.py), never the scorer itself."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import dpr_config, prompts_dataset, save_sft_output
from tests.reference import unpadded_logprobs
from trl_dpr import CheckpointRewardModel, DensePathTrainer, DenseReward, sequence_reward_func
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.rewards import CheckpointDifference, build_dense_reward

README = Path(__file__).resolve().parents[2] / "README.md"
USER_REWARDS = Path(__file__).resolve().parents[1] / "user_rewards"


def readme_reward_source() -> str:
    """The README's worked example: the Python block that defines `ClippedReward`."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(b for b in blocks if "class ClippedReward" in b)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The README's reward written to a user's own file, importable as `my_rewards` (as from their working folder)."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "my_rewards.py").write_text(readme_reward_source() + "\n" + (USER_REWARDS / "my_rewards.py").read_text())
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("my_rewards", None)
    yield __import__("my_rewards")
    sys.modules.pop("my_rewards", None)


def batch():
    prompt_ids = torch.tensor([[0, 5, 6], [7, 8, 9]])  # left-padded: row 0 has a pad first
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    completion_ids = torch.tensor([[10, 11, 12], [13, 14, 0]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def by_hand(model, row):
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch()
    prompt = prompt_ids[row][prompt_mask[row].bool()].tolist()
    completion = completion_ids[row][completion_mask[row].bool()].tolist()
    return torch.tensor(unpadded_logprobs(model, prompt, completion), dtype=torch.float64)


def test_the_readme_reward_is_a_dense_reward_and_clips_the_checkpoint_difference(tokenizer, user_module):
    sft, ref = build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    reward = user_module.ClippedReward(clip=0.05)
    assert isinstance(reward, DenseReward)
    scorer = CheckpointRewardModel(sft, ref, processing_class=tokenizer, reward=reward)
    out = scorer(*batch())
    for row in range(2):
        expected = (by_hand(sft, row) - by_hand(ref, row)).clamp(-0.05, 0.05)
        n = len(expected)
        torch.testing.assert_close(out.rewards[row, :n].double(), expected, atol=1e-5, rtol=0)
        assert (out.rewards[row, n:] == 0).all()
    assert (out.rewards.abs() <= 0.05 + 1e-7).all() and (out.rewards.abs() > 0.049).any()  # the clip is live


def test_a_third_checkpoint_is_scored_with_its_own_forward(tokenizer):
    sys.path.insert(0, str(USER_REWARDS))
    try:
        from my_rewards import ThirdCheckpointReward
    finally:
        sys.path.remove(str(USER_REWARDS))
    sft, ref, teacher = (build_tiny_causal_lm(tokenizer, seed=s) for s in (0, 1, 2))
    scorer = CheckpointRewardModel(sft, ref, reward=ThirdCheckpointReward(), models={"teacher": teacher})
    out = scorer(*batch(), temperature=0.5)
    for row in range(2):
        expected = by_hand(teacher, row) - by_hand(ref, row)
        torch.testing.assert_close(out.rewards[row, : len(expected)].double(), expected, atol=1e-5, rtol=0)
        # The KL reference is still π_SFT at the rollout temperature, whatever the reward reads.
        prompt_ids, prompt_mask, completion_ids, completion_mask = batch()
        kl_ref = unpadded_logprobs(
            sft,
            prompt_ids[row][prompt_mask[row].bool()].tolist(),
            completion_ids[row][completion_mask[row].bool()].tolist(),
            temperature=0.5,
        )
        torch.testing.assert_close(
            out.kl_reference_logps[row, : len(kl_ref)].double(),
            torch.tensor(kl_ref, dtype=torch.float64),
            atol=1e-5,
            rtol=0,
        )
    assert not any(p.requires_grad for p in teacher.parameters()) and not teacher.training


def test_a_reward_whose_models_are_missing_or_wrong_is_refused_with_what_to_do(tokenizer):
    sys.path.insert(0, str(USER_REWARDS))
    try:
        from my_rewards import ThirdCheckpointReward, returns_wrong_shape
    finally:
        sys.path.remove(str(USER_REWARDS))
    sft, ref = build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    with pytest.raises(ValueError, match=r"missing: \['teacher'\].*dense_reward_models"):
        CheckpointRewardModel(sft, ref, reward=ThirdCheckpointReward())
    with pytest.raises(TypeError, match="is not a DenseReward: it needs `model_names`"):
        CheckpointRewardModel(sft, ref, reward=lambda scored: scored.logps["sft"])
    with pytest.raises(ValueError, match=r"must return a \[B, T\] tensor like completion_ids \(2, 3\)"):
        CheckpointRewardModel(sft, None, reward=returns_wrong_shape())(*batch())


def test_recipe_keys_name_an_importable_reward_and_refuse_what_does_not_fit(tmp_path, user_module):
    args = dpr_config(tmp_path, dense_reward="my_rewards:ClippedReward", dense_reward_kwargs={"clip": 0.5})
    assert type(args.reward()).__name__ == "ClippedReward" and args.reward().clip == 0.5
    cases = {
        "dense_reward must be 'module:ClassName'": dict(dense_reward="my_rewards.ClippedReward"),
        "cannot import 'no_such_module'": dict(dense_reward="no_such_module:X"),
        "has no 'Nope'": dict(dense_reward="my_rewards:Nope"),
        "does not take dense_reward_kwargs": dict(
            dense_reward="my_rewards:ClippedReward", dense_reward_kwargs={"c": 1}
        ),
        "is not a DenseReward": dict(dense_reward="my_rewards:NotAReward"),
        "configure dense_reward, which is not set": dict(dense_reward_kwargs={"clip": 1.0}),
    }
    for message, values in cases.items():
        with pytest.raises((ValueError, TypeError), match=re.escape(message)):
            dpr_config(tmp_path, **values)


def test_the_trainer_trains_on_a_user_reward_from_a_recipe_key_and_from_python(tokenizer, tmp_path, user_module):
    sft_dir = save_sft_output(tmp_path / "sft", tokenizer)
    args = dpr_config(
        tmp_path, dense_reward="my_rewards:ClippedReward", dense_reward_kwargs={"clip": 0.01}, max_steps=1
    )
    trainer = DensePathTrainer(
        model=None, reward_model=str(sft_dir), args=args, processing_class=tokenizer, train_dataset=prompts_dataset(8)
    )
    assert type(trainer.reward_model.reward).__name__ == "ClippedReward"
    trainer.train()
    logged = trainer.state.log_history[0]
    # Σ_t r̂_t of a completion of ≤ 6 tokens, each clipped to ±0.01
    assert abs(logged["reward"]) <= 6 * 0.01 + 1e-6 and logged["dense_reward/token_mean"] != 0.0
    # From Python: a scorer built with the reward trains under a config that names no reward; a config naming
    # another reward is refused with what to do.
    scorer = CheckpointRewardModel.from_pretrained(str(sft_dir), reward=user_module.ClippedReward(0.01))
    trainer = DensePathTrainer(
        model=None,
        reward_model=scorer,
        args=dpr_config(tmp_path / "b", max_steps=1),
        processing_class=tokenizer,
        train_dataset=prompts_dataset(8),
    )
    trainer.train()
    assert abs(trainer.state.log_history[0]["reward"]) <= 6 * 0.01 + 1e-6
    with pytest.raises(ValueError, match=r"asks for the reward SFTLogProb .* scores ClippedReward"):
        DensePathTrainer(
            model=None,
            reward_model=scorer,
            args=dpr_config(tmp_path / "c", dense_reward="trl_dpr.rewards:SFTLogProb"),
            processing_class=tokenizer,
            train_dataset=prompts_dataset(8),
        )


def test_the_preview_scores_a_user_reward_variant(tokenizer, tmp_path, user_module):
    from trl_dpr.analysis.preview import PreviewConfig, run_preview

    sft_dir = save_sft_output(tmp_path / "sft", tokenizer)
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"What is {i}+1?", "completion": str(i + 1), "answer": str(i + 1)} for i in range(4)]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"),
        dataset_name=str(prompts),
        dataset_split="train",
        num_prompts=4,
        samples_per_prompt=4,
        min_ess=2.0,
        max_new_tokens=4,
        batch_size=16,
        kl_coefs=[1.0],
        variants={
            "DPR": {},
            "clipped": {"dense_reward": "my_rewards:ClippedReward", "dense_reward_kwargs": {"clip": 0.0}},
        },
        quality="exact",
        plot=False,
    )
    report = run_preview(config, str(sft_dir), {"dtype": "float32"})
    clipped = [p for p in report.points if p.variant == "clipped"]
    # clip 0: every reward is 0, so every π_λ is π_SFT (KL 0); DPR's own reward moves off it.
    assert clipped and all(abs(p.kl) < 1e-9 for p in clipped if p.lam > 0)
    assert any(p.kl > 0 for p in report.points if p.variant == "DPR" and p.lam == 1.0)


def test_the_checkpoint_reward_runs_as_a_reward_func_of_an_unmodified_grpo_trainer(tokenizer, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    sft_dir = save_sft_output(tmp_path / "sft", tokenizer)
    scorer = CheckpointRewardModel.from_pretrained(str(sft_dir))
    func = sequence_reward_func(scorer)
    # One call against float64 forwards: Σ_t (log π_SFT − log π_ref) of each completion.
    prompts = [[{"role": "user", "content": "What is 1+2?"}]]
    from trl_dpr.token_batches import render_prompts

    prompt_ids = render_prompts(tokenizer, prompts)[0]
    value = func(prompts=prompts, completions=["x"], completion_ids=[[10, 11]])[0]
    expected = sum(unpadded_logprobs(scorer.sft_model, prompt_ids, [10, 11])) - sum(
        unpadded_logprobs(scorer.ref_model, prompt_ids, [10, 11])
    )
    assert value == pytest.approx(expected, abs=1e-5)

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=2,
        max_completion_length=6,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=str(sft_dir),
        reward_funcs=[func],
        args=args,
        train_dataset=prompts_dataset(8),
        processing_class=tokenizer,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    rewards = [
        h["rewards/dense_path_sum/mean"] for h in trainer.state.log_history if "rewards/dense_path_sum/mean" in h
    ]
    assert len(rewards) == 2 and all(torch.isfinite(torch.tensor(rewards)))


def test_the_paper_reward_is_the_default_and_keeps_its_numbers(tokenizer):
    sft, ref = build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    default = CheckpointRewardModel(sft, ref)(*batch()).rewards
    explicit = CheckpointRewardModel(sft, ref, reward=CheckpointDifference())(*batch()).rewards
    assert torch.equal(default, explicit)
    assert type(build_dense_reward("trl_dpr.rewards:SFTLogProb")).__name__ == "SFTLogProb"


def test_rewards_compare_by_class_and_settings_not_by_class_name(tmp_path, tokenizer, user_module):
    from trl_dpr.rewards import SFTLogProb, WithSoftValue, describe_reward, same_reward

    assert same_reward(user_module.ClippedReward(clip=2.0), user_module.ClippedReward(clip=2.0))
    assert not same_reward(user_module.ClippedReward(clip=2.0), user_module.ClippedReward(clip=3.0))
    assert WithSoftValue(SFTLogProb()) == WithSoftValue(SFTLogProb()) != WithSoftValue(CheckpointDifference())
    assert describe_reward(user_module.ClippedReward(clip=2.0)) == "ClippedReward(clip=2.0)"
    # A scorer of clip=2 under a config asking for clip=3 is refused: the same class is not the same reward.
    sft_dir = save_sft_output(tmp_path / "sft", tokenizer)
    scorer = CheckpointRewardModel.from_pretrained(str(sft_dir), reward=user_module.ClippedReward(clip=2.0))
    with pytest.raises(ValueError, match=re.escape("asks for the reward ClippedReward(clip=3.0)")):
        DensePathTrainer(
            model=None,
            reward_model=scorer,
            processing_class=tokenizer,
            train_dataset=prompts_dataset(8),
            args=dpr_config(
                tmp_path / "c", dense_reward="my_rewards:ClippedReward", dense_reward_kwargs={"clip": 3.0}
            ),
        )


def test_the_papers_ablations_are_named_rewards_reached_from_the_dense_reward_key():
    from trl_dpr.rewards import SFTLogProb, WithSoftValue, reward_from_settings

    assert reward_from_settings({}) == CheckpointDifference()  # DPR
    assert reward_from_settings({"dense_reward": "trl_dpr.rewards:SFTLogProb"}) == SFTLogProb()  # wo/Baseline
    assert reward_from_settings({"dense_reward": "trl_dpr.rewards:WithSoftValue"}) == WithSoftValue(
        CheckpointDifference()
    )
    both = {
        "dense_reward": "trl_dpr.rewards:WithSoftValue",
        "dense_reward_kwargs": {"reward": "trl_dpr.rewards:SFTLogProb"},
    }
    assert reward_from_settings(both) == WithSoftValue(SFTLogProb())  # wo/Baseline and w/V
    # Each declares what it computes (the model card's line) on the class, not in an __init__.
    assert {type(r).label for r in (CheckpointDifference(), SFTLogProb())} == {
        CheckpointDifference.label,
        SFTLogProb.label,
    }
    assert WithSoftValue(SFTLogProb()).label.startswith(SFTLogProb.label)


def test_the_legacy_reward_keys_are_refused_with_what_to_write_instead(tmp_path):
    """use_baseline / eliminate_value left the config: a settings mapping, a preview variant or a recipe that still has
    one is refused with the dense_reward line that replaces it."""
    from trl_dpr import DensePathConfig
    from trl_dpr.analysis.preview import PreviewConfig
    from trl_dpr.rewards import reward_from_settings
    from trl_dpr.running.recipe_parser import RecipeParser

    with pytest.raises(ValueError, match=r"use_baseline: removed.*dense_reward: trl_dpr\.rewards:SFTLogProb"):
        reward_from_settings({"use_baseline": False})
    with pytest.raises(ValueError, match=r"eliminate_value: removed.*dense_reward: trl_dpr\.rewards:WithSoftValue"):
        PreviewConfig(output_dir=str(tmp_path), variants={"w/V": {"eliminate_value": False}})
    recipe = tmp_path / "dpr.yaml"
    recipe.write_text("use_baseline: false\n")
    with pytest.raises(ValueError, match=r"use_baseline \(renamed: use `dense_reward: trl_dpr\.rewards:SFTLogProb"):
        RecipeParser((DensePathConfig,)).parse_args_and_config(["--config", str(recipe)])
    with pytest.raises(TypeError, match="use_baseline"):
        DensePathConfig("runs/x", use_baseline=False, bf16=False)
    config = DensePathConfig(
        "runs/sr", dense_reward="trl_dpr.rewards:CheckpointDifference", reward_granularity="sentence", bf16=False
    )
    assert config.reward() == CheckpointDifference() and config.reward_granularity == "sentence"  # SR
