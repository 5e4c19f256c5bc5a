"""The DPR math on small hand-computed examples (each expected number is worked out by hand in the comment)."""

import math

import pytest
import torch

from trl_dpr.algorithm import (
    baseline_relative_rewards,
    dense_path_advantages,
    kl_penalized_rewards,
    sentence_rewards,
    soft_value_shaping,
    token_returns,
    whiten,
)


def test_token_returns_undiscounted_is_reverse_cumulative_sum():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # row 0: 1+2+3, 2+3, 3 ; row 1: 4+5, 5, padding
    assert torch.equal(token_returns(rewards, mask), torch.tensor([[6.0, 5.0, 3.0], [9.0, 5.0, 0.0]]))


def test_token_returns_discounted():
    rewards = torch.tensor([[1.0, 2.0, 4.0]])
    # G_2 = 4 ; G_1 = 2 + 0.5*4 = 4 ; G_0 = 1 + 0.5*4 = 3
    returns = token_returns(rewards, torch.ones(1, 3), gamma=0.5)
    assert torch.allclose(returns, torch.tensor([[3.0, 4.0, 4.0]]))


def test_token_returns_ignore_rewards_at_padding_and_are_zero_there():
    rewards = torch.tensor([[1.0, 2.0, 100.0, -7.0]])  # junk at padding must not leak into the returns
    returns = token_returns(rewards, torch.tensor([[1, 1, 0, 0]]), gamma=0.9)
    # G_1 = 2 ; G_0 = 1 + 0.9*2 = 2.8
    assert torch.allclose(returns, torch.tensor([[2.8, 2.0, 0.0, 0.0]]))


def test_token_returns_count_positions_relative_to_each_completion():
    # The same completion, left-padded by two: discounting must start at its own first token.
    right = token_returns(torch.tensor([[1.0, 2.0, 4.0, 0.0, 0.0]]), torch.tensor([[1, 1, 1, 0, 0]]), gamma=0.5)
    left = token_returns(torch.tensor([[9.0, 9.0, 1.0, 2.0, 4.0]]), torch.tensor([[0, 0, 1, 1, 1]]), gamma=0.5)
    assert torch.allclose(left[:, 2:], right[:, :3])
    assert torch.equal(left[:, :2], torch.zeros(1, 2))


def test_token_returns_skip_masked_holes_when_discounting():
    # A masked token (e.g. a tool response) inside the completion does not count as a step: G_0 = 1 + 0.5*4 = 3.
    returns = token_returns(torch.tensor([[1.0, 50.0, 4.0]]), torch.tensor([[1, 0, 1]]), gamma=0.5)
    assert torch.allclose(returns, torch.tensor([[3.0, 0.0, 4.0]]))


def test_sentence_rewards_move_all_mass_to_the_last_valid_token():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 9.0], [0.5, -1.5, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    expected = torch.tensor([[0.0, 0.0, 6.0, 0.0], [0.0, -1.0, 0.0, 0.0]])
    assert torch.equal(sentence_rewards(rewards, mask), expected)


def test_sentence_rewards_then_undiscounted_returns_give_every_token_the_whole_return():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert torch.equal(token_returns(sentence_rewards(rewards, mask), mask), torch.tensor([[6.0, 6.0, 6.0, 0.0]]))


def test_whiten_uses_global_mean_and_population_variance_over_valid_tokens():
    values = torch.tensor([[1.0, 2.0, 1000.0], [3.0, 6.0, -50.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    # valid: 1, 2, 3, 6 -> mean 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5
    std = math.sqrt(3.5 + 1e-8)
    expected = torch.tensor([[-2 / std, -1 / std, 0.0], [0.0, 3 / std, 0.0]])
    assert torch.allclose(whiten(values, mask), expected, atol=1e-6)


def test_whiten_matches_a_float64_reference_on_random_data():
    torch.manual_seed(0)
    values = torch.randn(5, 7) * 3 + 2
    mask = (torch.rand(5, 7) > 0.3).long()
    valid = values.double()[mask.bool()]
    mean = valid.sum() / valid.numel()
    var = ((valid - mean) ** 2).sum() / valid.numel()
    expected = torch.where(mask.bool(), (values.double() - mean) / torch.sqrt(var + 1e-8), 0.0)
    assert torch.allclose(whiten(values, mask).double(), expected, atol=1e-6)


def test_baseline_relative_rewards_subtract_the_reference_and_zero_padding():
    sft = torch.tensor([[-0.5, -1.0, -3.0]])
    ref = torch.tensor([[-2.0, -0.5, -9.0]])
    mask = torch.tensor([[1, 1, 0]])
    assert torch.equal(baseline_relative_rewards(sft, ref, mask), torch.tensor([[1.5, -0.5, 0.0]]))
    assert torch.equal(baseline_relative_rewards(sft, None, mask), torch.tensor([[-0.5, -1.0, 0.0]]))


def test_kl_penalty_is_k1_against_the_sft_model():
    rewards = torch.tensor([[1.0, 1.0]])
    policy = torch.tensor([[-1.0, -2.0]])
    sft = torch.tensor([[-2.0, -2.0]])
    # r - 0.1 * (log π_old - log π_SFT) = 1 - 0.1*1, 1 - 0.1*0
    out = kl_penalized_rewards(rewards, policy, sft, torch.ones(1, 2), kl_coef=0.1)
    assert torch.allclose(out, torch.tensor([[0.9, 1.0]]))
    with pytest.raises(ValueError, match="policy_logps"):
        kl_penalized_rewards(rewards, None, sft, torch.ones(1, 2), kl_coef=0.1)


def test_log_pi_old_without_one_log_prob_per_token_is_a_clear_error_not_a_shape_error():
    # What a `generate` or `rollout_func` that records no log-probs leaves: [B, 0] beside [B, T] completions.
    with pytest.raises(
        ValueError, match=r"needs log π_old of every sampled token, \[B, T\] = \[2, 3\].*returned \[2, 0\].*kl_coef=0"
    ):
        kl_penalized_rewards(torch.zeros(2, 3), torch.zeros(2, 0), torch.zeros(2, 3), torch.ones(2, 3), kl_coef=0.1)


def test_soft_value_shaping_terminal_and_truncated():
    values = torch.tensor([[5.0, 3.0, 2.0, 0.0], [4.0, 1.0, 7.0, 8.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    # row 0 ends with EOS: V after it is 0 -> [5-3, 3-2, 2-0, pad]
    # row 1 was cut at the length limit: V after the last token is the bootstrap 10 -> [4-1, 1-7, 7-8, 8-10]
    out = soft_value_shaping(values, mask, torch.tensor([True, False]), torch.tensor([99.0, 10.0]))
    assert torch.equal(out, torch.tensor([[2.0, 1.0, 2.0, 0.0], [3.0, -6.0, -1.0, -2.0]]))


def test_dense_path_advantages_follow_the_algorithm_step_by_step():
    dense = torch.tensor([[0.5, -0.2, 0.3], [1.0, 0.4, 0.0]])
    sft = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.2, 0.0]])
    policy = torch.tensor([[-0.5, -2.5, -0.5], [-0.3, -0.1, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    kl_coef, gamma = 0.2, 0.9
    out = dense_path_advantages(dense, sft, policy, mask, kl_coef=kl_coef, gamma=gamma)

    # Hand-written loop in float64: shaped reward, discounted return, then global whitening.
    returns = torch.zeros(2, 3, dtype=torch.float64)
    for b in range(2):
        running = 0.0
        for t in reversed(range(3)):
            if mask[b, t]:
                r = float(dense[b, t]) - kl_coef * (float(policy[b, t]) - float(sft[b, t]))
                running = r + gamma * running
                returns[b, t] = running
    valid = returns[mask.bool()]
    mean, var = valid.mean(), valid.var(unbiased=False)
    expected = torch.where(mask.bool(), (returns - mean) / torch.sqrt(var + 1e-8), 0.0)
    assert torch.allclose(out["returns"].double(), returns, atol=1e-6)
    assert torch.allclose(out["advantages"].double(), expected, atol=1e-5)
    assert torch.allclose(out["kl"], torch.where(mask.bool(), policy - sft, 0.0))


def test_dense_path_advantages_sentence_granularity_keeps_the_kl_dense():
    dense = torch.tensor([[1.0, 2.0]])
    sft = torch.tensor([[-1.0, -1.0]])
    policy = torch.tensor([[0.0, -1.0]])  # KL term 1 at token 0, 0 at token 1
    out = dense_path_advantages(
        dense, sft, policy, torch.ones(1, 2), kl_coef=0.5, reward_granularity="sentence", whiten_advantages=False
    )
    # rewards: [0 - 0.5*1, 3 - 0] -> returns [2.5, 3.0]
    assert torch.allclose(out["rewards"], torch.tensor([[-0.5, 3.0]]))
    assert torch.allclose(out["advantages"], torch.tensor([[2.5, 3.0]]))
