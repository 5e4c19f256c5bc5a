"""The paper's learning-from-demonstration baselines, SPIN and GSIL, on TRL's DPOTrainer (Table 1 of Li et al., 2025).

    losses      spin_loss, gsil_loss (five density-ratio loss pairs): pure tensor functions
    config      SPINConfig, GSILConfig (DPOConfig + the self-play loop, each paper's defaults)
    trainer     SPINTrainer, GSILTrainer: one iteration each, thin DPOTrainer subclasses
    self_play   run_self_play: π_t answers the demonstration prompts (cached), then trains against itself, T times

Both start from `trl-dpr sft`'s output, on the same demonstrations (`trl-dpr spin` / `trl-dpr gsil`).
"""

from .config import GSILConfig, SPINConfig
from .config import SelfPlayConfig as SelfPlayConfig
from .losses import gsil_discriminator as gsil_discriminator
from .losses import gsil_loss as gsil_loss
from .losses import spin_loss as spin_loss
from .self_play import SelfPlayRun as SelfPlayRun
from .self_play import SelfPlayScriptArguments as SelfPlayScriptArguments
from .self_play import run_self_play as run_self_play
from .trainer import GSILTrainer, SPINTrainer
from .trainer import SelfPlayTrainer as SelfPlayTrainer

# The baselines' trainers, as a user of TRL builds any trainer (DPR's own names are `trl_dpr.__all__`; these stay here so
# that `import trl_dpr` never loads DPOTrainer). The rest above is importable, not advertised.
__all__ = ["GSILConfig", "GSILTrainer", "SPINConfig", "SPINTrainer"]
