r"""The dense reward as a rule: `DenseReward`, the paper's variants, and the one loader recipes use.

A dense reward reads the log-probs that frozen causal LMs give the sampled tokens and returns one reward per token.
It names the models it reads; `CheckpointRewardModel` (the scorer) holds those models, runs one forward of each per
batch, and also keeps log π_SFT at the rollout temperature for DPR's KL term, so a reward need not be π_SFT's.

Where a variant belongs: *what r̂_t is* lives here (DPR's checkpoint difference, wo/Baseline, w/V, a user's reward);
*how r̂ is credited to tokens* lives with the RL settings of `DensePathConfig` (γ, `reward_granularity` = SR, the KL
weight, whitening), because it changes returns, not rewards: SR is the same r̂ paid at the last token.

Example, a per-token clipped r̂ in a user's own file (`my_rewards.py`):

    class ClippedReward:
        model_names = ("sft", "ref")

        def __init__(self, clip: float = 2.0):
            self.clip = clip

        def __call__(self, scored):
            r = scored.logps["sft"] - scored.logps["ref"]
            return r.clamp(-self.clip, self.clip) * scored.completion_mask

and in a recipe: `dense_reward: my_rewards:ClippedReward` with `dense_reward_kwargs: {clip: 2.0}`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from . import algorithm

__all__ = [
    "CheckpointDifference",
    "DenseReward",
    "SFTLogProb",
    "ScoredCompletions",
    "WithSoftValue",
    "build_dense_reward",
    "frozen_model_names",
    "paper_reward",
]


@dataclass
class ScoredCompletions:
    """What a `DenseReward` reads: the sampled tokens and each named model's log-probs of them, `[B, T]`, 0 at padding.

    Attributes:
        logps: name → log π(a_t|s_t) at temperature 1 (float32).
        completion_mask: 1 on real completion tokens.
        completion_ids: the sampled token ids.
        is_terminal: `[B]` True where the completion ended with EOS (False when cut at the length limit).
        values: name → V(s_t) = logsumexp of that model's logits at s_t, for the models in `value_model_names`.
        final_next_values: name → `[B]` V of the state after the last token.

    Example:
        >>> s = ScoredCompletions({"sft": torch.tensor([[-1.0, 0.0]])}, torch.tensor([[1, 0]]), torch.tensor([[5, 0]]))
        >>> SFTLogProb()(s)
        tensor([[-1.,  0.]])
    """

    logps: Mapping[str, torch.Tensor]
    completion_mask: torch.Tensor
    completion_ids: torch.Tensor
    is_terminal: torch.Tensor | None = None
    values: Mapping[str, torch.Tensor] = field(default_factory=dict)
    final_next_values: Mapping[str, torch.Tensor] = field(default_factory=dict)


@runtime_checkable
class DenseReward(Protocol):
    """A per-token reward read off frozen causal LMs. Any object with these two members is one (no base class).

    `model_names` lists the frozen models it reads: `"sft"` is π_SFT, `"ref"` the reference checkpoint, any other
    name a model given to the scorer (`CheckpointRewardModel(models={name: model})`, or `dense_reward_models: {name:
    path}` in a recipe), placed and sharded like π_SFT. An optional `value_model_names` asks for V(s_t) of those models.
    Calling it returns the `[B, T]` float reward, 0 at padding.

    Example:
        >>> isinstance(CheckpointDifference(), DenseReward)
        True
    """

    model_names: tuple[str, ...]

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor: ...


class CheckpointDifference:
    r"""DPR's reward (Eq. 5): r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t).

    Example:
        >>> s = ScoredCompletions({"sft": torch.tensor([[-0.1, -2.0]]), "ref": torch.tensor([[-1.1, -1.0]])},
        ...                       torch.tensor([[1, 0]]), torch.tensor([[5, 0]]))
        >>> CheckpointDifference()(s)
        tensor([[1., 0.]])
    """

    model_names = ("sft", "ref")
    label = "r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t) (DPR, Eq. 5)"

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor:
        return algorithm.baseline_relative_rewards(scored.logps["sft"], scored.logps["ref"], scored.completion_mask)


class SFTLogProb:
    r"""The wo/Baseline ablation: r̂_t = log π_SFT(a_t|s_t) (no reference checkpoint).

    Example:
        >>> SFTLogProb().model_names
        ('sft',)
    """

    model_names = ("sft",)
    label = "r̂_t = log π_SFT(a_t|s_t) (wo/Baseline ablation: no reference checkpoint)"

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor:
        return algorithm.baseline_relative_rewards(scored.logps["sft"], None, scored.completion_mask)


class WithSoftValue:
    r"""The w/V ablation: another reward plus the potential term the paper eliminates, V_SFT(s_t) − V_SFT(s_{t+1}).

    Example:
        >>> WithSoftValue(CheckpointDifference()).value_model_names
        ('sft',)
    """

    value_model_names = ("sft",)

    def __init__(self, reward: DenseReward):
        self.reward = reward
        self.model_names = tuple(reward.model_names)
        self.label = f"{getattr(reward, 'label', type(reward).__name__)} + V_SFT(s_t) − V_SFT(s_(t+1)) (w/V ablation)"

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor:
        shaping = algorithm.soft_value_shaping(
            scored.values["sft"], scored.completion_mask, scored.is_terminal, scored.final_next_values["sft"]
        )
        return self.reward(scored) + shaping


def frozen_model_names(reward: DenseReward) -> tuple[str, ...]:
    """The frozen models a DPR run holds for `reward`, in scoring order: π_SFT (`"sft"`) always, the reference of DPR's
    KL term even when the reward does not read it, then every other model the reward reads. The scorer scores them
    and the memory plan counts them.

    Example:
        >>> frozen_model_names(SFTLogProb()), frozen_model_names(CheckpointDifference())
        (('sft',), ('sft', 'ref'))
    """
    return ("sft", *(name for name in reward.model_names if name != "sft"))


def paper_reward(use_baseline: bool = True, eliminate_value: bool = True) -> DenseReward:
    """The paper's reward for its two reward-side switches: DPR, wo/Baseline, and either with the V term (w/V).

    Example:
        >>> type(paper_reward()).__name__, type(paper_reward(use_baseline=False)).__name__
        ('CheckpointDifference', 'SFTLogProb')
    """
    reward = CheckpointDifference() if use_baseline else SFTLogProb()
    return reward if eliminate_value else WithSoftValue(reward)


def build_dense_reward(spec: str, kwargs: Mapping | None = None) -> DenseReward:
    """The reward a recipe names: `"package.module:ClassName"` (importable), built with `kwargs`.

    Example:
        >>> type(build_dense_reward("trl_dpr.rewards:CheckpointDifference")).__name__
        'CheckpointDifference'
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            f"dense_reward must be 'module:ClassName' (e.g. my_rewards:ClippedReward, with my_rewards.py importable "
            f"from the working directory or installed), got {spec!r}."
        )
    try:
        module = _import_from_working_directory(module_name)
    except ImportError as error:
        raise ValueError(
            f"dense_reward {spec!r}: cannot import {module_name!r} ({error}). Run from the folder that holds "
            f"{module_name.replace('.', '/')}.py, or install the package that provides it."
        ) from error
    factory = getattr(module, attribute, None)
    if factory is None:
        raise ValueError(f"dense_reward {spec!r}: {module_name!r} has no {attribute!r}.")
    try:
        reward = factory(**dict(kwargs or {}))
    except TypeError as error:
        raise ValueError(f"dense_reward {spec!r} does not take dense_reward_kwargs {dict(kwargs or {})}: {error}.") from error
    try:
        check_dense_reward(reward, spec)
    except TypeError as error:  # named in a recipe: a mistake in the input, reported as one
        raise ValueError(str(error)) from None
    return reward


def _import_from_working_directory(module_name: str):
    """`import module_name`, with the folder the command runs in on `sys.path` as TRL's scripts put it for
    `--reward_funcs my_module.fn`: a launched script's `sys.path` starts at its own folder, not the user's."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name.split(".")[0] or os.getcwd() in sys.path:
            raise
    sys.path.insert(0, os.getcwd())
    return importlib.import_module(module_name)


def check_dense_reward(reward, where: str = "the reward") -> None:
    """A clear error when `reward` is not a `DenseReward` (the one place this rule is checked).

    Example:
        >>> check_dense_reward(object(), "x")
        Traceback (most recent call last):
        ...
        TypeError: x is not a DenseReward: it needs `model_names` (a tuple of model names such as ('sft', 'ref')) and must be callable on ScoredCompletions, returning [B, T] rewards.
    """
    names = getattr(reward, "model_names", None)
    if not callable(reward) or not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"{where} is not a DenseReward: it needs `model_names` (a tuple of model names such as ('sft', 'ref')) and "
            "must be callable on ScoredCompletions, returning [B, T] rewards."
        )
    unknown_values = set(getattr(reward, "value_model_names", ())) - set(names)
    if unknown_values:
        raise TypeError(f"{where}: value_model_names {sorted(unknown_values)} must also be in model_names {tuple(names)}.")
