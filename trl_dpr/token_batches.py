"""Token plumbing shared by scoring, sampling, evaluation and tracking, written once.

    prompts ─► render_prompts (as GRPOTrainer renders them) ─► pad_prompts (left, to generate)
                                                            ─► pad_batch (prompts left, completions right, to score)
    model + tokenizer ─► eos_token_ids (every id that ends a completion, as GRPOTrainer collects them)
    completions + EOS ids ─► ends_with_eos (which completions ended, which were cut at the length limit)

A prompt rendered another way is another state; every prompt goes through `render_prompts`, so the reward, the
preview, the evaluation and the trainer see the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from trl.data_utils import is_conversational
from trl.trainer.utils import pad

from .scoring import _causal_lm


def render_prompts(tokenizer, prompts: Sequence[Any], **chat_template_kwargs) -> list[list[int]]:
    """Token ids of each prompt, exactly as `GRPOTrainer` builds them before generation.

    Conversations through the chat template with the generation prompt; plain strings with their special tokens.
    """
    prompts = list(prompts)
    if not prompts:
        return []
    conversational = [is_conversational({"prompt": prompt}) for prompt in prompts]
    if all(conversational):
        rendered = tokenizer.apply_chat_template(
            conversation=prompts, add_generation_prompt=True, tokenize=True, return_dict=True, **chat_template_kwargs
        )
        return [list(ids) for ids in rendered["input_ids"]]
    if not any(conversational):
        return [list(ids) for ids in tokenizer(text=prompts)["input_ids"]]
    # A mix (GRPOTrainer never sees one; inspection tools may): each prompt rendered on its own, in order.
    return [render_prompts(tokenizer, [prompt], **chat_template_kwargs)[0] for prompt in prompts]


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a completion: the tokenizer's EOS first, then the model's `generation_config` ones.

    This is GRPOTrainer's rule (an end-of-turn token such as Llama-3's `<|eot_id|>` ends a completion too).
    """
    declared = getattr(getattr(_causal_lm(model), "generation_config", None), "eos_token_id", None)
    ids = [] if declared is None else [declared] if isinstance(declared, int) else list(declared)
    if tokenizer is not None and tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return ids


def ends_with_eos(completion_ids: torch.Tensor, completion_mask: torch.Tensor, eos_ids: Sequence[int]) -> torch.Tensor:
    """`[B]` bool: True where a right-padded completion's last real token is one of `eos_ids` (it is terminal).

    A completion cut at the length limit, or empty, is not terminal (w/V bootstraps V after a cut).
    """
    lengths = completion_mask.long().sum(dim=1)
    last_token = completion_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    eos = torch.tensor(list(eos_ids), dtype=completion_ids.dtype, device=completion_ids.device)
    return (lengths > 0) & torch.isin(last_token, eos)


@dataclass
class PaddedBatch:
    """Prompts left-padded and completions right-padded, with their masks (1 on real tokens), as GRPO lays them out."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    def to(self, device) -> PaddedBatch:
        return PaddedBatch(
            *(t.to(device) for t in (self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask))
        )

    def as_tuple(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask


def _padded(
    rows: Sequence[Sequence[int]], value: int, side: str, pad_to_multiple_of: int | None = None
) -> torch.Tensor:
    return pad([torch.as_tensor(list(r), dtype=torch.long) for r in rows], value, side, pad_to_multiple_of)


def pad_prompts(
    prompt_rows: Sequence[Sequence[int]], pad_token_id: int, pad_to_multiple_of: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad prompt rows for generation: `(input_ids, attention_mask)`, as GRPOTrainer pads them."""
    if pad_token_id is None:
        raise ValueError("The tokenizer has no pad token: set tokenizer.pad_token (e.g. to its EOS token).")
    ids = _padded(prompt_rows, pad_token_id, "left", pad_to_multiple_of)
    return ids, _padded([[1] * len(r) for r in prompt_rows], 0, "left", pad_to_multiple_of)


def pad_batch(
    prompt_rows: Sequence[Sequence[int]],
    completion_rows: Sequence[Sequence[int]],
    pad_token_id: int,
    pad_to_multiple_of: int | None = None,
) -> PaddedBatch:
    """Pad token-id rows into the `[B, P]` / `[B, Tc]` tensors the reward model and GRPO's loss take."""
    if len(prompt_rows) != len(completion_rows):
        raise ValueError(f"Got {len(prompt_rows)} prompts but {len(completion_rows)} completions; pass one of each.")

    prompt_ids, prompt_mask = pad_prompts(prompt_rows, pad_token_id, pad_to_multiple_of)
    return PaddedBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=_padded(completion_rows, pad_token_id, "right", pad_to_multiple_of),
        completion_mask=_padded([[1] * len(r) for r in completion_rows], 0, "right", pad_to_multiple_of),
    )
