"""The trainers a run uses: TRL's SFTTrainer and trl_dpr's DensePathTrainer with the run's services mixed in.

    atomic checkpoints and the output folder's claim   checkpointing.AtomicCheckpointsMixin
    the safe Hub push, once, with the model card        push.SafeHubPushMixin
    a model card written for a Hub visitor              model_card.BaseModelCardMixin
    a console log of numbers                            console_log.ConsoleLogMixin

The algorithm does not need them: `trl_dpr.DensePathTrainer` alone is a GRPOTrainer with TRL's own saving and card.
"""

from __future__ import annotations

import json
from pathlib import Path

from trl import SFTTrainer

from ..config import DensePathConfig
from ..reference_manifest import MANIFEST_NAME
from ..trainer import DensePathTrainer
from .checkpointing import AtomicCheckpointsMixin, check_output_dir, is_claimed
from .console_log import ConsoleLogMixin
from .model_card import (
    SFT_CARD_HYPERPARAMETERS,
    BaseModelCardMixin,
    dpr_model_card_section,
    hyperparameter_table,
    recorded_base_model,
    sft_lineage,
)
from .push import SafeHubPushMixin


class SafeSFTTrainer(SafeHubPushMixin, AtomicCheckpointsMixin, BaseModelCardMixin, ConsoleLogMixin, SFTTrainer):
    """TRL's SFTTrainer with the run's services: staged checkpoints, the safe Hub push (the reference checkpoint goes
    with the model), a card naming `base_model` (default: `model`) and a console log of numbers.
    """

    def __init__(self, *args, base_model: str | None = None, **kwargs):
        self._take_over_hub_push(kwargs["args"])
        model = kwargs.get("model", args[0] if args else None)
        self._base_model = base_model or (model if isinstance(model, str) else None)
        super().__init__(*args, **kwargs)

    def _card_base_name(self) -> str | None:
        return self._base_model or super()._card_base_name()

    def _card_sections(self) -> list[str]:
        # The run's hyperparameters; an SFT output is DPR's reward model: say where π_ref is and how to load the two.
        table = ["", *hyperparameter_table(self.args, SFT_CARD_HYPERPARAMETERS, "sequences")]
        manifest = Path(self.args.output_dir) / MANIFEST_NAME
        if not manifest.is_file():
            return table
        recorded = json.loads(manifest.read_text())
        return [
            *table,
            "",
            f"The reference checkpoint π_ref (step {recorded['step']} of {recorded['total_steps']}, "
            f"α = {recorded['fraction']}) is saved beside the model in `{recorded['path']}/`: "
            "`trl_dpr.CheckpointRewardModel.from_pretrained` on this model loads the dense reward "
            "r̂_t = log π_SFT − log π_ref that Dense-Path REINFORCE trains with.",
        ]


class DPRRunTrainer(SafeHubPushMixin, AtomicCheckpointsMixin, BaseModelCardMixin, ConsoleLogMixin, DensePathTrainer):
    """`DensePathTrainer` as `trl-dpr dpr` and the pipeline run it, with the same services as `SafeSFTTrainer`; its card
    also holds DPR's reward, α, λ, hyperparameters and evaluation. Takes `DensePathTrainer`'s arguments.
    """

    def __init__(self, model=None, reward_model=None, args: DensePathConfig | None = None, **kwargs):
        args = DensePathConfig("dpr-output") if args is None else args
        if isinstance(args, DensePathConfig):  # else DensePathTrainer says what it takes
            # Before any model loads. A pipeline (run_dpr) has claimed the folder and checked and deferred the push by
            # now; from Python, the folder is checked here and claimed by train(), and the push is checked and taken over.
            if not is_claimed(args.output_dir):
                check_output_dir(args.output_dir)
            self._take_over_hub_push(args)
        super().__init__(model, reward_model, args, **kwargs)

    def _card_base_name(self) -> str | None:
        # The model the SFT run started from, as its output records it (a policy loaded from a local SFT folder,
        # `model=None`, would be named by that folder), else the SFT model itself.
        source = self.reward_model.sft_model_name_or_path
        return recorded_base_model(source) or source

    def _card_base_model(self) -> str:
        return sft_lineage(self.reward_model.sft_model_name_or_path)

    def _card_sections(self) -> list[str]:
        # DPR's reward, α, λ and hyperparameters, the outcome rewards beside r̂ (TRL's names and weights, r̂ first), and
        # the evaluation table when the run wrote one.
        outcome = list(zip(self.reward_func_names[1:], self.reward_weights[1:].tolist()))  # two may share a name
        return dpr_model_card_section(self.args, self.reward_model, outcome).rstrip("\n").split("\n")
