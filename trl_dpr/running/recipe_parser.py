"""`RecipeParser`: TRL's `TrlParser` (YAML `--config` + command-line overrides) that rejects unknown keys, and
`find_recipe_file`: a YAML given by path, or by its name among the recipes shipped with the package.

Why: TRL's scripts ignore a stale key without a word (`torch_dtype:` since TRL 1.8), and a YAML value reaches the
dataclass unchecked (`max_steps: -5`); a recipe that silently ignores a line trains something else. So an unknown key
or a bad value stops the run before anything loads. The checks are in `recipe_checks.py`; this adds TRL's dataclasses.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Iterable

from trl import TrlParser

from .recipe_checks import RecipeChecks, _plain, parse_mapping, type_spec
from .recipe_checks import find_recipe_file as find_recipe_file  # re-exported: callers find recipes through the parser
from .recipe_checks import recipes_root as recipes_root


class RecipeParser(RecipeChecks, TrlParser):
    """TRL's `TrlParser` for the recipes: `--config` also takes a shipped recipe's name, a YAML key no recipe
    dataclass has stops the run (TrlParser detects it; this parser says what it was renamed to, or what is close), and
    every value is checked against its field. `prog` names the command in the messages (`trl-dpr sft`); flags are
never abbreviated.
    """

    def __init__(self, dataclass_types=None, recipe_subfolder: str | None = None, **kwargs):
        # A flag is a key of the recipe, spelled out as in the YAML: argparse's abbreviations would take a typo
        # (`--max_prompt`) for the key it begins.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(dataclass_types, **kwargs)
        self.recipe_subfolder = recipe_subfolder  # where `--config NAME` is looked up first among the shipped recipes
        # Keys of TRL's / transformers' dataclasses that no trl_dpr class declares (or re-declares with its default):
        # `--help` names them after trl_dpr's own, `--help-all` describes them.
        own = {name for dataclass_type in self.dataclass_types for cls in dataclass_type.__mro__
               if cls.__module__.startswith("trl_dpr") for name in cls.__dict__.get("__annotations__", {})}
        self.inherited_keys = {f.name for t in self.dataclass_types for f in dataclasses.fields(t)} - own
        # dest → what each value is checked against: its field's type, default and choices (the first dataclass that
        # has the field wins, as HfArgumentParser registers it once).
        self._rules: dict[str, dict] = {}
        for dataclass_type in self.dataclass_types:
            hints = typing.get_type_hints(dataclass_type)
            for f in dataclasses.fields(dataclass_type):
                if f.init and f.name not in self._rules:
                    self._rules[f.name] = _rule(f, hints.get(f.name, typing.Any))
        # Fields a dataclass declares unused (`_UNUSED_FIELDS`: name → (accepted values, reason)), refused while parsing.
        self._unused: dict[str, tuple[tuple, str]] = {}
        for dataclass_type in self.dataclass_types:
            self._unused.update(getattr(dataclass_type, "_UNUSED_FIELDS", {}))
        for action in self._actions:  # refused: --help does not offer them
            if action.dest in self._unused:
                action.help = argparse.SUPPRESS
            if action.type is dict:  # HfArgumentParser's `dict("{clip: 1.0}")` reads no text: the mapping forms do
                action.type = parse_mapping
        self._start_checks()

    def parse_args_and_config(
        self,
        args: Iterable[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ):
        """TrlParser's. A key of the YAML no dataclass has is always an error (`fail_with_unknown_args` is kept for
        TrlParser's signature); a command-line flag none has is one unless `return_remaining_strings` asks for them."""
        args = list(args) if args is not None else sys.argv[1:]
        if "--config" in args:
            index = args.index("--config") + 1
            args[index] = self.locate_config(args[index])
        if return_remaining_strings:
            return super().parse_args_and_config(
                args,
                return_remaining_strings=True,
                fail_with_unknown_args=fail_with_unknown_args,
                separate_remaining_strings=separate_remaining_strings,
            )
        # HfArgumentParser refuses a flag it does not know with the list of them; this names the closest known one.
        *parsed, remaining = super().parse_args_and_config(args, return_remaining_strings=True)
        self.check_unknown_flags(remaining)
        return tuple(parsed)


def _rule(field: dataclasses.Field, annotation) -> dict:
    """What `check_value` checks a value of `field` against, as plain data."""
    rule = {"type": type_spec(annotation), "choices": _plain(field.metadata.get("choices"))}
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    if default is not dataclasses.MISSING:
        rule["default"] = _plain(default)
    return rule
