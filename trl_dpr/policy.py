"""The policy DPR starts from (Algorithm 1, line 2: π_θ ← π_SFT), built from the reward model's π_SFT."""

from __future__ import annotations

import copy
import functools

from torch import nn

from .reward_model import CheckpointRewardModel

POLICY_ADAPTER = "default"  # PEFT saves the "default" adapter at the root of the output folder, where Trainer looks


def add_policy_adapter(reward_model: CheckpointRewardModel) -> nn.Module:
    """The DPR policy as a trainable copy of the π_SFT adapter on the reward model's own base (one base in memory).

    The policy is a third adapter, `default`, initialised from `sft` and trainable; `save_pretrained` then writes it
    only, so checkpoints and pushes hold the policy, not the frozen scorers.
    """
    peft_model, sft_adapter = reward_model.sft_model, reward_model.sft_adapter
    if sft_adapter is None:
        raise ValueError(
            "add_policy_adapter needs a reward model whose π_SFT is a PEFT adapter (from_pretrained of an adapter SFT output)."
        )
    if POLICY_ADAPTER in peft_model.peft_config:
        raise ValueError(
            f"The shared PEFT model already has an adapter named {POLICY_ADAPTER!r}; the policy adapter needs that name."
        )
    config = copy.deepcopy(peft_model.peft_config[sft_adapter])
    config.inference_mode = False
    peft_model.add_adapter(POLICY_ADAPTER, config)
    source, target = f".{sft_adapter}.", f".{POLICY_ADAPTER}."
    parameters = dict(peft_model.named_parameters())
    for name, parameter in parameters.items():
        if source in name:
            parameters[name.replace(source, target)].data.copy_(parameter.data)
    peft_model.set_adapter(POLICY_ADAPTER)  # active and trainable; the sft/ref adapters stay frozen
    # The base also carries the frozen sft/ref adapters: whoever saves this model (Trainer, a Hub push) gets the
    # policy adapter alone.
    peft_model.save_pretrained = functools.partial(
        type(peft_model).save_pretrained, peft_model, selected_adapters=[POLICY_ADAPTER]
    )
    return peft_model


def initial_policy(reward_model: CheckpointRewardModel, model=None, peft_config=None, use_vllm: bool = False):
    """The policy DPR starts from (Algorithm 1, line 2: π_θ ← π_SFT), as `GRPOTrainer` takes its `model`.

    `model=None` is the SFT path again (a trainable copy when π_SFT is in memory); with an adapter output, `None` or
    π_SFT itself is a trainable copy of its adapter (`add_policy_adapter`). Any other `model` is used as it is.
    """
    if reward_model.sft_adapter is not None and (model is None or model is reward_model.sft_model):
        if peft_config is not None:
            raise ValueError(
                "The reward model's π_SFT is a PEFT adapter, so the policy is a trainable copy of it on the same "
                "base; do not pass a peft_config (the copy keeps the SFT adapter's configuration)."
            )
        quantized = getattr(reward_model.sft_model, "is_loaded_in_4bit", False) or getattr(
            reward_model.sft_model, "is_loaded_in_8bit", False
        )
        if use_vllm and quantized:
            # TRL syncs a PEFT policy to vLLM by merging its adapter into the base and unmerging it after: on a 4/8-bit
            # base each step re-quantizes the base, so it drifts, and π_SFT / π_ref (adapters on that same base) would
            # score with a changed model.
            raise ValueError(
                "use_vllm with a quantized (4/8-bit) adapter SFT output is not supported: vLLM weight syncs merge the "
                "policy adapter into the shared quantized base and unmerge it, re-quantizing the base each time, which "
                "changes π_SFT and π_ref (the reward). Generate with transformers instead (use_vllm: false, with "
                "use_transformers_continuous_batching: true to bound memory, as the QLoRA recipes do), or train from a "
                "non-quantized (bf16) LoRA SFT output."
            )
        return add_policy_adapter(reward_model)
    if model is None:
        return reward_model.sft_model_name_or_path or copy.deepcopy(reward_model.sft_model).requires_grad_(True)
    if model is reward_model.sft_model:
        raise ValueError(
            "The policy and π_SFT are the same object: training would change the reward. Pass model=None to start "
            "from a copy of π_SFT, or load the SFT model a second time for the policy."
        )
    return model
