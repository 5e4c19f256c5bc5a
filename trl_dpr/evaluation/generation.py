"""Batched answer generation with transformers (left-padded prompts, chat template, fixed seed)."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

__all__ = ["generate_answers"]


@torch.no_grad()
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
    """Generate one answer per prompt (strings or conversations); `temperature=0` decodes greedily.

    The paper decodes evaluation answers at temperature 0.7 with a fixed maximum length (§4.1).

    Example:
        >>> from trl_dpr.tiny_lm import build_tokenizer, build_tiny_causal_lm
        >>> tok = build_tokenizer(["hello there"])
        >>> answers = generate_answers(build_tiny_causal_lm(tok), tok, ["hello"], max_new_tokens=3, show_progress=False)
        >>> len(answers)
        1
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}.")
    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    device = next(model.parameters()).device
    answers: list[str] = []
    # Seeded sampling that leaves the caller's random streams (CPU and this GPU) as they were, e.g. mid-training.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        try:
            for start in tqdm(range(0, len(prompts), batch_size), desc=desc, disable=not show_progress):
                batch = prompts[start : start + batch_size]
                answers.extend(_generate_batch(model, tokenizer, batch, device, temperature, max_new_tokens))
        finally:
            tokenizer.padding_side = padding_side
            model.train(was_training)
    return answers


def _generate_batch(model, tokenizer, batch: list, device, temperature: float, max_new_tokens: int) -> list[str]:
    if isinstance(batch[0], str):
        encoded = tokenizer(batch, return_tensors="pt", padding=True)
    else:
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in batch]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    encoded = {k: v.to(device) for k, v in encoded.items()}
    sampling = {"do_sample": False}
    if temperature > 0:  # plain sampling from the temperature-scaled distribution: no top-k / top-p truncation
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    output = model.generate(
        **encoded,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )
    return tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
