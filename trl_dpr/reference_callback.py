"""`ReferenceCheckpointCallback`: the reference checkpoint π_ref, saved during SFT at step ⌊α·N⌋ (Algorithm 1, line 1)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import torch
from accelerate.logging import get_logger
from transformers import TrainerCallback

from .range_rules import reference_fraction_problem
from .reference_manifest import MANIFEST_NAME, REFERENCE_DIRNAME, ReferenceManifest, parse_manifest, write_manifest

logger = get_logger(__name__)


def _is_main_process(state) -> bool:
    return state.is_world_process_zero


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def _full_state_dict(model) -> dict | None:
    """The full (unsharded) state dict under ZeRO-3 / FSDP, gathered collectively; None when `model` is not sharded."""
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    if any(type(m).__name__.startswith(("FullyShardedDataParallel", "FSDP")) for m in model.modules()):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return None


def check_reference_fraction(fraction) -> float:
    """α of Algorithm 1 as a float in (0, 1) (π_ref is the SFT model after ⌊α·N⌋ of N steps), else a ValueError."""
    if problem := reference_fraction_problem(fraction):
        raise ValueError(problem)
    return float(fraction)


class ReferenceCheckpointCallback(TrainerCallback):
    r"""Save the SFT reference checkpoint π_ref at optimizer step ⌊α·N⌋ (Algorithm 1, line 1 of Li et al., 2025).

    N is `state.max_steps`. The model (with PEFT: the adapter) and tokenizer go to `<output_dir>/dpr_reference/`
    (written under a temporary name, renamed), then the manifest `dpr_reference.json` that `from_pretrained` reads,
    last: a crash never leaves a reference that looks complete. `fraction` α ∈ (0, 1), the paper's 0.5.

    Example:
        ```python
        from trl import SFTConfig, SFTTrainer
        from trl_dpr import ReferenceCheckpointCallback

        trainer = SFTTrainer(model=..., args=SFTConfig(output_dir="runs/sft"), train_dataset=...,
                             callbacks=[ReferenceCheckpointCallback(fraction=0.5)])
        trainer.train()
        trainer.save_model()   # π_SFT in runs/sft, π_ref in runs/sft/dpr_reference
        mark_sft_complete("runs/sft", conversational=is_conversational(train_dataset[0]))
        ```

    The last line is the record `trl-dpr sft` writes (finished; trained on chat messages or raw text, how π_SFT reads a
    string prompt): a callback sees only tokenized batches, not the demonstrations, so it cannot write it itself.
    """

    def __init__(self, fraction: float = 0.5):
        self.fraction = check_reference_fraction(fraction)
        self.target_step: int | None = None
        self.done = False

    def _manifest_path(self, args) -> Path:
        return Path(args.output_dir) / MANIFEST_NAME

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        total_steps = state.max_steps
        if total_steps is None or total_steps <= 0:
            raise ValueError(
                "ReferenceCheckpointCallback needs the total number of optimizer steps N, but the trainer reports "
                f"max_steps={total_steps}. Set `max_steps` for an iterable (streaming) dataset."
            )
        self.target_step = math.floor(self.fraction * total_steps)
        manifest_path = self._manifest_path(args)
        if manifest_path.is_file():
            existing = parse_manifest(manifest_path.read_text(), str(manifest_path))
            resumed = state.global_step > 0  # a fresh run's π_ref is its own: a leftover of another run is replaced
            if (
                resumed
                and (existing.step, existing.total_steps) == (self.target_step, total_steps)
                and (Path(args.output_dir) / existing.path).is_dir()
            ):
                self.done = True  # resumed after the reference step: π_ref was already written by this run
                return
            if not resumed:
                logger.warning(
                    f"{manifest_path} records a reference from an earlier run (step {existing.step}/"
                    f"{existing.total_steps}); this run replaces it at step {self.target_step}/{total_steps}."
                )
        if state.global_step > self.target_step:
            logger.warning(
                f"Resuming at step {state.global_step}, after the reference step {self.target_step} = ⌊{self.fraction}·"
                f"{total_steps}⌋, and {MANIFEST_NAME} has no reference for it: this run cannot produce π_ref. Resume "
                "from a checkpoint before that step, or pass the reference explicitly to CheckpointRewardModel."
            )
            return
        if self.target_step == 0 and state.global_step == 0:
            logger.warning(
                f"⌊α·N⌋ = ⌊{self.fraction}·{total_steps}⌋ = 0: the reference is the model before any SFT step."
            )
            self._save(args, state, model, processing_class)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if not self.done and state.global_step == self.target_step:
            self._save(args, state, model, processing_class)

    def _save(self, args, state, model, processing_class) -> None:
        output_dir = Path(args.output_dir)
        final_dir = output_dir / REFERENCE_DIRNAME
        staging_dir = output_dir / f".{REFERENCE_DIRNAME}.partial"
        full_state_dict = _full_state_dict(model)  # collective: every process takes part
        if _is_main_process(state):
            shutil.rmtree(staging_dir, ignore_errors=True)
            staging_dir.mkdir(parents=True)
            if full_state_dict is None:
                model.save_pretrained(staging_dir)
            else:
                model.save_pretrained(staging_dir, state_dict=full_state_dict)
            if processing_class is not None:
                processing_class.save_pretrained(staging_dir)
            # The manifest goes last: a folder without a manifest entry is never read as π_ref.
            manifest_path = self._manifest_path(args)
            if manifest_path.exists():
                manifest_path.unlink()
            shutil.rmtree(final_dir, ignore_errors=True)
            os.replace(staging_dir, final_dir)
            write_manifest(output_dir, self._manifest(model, state))
            logger.info(
                f"Saved the reference checkpoint π_ref (step {self.target_step}/{state.max_steps}) to {final_dir}"
            )
        _barrier()
        self.done = True

    def _manifest(self, model, state) -> ReferenceManifest:
        peft_config = getattr(model, "peft_config", None)
        if peft_config:
            base_model = next(iter(peft_config.values())).base_model_name_or_path
        else:
            base_model = getattr(model.config, "_name_or_path", None) or None
        return ReferenceManifest(
            path=REFERENCE_DIRNAME,
            fraction=self.fraction,
            step=self.target_step,
            total_steps=state.max_steps,
            is_adapter=bool(peft_config),
            base_model=base_model,
        )
