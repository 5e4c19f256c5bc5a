"""trl_dpr: Dense-Path REINFORCE (Li et al., 2025, arXiv:2510.02493) for Hugging Face TRL.

    SFTTrainer (+ ReferenceCheckpointCallback) → CheckpointRewardModel → DensePathTrainer

The algorithm is the modules at the top of the package (algorithm, rewards, reward_model, config, trainer, ...);
`trl_dpr.running` runs it (pipeline, `trl-dpr` CLI, recipes, checkpoints, Hub, GGUF, memory plan), `trl_dpr.analysis`
looks at it (preview, heatmaps, tracking), `trl_dpr.scripts` holds one module per stage, and `embedded`,
`evaluation` and `lfd` are the demo task, the paper's evaluation and the SPIN/GSIL baselines.

The public names are imported on first use (PEP 562, as `trl`'s `_LazyModule`): `trl-dpr --help` must not load torch.

Example:
    >>> import trl_dpr
    >>> trl_dpr.DensePathConfig.__name__
    'DensePathConfig'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name → the submodule that defines it
_LAZY = {
    "dense_path_advantages": "algorithm",
    "sentence_rewards": "algorithm",
    "token_returns": "algorithm",
    "whiten": "algorithm",
    "ReferenceCheckpointCallback": "reference_callback",
    "DensePathConfig": "config",
    "CheckpointRewardModel": "reward_model",
    "sequence_reward_func": "reward_model",
    "DenseReward": "rewards",
    "ScoredCompletions": "rewards",
    "CheckpointDifference": "rewards",
    "SFTLogProb": "rewards",
    "WithSoftValue": "rewards",
    "TokenRewardOutput": "reward_model",
    "DensePathTrainer": "trainer",
}

__all__ = [
    "CheckpointDifference",
    "CheckpointRewardModel",
    "DenseReward",
    "SFTLogProb",
    "ScoredCompletions",
    "WithSoftValue",
    "sequence_reward_func",
    "ReferenceCheckpointCallback",
    "DensePathConfig",
    "DensePathTrainer",
    "TokenRewardOutput",
    "dense_path_advantages",
    "sentence_rewards",
    "token_returns",
    "whiten",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` imports on first use
    from .algorithm import dense_path_advantages, sentence_rewards, token_returns, whiten
    from .config import DensePathConfig
    from .reference_callback import ReferenceCheckpointCallback
    from .reward_model import CheckpointRewardModel, TokenRewardOutput, sequence_reward_func
    from .rewards import CheckpointDifference, DenseReward, ScoredCompletions, SFTLogProb, WithSoftValue
    from .trainer import DensePathTrainer


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'trl_dpr' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # cached: the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
