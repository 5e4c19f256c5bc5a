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
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    answers: list[str] = []
    try:
        for start in tqdm(range(0, len(prompts), batch_size), desc=desc, disable=not show_progress):
            batch = prompts[start : start + batch_size]
            if isinstance(batch[0], str):
                encoded = tokenizer(batch, return_tensors="pt", padding=True)
            else:
                texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in batch]
                encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            encoded = {k: v.to(device) for k, v in encoded.items()}
            sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {"do_sample": False}
            output = model.generate(
                **encoded,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                **sampling,
            )
            answers.extend(
                tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            )
    finally:
        tokenizer.padding_side = padding_side
        torch.random.set_rng_state(generator_state)
        model.train(was_training)
    return answers
