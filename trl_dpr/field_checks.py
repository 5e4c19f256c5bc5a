"""The rule of a config's unused fields, with no TRL import: `DensePathConfig.__post_init__` (the core) and the
recipe parsers (`trl_dpr.running.recipe_checks`, before torch is imported) refuse a field with the same message. And
the one check of a run's token lengths against the model's context (DPR's rollouts, SFT's `max_length`, SPIN/GSIL,
the preview, evaluation), with the one reader of a model's config without its weights (the memory plan's too).
"""

from __future__ import annotations

import collections.abc
import enum
import json
from pathlib import Path


def unused_field_problem(name: str, value, accepted, reason: str) -> str | None:
    """Why `value` of a field in `_UNUSED_FIELDS` is refused (set, it would be silently ignored), or None; a scalar
    stands for TRL's one-item list. The one rule of the recipe parsers and the configs' `__post_init__`."""
    value, accepted = _plain(value), [_plain(a) for a in accepted]
    if value in accepted or (not isinstance(value, list) and [value] in accepted):
        return None
    off = f" or set it to {accepted[0]!r}" if accepted and accepted[0] is not None else ""
    return f"{name}: {value!r} is not used: {reason}. Remove it{off}"


def _plain(value):
    """`value` as YAML and JSON hold it: an Enum member as its value, a tuple or a set (dict keys: argparse keeps
    choices as they were given) as a list."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list | collections.abc.Set):
        return [_plain(item) for item in value]
    return value


# The recipe keys that chose among the paper's rewards before `dense_reward` did, and what to write instead: refused by
# the recipe parser (an unknown key) and by `rewards.reward_from_settings` (a preview variant, a settings mapping).
LEGACY_REWARD_KEYS = {
    "use_baseline": "dense_reward: trl_dpr.rewards:SFTLogProb for use_baseline: false (wo/Baseline); remove the key "
    "for true",
    "eliminate_value": "dense_reward: trl_dpr.rewards:WithSoftValue for eliminate_value: false (w/V); remove the key "
    "for true",
}


# ---- token lengths against the model's context ----------------------------------------------------------------------


def model_config_of(
    path: str,
    revision: str | None = None,
    trust_remote_code: bool = False,
    *,
    where: str | None = None,
    hint: str = "",
    named: collections.abc.Callable[[str, str, str | None, bool], object] | None = None,
):
    """The `PretrainedConfig` of the model at `path`, without weights: a folder's `config.json`, an adapter folder's
    base model's (its `base_model_name_or_path`, followed), else `named(path, where, revision, trust_remote_code)` (the
    caller's names: the memory plan's embedded bases, GGUF files and backbones), else a Hub id's (the cache or the
    Hub). `revision` and `trust_remote_code` are the recipe's, as the model will load (the revision names `path`, not
    an adapter's base).

    Unreadable (offline and not cached, remote code not trusted): None, and a context check waits for the loaded model;
    with `where` (what named `path`, for the message) an error, ending with `hint` where the folder holds no config."""
    from transformers import AutoConfig

    folder = Path(path)
    if folder.is_dir() and not (folder / "config.json").is_file():
        adapter = folder / "adapter_config.json"
        base = json.loads(adapter.read_text()).get("base_model_name_or_path") if adapter.is_file() else None
        if base:  # a LoRA output: the base it adapts has the config
            of_base = f"the base_model_name_or_path of {adapter}" if where else None
            return model_config_of(base, None, trust_remote_code, where=of_base, hint=hint, named=named)
        if where is None:
            return None
        raise ValueError(
            f"{where} is the folder {str(folder)!r}, which holds no config.json (nor an adapter_config.json naming its "
            f"base model). Point it at a model folder{hint}."
        )
    if (
        named is not None
        and not folder.is_dir()
        and (config := named(path, where or "model_name_or_path", revision, trust_remote_code))
    ):
        return config
    try:
        return AutoConfig.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        if where is None:
            return None
        raise


def check_fits_context(
    model_config,
    model_name: str,
    lengths: dict[str, int | None],
    lower: str,
    alone: str = "shorten it first, or use a model with a longer context",
) -> None:
    """Refuse `lengths` (name → tokens, the parts of one sequence; None or 0 is unbounded and not counted) whose sum is
    more than the model's context (`context_of`): past it a rotary model reads positions it never saw, and nothing
    fails. The message names the value of `lower` that fits, or, when the others alone fill the context, `alone`."""
    context, source = context_of(model_config)
    counted = {name: tokens for name, tokens in lengths.items() if tokens}
    if not isinstance(context, int) or sum(counted.values()) <= context:
        return
    others = [name for name in counted if name != lower]
    room = context - sum(counted[name] for name in others)
    fix = (
        f"lower {lower} to at most {room}"
        if room >= 1
        else f"{' + '.join(others)} alone {'fill' if len(others) > 1 else 'fills'} it: {alone}"
    )
    raise ValueError(
        " + ".join(f"{name} {tokens}" for name, tokens in counted.items())
        + f" is more than {model_name}'s context of {context} tokens ({source}): "
        + f"{fix}."
    )


def tightest_prompt_context(
    models: dict[str, str],
    prompt_sets: dict[str, list],
    tokenizer=None,
    revision: str | None = None,
    trust_remote_code: bool = False,
):
    """`(model_config, model name, prompt set name, tokens of its longest prompt)` of the model and prompt set that leave
    the least room for an answer, or None when no model's context can be read here (`model_config_of`). A prompt counts
    as the model reads it (`render_prompts`: the chat template, the generation prompt), by `tokenizer` or the model's
    own. What `check_fits_context` then checks against `max_new_tokens`: the value it names fits every model and set."""
    from transformers import AutoTokenizer

    from .token_batches import render_prompts

    tightest = None  # (room left for the answer, the model's config, its name, the prompt set, its longest prompt)
    for name, path in models.items():
        model_config = model_config_of(path, revision, trust_remote_code)
        if model_config is None or not isinstance(context := context_of(model_config)[0], int):
            continue
        reader = tokenizer or AutoTokenizer.from_pretrained(
            path, revision=revision, trust_remote_code=trust_remote_code
        )
        for set_name, prompts in prompt_sets.items():
            longest = max(map(len, render_prompts(reader, prompts)), default=0)
            if tightest is None or context - longest < tightest[0]:
                tightest = (context - longest, model_config, name, set_name, longest)
    return None if tightest is None else tightest[1:]


def rope_parameter_sets(text_config) -> list[dict]:
    """A text config's rope scaling, as a list of parameter sets: `rope_parameters` in transformers 5 (one set, or one
    per attention type), `rope_scaling` before; none without scaling."""
    rope = getattr(text_config, "rope_parameters", None) or getattr(text_config, "rope_scaling", None) or {}
    # per attention type: every value a set, or None (transformers skips an attention type saved as None)
    per_attention_type = bool(rope) and all(isinstance(value, dict | None) for value in rope.values())
    per_attention_type = per_attention_type and any(isinstance(value, dict) for value in rope.values())
    if per_attention_type:
        return [parameters for parameters in rope.values() if parameters is not None]
    return [rope] if rope else []


def check_pad_token_fits(tokenizer, model_config, model_name: str, pad_token: str | None = None) -> None:
    """The pad token a run pads with (`pad_token`, else the tokenizer's, else its EOS, as TRL picks it) is a row of the
    model's embedding (`vocab_size`): a tokenizer without one of its own may get a new token past the model's
    vocabulary (Qwen2's `<|endoftext|>`), and the first padded batch fails mid-step with torch's IndexError."""
    pad = pad_token or tokenizer.pad_token or tokenizer.eos_token
    pad_id = tokenizer.convert_tokens_to_ids(pad) if pad is not None else None
    rows = getattr(model_config.get_text_config(), "vocab_size", None)
    if isinstance(pad_id, int) and isinstance(rows, int) and pad_id >= rows:
        raise ValueError(
            f"{model_name}'s tokenizer pads with {pad!r} (id {pad_id}), past the model's vocabulary of {rows} tokens "
            f"(vocab_size in its config.json): set pad_token to a token the model has (its EOS: "
            f"pad_token: {tokenizer.eos_token!r} in the SFT recipe), or save the tokenizer with such a pad token."
        )


def context_of(model_config) -> tuple[int | None, str]:
    """The tokens a model reads (None: its config does not say) and where its config says so: `max_position_embeddings`,
    or a longer `factor × original_max_position_embeddings` of its rope scaling (YaRN: Qwen2.5's 32768 × 4 = 128K).
    The scaling is `rope_parameters` in transformers 5 (one set, or one per attention type), `rope_scaling` before."""
    text_config = model_config.get_text_config()
    context = getattr(text_config, "max_position_embeddings", None)
    source = "max_position_embeddings in its config.json"
    for parameters in rope_parameter_sets(text_config):
        factor, original = parameters.get("factor"), parameters.get("original_max_position_embeddings")
        if isinstance(factor, int | float) and isinstance(original, int) and int(factor * original) > (context or 0):
            context = int(factor * original)
            source = f"its rope scaling: factor {factor} × original_max_position_embeddings {original}"
    return context, source
