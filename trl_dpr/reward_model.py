"""`CheckpointRewardModel`: the scorer of a dense reward, the paper's (Eq. 5) by default, read off frozen causal LMs.

π_SFT is the final SFT model, π_ref its checkpoint at a fraction α of training; a `DenseReward` names the models it
reads, the scorer runs one forward of each per micro-batch (`trl_dpr.scoring`). Loading: `trl_dpr.reward_loading`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from .reward_loading import load_frozen_models
from .rewards import (
    CheckpointDifference,
    DenseReward,
    ScoredCompletions,
    check_dense_reward,
    check_models_given,
    describe_reward,
    frozen_model_names,
    same_reward,
)
from .scoring import _causal_lm, check_token_chunk_size, completion_logprobs
from .token_batches import ends_with_eos, eos_token_ids, pad_batch, render_prompts

# `completion_logprobs` is re-exported: code written before the scorer's split imports it from here.


@dataclass
class TokenRewardOutput:
    """What one scoring pass computes. All tensors are `[B, Tc]` float32 on the input device, 0 at padding.

    `rewards`, `sft_logps` and `ref_logps` (None without a baseline) are at temperature 1, as the paper defines r̂;
    `kl_reference_logps` is log π_SFT at the rollout temperature T (as TRL's log π_old), from the same forward.

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


class CheckpointRewardModel(nn.Module):
    r"""Dense token reward from an SFT model and its reference checkpoint (Eq. 5 of Li et al., 2025).

    r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t)

    The scorer of any `DenseReward` (default DPR's, `CheckpointDifference()`; the ablations `SFTLogProb()` and
    `WithSoftValue(...)` are rewards too): it holds the frozen models the reward names (`sft`, `ref`, others in
    `models`), which must share one tokenizer. `ref_model` may be None when the reward does not read `"ref"`; with
    PEFT, π_SFT and π_ref can be two adapters of one base (`sft_adapter` / `ref_adapter`).

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
        reward: DenseReward | None = None,
        *,
        processing_class: PreTrainedTokenizerBase | None = None,
        ref_processing_class: PreTrainedTokenizerBase | None = None,
        sft_adapter: str | None = None,
        ref_adapter: str | None = None,
        token_chunk_size: int = 1024,
        models: dict[str, nn.Module] | None = None,
    ):
        super().__init__()
        reward = CheckpointDifference() if reward is None else reward
        check_dense_reward(reward, f"reward={type(reward).__name__}")
        self.reward = reward
        if "ref" in reward.model_names and ref_model is None:
            raise ValueError(
                f"The reward {type(reward).__name__} reads π_ref ('ref'), so it needs the reference checkpoint "
                "(`ref_model`). Pass it, load both with CheckpointRewardModel.from_pretrained(sft_dir), or score "
                "reward=SFTLogProb() for the 'wo/Baseline' ablation (dense_reward: trl_dpr.rewards:SFTLogProb in a recipe)."
            )
        check_token_chunk_size(token_chunk_size)
        models = dict(models or {})
        if {"sft", "ref"} & set(models):
            raise ValueError(
                f"models={sorted(models)}: 'sft' and 'ref' are sft_model and ref_model; `models` holds the reward's "
                "other models only."
            )
        check_models_given(reward, models)
        self.sft_model = sft_model
        self.ref_model = ref_model if "ref" in reward.model_names else None
        self.extra_models = nn.ModuleDict(models)  # frozen models of a reward beyond π_SFT and π_ref, by name
        self.processing_class = processing_class
        self.sft_adapter = sft_adapter
        self.ref_adapter = ref_adapter
        self.token_chunk_size = token_chunk_size
        self.sft_model_name_or_path: str | None = None  # set by from_pretrained (the model card names it)
        self.reference_manifest = None  # set by from_pretrained when π_ref came from an SFT manifest
        self.ref_model_name_or_path: str | None = None  # set by from_pretrained when π_ref was named instead

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
        return _causal_lm(self.sft_model).config

    @property
    def device(self) -> torch.device:
        return next(_causal_lm(self.sft_model).parameters()).device

    def prepare_for(self, accelerator, is_deepspeed_enabled: bool = False, is_fsdp_enabled: bool = False):
        """Place or shard the frozen scorers the way GRPOTrainer prepares its reference model; returns `self`.

        ZeRO-3 and FSDP shard them (`trl.models.prepare_deepspeed` / `prepare_fsdp`); otherwise each process holds
        them on its device. Adapters on a shared base live on the policy's model, which the trainer prepares.

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
        available = {
            "sft": (self.sft_model, self.sft_adapter),
            "ref": (self.ref_model, self.ref_adapter),
            **{name: (model, None) for name, model in self.extra_models.items()},
        }
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

        Prompts `[B, P]` left-padded, completions `[B, Tc]` right-padded. r̂ is at temperature 1 (Eq. 5);
        `kl_reference_logps` at the rollout `temperature`. `is_terminal` (`[B]`, read by w/V) defaults to whether the
        last real token is one of the SFT model's EOS ids.
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
                    scorer,
                    prompt_ids,
                    prompt_mask,
                    completion_ids,
                    completion_mask,
                    with_values=name in value_names,
                    token_chunk_size=self.token_chunk_size,
                    temperatures=temperatures,
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

        Prompts are strings or conversations (rendered as GRPOTrainer does); `append_eos` adds the EOS the model would
        end with. One dict per pair: `tokens`, `token_ids`, `rewards`, `total` (Σ r̂).

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
            raise ValueError(
                f"Got {len(prompts)} prompts and {len(completions)} completions; pass one of each per pair."
            )
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
        reward: DenseReward | None = None,
        token_chunk_size: int = 1024,
        model_paths: dict[str, str] | None = None,
        **model_init_kwargs,
    ) -> CheckpointRewardModel:
        """The scorer of `reward` (default DPR's) with π_SFT, π_ref (else the one the SFT recorded) and the reward's
        other models (`model_paths`: name → path or Hub id) loaded with the same `model_init_kwargs`.

        Example:
            >>> rm = CheckpointRewardModel.from_pretrained("runs/sft", dtype="bfloat16")  # doctest: +SKIP
            >>> wo_baseline = CheckpointRewardModel.from_pretrained("runs/sft", reward=SFTLogProb())  # doctest: +SKIP
        """
        reward = CheckpointDifference() if reward is None else reward
        frozen = load_frozen_models(
            sft_model_name_or_path, ref_model_name_or_path, reward, model_paths, **model_init_kwargs
        )
        reward_model = cls(reward=reward, token_chunk_size=token_chunk_size, **frozen.scorer_kwargs())
        reward_model.sft_model_name_or_path = sft_model_name_or_path
        reward_model.reference_manifest = frozen.reference_manifest
        if reward_model.ref_model is not None and frozen.reference_manifest is None:
            reward_model.ref_model_name_or_path = ref_model_name_or_path
        return reward_model


def load_reward_model(
    reward_model: CheckpointRewardModel | str | None,
    args,
    ref_model_name_or_path: str | None = None,
    **model_init_kwargs,
) -> CheckpointRewardModel:
    """The one loader of the scorer: from an SFT path with `args` (a `DensePathConfig`), or checked against it.

    A path loads the models the config's reward reads; a given `CheckpointRewardModel` must score the same reward
    (class and settings) as the config names, when it names one.
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
            reward=args.reward(),
            token_chunk_size=args.reward_token_chunk_size,
            model_paths=args.dense_reward_models,
            **(model_init_kwargs or dict(args.model_init_kwargs or {})),
        )
    if not isinstance(reward_model, CheckpointRewardModel):
        raise TypeError(
            f"reward_model must be a CheckpointRewardModel (the scorer of a DenseReward: "
            f"CheckpointRewardModel.from_pretrained(sft_path, reward=...)) or an SFT path, got {type(reward_model).__name__}."
        )
    # A config at its defaults names no reward: the scorer's own reward is the run's. One that names a reward
    # (dense_reward) must get it, or the run would train on another.
    wanted = args.reward()
    names_a_reward = args.dense_reward is not None
    if names_a_reward and not same_reward(wanted, reward_model.reward):
        raise ValueError(
            f"The config asks for the reward {describe_reward(wanted)} (dense_reward) "
            f"but the reward model scores {describe_reward(reward_model.reward)}. Build it with the same reward, or "
            "pass the SFT path as `reward_model` and let the trainer load it from the config."
        )
    return reward_model


def sequence_reward_func(reward_model: CheckpointRewardModel, batch_size: int | None = None):
    """The dense reward reduced to one number per completion, Σ_t r̂_t, as a `reward_funcs` entry of TRL's own
    `GRPOTrainer` / `RLOOTrainer`: try the checkpoint reward in a TRL pipeline you already have.

    Prompts are tokenized as GRPOTrainer does. A sequence reward gives up DPR's per-token credit (`DensePathTrainer`).

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


def _check_same_base(sft_model, ref_model, sft_tokenizer, ref_tokenizer) -> None:
    """π_ref must be a checkpoint of the same SFT run: same architecture, vocabulary and (when known) tokenizer."""
    sft_config = _causal_lm(sft_model).config.get_text_config()
    ref_config = _causal_lm(ref_model).config.get_text_config()
    for field_name in ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        sft_value, ref_value = getattr(sft_config, field_name, None), getattr(ref_config, field_name, None)
        if sft_value != ref_value:
            raise ValueError(
                f"π_ref is not a checkpoint of the same model as π_SFT: {field_name} is {sft_value!r} for π_SFT but "
                f"{ref_value!r} for π_ref (another base model?). Use the reference checkpoint saved by the same SFT run "
                "(dpr_reference/ next to the SFT model)."
            )
    sft_vocab = _causal_lm(sft_model).get_output_embeddings().weight.shape[0]
    ref_vocab = _causal_lm(ref_model).get_output_embeddings().weight.shape[0]
    if sft_vocab != ref_vocab:
        raise ValueError(
            f"π_SFT and π_ref have different vocabularies ({sft_vocab} vs {ref_vocab} output rows), so their token "
            "log-probs cannot be compared. The reference must be a checkpoint of the same SFT run (same base model "
            "and tokenizer)."
        )
    if (
        sft_tokenizer is not None
        and ref_tokenizer is not None
        and sft_tokenizer.get_vocab() != ref_tokenizer.get_vocab()
    ):
        differing = sorted(set(sft_tokenizer.get_vocab().items()) ^ set(ref_tokenizer.get_vocab().items()))[:5]
        raise ValueError(
            "π_SFT and π_ref were saved with different tokenizers (first differing (token, id) entries: "
            f"{differing}). The reference must be a checkpoint of the same SFT run."
        )
