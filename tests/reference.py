"""Independent float64 references the tests compare the package against: plain unpadded forwards and explicit loops."""

import torch


def unpadded_logprobs(model, prompt: list[int], completion: list[int], temperature: float = 1.0) -> list[float]:
    """log π_T(a_t|s_t) = log softmax(logits / T) of each completion token, from one unpadded forward, in float64."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].double()
    log_probs = (logits / temperature).log_softmax(-1)
    return [log_probs[len(prompt) + t - 1, token].item() for t, token in enumerate(completion)]


def strip_padding(ids: torch.Tensor, mask: torch.Tensor) -> list[int]:
    return ids[mask.bool()].tolist()


def dpr_advantages_by_hand(rows, gamma=1.0, kl_coef=0.0, policy_rows=None, sft_rows=None, whiten=True):
    """rows: per-sequence dense rewards (lists). Returns per-sequence advantages (lists), REINFORCE++ style."""
    returns = []
    for b, rewards in enumerate(rows):
        running, row_returns = 0.0, [0.0] * len(rewards)
        for t in reversed(range(len(rewards))):
            r = rewards[t]
            if kl_coef:
                r -= kl_coef * (policy_rows[b][t] - sft_rows[b][t])
            running = r + gamma * running
            row_returns[t] = running
        returns.append(row_returns)
    if not whiten:
        return returns
    flat = [g for row in returns for g in row]
    mean = sum(flat) / len(flat)
    var = sum((g - mean) ** 2 for g in flat) / len(flat)
    return [[(g - mean) / (var + 1e-8) ** 0.5 for g in row] for row in returns]
