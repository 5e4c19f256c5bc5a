"""The Dense-Path REINFORCE math, in the order the data flows.

    token log-probs ─► dense reward r̂_t ─► (SR: move to EOS) ─► + outcome rewards at EOS ─► KL to π_SFT ─► returns G_t
                    ─► whitened advantages

Pure functions on `[B, T]` tensors laid out like TRL's completions (right-padded, `mask` = 1 on real tokens). Equation
numbers: Li et al., 2025, arXiv:2510.02493.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def baseline_relative_rewards(
    sft_logps: torch.Tensor, ref_logps: torch.Tensor | None, mask: torch.Tensor
) -> torch.Tensor:
    r"""Dense token reward of Eq. (5): r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t).

    `ref_logps=None` is the "wo/Baseline" ablation, r̂_t = log π_SFT(a_t|s_t). Float32, exactly 0 at padding.

    Example:
        >>> import torch
        >>> baseline_relative_rewards(torch.tensor([[-0.1, -2.0]]), torch.tensor([[-1.1, -1.0]]), torch.tensor([[1, 0]]))
        tensor([[1., 0.]])
    """
    rewards = sft_logps.float() if ref_logps is None else sft_logps.float() - ref_logps.float()
    return torch.where(mask.bool(), rewards, torch.zeros_like(rewards))


def soft_value_shaping(
    state_values: torch.Tensor,
    mask: torch.Tensor,
    is_terminal: torch.Tensor,
    final_next_values: torch.Tensor,
) -> torch.Tensor:
    r"""The potential term the paper eliminates, V(s_t) − V(s_{t+1}) ("w/V" ablation, Table 2).

    Eq. (4): log π_SFT(a_t|s_t) = r(s_t, a_t) + V(s_{t+1}) − V(s_t), V(s) = logsumexp of the SFT logits at s. After
    the last token V = 0 if the completion ended with EOS (`is_terminal`, `[B]`), else `final_next_values` (`[B]`).

    Example:
        >>> import torch
        >>> v = torch.tensor([[3.0, 2.0, 1.0]]); m = torch.ones(1, 3)
        >>> soft_value_shaping(v, m, torch.tensor([True]), torch.tensor([9.0]))  # V after EOS is 0
        tensor([[1., 1., 1.]])
        >>> soft_value_shaping(v, m, torch.tensor([False]), torch.tensor([9.0]))  # truncated: bootstrap V = 9
        tensor([[ 1.,  1., -8.]])
    """
    mask = mask.bool()
    state_values = state_values.float()
    # V(s_{t+1}) is V of the next token's state; the last real token gets the terminal/bootstrap value instead.
    next_values = torch.zeros_like(state_values)
    next_values[:, :-1] = state_values[:, 1:]
    last = mask.long().sum(dim=1).clamp(min=1) - 1
    last_next_value = torch.where(is_terminal.bool(), torch.zeros_like(final_next_values), final_next_values)
    next_values.scatter_(1, last.unsqueeze(1), last_next_value.float().unsqueeze(1))
    shaping = state_values - next_values
    return torch.where(mask, shaping, torch.zeros_like(shaping))


def sentence_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""Sparse "SR" baseline of the paper: the whole return Σ_t r̂_t delivered at the last token (EOS), 0 elsewhere.

    r^SR_t = 1[t = T_i − 1] · Σ_k r̂_k

    Example:
        >>> import torch
        >>> sentence_rewards(torch.tensor([[1.0, 2.0, 3.0, 0.0]]), torch.tensor([[1, 1, 1, 0]]))
        tensor([[0., 0., 6., 0.]])
    """
    mask = mask.bool()
    rewards = torch.where(mask, rewards.float(), torch.zeros_like(rewards, dtype=torch.float32))
    total = rewards.sum(dim=1, keepdim=True)
    last = mask.long().sum(dim=1, keepdim=True).clamp(min=1) - 1
    sparse = torch.zeros_like(rewards).scatter_(1, last, total)
    # A completion with no real token (all padding) keeps no reward at all.
    return torch.where(mask, sparse, torch.zeros_like(sparse))


def add_outcome_rewards(
    rewards: torch.Tensor, outcome_rewards: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    r"""Scalar outcome rewards R_j (TRL's `reward_funcs`: a verifier, a length penalty) added at each completion's last
    valid token, weighted by w_j (default 1), on top of the token rewards (PRIME: verifier + implicit PRM r̂):

        r_t ← r_t + 1[t = T_i − 1] · Σ_j w_j R_j(x_i, y_i)    (`outcome_rewards` `[B, K]`; a NaN R_j adds nothing)

    Example:
        >>> import torch
        >>> m = torch.tensor([[1, 1, 0]])
        >>> r = add_outcome_rewards(torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[1.0, -0.5]]), m, torch.tensor([2.0, 1.0]))
        >>> r  # 2 + (2·1 − 0.5) at the last real token
        tensor([[1.0000, 3.5000, 0.0000]])
        >>> token_returns(r, m)
        tensor([[4.5000, 3.5000, 0.0000]])
    """
    mask = mask.bool()
    outcome_rewards = outcome_rewards.float()
    weights = torch.ones(outcome_rewards.size(1)) if weights is None else weights
    total = (outcome_rewards * weights.to(outcome_rewards).unsqueeze(0)).nansum(dim=1, keepdim=True)
    last = mask.long().sum(dim=1, keepdim=True).clamp(min=1) - 1
    outcome = torch.zeros_like(rewards, dtype=torch.float32).scatter_(1, last, total)
    return rewards.float() + torch.where(mask, outcome, torch.zeros_like(outcome))


def kl_penalized_rewards(
    rewards: torch.Tensor,
    policy_logps: torch.Tensor | None,
    sft_logps: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
) -> torch.Tensor:
    r"""REINFORCE++'s token KL inside the reward, with the frozen SFT model as the KL reference.

    r_t = r̂_t − λ_KL · (log π_old(a_t|s_t) − log π_SFT(a_t|s_t))        (k1 estimator of KL(π_old ‖ π_SFT))

    `policy_logps` may be None only when `kl_coef` is 0 (what a config cannot check: a `rollout_func` without them).

    Example:
        >>> import torch
        >>> kl_penalized_rewards(torch.tensor([[1.0]]), torch.tensor([[-1.0]]), torch.tensor([[-3.0]]), torch.ones(1, 1), 0.5)
        tensor([[0.]])
    """
    rewards = rewards.float()
    if kl_coef != 0.0:
        if policy_logps is None:
            raise ValueError(
                f"kl_coef={kl_coef} needs `policy_logps`, the log π_old of the sampled tokens, and got None. Pass "
                "them (a trainer's `rollout_func` must return its `logprobs`), or set kl_coef=0."
            )
        if policy_logps.shape != rewards.shape:
            raise ValueError(
                f"kl_coef={kl_coef} needs log π_old of every sampled token, [B, T] = {list(rewards.shape)}, and the "
                f"generation returned {list(policy_logps.shape)}: no log-prob per completion token (a `rollout_func` "
                "or a `generate` that records none). Return one log-prob per completion token (`logprobs`), or set "
                "kl_coef=0."
            )
        rewards = rewards - kl_coef * (policy_logps.float() - sft_logps.float())
    return torch.where(mask.bool(), rewards, torch.zeros_like(rewards))


def token_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    r"""Per-token return G_t = Σ_{k ≥ t} γ^{k−t} r_k over the completion's own valid tokens (Algorithm 1, line 8).

    k − t counts valid tokens only, so padding anywhere in a row changes nothing; padding gets G = 0. γ ∈ (0, 1].

    Example:
        >>> import torch
        >>> token_returns(torch.tensor([[1.0, 2.0, 3.0, 0.0]]), torch.tensor([[1, 1, 1, 0]]), gamma=0.5)
        tensor([[2.7500, 3.5000, 3.0000, 0.0000]])
    """
    mask = mask.bool()
    rewards = torch.where(mask, rewards.float(), torch.zeros_like(rewards, dtype=torch.float32))
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        # At a real token: G_t = r_t + γ G_{next real token}. At padding: carry G forward unchanged, report 0.
        running = torch.where(mask[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(mask[:, t], running, torch.zeros_like(running))
    return returns


def masked_mean_std(
    values: torch.Tensor, mask: torch.Tensor, distributed: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Mean μ and population standard deviation σ of `values` over the valid (`mask` = 1) entries of the whole batch.

        μ = Σ v / n,   σ² = Σ (v − μ)² / n          (two passes, float64: exact where E[v²] − μ² would cancel)

    The sums are all-reduced over the processes when `torch.distributed` is initialised. An empty mask gives μ = σ = 0.

    Example:
        >>> import torch
        >>> masked_mean_std(torch.tensor([[1.0, 3.0, 99.0]]), torch.tensor([[1, 1, 0]]))
        (tensor(2., dtype=torch.float64), tensor(1., dtype=torch.float64))
    """
    mask = mask.bool()
    values64 = torch.where(mask, values.double(), torch.zeros_like(values, dtype=torch.float64))
    reduce = distributed and dist.is_available() and dist.is_initialized()
    totals = torch.stack([values64.sum(), mask.sum().double()])
    if reduce:
        dist.all_reduce(totals)
    count = totals[1].clamp(min=1.0)
    mean = totals[0] / count
    squared_deviation = torch.where(mask, (values64 - mean) ** 2, torch.zeros_like(values64)).sum()
    if reduce:
        dist.all_reduce(squared_deviation)
    return mean, (squared_deviation / count).sqrt()


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, distributed: bool = True) -> torch.Tensor:
    r"""REINFORCE++ global advantage normalisation: A = (v − μ) / sqrt(σ² + ε), 0 at padding.

    μ and σ² are over the valid tokens of the whole global batch (`masked_mean_std`), so N processes whiten as one.

    Example:
        >>> import torch
        >>> whiten(torch.tensor([[1.0, 3.0, 99.0]]), torch.tensor([[1, 1, 0]]))
        tensor([[-1.,  1.,  0.]])
    """
    mask = mask.bool()
    mean, std = masked_mean_std(values, mask, distributed=distributed)
    whitened = (values.double() - mean) * torch.rsqrt(std**2 + eps)
    return torch.where(mask, whitened, torch.zeros_like(whitened)).float()


def dense_path_advantages(
    dense_rewards: torch.Tensor,
    sft_logps: torch.Tensor,
    policy_logps: torch.Tensor | None,
    mask: torch.Tensor,
    *,
    kl_coef: float = 1e-5,
    gamma: float = 1.0,
    reward_granularity: str = "token",
    whiten_advantages: bool = True,
    dense_weight: float = 1.0,
    outcome_rewards: torch.Tensor | None = None,
    outcome_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    r"""Everything between the dense reward and the loss, as DPR (Algorithm 1 + REINFORCE++) does it.

        r  = w_0 r̂                           (token, DPR)    or  w_0 sentence_rewards(r̂)   (sentence, SR)
        r  = add_outcome_rewards(r, R, w)      (only with `outcome_rewards` [B, K]: Σ_j w_j R_j at the last token)
        r  = r − λ_KL (log π_old − log π_SFT)                  (dense KL to π_SFT, both variants)
        G  = token_returns(r, γ)
        A  = whiten(G)                         (or G itself when `whiten_advantages=False`)

    Returns `advantages`, `returns`, `rewards` (shaped) and `kl` (log π_old − log π_SFT, zeros without `policy_logps`),
    all `[B, T]` float32, 0 at padding.

    Example:
        >>> import torch
        >>> out = dense_path_advantages(torch.tensor([[1.0, -1.0]]), torch.zeros(1, 2), None, torch.ones(1, 2), kl_coef=0.0)
        >>> out["returns"]
        tensor([[ 0., -1.]])
    """
    rewards = sentence_rewards(dense_rewards, mask) if reward_granularity == "sentence" else dense_rewards.float()
    rewards = dense_weight * rewards  # w_0 = 0: the outcome rewards alone (r̂ stays out, the KL term stays in)
    if outcome_rewards is not None:
        rewards = add_outcome_rewards(rewards, outcome_rewards, mask, outcome_weights)
    rewards = kl_penalized_rewards(rewards, policy_logps, sft_logps, mask, kl_coef)
    returns = token_returns(rewards, mask, gamma)
    advantages = whiten(returns, mask) if whiten_advantages else returns
    if policy_logps is None:
        kl = torch.zeros_like(returns)
    else:
        kl = torch.where(mask.bool(), policy_logps.float() - sft_logps.float(), torch.zeros_like(returns))
    return {"advantages": advantages, "returns": returns, "rewards": rewards, "kl": kl}
