"""Responses sampled from a model with their exact token ids, and scored by the dense reward: written once.

    prompts ─► render_prompts ─► generate (seeded, plain sampling or greedy) ─► Sample(prompt_ids, completion_ids, text)
    samples ─► pad_batch ─► CheckpointRewardModel / completion_logprobs ─► per-token r̂_t, log π_SFT, log π_θ

Re-tokenizing decoded text can give other tokens ("4", "6" → "46"), so a sample is scored on its sampled ids. All
sampling goes through `sample_completions`: the same seed, prompts and batch size give the same responses everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..reward_model import CheckpointRewardModel, TokenRewardOutput
from ..scoring import completion_logprobs
from ..token_batches import eos_token_ids, pad_batch, pad_prompts, render_prompts


@dataclass
class Sample:
    """One sampled response: the prompt (as given), its rendered token ids, the sampled completion ids (up to and
    including the first EOS; all of them when the length limit cut the response) and the decoded text.

    `prompt_index` is the position of the prompt in the list given to `sample_completions`.
    """

    prompt_index: int
    prompt: Any
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str

    @property
    def length(self) -> int:
        """Number of completion tokens (EOS included)."""
        return len(self.completion_ids)


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    prompts: list,
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 32,
    seed: int = 0,
    desc: str = "Sampling",
    show_progress: bool = False,
    top_p: float = 1.0,
) -> list[Sample]:
    """Sample one completion per prompt (repeat a prompt to get several), keeping the sampled token ids.

    `temperature=0` is greedy, else plain sampling as DPR's rollouts do (the checkpoint's generation defaults are not
    used; `top_p < 1` for SPIN). Seeded once per call; the caller's random streams are left as they were.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 = plain sampling), got {top_p}.")
    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size} and {max_new_tokens}.")
    prompts = list(prompts)
    if not prompts:
        return []
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    stop_ids = eos_token_ids(model, tokenizer)
    # A full generation config, not the checkpoint's: its defaults (top-k / top-p, a repetition penalty) would change
    # the distribution the samples come from.
    sampling = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=temperature > 0,
        temperature=temperature if temperature > 0 else None,
        top_k=0 if temperature > 0 else None,
        top_p=top_p if temperature > 0 else None,
        eos_token_id=stop_ids,
        pad_token_id=_pad_id(tokenizer),
        bos_token_id=None,
    )
    samples: list[Sample] = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        try:
            for start in tqdm(range(0, len(prompts), batch_size), desc=desc, disable=not show_progress):
                batch = prompts[start : start + batch_size]
                rows = render_prompts(tokenizer, batch)
                input_ids, attention_mask = pad_prompts(rows, _pad_id(tokenizer))
                output = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=sampling,
                )
                for offset, generated in enumerate(output[:, input_ids.size(1) :].tolist()):
                    end = next((i + 1 for i, t in enumerate(generated) if t in stop_ids), len(generated))
                    completion = generated[:end]
                    samples.append(
                        Sample(
                            prompt_index=start + offset,
                            prompt=batch[offset],
                            prompt_ids=list(rows[offset]),
                            completion_ids=completion,
                            text=tokenizer.decode(completion, skip_special_tokens=True),
                        )
                    )
        finally:
            model.train(was_training)
    return samples


def generate_answers(
    model,
    tokenizer,
    prompts: list,
    *,
    temperature: float = 0.7,
    max_new_tokens: int = 256,
    batch_size: int = 64,
    seed: int = 0,
    desc: str = "Generating",
    show_progress: bool = True,
) -> list[str]:
    """The text of one sampled answer per prompt (`sample_completions`); the paper's evaluation samples at 0.7."""
    samples = sample_completions(
        model,
        tokenizer,
        prompts,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
        desc=desc,
        show_progress=show_progress,
    )
    return [sample.text for sample in samples]


def score_samples(
    reward_model: CheckpointRewardModel, samples: list[Sample], batch_size: int = 32
) -> tuple[TokenRewardOutput, torch.Tensor]:
    """The reward model's output on the sampled ids (`[N, T]` on CPU) and the completion mask."""
    batch = pad_batch(
        [s.prompt_ids for s in samples], [s.completion_ids for s in samples], _pad_id(reward_model.processing_class)
    )
    out = reward_model(*batch.as_tuple(), batch_size=batch_size)
    cpu = TokenRewardOutput(
        rewards=out.rewards.cpu(),
        sft_logps=out.sft_logps.cpu(),
        ref_logps=None if out.ref_logps is None else out.ref_logps.cpu(),
    )
    return cpu, batch.completion_mask


@torch.no_grad()
def policy_logprobs(policy, tokenizer, samples: list[Sample], batch_size: int = 32) -> torch.Tensor:
    """log π_θ(a_t|s_t) of every sampled token, `[N, T]` on CPU, 0 at padding."""
    was_training = policy.training
    policy.eval()
    device = next(policy.parameters()).device
    rows = []
    try:
        for start in range(0, len(samples), batch_size):
            chunk = samples[start : start + batch_size]
            batch = pad_batch([s.prompt_ids for s in chunk], [s.completion_ids for s in chunk], _pad_id(tokenizer))
            logps, _, _ = completion_logprobs(policy, *(t.to(device) for t in batch.as_tuple()))
            rows.append(logps.cpu())
    finally:
        policy.train(was_training)
    width = max(r.size(1) for r in rows)
    return torch.cat([torch.nn.functional.pad(r, (0, width - r.size(1))) for r in rows])
