"""The rule of a config's unused fields, with no TRL import: `DensePathConfig.__post_init__` (the core) and the
recipe parsers (`trl_dpr.running.recipe_checks`, before torch is imported) refuse a field with the same message."""

from __future__ import annotations

import collections.abc
import enum


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
