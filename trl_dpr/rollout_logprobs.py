"""log π(a_t|s_t) of the tokens `generate` samples, recorded while it samples them: no second forward pass.

vLLM returns them; transformers' `generate` does not, and DPR's KL needs log π_old of every sampled token, which would
cost one more forward. Each decoding step already computes the logits, and the sampled token is the next step's input:

    step k:   logits z_k (for token k) ─► keep z_k and log Σ exp(z_k / T)
    step k+1: input token a_k          ─► log π_T(a_k | s_k) = z_k[a_k] / T − log Σ exp(z_k / T)
    after the last step: the last token of each row, from the logits kept

Never a `[B, T, V]` tensor. Valid only when each forward is one decoding step of the returned rows; beam search,
assisted or prompt-lookup decoding break that, the recorder notices and `logprobs` is None (the caller then runs a
forward). Logits / T with no top-k / top-p, as GRPOTrainer's `_get_per_token_logps_and_entropies`.
"""

from __future__ import annotations

import torch
from torch import nn

from .scoring import _causal_lm, check_temperature


class SampledTokenLogprobs:
    """Context manager that records log π_T(a_t|s_t) of each token a model's `generate` samples, T = `temperature`."""

    def __init__(self, model: nn.Module, temperature: float = 1.0):
        check_temperature(temperature)
        self.causal_lm = _causal_lm(model)
        self.temperature = temperature

    def __enter__(self) -> SampledTokenLogprobs:
        self._steps: list[torch.Tensor] = []  # [B] log-prob of the token sampled at each finished step
        self._last_logits: torch.Tensor | None = None  # [B, V] logits of the step whose token is not known yet
        self._last_logsumexp: torch.Tensor | None = None
        self._end: torch.Tensor | None = None  # [B] position of each row's last token after the latest forward
        self._one_token_per_step = True
        self._handle = self.causal_lm.register_forward_hook(self._record, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()

    def _record(self, module, args, kwargs, output) -> None:
        input_ids = kwargs["input_ids"] if kwargs.get("input_ids") is not None else args[0]
        # Where each row's sequence ends after this forward: one token further than after the previous one.
        positions, attention_mask = kwargs.get("position_ids"), kwargs.get("attention_mask")
        end = positions[:, -1] if positions is not None else None
        if end is None and attention_mask is not None:
            end = torch.full((input_ids.size(0),), attention_mask.size(-1), device=input_ids.device)
        if self._end is None and self._last_logits is None:
            self._end = end  # the prompt's forward
        elif end is None or self._end is None or end.shape != self._end.shape or not torch.equal(end, self._end + 1):
            self._one_token_per_step = False  # not one decoding step of the same rows (beams, candidate tokens)
        else:
            self._end = end
        if self._last_logits is not None:
            # The newest input token is the one sampled from the previous step's logits.
            sampled = input_ids[:, -1:].to(self._last_logits.device)
            chosen = self._last_logits.gather(1, sampled).squeeze(1).float()
            self._steps.append(chosen / self.temperature - self._last_logsumexp)
        self._last_logits = output.logits[:, -1, :]
        self._last_logsumexp = (self._last_logits.float() / self.temperature).logsumexp(dim=-1)

    def logprobs(self, completion_ids: list[list[int]]) -> list[list[float]] | None:
        """Per row, log π_T of each of its completion tokens (rows as `generate` produced them, cut after EOS); None
        when the forwards seen were not one sampling step of these rows each, or none ran.
        """
        if (
            self._last_logits is None
            or not self._one_token_per_step
            or self._end is None
            or self._end.size(0) != len(completion_ids)
        ):
            return None
        steps = torch.stack(self._steps, dim=1).cpu() if self._steps else torch.zeros(len(completion_ids), 0)
        rows = []
        for i, ids in enumerate(completion_ids):
            row = steps[i, : len(ids)].tolist()
            if len(ids) > steps.size(1):  # this row's last token was sampled at the final step
                last = self._last_logits[i, ids[-1]].float() / self.temperature - self._last_logsumexp[i]
                row.append(last.item())
            rows.append(row)
        return rows
