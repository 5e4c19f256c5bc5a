"""Scoring: log π(a_t|s_t) of given completion tokens under a causal LM, from one forward and a chunked LM head.

    prompt ‖ completion ─► backbone (one forward) ─► hidden states of the states s_t ─► LM head, N tokens at a time
                                                                                      ─► log π_T(a_t|s_t), V(s_t)

No `[B, T, vocab]` float32 tensor is ever held: the head is applied to the completion tokens only, a chunk at a time.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor
from trl.trainer.utils import maybe_gather_lm_head_ctx

from .range_rules import temperature_problem, token_chunk_size_problem


def check_temperature(temperature: float) -> None:
    """The one check of a sampling / scoring temperature T (everything divides the logits by it)."""
    if problem := temperature_problem(temperature):
        raise ValueError(problem)


def check_token_chunk_size(token_chunk_size: int, name: str = "token_chunk_size") -> None:
    """The one check of the LM head's chunk (`name` is the setting as the caller spells it)."""
    if problem := token_chunk_size_problem(token_chunk_size, name):
        raise ValueError(problem)


def _causal_lm(model: nn.Module) -> nn.Module:
    """The transformers causal LM inside DDP / DeepSpeed / PEFT wrappers (PEFT layers stay injected and active)."""
    model = getattr(model, "module", model)  # DDP / DeepSpeed engine / FSDP1
    return model.get_base_model() if hasattr(model, "get_base_model") else model  # PeftModel


def _logit_transform(config) -> tuple[float, float | None]:
    """(scale, softcap) a model applies to `lm_head` outputs, read from the same config fields as TRL's fused head."""
    text_config = config.get_text_config()
    scale = getattr(text_config, "logit_scale", None)
    if scale is None:
        scale = getattr(text_config, "output_multiplier", None)
    if scale is None:
        scale = getattr(text_config, "lm_head_multiplier", None)
    if scale is None and getattr(text_config, "logits_scaling", None) is not None:
        scaling = text_config.logits_scaling
        scale = scaling if text_config.model_type == "hyperclovax" else 1 / scaling
    return (1.0 if scale is None else float(scale)), getattr(text_config, "final_logit_softcapping", None)


@contextlib.contextmanager
def _whole_lm_head(lm_head: nn.Module):
    """(weight, bias) of the LM head, whole, for the chunks: its weight is read directly (not through its forward), so
    where it is sharded it is gathered once here. FSDP2 holds it as a DTensor; ZeRO-3 as an empty shard that only a
    forward hook would fill (TRL's `maybe_gather_lm_head_ctx`, the gather TRL's fused head uses)."""
    weight, bias = lm_head.weight, getattr(lm_head, "bias", None)
    if isinstance(weight, DTensor):
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    with maybe_gather_lm_head_ctx(weight, bias):
        yield weight, bias


def _project_to_logits(hidden: torch.Tensor, weight, bias, scale: float, softcap: float | None) -> torch.Tensor:
    """float32 logits of `hidden` ([N, H]), scaled and soft-capped as the model's own head would."""
    hidden = hidden.to(weight.device, weight.dtype)
    if hidden.is_cuda and weight.dtype in (torch.bfloat16, torch.float16):
        # Half-precision weights accumulate straight into float32: no half-precision logits, no float32 weight copy.
        logits = torch.mm(hidden, weight.t(), out_dtype=torch.float32)
        if bias is not None:
            logits = logits + bias.float()
    else:
        logits = F.linear(hidden, weight, bias).float()
    if scale != 1.0:
        logits = logits * scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    return logits


@contextlib.contextmanager
def _backbone_output(causal_lm: nn.Module):
    """Keep the last hidden states of `causal_lm`'s backbone during one forward (`kept["hidden"]`), and hand the
    model's own LM head none of them (zero columns): the forward's logits are `[B, 0, vocab]`, never `[B, T, vocab]`.
    """
    kept = {}

    def keep(module, args, output):
        kept["hidden"] = output.last_hidden_state
        output.last_hidden_state = output.last_hidden_state[:, :0]
        return output

    handle = causal_lm.base_model.register_forward_hook(keep)
    try:
        yield kept
    finally:
        handle.remove()


def _check_padding(prompt_mask: torch.Tensor, completion_mask: torch.Tensor) -> None:
    if prompt_mask.size(1) == 0 or not bool(prompt_mask[:, -1].all()):
        raise ValueError(
            "token_rewards expects every prompt to be non-empty and left-padded (prompt_mask[:, -1] == 1 for every "
            "row), as GRPOTrainer builds them. Pad prompts on the left, e.g. tokenizer(padding_side='left')."
        )
    if bool((prompt_mask[:, 1:] < prompt_mask[:, :-1]).any()):
        raise ValueError("prompt_mask must be left-padded: zeros first, then ones, in every row.")
    if bool((completion_mask[:, 1:] > completion_mask[:, :-1]).any()):
        raise ValueError("completion_mask must be right-padded: ones first, then zeros, in every row.")


@torch.no_grad()
def completion_logprobs(
    model: nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    with_values: bool = False,
    token_chunk_size: int = 1024,
    temperatures: tuple[float, ...] = (1.0,),
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    r"""log π(a_t|s_t) of each completion token, from one forward and a chunked LM head.

        log π_T(a_t|s_t) = z(s_t, a_t)/T − log Σ_a' exp(z(s_t, a')/T),    z = the model's (scaled, soft-capped) logits

    Prompts `[B, P]` left-padded and non-empty, completions `[B, Tc]` right-padded; position ids count real tokens,
    so padding changes nothing. Several `temperatures` give `logps` `[len(temperatures), B, Tc]`; `with_values` adds
    V(s_t) (logsumexp at temperature 1) and V after the last token. Float32, 0 at padding.
    """
    _check_padding(prompt_mask, completion_mask)
    if not temperatures:
        raise ValueError("temperatures must name at least one temperature, e.g. (1.0,).")
    for temperature in temperatures:
        check_temperature(temperature)
    causal_lm = _causal_lm(model)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
    # Real tokens are numbered 0, 1, 2, ... whatever padding precedes them (matters for absolute position embeddings).
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    # One forward, called through the outermost wrapper (not the backbone directly) so that the hooks FSDP and
    # DeepSpeed put on the root module gather its own weights (embeddings, final norm), as for any forward. The model's
    # own LM head gets no column (`_backbone_output`): the head runs below, on real tokens only, a chunk at a time.
    with _backbone_output(causal_lm) as kept:
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    hidden = kept["hidden"]

    num_prompt, num_completion = prompt_ids.size(1), completion_ids.size(1)
    state_hidden = hidden[:, num_prompt - 1 : num_prompt + num_completion - 1]  # s_t of every completion token
    valid = completion_mask.bool()
    flat_hidden, flat_targets = (
        state_hidden[valid],
        completion_ids[valid],
    )  # real tokens only: padding is never projected

    scale, softcap = _logit_transform(causal_lm.config)
    token_logps = [[] for _ in temperatures]  # per temperature, per chunk: log π_T of the sampled tokens
    logsumexps = []  # per chunk: V(s_t), the logsumexp at temperature 1
    need_unit = with_values or 1.0 in temperatures
    with _whole_lm_head(causal_lm.get_output_embeddings()) as (weight, bias):
        for start in range(0, flat_hidden.size(0), token_chunk_size):
            chunk = slice(start, start + token_chunk_size)
            logits = _project_to_logits(flat_hidden[chunk], weight, bias, scale, softcap)  # [chunk, vocab] float32
            target_logit = logits.gather(1, flat_targets[chunk, None].to(logits.device)).squeeze(1)
            unit_logsumexp = logits.logsumexp(dim=1) if need_unit else None
            if with_values:
                logsumexps.append(unit_logsumexp)
            for chunks, temperature in zip(token_logps, temperatures):
                # log π_T(a|s) = z(s, a)/T − log Σ_a' exp(z(s, a')/T): one more logsumexp per extra temperature.
                logsumexp = unit_logsumexp if temperature == 1.0 else (logits / temperature).logsumexp(dim=1)
                chunks.append(target_logit / temperature - logsumexp)
            del logits  # the largest tensor of the loop: freed before the next chunk's is made
        if with_values:
            # V of the state after the last real token: the hidden state at that token's own column.
            last_column = num_prompt + valid.long().sum(dim=1) - 1
            final_hidden = hidden[torch.arange(hidden.size(0), device=hidden.device), last_column]
            final_next_values = _project_to_logits(final_hidden, weight, bias, scale, softcap).logsumexp(dim=1)

    logps = torch.stack([_scatter(chunks, valid) for chunks in token_logps])
    logps = logps[0] if len(temperatures) == 1 else logps
    if not with_values:
        return logps, None, None
    return logps, _scatter(logsumexps, valid), final_next_values.to(valid.device)


def _scatter(chunks: list[torch.Tensor], valid: torch.Tensor) -> torch.Tensor:
    """The values of the real tokens, in chunks, back in place: `[B, Tc]` float32, 0 at padding."""
    out = torch.zeros(valid.shape, dtype=torch.float32, device=valid.device)
    if chunks:
        out[valid] = torch.cat(chunks).to(out.device)
    return out
