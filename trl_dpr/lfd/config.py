"""`SPINConfig` and `GSILConfig`: DPOConfig with the self-play fields and each paper's defaults.

Sources of the defaults: SPIN, arXiv:2401.01335 and uclaml/SPIN; GSIL, arXiv:2410.10093 and tengxiao1/GSIL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DPOConfig

from ..config import ActivationCheckpointingAlias, refuse_unused_fields, unused_parent_fields
from ..range_rules import check_ranges
from .losses import GSIL_LOSSES, SPIN_LOSSES


@dataclass
class SelfPlayConfig(ActivationCheckpointingAlias, DPOConfig):
    r"""What SPIN and GSIL share on top of [`trl.DPOConfig`]: the self-play loop. Use `SPINConfig` or `GSILConfig`.

    Training-loop fields apply to each iteration; `output_dir` holds `iteration-<t>/`, π_t's cached answers
    (`generations/iteration-<t>.jsonl`) and, at the end, the last iterate.
    """

    num_iterations: int = field(
        default=1, metadata={"help": "Self-play iterations: π_t answers, then π_{t+1} is trained."}
    )
    generation_temperature: float = field(
        default=1.0,
        metadata={"help": "Temperature of the answers π_t writes for the demonstration prompts (0: greedy)."},
    )
    generation_top_p: float = field(
        default=1.0, metadata={"help": "Nucleus (top-p) sampling of π_t's answers; 1 = off."}
    )
    max_new_tokens: int = field(
        default=256,
        metadata={"help": "Longest answer π_t writes, in tokens (uclaml/SPIN and tengxiao1/GSIL generate.py: 256)."},
    )
    # The defaults both papers share (uclaml/SPIN configs/config.yaml, tengxiao1/GSIL scripts/finetune.sh).
    beta: float = field(
        default=0.1,
        metadata={
            "help": "Scale of the log-ratio to π_t: SPIN's λ, GSIL's β in f = β log π_θ/π_t + b (both papers: 0.1)."
        },
    )
    learning_rate: float = field(
        default=5e-7, metadata={"help": "Learning rate of each iteration (both papers: 5e-7)."}
    )
    optim: str = field(default="rmsprop", metadata={"help": "Optimizer (both papers: RMSProp)."})
    lr_scheduler_type: str = field(
        default="linear", metadata={"help": "Learning-rate schedule of each iteration (linear)."}
    )
    warmup_steps: float = field(
        default=0.1,
        metadata={"help": "Warmup: steps, or a ratio of each iteration's steps when < 1 (both papers: 0.1)."},
    )
    generation_batch_size: int = field(default=32, metadata={"help": "Prompts per generate call while π_t answers."})
    previous_iteration_pairs: bool = field(
        default=False,
        metadata={
            "help": "Train iteration t on its pairs and on iteration t−1's (the old answers, the old reference's)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start over in an output_dir that holds a self-play run (its π_T, iterations and cached answers "
            "are deleted once every check has passed; with resume_from_checkpoint it resumes instead). Off: a run with "
            "the same settings resumes (finished: `Already finished`), one with other settings is refused, naming them."
        },
    )

    # DPO fields that would change the loss or the reference these methods define: refused when set, not ignored
    # (`refuse_unused_fields`).
    _UNUSED_FIELDS = unused_parent_fields(
        DPOConfig,
        {
            "loss_type": "the loss is the method's own (`spin_loss_type` / `gsil_loss_type`)",
            "loss_weights": "the loss is the method's own (`spin_loss_type` / `gsil_loss_type`)",
            "ld_alpha": "the loss uses whole-sequence log-probabilities, as the papers do",
            "f_divergence_type": "the loss is the method's own (`spin_loss_type` / `gsil_loss_type`)",
            "use_weighting": "the papers weight every pair equally",
            "label_smoothing": "the loss is the method's own (`spin_loss_type` / `gsil_loss_type`)",
            "sync_ref_model": "the reference is π_t, the iterate that wrote the answers, frozen for the whole iteration",
        },
    )

    # range_rules.RANGE_RULES checked by __post_init__, and by the recipe parser before anything loads
    _RANGE_RULES = (
        "num_iterations",
        "generation_temperature",
        "generation_top_p",
        "self_play_generation",
        "self_play_beta",
    )

    def __post_init__(self):
        refuse_unused_fields(self)
        check_ranges(self, self._RANGE_RULES)
        if getattr(self, "truncation_mode", "keep_start") != "keep_start":
            raise ValueError(
                f"truncation_mode {self.truncation_mode!r} is not supported by self-play: its trainer drops a pair "
                "whose prompt reaches max_length, as DPOTrainer does with keep_start. Set truncation_mode: keep_start "
                "(the default)."
            )
        if self.push_to_hub:
            raise ValueError(
                "push_to_hub is not supported for self-play: every iteration is a training run of its own, and pushes "
                "would upload each of them. Upload the last iterate after the run: `hf upload <repo id> <output_dir>`."
            )
        super().__post_init__()


@dataclass
class SPINConfig(SelfPlayConfig):
    r"""Configuration for [`SPINTrainer`] and `trl-dpr spin`: [`trl.DPOConfig`], the self-play loop and SPIN's loss,
    with SPIN's defaults (uclaml/SPIN's `configs/config*.yaml`, `spin/generate.py`).

    Parameters:
        beta (`float`, defaults to `0.1`): λ of L_SPIN. spin_loss_type (`str`, defaults to `"sigmoid"`) or `"hinge"`.
        num_iterations (`int`, defaults to `4`); previous_iteration_pairs (`bool`, defaults to `True`).
        generation_temperature `0.8`, generation_top_p `0.95`, max_new_tokens `256`; learning_rate `5e-7`, optim
            `"rmsprop"`, lr_scheduler_type `"linear"`, warmup_steps `0.1`, num_train_epochs `3` (per iteration).

    Example:
        >>> from trl_dpr.lfd import SPINConfig
        >>> args = SPINConfig(output_dir="runs/spin", use_cpu=True, bf16=False)
        >>> args.beta, args.num_iterations, args.generation_temperature, args.learning_rate
        (0.1, 4, 0.8, 5e-07)
    """

    spin_loss_type: str = field(
        default="sigmoid",
        metadata={
            "help": "ℓ of SPIN's loss (Method section): 'sigmoid' = the paper's logistic loss log(1 + e^{-t}); "
            "'hinge' = max(0, 1 - t) (uclaml/SPIN spin_loss).",
            "choices": list(SPIN_LOSSES),
        },
    )
    num_iterations: int = field(
        default=4, metadata={"help": "Self-play iterations (Experiments section: iterations 0 to 3)."}
    )
    previous_iteration_pairs: bool = field(
        default=True,
        metadata={
            "help": "Iteration t >= 1 also trains on iteration t-1's pairs (Experiments section; uclaml/SPIN "
            "configs/config_iter1.yaml mixes SPIN_iter0 and SPIN_iter1)."
        },
    )
    generation_temperature: float = field(
        default=0.8, metadata={"help": "Temperature of π_t's answers (uclaml/SPIN spin/generate.py: 0.8)."}
    )
    generation_top_p: float = field(
        default=0.95, metadata={"help": "Top-p of π_t's answers (uclaml/SPIN spin/generate.py: 0.95)."}
    )
    num_train_epochs: float = field(
        default=3.0, metadata={"help": "Epochs over each iteration's pairs (uclaml/SPIN configs/config.yaml: 3)."}
    )

    def __post_init__(self):
        if self.spin_loss_type not in SPIN_LOSSES:
            raise ValueError(
                f"spin_loss_type must be one of {SPIN_LOSSES} ('sigmoid' is the paper's), got {self.spin_loss_type!r}."
            )
        super().__post_init__()


@dataclass
class GSILConfig(SelfPlayConfig):
    r"""Configuration for [`GSILTrainer`] and `trl-dpr gsil`: [`trl.DPOConfig`], the self-play loop and GSIL's losses,
    with GSIL's defaults (tengxiao1/GSIL's `scripts/finetune.sh`, `gsil/generate.py`).

    Parameters:
        beta (`float`, defaults to `0.1`): β of f_θ = β log π_θ/π_t + b; gsil_shift (`float`, defaults to `0.0`): b.
        gsil_loss_type (`str`, defaults to `"bernoulli"`): `"brier"`, `"hinge"`, `"kliep"`, `"lsif"` (`gsil_loss`).
        num_iterations `1`, generation_temperature `0.0` (greedy), max_new_tokens `256`; learning_rate `5e-7`, optim
            `"rmsprop"`, lr_scheduler_type `"linear"`, warmup_steps `0.1`, num_train_epochs `1`.

    Example:
        >>> from trl_dpr.lfd import GSILConfig
        >>> args = GSILConfig(output_dir="runs/gsil", use_cpu=True, bf16=False, gsil_loss_type="brier")
        >>> args.beta, args.gsil_loss_type, args.num_iterations, args.generation_temperature
        (0.1, 'brier', 1, 0.0)
    """

    gsil_loss_type: str = field(
        default="bernoulli",
        metadata={
            "help": "GSIL's density-ratio loss pair (Method section): bernoulli (logistic), brier, hinge, kliep or "
            "lsif (the five of tengxiao1/GSIL gsil_loss).",
            "choices": list(GSIL_LOSSES),
        },
    )
    gsil_shift: float = field(
        default=0.0,
        metadata={
            "help": "Shift b of f = β log π_θ/π_t + b. The paper's f has none (0); tengxiao1/GSIL calls it `beta` "
            "(0.1 by default, 2 in scripts/finetune.sh)."
        },
    )
    num_iterations: int = field(
        default=1, metadata={"help": "Self-play iterations (tengxiao1/GSIL scripts train one, on data/iter1)."}
    )
    generation_temperature: float = field(
        default=0.0, metadata={"help": "Temperature of π_t's answers; 0 = greedy (tengxiao1/GSIL gsil/generate.py)."}
    )
    num_train_epochs: float = field(
        default=1.0, metadata={"help": "Epochs over each iteration's pairs (tengxiao1/GSIL scripts/finetune.sh: 1)."}
    )

    def __post_init__(self):
        if self.gsil_loss_type not in GSIL_LOSSES:
            raise ValueError(
                f"gsil_loss_type must be one of {GSIL_LOSSES} ('bernoulli' is the logistic loss), got "
                f"{self.gsil_loss_type!r}."
            )
        super().__post_init__()
