"""The paper's learning-from-demonstration baselines, SPIN and GSIL, on TRL's DPOTrainer (Table 1 of Li et al., 2025).

    losses      spin_loss, gsil_loss (five density-ratio loss pairs): pure tensor functions
    config      SPINConfig, GSILConfig (DPOConfig + the self-play loop, each paper's defaults)
    trainer     SPINTrainer, GSILTrainer: one iteration each, thin DPOTrainer subclasses
    self_play   run_self_play: π_t answers the demonstration prompts (cached), then trains against itself, T times

Both start from the SFT output of `trl-dpr sft` (π_SFT) on the same demonstrations as SFT and DPR; `trl-dpr spin`
and `trl-dpr gsil` run them, `experiments/table1.py` compares them with SFT, DPR and SR.
"""

from .config import GSILConfig, SelfPlayConfig, SPINConfig
from .losses import gsil_discriminator, gsil_loss, spin_loss
from .self_play import SelfPlayRun, SelfPlayScriptArguments, run_self_play
from .trainer import GSILTrainer, SelfPlayTrainer, SPINTrainer

__all__ = [
    "GSILConfig",
    "GSILTrainer",
    "SPINConfig",
    "SPINTrainer",
    "SelfPlayConfig",
    "SelfPlayRun",
    "SelfPlayScriptArguments",
    "SelfPlayTrainer",
    "gsil_discriminator",
    "gsil_loss",
    "run_self_play",
    "spin_loss",
]
