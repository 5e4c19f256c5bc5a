"""trl_dpr: Dense-Path REINFORCE (Li et al., 2025, arXiv:2510.02493) for Hugging Face TRL.

    SFTTrainer (+ ReferenceCheckpointCallback) → CheckpointRewardModel → DensePathTrainer
"""

from .algorithm import dense_path_advantages, sentence_rewards, token_returns, whiten
from .callbacks import ReferenceCheckpointCallback
from .config import DensePathConfig
from .reward_model import CheckpointRewardModel, TokenRewardOutput
from .trainer import DensePathTrainer

__version__ = "0.1.0"

__all__ = [
    "CheckpointRewardModel",
    "ReferenceCheckpointCallback",
    "DensePathConfig",
    "DensePathTrainer",
    "TokenRewardOutput",
    "dense_path_advantages",
    "sentence_rewards",
    "token_returns",
    "whiten",
]
