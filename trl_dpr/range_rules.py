"""The range rules of the recipe dataclasses' values (`gamma` in (0, 1], `temperature` > 0, ...), written once with
no torch or TRL import: a config's `__post_init__` raises their message (`check_ranges`), and the recipe parser reports
it before anything loads (`range_problems` on the names in a dataclass's `_RANGE_RULES`). Each rule takes the values
(field → value) and returns its message, or None; one whose fields hold no number yet (None, a type mistake) returns
None, as the type checks report those.
"""

from __future__ import annotations

import collections.abc


def _numbers(*values) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def temperature_problem(temperature) -> str | None:
    """A sampling / scoring temperature T: everything divides the logits by it."""
    if _numbers(temperature) and not temperature > 0.0:
        return (
            f"temperature must be > 0 (the paper samples at 1.0), got {temperature}: DPR's reward and its KL term are "
            "for sampled completions, scored at log softmax(logits / T)."
        )
    return None


def token_chunk_size_problem(token_chunk_size, name: str = "token_chunk_size") -> str | None:
    """The LM head's chunk (`name` is the setting as the caller spells it)."""
    if _numbers(token_chunk_size) and token_chunk_size < 1:
        return (
            f"{name} must be a positive number of tokens (memory ∝ chunk × vocab × 4 bytes), got {token_chunk_size}."
        )
    return None


def _num_generations(v):
    n = v["num_generations"]
    if n is None or (_numbers(n) and n < 1):
        return f"num_generations must be >= 1 (the paper uses 1), got {n}."


def _kl_in_loss(v):
    if _numbers(v["beta"], v["kl_coef"]) and v["beta"] != 0.0 and v["kl_coef"] != 0.0 and not v["allow_kl_in_loss"]:
        return (
            f"beta={v['beta']} (GRPO's KL in the loss) and kl_coef={v['kl_coef']} (DPR's KL to π_SFT in the reward) "
            "would stack two KL penalties, and under PEFT GRPO's reference is the base model, not π_SFT. Use kl_coef "
            "alone (beta: 0), or set allow_kl_in_loss: true if you want both."
        )


def _reward_granularity(v):
    if v["reward_granularity"] not in ("token", "sentence"):
        return (
            f"reward_granularity must be 'token' or 'sentence', got {v['reward_granularity']!r}: 'token' is Dense-Path "
            "REINFORCE (the default), 'sentence' the SR baseline of §4.1 (the whole return at the last token). Set one "
            "of them, or remove the key."
        )


def _gamma(v):
    if _numbers(v["gamma"]) and not 0.0 < v["gamma"] <= 1.0:
        return (
            f"gamma must be in (0, 1], got {v['gamma']}: it discounts the token returns, and the paper uses 1.0 (§4.4 "
            "sweeps values below 1). Set e.g. gamma: 1.0, or remove the key."
        )


def _max_prompt_length(v):
    if _numbers(v["max_prompt_length"]) and v["max_prompt_length"] < 1:
        return f"max_prompt_length must be a positive number of tokens or None, got {v['max_prompt_length']}."


def _max_completion_length(v):
    if _numbers(v["max_completion_length"]) and v["max_completion_length"] < 1:
        return (
            f"max_completion_length must be a positive number of tokens, got {v['max_completion_length']}: DPR needs "
            "at least one sampled token per completion to score."
        )


def _generation_batch_size(v):
    # TRL's GRPOConfig asks a multiple of per_device_train_batch_size × processes; the processes are the launcher's,
    # so this checks the part every launch needs (TRL's own check still runs in the launched processes).
    size, per_device = v["generation_batch_size"], v["per_device_train_batch_size"]
    if _numbers(size, per_device) and per_device >= 1 and size % per_device != 0:
        return (
            f"generation_batch_size {size} is not a multiple of per_device_train_batch_size {per_device} (GRPO splits "
            "each generation batch into training batches): set it to a multiple, or remove it (the default is "
            "per_device_train_batch_size × processes × steps_per_generation)."
        )


def reference_fraction_problem(fraction) -> str | None:
    """α of Algorithm 1: π_ref is the SFT model after ⌊α·N⌋ of N steps, so α is in (0, 1)."""
    if not _numbers(fraction) or not 0.0 < float(fraction) < 1.0:
        return (
            f"reference_fraction α must be strictly between 0 and 1, got {fraction!r}: π_ref is the SFT model after "
            "⌊α·N⌋ of its N optimizer steps (0 would be the base model, 1 π_SFT itself). The paper uses 0.5, the "
            "checkpoint after half of the steps: set reference_fraction: 0.5 (ReferenceCheckpointCallback(fraction=0.5) "
            "in Python)."
        )
    return None


def _num_train_samples(v):
    if _numbers(v["num_train_samples"]) and v["num_train_samples"] < 1:
        return (
            f"num_train_samples must be a positive number of rows (or unset, for all of them), got "
            f"{v['num_train_samples']}: training on no data would save an untrained copy of the model."
        )


def _heatmap_samples(v):
    if v["heatmap_steps"] and _numbers(v["heatmap_samples"]) and v["heatmap_samples"] < 1:
        return f"heatmap_samples must be at least 1 rollout per heatmap page, got {v['heatmap_samples']}."


def _num_iterations(v):
    if _numbers(v["num_iterations"]) and v["num_iterations"] < 1:
        return f"num_iterations must be >= 1, got {v['num_iterations']}."


def _generation_temperature(v):
    if _numbers(v["generation_temperature"]) and v["generation_temperature"] < 0:
        return f"generation_temperature must be >= 0 (0 = greedy), got {v['generation_temperature']}."


def _generation_top_p(v):
    if _numbers(v["generation_top_p"]) and not 0.0 < v["generation_top_p"] <= 1.0:
        return f"generation_top_p must be in (0, 1] (1 = off), got {v['generation_top_p']}."


def _self_play_generation(v):
    if (
        _numbers(v["max_new_tokens"], v["generation_batch_size"])
        and min(v["max_new_tokens"], v["generation_batch_size"]) < 1
    ):
        return (
            f"max_new_tokens and generation_batch_size must be >= 1, got {v['max_new_tokens']} and "
            f"{v['generation_batch_size']}."
        )


def _self_play_beta(v):
    if _numbers(v["beta"]) and v["beta"] <= 0:
        return f"beta must be > 0 (it scales the log-ratio to π_t), got {v['beta']}."


# name → (the fields it reads; the first is the key its message is reported under, the rule)
RANGE_RULES: dict[str, tuple[tuple[str, ...], collections.abc.Callable]] = {
    "num_generations": (("num_generations",), _num_generations),
    "kl_in_loss": (("beta", "kl_coef", "allow_kl_in_loss"), _kl_in_loss),
    "reward_granularity": (("reward_granularity",), _reward_granularity),
    "temperature": (("temperature",), lambda v: temperature_problem(v["temperature"])),
    "gamma": (("gamma",), _gamma),
    "max_prompt_length": (("max_prompt_length",), _max_prompt_length),
    "max_completion_length": (("max_completion_length",), _max_completion_length),
    "reward_token_chunk_size": (
        ("reward_token_chunk_size",),
        lambda v: token_chunk_size_problem(v["reward_token_chunk_size"], "reward_token_chunk_size"),
    ),
    "generation_batch_size": (("generation_batch_size", "per_device_train_batch_size"), _generation_batch_size),
    # the SFT and DPR script arguments
    "reference_fraction": (("reference_fraction",), lambda v: reference_fraction_problem(v["reference_fraction"])),
    "num_train_samples": (("num_train_samples",), _num_train_samples),
    "heatmap_samples": (("heatmap_samples", "heatmap_steps"), _heatmap_samples),
    # SPIN and GSIL
    "num_iterations": (("num_iterations",), _num_iterations),
    "generation_temperature": (("generation_temperature",), _generation_temperature),
    "generation_top_p": (("generation_top_p",), _generation_top_p),
    "self_play_generation": (("max_new_tokens", "generation_batch_size"), _self_play_generation),
    "self_play_beta": (("beta",), _self_play_beta),
}


def range_problems(values: collections.abc.Mapping, names) -> list[tuple[str, str]]:
    """(key, message) of each rule in `names` (`RANGE_RULES`) that `values` (field → value) break."""
    problems = []
    for name in names:
        fields, rule = RANGE_RULES[name]
        if all(field in values for field in fields) and (problem := rule({f: values[f] for f in fields})):
            problems.append((fields[0], problem))
    return problems


def check_ranges(config, names) -> None:
    """`ValueError` with the first broken rule of `names` on `config`'s fields (a config's `__post_init__`)."""
    problems = range_problems(vars(config), names)
    if problems:
        raise ValueError(problems[0][1])
