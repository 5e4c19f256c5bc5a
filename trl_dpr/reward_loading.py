"""Loading a scorer's frozen models from SFT outputs: folders or Hub ids, full models or PEFT adapters.

Every source is checked before anything loads (a finished SFT output, π_ref's manifest, the other models' paths).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from .reference_manifest import (
    _WEIGHTS,
    ReferenceManifest,
    check_model_source,
    resolve_reference,
    sft_output_problem,
)
from .rewards import DenseReward, check_dense_reward, check_models_given

logger = logging.getLogger(__name__)


@dataclass
class FrozenModels:
    """What `load_frozen_models` loaded: the `CheckpointRewardModel` arguments (`scorer_kwargs`) and where π_ref came from.

    With an adapter SFT output, `sft_model` and `ref_model` are one PEFT model holding the adapters `sft` and `ref`.
    """

    sft_model: nn.Module
    ref_model: nn.Module | None
    processing_class: PreTrainedTokenizerBase
    ref_processing_class: PreTrainedTokenizerBase | None = None
    sft_adapter: str | None = None
    ref_adapter: str | None = None
    models: dict[str, nn.Module] = field(default_factory=dict)
    reference_manifest: ReferenceManifest | None = None

    def scorer_kwargs(self) -> dict:
        return {
            k: getattr(self, k)
            for k in (
                "sft_model",
                "ref_model",
                "processing_class",
                "ref_processing_class",
                "sft_adapter",
                "ref_adapter",
                "models",
            )
        }


def load_frozen_models(
    sft_model_name_or_path: str,
    ref_model_name_or_path: str | None,
    reward: DenseReward,
    model_paths: dict[str, str] | None = None,
    **model_init_kwargs,
) -> FrozenModels:
    """The frozen models `reward` reads, loaded with the same `model_init_kwargs`.

    π_ref defaults to the one the SFT recorded (`dpr_reference.json`); adapter outputs load as adapters `sft` and `ref`
    on one base; other models come from `model_paths` (name → path or Hub id).
    """
    from trl.trainer.utils import create_model_from_path

    revision, token = model_init_kwargs.get("revision"), model_init_kwargs.get("token")
    check_dense_reward(reward, f"reward={type(reward).__name__}")
    reads_ref = "ref" in reward.model_names
    model_paths = dict(model_paths or {})
    check_models_given(reward, model_paths)  # before anything loads
    extra_names = [n for n in reward.model_names if n not in ("sft", "ref")]
    for name in extra_names:
        check_model_source(model_paths[name], f"The reward's model {name!r}")
    if os.path.isdir(sft_model_name_or_path) and (problem := sft_output_problem(sft_model_name_or_path)):
        raise ValueError(
            f"{sft_model_name_or_path!r} is not a finished SFT output: {problem}. An interrupted SFT resumes with "
            "the same SFT recipe and --resume_from_checkpoint true (when it saved checkpoints); otherwise delete "
            "the folder and run the SFT again."
        )
    check_model_source(sft_model_name_or_path, "π_SFT (the SFT output)")
    manifest = None
    if reads_ref and ref_model_name_or_path is None:
        manifest, ref_model_name_or_path = resolve_reference(sft_model_name_or_path, revision=revision, token=token)
    elif reads_ref:
        check_model_source(ref_model_name_or_path, "π_ref (ref_model_name_or_path)")
        check_reference_is_not_sft(sft_model_name_or_path, ref_model_name_or_path)
    ref_path = ref_model_name_or_path if reads_ref else None

    tokenizer = AutoTokenizer.from_pretrained(sft_model_name_or_path, revision=revision, token=token)
    ref_tokenizer = None
    if ref_path is not None and _has_tokenizer(ref_path):
        ref_tokenizer = AutoTokenizer.from_pretrained(ref_path)
    elif ref_path is not None and os.path.isdir(ref_path):
        logger.warning(
            f"π_ref at {ref_path!r} was saved without its tokenizer files: only its vocabulary size can be checked "
            "against π_SFT's, not its tokens. A reference trained with another tokenizer of the same size would give "
            "meaningless rewards. Save the tokenizer with it (ReferenceCheckpointCallback does)."
        )

    if _is_adapter_dir(sft_model_name_or_path):
        if extra_names:
            raise ValueError(
                f"{sft_model_name_or_path!r} is an adapter SFT output; a reward reading further models "
                f"({extra_names}) needs a full (merged) SFT model, as the extra models are loaded whole."
            )
        model = _load_adapters(sft_model_name_or_path, ref_path, model_init_kwargs)
        return FrozenModels(
            model,
            model if ref_path else None,
            tokenizer,
            ref_tokenizer,
            sft_adapter="sft",
            ref_adapter="ref" if ref_path else None,
            reference_manifest=manifest,
        )
    other_kwargs = {k: v for k, v in model_init_kwargs.items() if k != "revision"}  # the revision is π_SFT's
    return FrozenModels(
        create_model_from_path(sft_model_name_or_path, **model_init_kwargs),
        create_model_from_path(ref_path, **other_kwargs) if ref_path else None,
        tokenizer,
        ref_tokenizer,
        models={n: create_model_from_path(model_paths[n], **other_kwargs) for n in extra_names},
        reference_manifest=manifest,
    )


def check_reference_is_not_sft(sft_model_name_or_path: str, ref_model_name_or_path: str) -> None:
    """Refuse a π_ref that is π_SFT itself (the same Hub id, the same folder, or a folder linking π_SFT's weight
    files): r̂ = log π_SFT − log π_ref would be 0 on every token, and DPR would train on nothing but the KL."""
    sft, ref = Path(sft_model_name_or_path), Path(ref_model_name_or_path)
    same = os.path.realpath(sft_model_name_or_path) == os.path.realpath(ref_model_name_or_path)  # saved yet or not
    if not same and sft.is_dir() and ref.is_dir():
        weights = [name for name in _WEIGHTS if (sft / name).is_file()]
        same = os.path.samefile(sft, ref) or (
            bool(weights)
            and all((ref / name).is_file() and os.path.samefile(sft / name, ref / name) for name in weights)
        )
    if same:
        raise ValueError(
            f"ref_model_name_or_path {ref_model_name_or_path!r} is π_SFT itself ({sft_model_name_or_path!r}): "
            "r̂ = log π_SFT − log π_ref would be 0 on every token. Leave ref_model_name_or_path unset for the "
            "reference checkpoint the SFT recorded (dpr_reference/), or name an earlier checkpoint of that SFT run."
        )


def _has_tokenizer(path: str) -> bool:
    return os.path.isdir(path) and any(
        (Path(path) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    )


def _is_adapter_dir(path: str) -> bool:
    return os.path.isdir(path) and (Path(path) / "adapter_config.json").is_file()


def _load_adapters(sft_dir: str, ref_dir: str | None, model_init_kwargs: dict) -> nn.Module:
    """One base model with the SFT adapter as `sft` and, if given, the reference adapter as `ref` (both frozen)."""
    from peft import PeftModel
    from trl.trainer.utils import create_model_from_path

    base_name = json.loads((Path(sft_dir) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base_name:
        raise ValueError(
            f"{sft_dir}/adapter_config.json does not name the base model the adapter was trained on "
            "(base_model_name_or_path is empty). Set it to the base model's Hub id or folder."
        )
    if ref_dir is not None:
        if not _is_adapter_dir(ref_dir):
            raise ValueError(
                f"The SFT output {sft_dir!r} is a PEFT adapter but its reference checkpoint {ref_dir!r} is not. Both "
                "must be adapters on the same base model (save both from the same PEFT SFT run)."
            )
        ref_base = json.loads((Path(ref_dir) / "adapter_config.json").read_text())["base_model_name_or_path"]
        if ref_base != base_name:
            raise ValueError(
                f"The SFT adapter {sft_dir!r} was trained on base model {base_name!r} but the reference adapter "
                f"{ref_dir!r} on {ref_base!r}. π_SFT and π_ref must come from the same SFT run."
            )
    base = create_model_from_path(base_name, **model_init_kwargs)
    model = PeftModel.from_pretrained(base, sft_dir, adapter_name="sft", is_trainable=False)
    if ref_dir is not None:
        model.load_adapter(ref_dir, adapter_name="ref", is_trainable=False)
    model.set_adapter("sft")
    # Train mode on purpose (scoring switches dropout off by itself): in eval mode, bitsandbytes on CPU repacks 4-bit
    # weights into an inference-only layout at the first no-grad forward, and a policy trained on this base later
    # would silently get no gradient.
    model.train()
    return model
