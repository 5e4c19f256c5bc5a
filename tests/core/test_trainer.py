"""DensePathTrainer runs on tiny models: the advantages the loss uses are DPR's, per token, and the policy learns."""

import pytest
import torch

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

from ..conftest import prompts_dataset
from ..reference import dpr_advantages_by_hand, strip_padding, unpadded_logprobs


def test_config_defaults_are_the_papers():
    args = DensePathConfig(output_dir="unused", report_to="none", bf16=False)
    assert args.num_generations == 1 and type(args.num_generations) is int
    assert (args.learning_rate, args.kl_coef, args.gamma, args.epsilon, args.temperature, args.beta) == (
        5e-7,
        1e-5,
        1.0,
        0.2,
        1.0,
        0.0,
    )
    from trl_dpr.rewards import CheckpointDifference

    assert args.reward_granularity == "token" and args.dense_reward is None and args.whiten_advantages
    assert args.reward() == CheckpointDifference()
    assert args.warmup_steps == 0.03


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"gamma": 0.0}, "gamma"),
        ({"gamma": 1.2}, "gamma"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"reward_granularity": "episode"}, "reward_granularity"),
    ],
)
def test_config_rejects_bad_values(overrides, match):
    with pytest.raises(ValueError, match=match):
        DensePathConfig(output_dir="unused", report_to="none", bf16=False, **overrides)


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_training_uses_per_token_dpr_advantages_and_updates_the_policy(make_trainer, architecture):
    trainer, used, sft, ref = make_trainer(architecture=architecture, kl_coef=0.0)
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


def test_kl_to_sft_is_zero_while_the_policy_still_equals_sft(make_trainer):
    trainer, used, _, _ = make_trainer(kl_coef=0.5, max_steps=1)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["kl_sft/per_token"] == pytest.approx(0.0, abs=1e-6)
    # GRPO's tied-group share is always 1 with one sample per prompt: not logged (it would read as "no signal")
    assert "frac_reward_zero_std" not in logged and "reward" in logged


def test_sentence_granularity_gives_every_token_of_a_completion_the_same_advantage(make_trainer):
    trainer, used, _, _ = make_trainer(reward_granularity="sentence", kl_coef=0.0)
    trainer.train()
    advantages, mask = used[0]["advantages"], used[0]["completion_mask"].bool()
    for row, valid in zip(advantages, mask):
        assert torch.allclose(row[valid], row[valid][0].expand(int(valid.sum())), atol=1e-6)


def test_without_baseline_the_reward_is_the_sft_log_likelihood(make_trainer):
    trainer, used, sft, _ = make_trainer(dense_reward="trl_dpr.rewards:SFTLogProb", kl_coef=0.0, max_steps=1)
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


def test_the_policy_cannot_be_the_frozen_sft_model(tokenizer, make_config):
    sft = build_tiny_causal_lm(tokenizer, seed=0)
    reward_model = CheckpointRewardModel(sft, build_tiny_causal_lm(tokenizer, seed=1))
    with pytest.raises(ValueError, match="same object"):
        DensePathTrainer(model=sft, reward_model=reward_model, args=make_config(), train_dataset=prompts_dataset())


def test_reward_model_flags_must_match_the_config(tokenizer, make_config):
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    )
    with pytest.raises(ValueError, match=r"asks for the reward WithSoftValue.*scores CheckpointDifference"):
        DensePathTrainer(
            reward_model=reward_model,
            args=make_config(dense_reward="trl_dpr.rewards:WithSoftValue"),
            train_dataset=prompts_dataset(),
        )


def test_model_card_has_the_dpr_tags_citation_and_hyperparameters(make_trainer, tmp_path):
    trainer, _, _, _ = make_trainer(max_steps=1, kl_coef=0.25)
    trainer.create_model_card()  # what push_to_hub and every checkpoint save write
    card = (tmp_path / "dpr" / "README.md").read_text()
    for expected in ("dpr", "dense-path-reinforce", "trl", "2510.02493", "Beyond Imitation", "| `kl_coef` | 0.25 |"):
        assert expected in card


# ---- what GRPO users set and DPR replaces: refused, not ignored ---------------------------------------------------


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"scale_rewards": "batch"}, "scale_rewards: 'batch' is not used: DPR whitens"),
        (
            {"multi_objective_aggregation": "normalize_then_sum"},
            "multi_objective_aggregation: 'normalize_then_sum' is not used",
        ),
        ({"beta": 0.04, "kl_coef": 0.1}, "stack two KL penalties"),
        ({"num_generations": 0}, "num_generations must be >= 1"),
        ({"max_completion_length": 0}, "max_completion_length must be a positive"),
    ],
)
def test_settings_dpr_would_ignore_or_divide_by_are_refused_with_the_reason(overrides, match):
    with pytest.raises(ValueError, match=match):
        DensePathConfig(output_dir="unused", report_to="none", bf16=False, **overrides)


def test_scale_rewards_true_is_accepted_as_grpo_reads_it_its_default_group(tmp_path):
    from trl_dpr.running.cli import _check_before_importing

    assert (
        DensePathConfig(output_dir="unused", report_to="none", bf16=False, scale_rewards=True).scale_rewards == "group"
    )
    recipe = tmp_path / "dpr.yaml"
    recipe.write_text("scale_rewards: true\nmodel_name_or_path: runs/sft\n")
    _check_before_importing("dpr", ["--config", str(recipe)])  # the recipes' check, before anything is launched


def test_grpo_kl_in_the_loss_is_allowed_next_to_dpr_kl_only_when_asked():
    args = DensePathConfig(
        output_dir="unused", report_to="none", bf16=False, beta=0.04, kl_coef=0.1, allow_kl_in_loss=True
    )
    assert (args.beta, args.kl_coef) == (0.04, 0.1)
    assert DensePathConfig(output_dir="unused", report_to="none", bf16=False, beta=0.04, kl_coef=0.0).beta == 0.04


# ---- the KL term: log π_old and log π_SFT on the same footing ------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_kl_to_sft_is_zero_at_any_rollout_temperature_while_the_policy_equals_sft(make_trainer, temperature):
    # TRL's log π_old is taken at the rollout temperature (logits / T); log π_SFT must be too, or a policy equal to
    # π_SFT shows a KL (−0.034 at T = 0.5 before the fix) and gets a spurious per-token penalty.
    trainer, used, _, _ = make_trainer(kl_coef=0.5, max_steps=1, temperature=temperature, learning_rate=0.0)
    trainer.train()
    assert trainer.state.log_history[0]["kl_sft/per_token"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_pi_old_from_generation_equals_a_separate_forward(make_trainer, temperature):
    # The transformers generation path records log π_T of each sampled token while sampling (no extra forward);
    # here it is compared with an unpadded float64 forward of the policy on the same tokens.
    trainer, used, sft, _ = make_trainer(kl_coef=0.5, max_steps=1, temperature=temperature, learning_rate=0.0)
    trainer.train()
    batch = used[0]
    assert "sampling_per_token_logps" in batch and "old_per_token_logps" not in batch  # on-policy: from generation
    for b in range(batch["completion_ids"].size(0)):
        prompt = strip_padding(batch["prompt_ids"][b], batch["prompt_mask"][b])
        completion = strip_padding(batch["completion_ids"][b], batch["completion_mask"][b])
        expected = unpadded_logprobs(sft, prompt, completion, temperature=temperature)  # policy == π_SFT at step 0
        recorded = batch["sampling_per_token_logps"][b, : len(completion)].tolist()
        assert recorded == pytest.approx(expected, abs=1e-5)


def assert_log_pi_old_is_the_policys(batch, policy, temperature=1.0):
    """The log π_old the batch carries equals an unpadded float64 forward of `policy` on each row's own tokens."""
    for b in range(batch["completion_ids"].size(0)):
        prompt = strip_padding(batch["prompt_ids"][b], batch["prompt_mask"][b])
        completion = strip_padding(batch["completion_ids"][b], batch["completion_mask"][b])
        expected = unpadded_logprobs(policy, prompt, completion, temperature=temperature)
        assert batch["sampling_per_token_logps"][b, : len(completion)].tolist() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    ("generation_kwargs", "batch_size"),
    [({"num_beams": 2}, 4), ({"prompt_lookup_num_tokens": 2}, 1)],
    ids=["beams", "prompt-lookup"],
)  # transformers' prompt lookup takes one prompt at a time
def test_log_pi_old_is_each_returned_sequences_own_under_beam_search_and_prompt_lookup(
    make_trainer, generation_kwargs, batch_size
):
    # Beams decode B x beams rows, reordered between steps; prompt lookup verifies several candidate tokens per forward.
    # Neither is one sampled token per returned row per forward, which the recorder reads: log π_old comes from a
    # forward on the returned sequences instead.
    trainer, used, sft, _ = make_trainer(
        kl_coef=0.5,
        max_steps=1,
        learning_rate=0.0,
        temperature=0.7,
        generation_kwargs=generation_kwargs,
        per_device_train_batch_size=batch_size,
    )
    trainer.train()
    assert_log_pi_old_is_the_policys(used[0], sft, temperature=0.7)  # policy == π_SFT at step 0


def test_a_generate_that_never_calls_the_models_forward_gets_log_pi_old_from_a_forward(make_trainer, monkeypatch):
    trainer, used, sft, _ = make_trainer(kl_coef=0.5, max_steps=1, learning_rate=0.0)
    completion = torch.tensor([5, 6, 7, 8])

    def canned_generate(input_ids, **kwargs):  # a generate of the user's that samples elsewhere
        return torch.cat([input_ids, completion.expand(input_ids.size(0), -1)], dim=1)

    monkeypatch.setattr(trainer.model, "generate", canned_generate)
    trainer.train()
    assert used[0]["completion_ids"][:, :4].eq(completion).all()
    assert_log_pi_old_is_the_policys(used[0], sft)


def test_the_kl_to_sft_is_logged_with_kl_coef_0_and_leaves_the_advantages_alone(make_trainer):
    """kl_coef 0 puts no KL in the reward, yet kl_sft/per_token and kl_sft/per_response are logged (docs/algorithm.md):
    the float64 log π_θ − log π_SFT of the sampled rows, while the advantages are the KL-free REINFORCE++ loop's."""
    trainer, used, sft, ref = make_trainer(kl_coef=0.0, max_steps=1, learning_rate=0.0)
    with torch.no_grad():  # make the policy differ from π_SFT so the KL is not zero
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    trainer.train()
    batch = used[0]
    rewards, diffs = [], []
    for b in range(batch["completion_ids"].size(0)):
        prompt = strip_padding(batch["prompt_ids"][b], batch["prompt_mask"][b])
        completion = strip_padding(batch["completion_ids"][b], batch["completion_mask"][b])
        sft_lp, ref_lp = unpadded_logprobs(sft, prompt, completion), unpadded_logprobs(ref, prompt, completion)
        rewards.append([s - r for s, r in zip(sft_lp, ref_lp)])
        diffs.append([p - s for p, s in zip(unpadded_logprobs(trainer.model, prompt, completion), sft_lp)])
    for b, row in enumerate(dpr_advantages_by_hand(rewards, kl_coef=0.0)):
        assert batch["advantages"][b, : len(row)].tolist() == pytest.approx(row, abs=1e-4)
    logged = trainer.state.log_history[0]
    assert abs(logged["kl_sft/per_token"]) > 1e-4
    assert logged["kl_sft/per_token"] == pytest.approx(sum(map(sum, diffs)) / sum(map(len, diffs)), abs=1e-4)
    assert logged["kl_sft/per_response"] == pytest.approx(sum(map(sum, diffs)) / len(diffs), abs=1e-3)


def test_the_kl_term_uses_the_generation_log_probs_of_the_policy(make_trainer):
    # One step at lr 0 with kl_coef > 0: the advantages equal the hand-written REINFORCE++ loop fed with the recorded
    # log π_old and a float64 log π_SFT — the KL term is wired to the right tensors with the right sign.
    trainer, used, sft, ref = make_trainer(kl_coef=2.0, max_steps=1, learning_rate=0.0)
    with torch.no_grad():  # make the policy differ from π_SFT so the KL term is not zero
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    trainer.train()
    batch = used[0]
    rewards, policy_rows, sft_rows = [], [], []
    for b in range(batch["completion_ids"].size(0)):
        prompt = strip_padding(batch["prompt_ids"][b], batch["prompt_mask"][b])
        completion = strip_padding(batch["completion_ids"][b], batch["completion_mask"][b])
        sft_lp, ref_lp = unpadded_logprobs(sft, prompt, completion), unpadded_logprobs(ref, prompt, completion)
        rewards.append([s - r for s, r in zip(sft_lp, ref_lp)])
        sft_rows.append(sft_lp)
        policy_rows.append(unpadded_logprobs(trainer.model, prompt, completion))
    expected = dpr_advantages_by_hand(rewards, kl_coef=2.0, policy_rows=policy_rows, sft_rows=sft_rows)
    for b, row in enumerate(expected):
        assert batch["advantages"][b, : len(row)].tolist() == pytest.approx(row, abs=1e-4)
    assert abs(trainer.state.log_history[0]["kl_sft/per_token"]) > 1e-4  # the policy really differs: the term is live
    # The two units of the logged KL, from the same float64 rows: the mean over tokens, and the per-response sum
    # averaged over responses (an estimate of KL(π_θ ‖ π_SFT) in nats per response, the preview's unit).
    diffs = [[p - s for p, s in zip(pr, sr)] for pr, sr in zip(policy_rows, sft_rows)]
    per_token = sum(sum(d) for d in diffs) / sum(len(d) for d in diffs)
    per_response = sum(sum(d) for d in diffs) / len(diffs)
    logged = trainer.state.log_history[0]
    assert logged["kl_sft/per_token"] == pytest.approx(per_token, abs=1e-4)
    assert logged["kl_sft/per_response"] == pytest.approx(per_response, abs=1e-3)
    assert abs(per_response) > 1.5 * abs(per_token)  # the units differ: completions are several tokens long


# ---- logs and evaluation -----------------------------------------------------------------------------------------


def test_the_completions_table_holds_the_ids_rewards_and_advantages_the_loss_used(make_trainer):
    trainer, used, sft, ref = make_trainer(kl_coef=0.0, max_steps=1, log_completions=True, learning_rate=0.0)
    trainer.train()
    table = trainer._logs["extra"]
    batch = used[0]
    by_ids = {}
    for b in range(batch["completion_ids"].size(0)):
        completion = strip_padding(batch["completion_ids"][b], batch["completion_mask"][b])
        by_ids[tuple(completion)] = (b, strip_padding(batch["prompt_ids"][b], batch["prompt_mask"][b]))
    assert len(table["completion_token_ids"]) == len(by_ids) == 4
    for ids, rewards, advantages, total in zip(
        table["completion_token_ids"], table["token_rewards"], table["token_advantages"], table["sequence_reward"]
    ):
        b, prompt = by_ids[tuple(ids)]  # the loss batch is shuffled: match rows by their completion
        expected = [s - r for s, r in zip(unpadded_logprobs(sft, prompt, ids), unpadded_logprobs(ref, prompt, ids))]
        assert rewards == pytest.approx(expected, abs=1e-3)
        assert total == pytest.approx(sum(expected), abs=1e-3)
        assert advantages == pytest.approx(batch["advantages"][b, : len(ids)].tolist(), abs=1e-3)
    logged = trainer.state.log_history[0]
    assert logged["reward"] == pytest.approx(sum(table["sequence_reward"]) / 4, abs=1e-3)


def test_evaluate_works_with_an_eval_batch_larger_than_the_train_batch(tokenizer, tmp_path):
    from ..conftest import dpr_trainer

    trainer, _, _, _ = dpr_trainer(
        tokenizer,
        tmp_path,
        kl_coef=0.1,
        max_steps=2,
        per_device_eval_batch_size=12,
        eval_strategy="steps",
        eval_steps=1,
        log_completions=True,
        eval_dataset=prompts_dataset(24),  # 2 eval batches of 12, each larger than the table's 4 rows
    )
    trainer.train()  # evaluates after each step
    metrics = trainer.evaluate()
    for key in ("eval_reward", "eval_kl_sft/per_token", "eval_dense_reward/token_mean", "eval_advantages/std"):
        assert key in metrics and metrics[key] is not None and torch.isfinite(torch.tensor(metrics[key]))
    assert sum("eval_reward" in row for row in trainer.state.log_history) == 3  # 2 during training + this one
    columns = [trainer._logs["prompt"], *trainer._logs["extra"].values()]
    assert len({len(column) for column in columns}) == 1  # every table column still holds the same rows


def test_the_step_profile_says_where_each_step_went_and_sums_to_the_step_time(make_trainer):
    """`timing/generation`, `timing/scoring`, `timing/update` in the logs: generation slowed by 1 s and scoring by
    0.5 s land in their own columns (not in another), and the three add up to TRL's `step_time`."""
    import time

    trainer, _, _, _ = make_trainer(kl_coef=0.0)
    generate, score = trainer._generate_single_turn, trainer.reward_model.forward

    def slow(function, seconds):
        def wrapper(*args, **kwargs):
            time.sleep(seconds)
            return function(*args, **kwargs)

        return wrapper

    trainer._generate_single_turn, trainer.reward_model.forward = slow(generate, 1.0), slow(score, 0.5)
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "step_time" in entry]
    assert len(steps) == 2
    for entry in steps:
        generation, scoring, update = entry["timing/generation"], entry["timing/scoring"], entry["timing/update"]
        assert 1.0 <= generation < 1.5 and 0.5 <= scoring < 1.0 and 0.0 < update < 0.5
        assert generation + scoring + update == pytest.approx(entry["step_time"], rel=1e-6)


def test_fast_generation_samples_with_a_static_cache_and_keeps_log_pi_old_exact(make_trainer):
    """`fast_generation`: transformers' static KV cache during the rollout (a padded, fixed-size cache: the mask and
    positions differ from the dynamic cache's), and the log π_old recorded while sampling still equals a float64
    forward of the policy on each row's own tokens."""
    from transformers import StaticCache

    trainer, used, sft, _ = make_trainer(kl_coef=0.5, max_steps=1, learning_rate=0.0, fast_generation=True)
    assert trainer.args.generation_kwargs["cache_implementation"] == "static"
    caches = []
    forward = trainer.model.forward

    def recording_forward(*args, **kwargs):
        caches.append(type(kwargs.get("cache", kwargs.get("past_key_values"))))  # its name in transformers 5 / 4
        return forward(*args, **kwargs)

    trainer.model.forward = recording_forward
    trainer.train()
    assert StaticCache in caches
    assert "sampling_per_token_logps" in used[0]
    assert_log_pi_old_is_the_policys(used[0], sft)


def test_overwrite_output_dir_from_python_warns_that_the_trainer_does_not_clear_the_folder(
    tokenizer, tmp_path, caplog
):
    """DensePathTrainer from Python never claims nor clears output_dir (transformers 5 dropped the field): the help
    said "its checkpoints and model are replaced". It now says so at init; the recipes' trainer, which does, does not."""
    from trl_dpr.running.trainers import DPRRunTrainer

    from ..conftest import dpr_config, save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    said = "overwrite_output_dir=True does nothing for DensePathTrainer from Python"
    for trainer_class, warned in ((DensePathTrainer, True), (DPRRunTrainer, False)):
        caplog.clear()
        with caplog.at_level("WARNING"):
            trainer_class(
                reward_model=str(sft),
                args=dpr_config(tmp_path, overwrite_output_dir=True, use_cpu=True),
                train_dataset=prompts_dataset(4),
            )
        assert any(said in record.getMessage() for record in caplog.records) is warned, trainer_class
    assert (
        "DensePathTrainer from Python neither refuses nor clears"
        in DensePathConfig.__dataclass_fields__["overwrite_output_dir"].metadata["help"]
    )
