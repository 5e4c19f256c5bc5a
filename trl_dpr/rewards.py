r"""The dense reward as a rule: `DenseReward`, the paper's variants, and the one loader recipes use.

*What r̂_t is* lives here (DPR's, wo/Baseline, w/V, a user's reward: the README's `ClippedReward`); *how r̂ is credited
to tokens* (γ, SR, the KL, whitening) lives with `DensePathConfig`, because it changes returns, not rewards.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

import torch

from . import algorithm
from .field_checks import LEGACY_REWARD_KEYS


@dataclass
class ScoredCompletions:
    """What a `DenseReward` reads: the sampled tokens and each named model's log-probs of them, `[B, T]`, 0 at padding.

    `logps` (name → log π(a_t|s_t)) are at temperature 1; `values` (name → V(s_t), the logsumexp of the logits) and
    `final_next_values` (`[B]`) only for `value_model_names`; `is_terminal` (`[B]`) where it ended with EOS.

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

    `model_names`: the frozen models it reads (`"sft"`, `"ref"`, or any name given to the scorer's `models` /
    `dense_reward_models`); optional `value_model_names` (asks for V(s_t)) and `label` (for the model card). Calling it
    returns the `[B, T]` float reward, 0 at padding. Two rewards are the same when class and settings are.

    Example:
        >>> isinstance(CheckpointDifference(), DenseReward)
        True
    """

    model_names: tuple[str, ...]

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor: ...


# Optional members of a DenseReward (not part of the protocol's isinstance check):
#   value_model_names: tuple[str, ...]  models whose V(s_t) the reward reads (ScoredCompletions.values)
#   label: str                          what r̂_t is, one line (model cards, `reward_label`)


@dataclass(frozen=True)
class CheckpointDifference:
    r"""DPR's reward (Eq. 5): r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t).

    Example:
        >>> s = ScoredCompletions({"sft": torch.tensor([[-0.1, -2.0]]), "ref": torch.tensor([[-1.1, -1.0]])},
        ...                       torch.tensor([[1, 0]]), torch.tensor([[5, 0]]))
        >>> CheckpointDifference()(s)
        tensor([[1., 0.]])
    """

    model_names: ClassVar[tuple[str, ...]] = ("sft", "ref")
    label: ClassVar[str] = "r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t) (DPR, Eq. 5)"

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor:
        return algorithm.baseline_relative_rewards(scored.logps["sft"], scored.logps["ref"], scored.completion_mask)


@dataclass(frozen=True)
class SFTLogProb:
    r"""The wo/Baseline ablation: r̂_t = log π_SFT(a_t|s_t) (no reference checkpoint).

    Example:
        >>> SFTLogProb().model_names
        ('sft',)
    """

    model_names: ClassVar[tuple[str, ...]] = ("sft",)
    label: ClassVar[str] = "r̂_t = log π_SFT(a_t|s_t) (wo/Baseline ablation: no reference checkpoint)"

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor:
        return algorithm.baseline_relative_rewards(scored.logps["sft"], None, scored.completion_mask)


@dataclass(frozen=True)
class WithSoftValue:
    r"""The w/V ablation: another reward plus the potential term the paper eliminates, V_SFT(s_t) − V_SFT(s_{t+1}).

    `reward` is DPR's by default; a recipe names another by its `module:Class` (`dense_reward_kwargs: {reward: ...}`).

    Example:
        >>> WithSoftValue().reward, WithSoftValue("trl_dpr.rewards:SFTLogProb").model_names
        (CheckpointDifference(), ('sft',))
    """

    reward: DenseReward | str = field(default_factory=lambda: CheckpointDifference())
    value_model_names: ClassVar[tuple[str, ...]] = ("sft",)

    def __post_init__(self):
        if isinstance(self.reward, str):  # named in a recipe
            object.__setattr__(self, "reward", build_dense_reward(self.reward))

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(self.reward.model_names)

    @property
    def label(self) -> str:
        return f"{reward_label(self.reward)} + V_SFT(s_t) − V_SFT(s_(t+1)) (w/V ablation)"

    def __call__(self, scored: ScoredCompletions) -> torch.Tensor:
        shaping = algorithm.soft_value_shaping(
            scored.values["sft"], scored.completion_mask, scored.is_terminal, scored.final_next_values["sft"]
        )
        return self.reward(scored) + shaping


def frozen_model_names(reward: DenseReward) -> tuple[str, ...]:
    """The frozen models a DPR run holds for `reward`, in scoring order: `"sft"` always (the KL's reference), then
    every other model the reward reads."""
    return ("sft", *(name for name in reward.model_names if name != "sft"))


def check_models_given(reward: DenseReward, given: Iterable[str]) -> None:
    """The one check that every model `reward` reads besides π_SFT and π_ref was given (by name: models or paths)."""
    if missing := [n for n in reward.model_names if n not in ("sft", "ref") and n not in set(given)]:
        raise ValueError(
            f"The reward {describe_reward(reward)} reads the models {list(reward.model_names)}: 'sft' and 'ref' are π_SFT "
            f"and π_ref, every other one must be given (missing: {missing}). Pass models={{{missing[0]!r}: model}} to "
            f"CheckpointRewardModel, or model_paths={{{missing[0]!r}: 'path/or/hub-id'}} to from_pretrained (in a recipe "
            "or a preview variant: dense_reward_models: {name: path})."
        )


def reward_from_settings(settings: Mapping) -> DenseReward:
    """The reward a run's settings name (config, preview variant): `dense_reward` (`module:Class`) with its kwargs,
    else DPR's `CheckpointDifference`. The one place settings become a reward."""
    if legacy := [key for key in LEGACY_REWARD_KEYS if key in settings]:
        raise ValueError(
            f"{', '.join(legacy)}: removed; the reward is chosen by dense_reward alone. Write "
            + "; ".join(LEGACY_REWARD_KEYS[key] for key in legacy)
            + "."
        )
    spec, kwargs, models = (settings.get(k) for k in ("dense_reward", "dense_reward_kwargs", "dense_reward_models"))
    if spec is None and (kwargs or models):
        raise ValueError("dense_reward_kwargs / dense_reward_models configure dense_reward, which is not set.")
    return CheckpointDifference() if spec is None else build_dense_reward(spec, kwargs)


def reward_label(reward: DenseReward) -> str:
    """What a reward computes, for model cards and logs: its `label` when it has one, else `describe_reward`."""
    return getattr(reward, "label", None) or describe_reward(reward)


def describe_reward(reward: DenseReward) -> str:
    """A reward by class and settings, e.g. `ClippedReward(clip=2.0)`: what `same_reward` compares."""
    settings = _settings(reward)
    inner = ", ".join(f"{k}={describe_reward(v) if _is_reward(v) else repr(v)}" for k, v in settings.items())
    return type(reward).__name__ + (f"({inner})" if inner else "")


def same_reward(a: DenseReward, b: DenseReward) -> bool:
    """Whether two rewards are the same rule: same class, same settings by value (nested rewards included)."""
    if type(a) is not type(b):
        return False
    settings_a, settings_b = _settings(a), _settings(b)
    if settings_a.keys() != settings_b.keys():
        return False
    return all(
        same_reward(v, settings_b[k]) if _is_reward(v) else _equal(v, settings_b[k]) for k, v in settings_a.items()
    )


def _settings(reward) -> dict:
    """A reward's settings: its dataclass fields, else its instance attributes (what `__init__(**kwargs)` stored)."""
    if is_dataclass(reward):
        return {f.name: getattr(reward, f.name) for f in fields(reward)}
    return {k: v for k, v in vars(reward).items() if not k.startswith("_")} if hasattr(reward, "__dict__") else {}


def _is_reward(value) -> bool:
    return callable(value) and isinstance(getattr(value, "model_names", None), (tuple, list))


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool((a == b).all())
        )
    return bool(a == b)


def build_dense_reward(spec: str, kwargs: Mapping | None = None) -> DenseReward:
    """The reward a recipe names: `"package.module:ClassName"` (importable), built with `kwargs`."""
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
        raise ValueError(
            f"dense_reward {spec!r} does not take dense_reward_kwargs {dict(kwargs or {})}: {error}."
        ) from error
    try:
        check_dense_reward(reward, spec)
    except TypeError as error:  # named in a recipe: a mistake in the input, reported as one
        raise ValueError(str(error)) from None
    return reward


def _import_from_working_directory(module_name: str):
    """`import module_name`, the folder the command runs in first when it holds the module (`./my_checks.py`,
    `./my_checks/__init__.py`), as TRL's scripts put it for `--reward_funcs my_checks.fn`: a launched script's
    `sys.path` starts at its own folder (trl_dpr/scripts/, recipes/), whose `evaluate.py` would shadow the user's. What
    is imported is then the file `run_fingerprint` digests (`_local_source_files`)."""
    local = _local_module_path(module_name.split(".")[0])
    if local is None:  # installed, or not there at all (the old fallback: a namespace package, a compiled module)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name.split(".")[0] or os.getcwd() in sys.path:
                raise
        sys.path.insert(0, os.getcwd())
        return importlib.import_module(module_name)
    top = module_name.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None and _FROM_A_WORKING_DIRECTORY.get(top) is loaded and not _same_file(loaded.__file__, local):
        for name in [name for name in sys.modules if name == top or name.startswith(top + ".")]:  # another folder's
            del sys.modules[name]
    elif loaded is not None and not _same_file(getattr(loaded, "__file__", None), local):
        raise ImportError(
            f"./{local.relative_to(Path.cwd()).as_posix()} is shadowed by the module of that name this process "
            f"imported already ({getattr(loaded, '__file__', None) or 'built in'}); rename your file"
        )
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        _FROM_A_WORKING_DIRECTORY[top] = sys.modules[top]
        return module
    finally:  # the user's folder stays importable (a function's own later imports), behind what was there
        sys.path[:] = saved if os.getcwd() in saved else [*saved, os.getcwd()]


# Modules `_import_from_working_directory` imported from the folder a command ran in, by name: a later import from
# another folder (a notebook that changed folder, a test) replaces them; an installed module of the name is refused.
_FROM_A_WORKING_DIRECTORY: dict[str, object] = {}


def _local_module_path(top: str) -> Path | None:
    """`./top/__init__.py` or else `./top.py` in the folder the command runs in (a package first, as Python looks)."""
    if not top.isidentifier():
        return None
    for path in (Path.cwd() / top / "__init__.py", Path.cwd() / f"{top}.py"):
        if path.is_file():
            return path
    return None


def _same_file(a: str | None, b: Path) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def _local_source_files(module_name: str) -> list[Path]:
    """The files of the folder the command runs in that `import module_name` reads, found without importing: every
    `*.py` of its package (`./pkg/**`, no `__pycache__`) or its module file, and so on for the folder's modules those
    import by name (`import helper`, `from helper import x`; read with `ast`). [] for an installed module."""
    found, tops = set(), [module_name.split(".")[0]]
    while tops:
        path = _local_module_path(tops.pop())
        if path is None:
            continue
        files = sorted(p for p in path.parent.rglob("*.py") if "__pycache__" not in p.parts)
        for file in [path] if path.name != "__init__.py" else files:
            if file not in found:
                found.add(file)
                tops.extend(_imported_names(file))
    return sorted(found)


def _imported_names(file: Path) -> list[str]:
    """The top-level module names `file` imports absolutely (relative imports stay in its package, digested whole)."""
    import ast

    try:
        tree = ast.parse(file.read_bytes())
    except (OSError, SyntaxError, ValueError):  # its import says what is wrong
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return names


# The names TRL's `trl grpo` script takes without a module (trl/scripts/grpo.py's registry, with its values).
_TRL_REWARD_FUNC_NAMES = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward")
_TRL_REWARD_FACTORIES = {"get_soft_overlong_punishment": {"max_completion_len": 1280, "soft_punish_cache": 256}}


def _factory_settings(attribute: str, max_completion_length: int | None) -> dict:
    """The arguments a factory of TRL's is built with: DAPO's soft overlong punishment fits the run's own
    `max_completion_length` (its last quarter penalised, 0 → −1), where TRL's script values (1280, 256) would never
    penalise a run that stops at 1024 tokens; those without a length."""
    if attribute == "get_soft_overlong_punishment" and max_completion_length:
        return {"max_completion_len": max_completion_length, "soft_punish_cache": max(1, max_completion_length // 4)}
    return _TRL_REWARD_FACTORIES[attribute]


REWARD_FUNC_FORMS = (
    f"a name of TRL's ({', '.join([*_TRL_REWARD_FUNC_NAMES, *_TRL_REWARD_FACTORIES])}), a dotted import path "
    "(my_checks.right_answer, as TRL's scripts take it) or module:function (my_checks:right_answer), with my_checks.py "
    "in the folder you run from or installed"
)


def reward_func_source(spec: str) -> tuple[str, str]:
    """(module, function) of a `reward_funcs` entry, without importing anything: TRL's names are `trl.rewards`'.

    Example:
        >>> reward_func_source("my_checks.right_answer"), reward_func_source("think_format_reward")
        (('my_checks', 'right_answer'), ('trl.rewards', 'think_format_reward'))
    """
    if spec in _TRL_REWARD_FUNC_NAMES or spec in _TRL_REWARD_FACTORIES:
        return "trl.rewards", spec
    module_name, _, attribute = spec.partition(":") if ":" in spec else spec.rpartition(".")
    return module_name, attribute


def load_reward_func(spec: str, max_completion_length: int | None = None):
    """The outcome reward function a recipe names in `reward_funcs` (TRL's `def f(prompts, completions, **kwargs) ->
    list[float]`): one of `REWARD_FUNC_FORMS`, imported as `dense_reward` is (the folder the command runs in first).
    A name that does not resolve to a function is one line saying what is accepted. `max_completion_length`: the run's,
    which `get_soft_overlong_punishment` is built for (`_factory_settings`).

    Example:
        >>> load_reward_func("think_format_reward").__name__, load_reward_func("trl.rewards:think_format_reward").__name__
        ('think_format_reward', 'think_format_reward')
    """
    module_name, attribute = reward_func_source(spec)
    if not module_name or not attribute:
        raise ValueError(f"reward_funcs {spec!r} names no function; give {REWARD_FUNC_FORMS}.")
    try:
        module = _import_from_working_directory(module_name)
    except ImportError as error:
        raise ValueError(
            f"reward_funcs {spec!r}: cannot import {module_name!r} ({error}); give {REWARD_FUNC_FORMS}."
        ) from None
    func = getattr(module, attribute, None)
    if func is None:
        raise ValueError(f"reward_funcs {spec!r}: {module_name!r} has no {attribute!r}; give {REWARD_FUNC_FORMS}.")
    if module_name == "trl.rewards" and attribute in _TRL_REWARD_FACTORIES:
        func = func(**_factory_settings(attribute, max_completion_length))
    if not callable(func):
        raise ValueError(
            f"reward_funcs {spec!r}: {module_name}.{attribute} is a {type(func).__name__}, not a function; it must be "
            f"`def {attribute}(prompts, completions, **kwargs) -> list[float]` (one score per completion)."
        )
    if getattr(func, "__module__", None) == "trl.rewards.accuracy_rewards":  # they import math_verify when called
        from trl.import_utils import is_math_verify_available

        if not is_math_verify_available():
            raise ValueError(
                f"reward_funcs {spec!r} needs the math_verify package, which is not installed: "
                "`pip install math-verify`."
            )
    return func


def check_dense_reward(reward, where: str = "the reward") -> None:
    """A clear error when `reward` is not a `DenseReward` (the one place this rule is checked)."""
    names = getattr(reward, "model_names", None)
    if not callable(reward) or not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"{where} is not a DenseReward: it needs `model_names` (a tuple of model names such as ('sft', 'ref')) and "
            "must be callable on ScoredCompletions, returning [B, T] rewards."
        )
    unknown_values = set(getattr(reward, "value_model_names", ())) - set(names)
    if unknown_values:
        raise TypeError(
            f"{where}: value_model_names {sorted(unknown_values)} must also be in model_names {tuple(names)}."
        )
