"""`CheckpointRewardModel`: the dense token reward an SFT run carries (Eq. 5), read off two causal LMs.

π_SFT is the final SFT model and π_ref the SFT checkpoint at a fraction α of training. The reward of completion token
a_t in state s_t is r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t). The log-probs come from one forward of each model
over `prompt ‖ completion`; the LM head is applied to the last hidden states in chunks of tokens, so no `[B, T, vocab]`
float32 tensor is ever held.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from trl.trainer.utils import maybe_gather_lm_head_ctx

from .reference_manifest import check_model_source, resolve_reference, sft_output_problem
from .rewards import DenseReward, ScoredCompletions, check_dense_reward, frozen_model_names, paper_reward
from .token_batches import ends_with_eos, eos_token_ids, pad_batch, render_prompts

logger = logging.getLogger(__name__)

__all__ = ["CheckpointRewardModel", "TokenRewardOutput", "completion_logprobs", "load_reward_model", "sequence_reward_func"]


@dataclass
class TokenRewardOutput:
    """What one scoring pass computes. All tensors are `[B, Tc]` float32 on the input device, 0 at padding.

    Attributes:
        rewards: the dense token reward r̂_t of the configured variant (at temperature 1, as the paper defines it).
        sft_logps: log π_SFT(a_t|s_t) at temperature 1.
        ref_logps: log π_ref(a_t|s_t) at temperature 1, or None without a baseline.
        kl_reference_logps: log π_SFT(a_t|s_t) at the rollout temperature T, i.e. log softmax(logits / T): the
            reference of DPR's KL term, on the same footing as TRL's log π_old (also taken at T). Equal to `sft_logps`
            when T = 1. Computed from the same forward as `sft_logps` (no extra pass).

    Example:
        >>> out = TokenRewardOutput(rewards=torch.zeros(1, 2), sft_logps=torch.full((1, 2), -1.0), ref_logps=None)
        >>> torch.equal(out.kl_reference_logps, out.sft_logps)  # scored at temperature 1
        True
    """

    rewards: torch.Tensor
    sft_logps: torch.Tensor
    ref_logps: torch.Tensor | None
    kl_reference_logps: torch.Tensor | None = None

    def __post_init__(self):
        if self.kl_reference_logps is None:  # scored at temperature 1: the KL reference is log π_SFT itself
            self.kl_reference_logps = self.sft_logps


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


def _project_to_logits(hidden: torch.Tensor, lm_head: nn.Module, scale: float, softcap: float | None) -> torch.Tensor:
    """float32 logits of `hidden` ([N, H]). On CUDA, half-precision weights accumulate straight into float32.

    The head's weight is read directly (not through `lm_head.forward`), so where it is sharded it is gathered first:
    FSDP2 holds it as a DTensor, and ZeRO-3 as an empty shard that only its module's forward hook would materialise
    (TRL's `maybe_gather_lm_head_ctx`, the same gather TRL's fused head uses).
    """
    weight, bias = lm_head.weight, getattr(lm_head, "bias", None)
    if isinstance(weight, DTensor):
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    with maybe_gather_lm_head_ctx(weight, bias):
        hidden = hidden.to(weight.dtype)
        if hidden.is_cuda and weight.dtype in (torch.bfloat16, torch.float16):
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


def _unwrap_causal_lm(model: nn.Module) -> nn.Module:
    """The transformers causal LM inside a PEFT / accelerate wrapper (PEFT layers stay injected and active)."""
    model = getattr(model, "module", model)  # DDP / DeepSpeed engine
    if hasattr(model, "get_base_model"):  # PeftModel: LoRA layers live inside the base model's modules
        model = model.get_base_model()
    return model


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

    The sequence is `prompt ‖ completion` (prompts left-padded, completions right-padded, as TRL holds them), with
    position ids counted over real tokens only, so a left-padded row is scored exactly like the same row unpadded. The
    hidden state at column P + t − 1 (the last token of s_t) scores completion token t.

        log π_T(a_t|s_t) = z(s_t, a_t)/T − log Σ_a' exp(z(s_t, a')/T),    z = the model's (scaled, soft-capped) logits

    Args:
        model: a causal LM (transformers, PEFT-wrapped or accelerate-wrapped). PEFT's active adapter is used.
        prompt_ids, prompt_mask: `[B, P]`, left-padded, every prompt non-empty.
        completion_ids, completion_mask: `[B, Tc]`, right-padded.
        with_values: also return the soft values V(s_t) = logsumexp of the logits at s_t (temperature 1), and V of the
            state after the last real token.
        token_chunk_size: tokens projected through the LM head at once (memory ∝ chunk × vocab × 4 bytes).
        temperatures: the temperatures T to return log-probs at, all from the same forward. With one temperature
            (default 1) `logps` is `[B, Tc]`; with several it is `[len(temperatures), B, Tc]`.

    Returns:
        `(logps, values [B, Tc] or None, final_next_values [B] or None)`, float32, 0 at padding.

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        ...     num_attention_heads=2, num_key_value_heads=2)).eval()
        >>> logps, _, _ = completion_logprobs(lm, torch.tensor([[5, 6]]), torch.ones(1, 2), torch.tensor([[7]]), torch.ones(1, 1))
        >>> logps.shape
        torch.Size([1, 1])
    """
    _check_padding(prompt_mask, completion_mask)
    if not temperatures or any(t <= 0 for t in temperatures):
        raise ValueError(f"temperatures must be positive, got {temperatures}.")
    causal_lm = _unwrap_causal_lm(model)

    def score():
        lm_head = causal_lm.get_output_embeddings()
        scale, softcap = _logit_transform(causal_lm.config)
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
        # Real tokens are numbered 0, 1, 2, ... whatever padding precedes them (matters for absolute position
        # embeddings).
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        hidden = causal_lm.base_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state

        num_prompt, num_completion = prompt_ids.size(1), completion_ids.size(1)
        state_hidden = hidden[:, num_prompt - 1 : num_prompt + num_completion - 1]  # s_t of every completion token
        valid = completion_mask.bool()
        flat_hidden = state_hidden[valid]
        flat_targets = completion_ids[valid]

        token_logps = [[] for _ in temperatures]  # per temperature, per chunk: log π_T of the sampled tokens
        logsumexps = []  # per chunk: V(s_t), the logsumexp at temperature 1
        need_unit = with_values or 1.0 in temperatures
        for start in range(0, flat_hidden.size(0), token_chunk_size):
            logits = _project_to_logits(flat_hidden[start : start + token_chunk_size], lm_head, scale, softcap)
            target_logit = logits.gather(1, flat_targets[start : start + token_chunk_size, None]).squeeze(1)
            unit_logsumexp = logits.logsumexp(dim=1) if need_unit else None
            if with_values:
                logsumexps.append(unit_logsumexp)
            for chunks, temperature in zip(token_logps, temperatures):
                # log π_T(a|s) = z(s, a)/T − log Σ_a' exp(z(s, a')/T): one more logsumexp per extra temperature.
                logsumexp = unit_logsumexp if temperature == 1.0 else (logits / temperature).logsumexp(dim=1)
                chunks.append(target_logit / temperature - logsumexp)
            del logits

        def scatter(chunks):
            out = torch.zeros(completion_ids.shape, dtype=torch.float32, device=hidden.device)
            if chunks:
                out[valid] = torch.cat(chunks)
            return out

        logps = torch.stack([scatter(chunks) for chunks in token_logps])
        logps = logps[0] if len(temperatures) == 1 else logps
        if not with_values:
            return logps, None, None
        values = scatter(logsumexps)
        # V of the state after the last real token: the hidden state at that token's own column.
        last_column = num_prompt + valid.long().sum(dim=1) - 1
        final_hidden = hidden[torch.arange(hidden.size(0), device=hidden.device), last_column]
        final_next_values = _project_to_logits(final_hidden, lm_head, scale, softcap).logsumexp(dim=1)
        return logps, values, final_next_values

    return _inside_forward(model, causal_lm, score)


def _inside_forward(model: nn.Module, causal_lm: nn.Module, fn):
    """Run `fn()` as the forward of `causal_lm`, called through `model` (its outermost wrapper).

    Scoring reads the backbone and the LM head of `causal_lm` directly. Called through the wrapper's `__call__`, the
    hooks FSDP (1 and 2) and DeepSpeed put on the root module run as for any forward, so the root's own parameters
    (embeddings, final norm, LM head) are gathered while `fn` reads them, as TRL's fused LM head does.
    """
    had_own_forward = "forward" in vars(causal_lm)  # e.g. TRL's fused LM head patches the instance
    original = causal_lm.forward
    causal_lm.forward = lambda *args, **kwargs: fn()
    try:
        return model()
    finally:
        if had_own_forward:
            causal_lm.forward = original
        else:
            del causal_lm.forward


class CheckpointRewardModel(nn.Module):
    r"""Dense token reward from an SFT model and its reference checkpoint (Eq. 5 of Li et al., 2025).

    r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t)

    The scorer of any `DenseReward` (`trl_dpr.rewards`): it holds the frozen models the reward names (π_SFT as `sft`,
    π_ref as `ref`, others given in `models`), runs one forward of each per micro-batch, and returns the reward with
    log π_SFT at the rollout temperature for DPR's KL term. `reward=None` is the paper's reward for the two switches:

    Variants (the paper's ablations):
      - `use_baseline=False` ("wo/Baseline"): r̂_t = log π_SFT(a_t|s_t); π_ref is not needed.
      - `eliminate_value=False` ("w/V"): adds V_SFT(s_t) − V_SFT(s_{t+1}), with V the logsumexp of the SFT logits at a
        state; V = 0 after EOS, and a completion cut at the length limit without EOS is not terminal.

    Both models are frozen (`eval()`, no gradients). They must share one tokenizer. With PEFT, π_SFT and π_ref can be
    two adapters of one base model (`sft_adapter` / `ref_adapter`), scored by switching the active adapter.

    Args:
        sft_model: π_SFT, a causal LM (`PreTrainedModel` or `PeftModel`).
        ref_model: π_ref, same vocabulary; may be None when `use_baseline=False`.
        use_baseline: subtract log π_ref (default, DPR).
        eliminate_value: drop the potential term V (default, DPR).
        processing_class: the tokenizer of π_SFT, used by `score_text` and to check π_ref's tokenizer.
        ref_processing_class: the tokenizer π_ref was saved with; checked against `processing_class`.
        sft_adapter, ref_adapter: adapter names when the models are PEFT models holding several adapters.
        token_chunk_size: tokens sent through the LM head at once.

    Example:
        >>> from trl_dpr import CheckpointRewardModel
        >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
        >>> tok = build_tokenizer(["2+3=5"])
        >>> rm = CheckpointRewardModel(build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1), processing_class=tok)
        >>> scored = rm.score_text(["2+3="], ["5"])
        >>> len(scored[0]["rewards"]) == len(scored[0]["tokens"])
        True
    """

    def __init__(
        self,
        sft_model: nn.Module,
        ref_model: nn.Module | None = None,
        use_baseline: bool = True,
        eliminate_value: bool = True,
        processing_class: PreTrainedTokenizerBase | None = None,
        ref_processing_class: PreTrainedTokenizerBase | None = None,
        sft_adapter: str | None = None,
        ref_adapter: str | None = None,
        token_chunk_size: int = 1024,
        *,
        reward: DenseReward | None = None,
        models: dict[str, nn.Module] | None = None,
    ):
        super().__init__()
        if reward is None:
            reward = paper_reward(use_baseline, eliminate_value)
        else:
            check_dense_reward(reward, f"reward={type(reward).__name__}")
        self.reward = reward
        # The two switches of the paper's rewards, read off the reward itself (the card and the checks use them).
        use_baseline = "ref" in reward.model_names
        eliminate_value = "sft" not in getattr(reward, "value_model_names", ())
        if use_baseline and ref_model is None:
            raise ValueError(
                f"The reward {type(reward).__name__} reads π_ref ('ref'), so it needs the reference checkpoint "
                "(`ref_model`). Pass it, load both with CheckpointRewardModel.from_pretrained(sft_dir), or set "
                "use_baseline=False for the 'wo/Baseline' ablation."
            )
        if token_chunk_size < 1:
            raise ValueError(f"token_chunk_size must be a positive number of tokens, got {token_chunk_size}.")
        models = dict(models or {})
        missing = [n for n in reward.model_names if n not in ("sft", "ref") and n not in models]
        if missing or {"sft", "ref"} & set(models):
            raise ValueError(
                f"The reward {type(reward).__name__} reads models {list(reward.model_names)}: 'sft' and 'ref' are "
                f"sft_model and ref_model, every other name must be in `models` (missing: {missing}; given: "
                f"{sorted(models)}). In a recipe: dense_reward_models: {{name: path}}."
            )
        self.sft_model = sft_model
        self.ref_model = ref_model if use_baseline else None
        self.extra_models = nn.ModuleDict(models)  # frozen models of a reward beyond π_SFT and π_ref, by name
        self.use_baseline = use_baseline
        self.eliminate_value = eliminate_value
        self.processing_class = processing_class
        self.sft_adapter = sft_adapter
        self.ref_adapter = ref_adapter
        self.token_chunk_size = token_chunk_size
        self.sft_model_name_or_path: str | None = None  # set by from_pretrained
        self.reference_manifest = None  # set by from_pretrained when π_ref came from an SFT manifest

        if self.ref_model is not None:
            _check_same_base(sft_model, self.ref_model, processing_class, ref_processing_class)
        for model in models.values():
            _check_same_base(sft_model, model, processing_class, None)
        if sft_adapter is None:
            # Whole frozen models. (Adapters are loaded frozen, and their base may also carry the trainable policy.)
            for frozen in {id(m): m for m in (self.sft_model, self.ref_model) if m is not None}.values():
                frozen.eval()
                frozen.requires_grad_(False)
        for frozen in models.values():
            frozen.eval()
            frozen.requires_grad_(False)
        self.eos_token_ids = eos_token_ids(sft_model, processing_class)

    @property
    def config(self):
        """The SFT model's config (vocabulary size, name)."""
        return _unwrap_causal_lm(self.sft_model).config

    @property
    def device(self) -> torch.device:
        return next(_unwrap_causal_lm(self.sft_model).parameters()).device

    def prepare_for(self, accelerator, is_deepspeed_enabled: bool = False, is_fsdp_enabled: bool = False):
        """Place or shard the frozen scorers the way GRPOTrainer prepares its reference model; returns `self`.

        ZeRO-3 shards them (`trl.models.prepare_deepspeed`; other ZeRO stages hold a whole copy per process), FSDP
        shards them (`trl.models.prepare_fsdp`), and otherwise each process holds them on its device
        (`accelerator.prepare_model(..., evaluation_mode=True)`, which leaves `device_map`-dispatched and quantized
        models where they are). Adapters on a shared base (`sft_adapter`) live on the policy's model, which the
        trainer prepares itself.

        Example:
            >>> reward_model = reward_model.prepare_for(trainer.accelerator)  # doctest: +SKIP
        """
        from trl.models import prepare_deepspeed, prepare_fsdp

        def prepare(scorer):
            if is_deepspeed_enabled:
                return prepare_deepspeed(scorer, accelerator)
            if is_fsdp_enabled:
                return prepare_fsdp(scorer, accelerator)
            return accelerator.prepare_model(scorer, evaluation_mode=True)

        if self.sft_adapter is None:
            for name in ("sft_model", "ref_model"):
                if getattr(self, name) is not None:
                    setattr(self, name, prepare(getattr(self, name)))
        for name in list(self.extra_models):  # a third checkpoint is a whole model: placed and sharded like π_SFT
            self.extra_models[name] = prepare(self.extra_models[name])
        return self

    def scoring_models(self) -> dict[str, tuple[nn.Module, str | None]]:
        """name → (model, adapter) of every frozen model the reward reads, π_SFT first (its forward also gives the KL
        reference)."""
        available = {"sft": (self.sft_model, self.sft_adapter), "ref": (self.ref_model, self.ref_adapter),
                     **{name: (model, None) for name, model in self.extra_models.items()}}
        return {name: available[name] for name in frozen_model_names(self.reward)}

    @contextlib.contextmanager
    def _activated(self, model: nn.Module, adapter: str | None):
        """`model` scoring as π_SFT or π_ref: the right adapter active, dropout off, previous state restored after."""
        if adapter is None:
            yield model
            return
        from trl.trainer.utils import use_adapter

        # The shared base may be the policy, in train mode with LoRA dropout. Turn off the dropout modules only:
        # `model.eval()` would also make bitsandbytes (CPU) repack its 4-bit weights into an inference-only layout
        # that silently stops gradients for the rest of training.
        dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout) and m.training]
        for module in dropouts:
            module.eval()
        try:
            with use_adapter(model, adapter_name=adapter):
                yield model
        finally:
            for module in dropouts:
                module.train()

    @torch.no_grad()
    def forward(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        is_terminal: torch.Tensor | None = None,
        batch_size: int | None = None,
        temperature: float = 1.0,
    ) -> TokenRewardOutput:
        """Score completions: one forward of π_SFT (and of π_ref) per micro-batch of `batch_size` rows.

        The dense reward r̂ is always at temperature 1 (Eq. 5 of the paper). `temperature` is the rollout temperature
        T, at which `kl_reference_logps` = log softmax(logits_SFT / T) is returned for the KL term, from the same
        forward.

        Args:
            prompt_ids, prompt_mask: `[B, P]` left-padded prompts.
            completion_ids, completion_mask: `[B, Tc]` right-padded completions.
            is_terminal: `[B]` bool, True where the completion ended with EOS (used by `eliminate_value=False`);
                by default, whether its last real token is one of the SFT model's EOS ids.
            batch_size: rows per forward (default: all at once).
            temperature: the rollout temperature T of `kl_reference_logps`.

        Returns:
            `TokenRewardOutput` with `rewards`, `sft_logps`, `ref_logps`, `kl_reference_logps`.
        """
        device = self.device
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
        if is_terminal is None:
            is_terminal = ends_with_eos(completion_ids, completion_mask, self.eos_token_ids)
        batch_size = batch_size or prompt_ids.size(0)

        outputs = []
        for start in range(0, prompt_ids.size(0), batch_size):
            rows = slice(start, start + batch_size)
            outputs.append(
                self._score_rows(
                    prompt_ids[rows],
                    prompt_mask[rows],
                    completion_ids[rows],
                    completion_mask[rows],
                    is_terminal[rows].to(device),
                    temperature,
                )
            )
        rewards, sft_logps, ref_logps, kl_reference_logps = (
            torch.cat([o[i] for o in outputs]) if outputs[0][i] is not None else None for i in range(4)
        )
        return TokenRewardOutput(rewards, sft_logps, ref_logps, kl_reference_logps)

    def _score_rows(self, prompt_ids, prompt_mask, completion_ids, completion_mask, is_terminal, temperature):
        value_names = set(getattr(self.reward, "value_model_names", ()))
        logps, values, final_next_values = {}, {}, {}
        kl_reference_logps = None
        for name, (model, adapter) in self.scoring_models().items():
            # π_SFT's forward also gives log π_SFT at the rollout temperature T, the KL term's reference.
            temperatures = (1.0, temperature) if name == "sft" and temperature != 1.0 else (1.0,)
            with self._activated(model, adapter) as scorer:
                out, state_values, final_values = completion_logprobs(
                    scorer, prompt_ids, prompt_mask, completion_ids, completion_mask, with_values=name in value_names,
                    token_chunk_size=self.token_chunk_size, temperatures=temperatures,
                )
            logps[name], at_temperature = out.unbind(0) if len(temperatures) == 2 else (out, out)
            if name == "sft":
                kl_reference_logps = at_temperature
            if name in value_names:
                values[name], final_next_values[name] = state_values, final_values
        scored = ScoredCompletions(logps, completion_mask, completion_ids, is_terminal, values, final_next_values)
        rewards = self.reward(scored)
        if not isinstance(rewards, torch.Tensor) or rewards.shape != completion_ids.shape:
            raise ValueError(
                f"The reward {type(self.reward).__name__} must return a [B, T] tensor like completion_ids "
                f"{tuple(completion_ids.shape)}, got {getattr(rewards, 'shape', type(rewards).__name__)}."
            )
        rewards = torch.where(completion_mask.bool(), rewards.float(), torch.zeros((), device=rewards.device))
        return rewards, logps["sft"], logps.get("ref"), kl_reference_logps

    def token_rewards(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        is_terminal: torch.Tensor | None = None,
    ) -> torch.FloatTensor:
        """Dense reward `[B, Tc]` (float32, 0 at padding, no autograd graph) of each completion token.

        Example:
            >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
            >>> import torch
            >>> tok = build_tokenizer(["abc"])
            >>> rm = CheckpointRewardModel(build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1))
            >>> rm.token_rewards(torch.tensor([[4, 5]]), torch.ones(1, 2), torch.tensor([[6, 0]]), torch.tensor([[1, 0]])).shape
            torch.Size([1, 2])
        """
        return self(prompt_ids, prompt_mask, completion_ids, completion_mask, is_terminal=is_terminal).rewards

    def score_text(
        self, prompts: list[Any], completions: list[str], append_eos: bool = True, batch_size: int = 32
    ) -> list[dict[str, Any]]:
        """Per-token rewards of (prompt, completion) pairs, with the token strings, for inspection and heatmaps.

        Prompts are strings or conversations (lists of `{"role", "content"}` messages, rendered with the chat template
        and its generation prompt, as GRPOTrainer does). Completions are plain strings; `append_eos` adds the EOS token
        the model would end with.

        Returns:
            One dict per pair: `tokens` (decoded strings), `token_ids`, `rewards` (floats), `total` (Σ r̂).

        Example:
            >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
            >>> tok = build_tokenizer(["hello"])
            >>> rm = CheckpointRewardModel(build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1), processing_class=tok)
            >>> out = rm.score_text(["he"], ["llo"])
            >>> out[0]["tokens"][-1] == tok.eos_token
            True
        """
        if self.processing_class is None:
            raise ValueError(
                "score_text needs the tokenizer: pass processing_class= to CheckpointRewardModel (from_pretrained "
                "loads it)."
            )
        if len(prompts) != len(completions):
            raise ValueError(f"Got {len(prompts)} prompts and {len(completions)} completions; pass one of each per pair.")
        tokenizer = self.processing_class
        completion_rows = []
        for completion in completions:
            ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
            if append_eos and tokenizer.eos_token_id is not None:
                ids = ids + [tokenizer.eos_token_id]
            if not ids:
                raise ValueError(f"Completion {completion!r} is empty after tokenization; nothing to score.")
            completion_rows.append(ids)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        batch = pad_batch(render_prompts(tokenizer, prompts), completion_rows, pad_id)
        rewards = self(*batch.as_tuple(), batch_size=batch_size).rewards.cpu()
        return [
            {
                "tokens": [tokenizer.decode([t]) for t in ids],
                "token_ids": list(ids),
                "rewards": rewards[i, : len(ids)].tolist(),
                "total": float(rewards[i, : len(ids)].sum()),
            }
            for i, ids in enumerate(completion_rows)
        ]

    @classmethod
    def from_pretrained(
        cls,
        sft_model_name_or_path: str,
        ref_model_name_or_path: str | None = None,
        *,
        use_baseline: bool = True,
        eliminate_value: bool = True,
        token_chunk_size: int = 1024,
        reward: DenseReward | None = None,
        model_paths: dict[str, str] | None = None,
        **model_init_kwargs,
    ) -> CheckpointRewardModel:
        """Load π_SFT and π_ref with the same `model_init_kwargs` (dtype, quantization_config, device_map, ...).

        `reward` replaces the paper's reward (`use_baseline` / `eliminate_value` are then read off it); the models it
        names besides `sft` and `ref` are loaded from `model_paths` (name → path or Hub id), with the same kwargs.

        With `ref_model_name_or_path=None`, π_ref is the reference checkpoint the SFT stage recorded next to the SFT
        model (`dpr_reference.json`, written by `ReferenceCheckpointCallback`); local directories and Hub repos both
        work. PEFT adapter outputs (an `adapter_config.json` in the folder) are loaded as adapters `sft` and `ref` on
        one base model.

        Example:
            >>> rm = CheckpointRewardModel.from_pretrained("runs/sft", dtype="bfloat16")  # doctest: +SKIP
        """
        from trl.trainer.utils import create_model_from_path

        revision = model_init_kwargs.get("revision")
        token = model_init_kwargs.get("token")
        if reward is not None:
            check_dense_reward(reward, f"reward={type(reward).__name__}")
            use_baseline = "ref" in reward.model_names
        model_paths = dict(model_paths or {})
        extra_names = [n for n in (reward.model_names if reward is not None else ()) if n not in ("sft", "ref")]
        if missing := [n for n in extra_names if n not in model_paths]:
            raise ValueError(
                f"The reward {type(reward).__name__} reads the models {missing}, but no path was given for them: pass "
                f"model_paths={{{missing[0]!r}: 'path/or/hub-id'}} (in a recipe: dense_reward_models)."
            )
        for name in extra_names:
            check_model_source(model_paths[name], f"The reward's model {name!r}")
        if os.path.isdir(sft_model_name_or_path) and (problem := sft_output_problem(sft_model_name_or_path)):
            raise ValueError(
                f"{sft_model_name_or_path!r} is not a finished SFT output: {problem}. An interrupted SFT resumes with "
                "the same SFT recipe and --resume_from_checkpoint true (when it saved checkpoints); otherwise delete "
                "the folder and run the SFT again."
            )
        check_model_source(sft_model_name_or_path, "π_SFT (the SFT output)")
        manifest = None
        if use_baseline and ref_model_name_or_path is None:
            manifest, ref_model_name_or_path = resolve_reference(sft_model_name_or_path, revision=revision, token=token)
        elif use_baseline:
            check_model_source(ref_model_name_or_path, "π_ref (ref_model_name_or_path)")

        tokenizer = AutoTokenizer.from_pretrained(sft_model_name_or_path, revision=revision, token=token)
        ref_tokenizer = None
        if use_baseline and _has_tokenizer(ref_model_name_or_path):
            ref_tokenizer = AutoTokenizer.from_pretrained(ref_model_name_or_path)
        elif use_baseline and os.path.isdir(ref_model_name_or_path):
            logger.warning(
                f"π_ref at {ref_model_name_or_path!r} was saved without its tokenizer files: only its vocabulary size "
                "can be checked against π_SFT's, not its tokens. A reference trained with another tokenizer of the "
                "same size would give meaningless rewards. Save the tokenizer with it (ReferenceCheckpointCallback does)."
            )

        if _is_adapter_dir(sft_model_name_or_path):
            if extra_names:
                raise ValueError(
                    f"{sft_model_name_or_path!r} is an adapter SFT output; a reward reading further models "
                    f"({extra_names}) needs a full (merged) SFT model, as the extra models are loaded whole."
                )
            model = _load_adapters(sft_model_name_or_path, ref_model_name_or_path if use_baseline else None, model_init_kwargs)
            reward_model = cls(
                model,
                model if use_baseline else None,
                use_baseline=use_baseline,
                eliminate_value=eliminate_value,
                processing_class=tokenizer,
                ref_processing_class=ref_tokenizer,
                sft_adapter="sft",
                ref_adapter="ref" if use_baseline else None,
                token_chunk_size=token_chunk_size,
                reward=reward,
            )
        else:
            sft_model = create_model_from_path(sft_model_name_or_path, **model_init_kwargs)
            ref_model = None
            if use_baseline:
                ref_kwargs = {k: v for k, v in model_init_kwargs.items() if k != "revision"}
                ref_model = create_model_from_path(ref_model_name_or_path, **ref_kwargs)
            extra_kwargs = {k: v for k, v in model_init_kwargs.items() if k != "revision"}
            reward_model = cls(
                sft_model,
                ref_model,
                use_baseline=use_baseline,
                eliminate_value=eliminate_value,
                processing_class=tokenizer,
                ref_processing_class=ref_tokenizer,
                token_chunk_size=token_chunk_size,
                reward=reward,
                models={n: create_model_from_path(model_paths[n], **extra_kwargs) for n in extra_names},
            )
        reward_model.sft_model_name_or_path = sft_model_name_or_path
        reward_model.reference_manifest = manifest
        return reward_model


def load_reward_model(
    reward_model: CheckpointRewardModel | str | None, args, ref_model_name_or_path: str | None = None, **model_init_kwargs
) -> CheckpointRewardModel:
    """The one loader of the scorer: from an SFT path with `args` (a `DensePathConfig`), or checked against it.

    A path loads π_SFT, π_ref (`ref_model_name_or_path`, or the one the SFT recorded) and the reward's other models with
    `args.model_init_kwargs` (or `model_init_kwargs`), scoring the config's reward (`args.reward()`: `dense_reward`,
    else the paper's, from `use_baseline` / `eliminate_value`). A `CheckpointRewardModel` must score the same reward
    as the config names, when the config names one (else the scorer's reward is the run's).

    Example:
        >>> reward_model = load_reward_model("runs/sft", DensePathConfig("runs/dpr"))  # doctest: +SKIP
    """
    if reward_model is None:
        raise ValueError(
            "DensePathTrainer needs `reward_model`: a CheckpointRewardModel, or the path of an SFT output saved "
            "with ReferenceCheckpointCallback (e.g. reward_model='runs/sft')."
        )
    if isinstance(reward_model, str):
        return CheckpointRewardModel.from_pretrained(
            reward_model,
            ref_model_name_or_path,
            token_chunk_size=args.reward_token_chunk_size,
            reward=args.reward(),
            model_paths=args.dense_reward_models,
            **(model_init_kwargs or dict(args.model_init_kwargs or {})),
        )
    if not isinstance(reward_model, CheckpointRewardModel):
        raise TypeError(
            f"reward_model must be a CheckpointRewardModel (the scorer of a DenseReward: "
            f"CheckpointRewardModel.from_pretrained(sft_path, reward=...)) or an SFT path, got {type(reward_model).__name__}."
        )
    # A config at its defaults names no reward: the scorer's own reward is the run's. One that names a reward
    # (dense_reward, use_baseline: false, eliminate_value: false) must get it, or the run would train on another.
    names_a_reward = args.dense_reward is not None or not args.use_baseline or not args.eliminate_value
    if names_a_reward and _reward_name(args.reward()) != _reward_name(reward_model.reward):
        raise ValueError(
            f"The config asks for the reward {_reward_name(args.reward())} (dense_reward / use_baseline / "
            f"eliminate_value) but the reward model scores {_reward_name(reward_model.reward)}. Build it with the same "
            "reward, or pass the SFT path as `reward_model` and let the trainer load it from the config."
        )
    return reward_model


def _reward_name(reward) -> str:
    inner = getattr(reward, "reward", None)
    return type(reward).__name__ + (f"({type(inner).__name__})" if inner is not None else "")


def sequence_reward_func(reward_model: CheckpointRewardModel, batch_size: int | None = None):
    """The dense reward reduced to one number per completion, Σ_t r̂_t, as a `reward_funcs` entry of TRL's own
    `GRPOTrainer` / `RLOOTrainer`: try the checkpoint reward in a TRL pipeline you already have.

    Prompts are tokenized as GRPOTrainer tokenizes them (chat template with the generation prompt); the completion ids
    are the ones TRL sampled. A sequence reward gives up DPR's per-token credit: use `DensePathTrainer` for that.

    Example:
        ```python
        from trl import GRPOTrainer
        reward = sequence_reward_func(CheckpointRewardModel.from_pretrained("runs/sft"))
        GRPOTrainer(model="runs/sft", reward_funcs=[reward], args=GRPOConfig(...), train_dataset=prompts).train()
        ```
    """
    if reward_model.processing_class is None:
        raise ValueError("sequence_reward_func needs the reward model's tokenizer (processing_class=...).")
    tokenizer = reward_model.processing_class
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def dense_path_sum(prompts, completions, completion_ids, **kwargs) -> list[float]:
        batch = pad_batch(render_prompts(tokenizer, prompts), [list(ids) for ids in completion_ids], pad_id)
        scored = reward_model(*batch.as_tuple(), batch_size=batch_size)
        return scored.rewards.sum(dim=1).tolist()

    return dense_path_sum


def _has_tokenizer(path: str) -> bool:
    return os.path.isdir(path) and any(
        (Path(path) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    )


def _is_adapter_dir(path: str) -> bool:
    return os.path.isdir(path) and (Path(path) / "adapter_config.json").is_file()


def _load_adapters(sft_dir: str, ref_dir: str | None, model_init_kwargs: dict) -> nn.Module:
    """One base model with the SFT adapter as `sft` and, if given, the reference adapter as `ref` (both frozen)."""
    from peft import PeftModel
    from trl.trainer.utils import create_model_from_path

    base_name = json.loads((Path(sft_dir) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base_name:
        raise ValueError(
            f"{sft_dir}/adapter_config.json does not name the base model the adapter was trained on "
            "(base_model_name_or_path is empty). Set it to the base model's Hub id or folder."
        )
    if ref_dir is not None:
        if not _is_adapter_dir(ref_dir):
            raise ValueError(
                f"The SFT output {sft_dir!r} is a PEFT adapter but its reference checkpoint {ref_dir!r} is not. Both "
                "must be adapters on the same base model (save both from the same PEFT SFT run)."
            )
        ref_base = json.loads((Path(ref_dir) / "adapter_config.json").read_text())["base_model_name_or_path"]
        if ref_base != base_name:
            raise ValueError(
                f"The SFT adapter {sft_dir!r} was trained on base model {base_name!r} but the reference adapter "
                f"{ref_dir!r} on {ref_base!r}. π_SFT and π_ref must come from the same SFT run."
            )
    base = create_model_from_path(base_name, **model_init_kwargs)
    model = PeftModel.from_pretrained(base, sft_dir, adapter_name="sft", is_trainable=False)
    if ref_dir is not None:
        model.load_adapter(ref_dir, adapter_name="ref", is_trainable=False)
    model.set_adapter("sft")
    # Train mode on purpose (scoring switches dropout off by itself): in eval mode, bitsandbytes on CPU repacks 4-bit
    # weights into an inference-only layout at the first no-grad forward, and a policy trained on this base later
    # would silently get no gradient.
    model.train()
    return model


def _check_same_base(sft_model, ref_model, sft_tokenizer, ref_tokenizer) -> None:
    """π_ref must be a checkpoint of the same SFT run: same architecture, vocabulary and (when known) tokenizer."""
    sft_config = _unwrap_causal_lm(sft_model).config.get_text_config()
    ref_config = _unwrap_causal_lm(ref_model).config.get_text_config()
    for field_name in ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        sft_value, ref_value = getattr(sft_config, field_name, None), getattr(ref_config, field_name, None)
        if sft_value != ref_value:
            raise ValueError(
                f"π_ref is not a checkpoint of the same model as π_SFT: {field_name} is {sft_value!r} for π_SFT but "
                f"{ref_value!r} for π_ref (another base model?). Use the reference checkpoint saved by the same SFT run "
                "(dpr_reference/ next to the SFT model)."
            )
    sft_vocab = _unwrap_causal_lm(sft_model).get_output_embeddings().weight.shape[0]
    ref_vocab = _unwrap_causal_lm(ref_model).get_output_embeddings().weight.shape[0]
    if sft_vocab != ref_vocab:
        raise ValueError(
            f"π_SFT and π_ref have different vocabularies ({sft_vocab} vs {ref_vocab} output rows), so their token "
            "log-probs cannot be compared. The reference must be a checkpoint of the same SFT run (same base model "
            "and tokenizer)."
        )
    if sft_tokenizer is not None and ref_tokenizer is not None and sft_tokenizer.get_vocab() != ref_tokenizer.get_vocab():
        differing = sorted(set(sft_tokenizer.get_vocab().items()) ^ set(ref_tokenizer.get_vocab().items()))[:5]
        raise ValueError(
            "π_SFT and π_ref were saved with different tokenizers (first differing (token, id) entries: "
            f"{differing}). The reference must be a checkpoint of the same SFT run."
        )
