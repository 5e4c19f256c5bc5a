"""`RecipeParser`: TRL's `TrlParser` (YAML `--config` + command-line overrides) with the recipe checks as a thin layer.

    RecipeParser(dataclasses) ──describe()──► plain JSON (cached) ──► RecipeParser.from_description(): same flags,
                                                                       same checks, no dataclass (no torch import)

Why: TRL's scripts ignore a stale key without a word (`torch_dtype:` since TRL 1.8), and a YAML value reaches the
dataclass unchecked (`max_steps: -5`); a recipe that silently ignores a line trains something else. So an unknown key
or a bad value stops the run before anything loads. A YAML value becomes an argument in one place, TrlParser's own
`set_defaults_with_config`; this class only checks around it. The value checks themselves are in `recipe_checks.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import textwrap
import typing
from collections.abc import Iterable

from trl import TrlParser  # the `trl` package's light entry: no torch, ~0.2 s

from ..field_checks import _plain, unused_field_problem
from ..range_rules import range_problems
from .recipe_checks import (
    RENAMED_KEYS,
    _check_yaml_syntax,
    _describe,
    check_value,
    find_recipe_file,
    load_recipe_yaml,
    parse_mapping,
    type_spec,
    unknown_flags,
)
from .recipe_checks import recipes_root as recipes_root


class RecipeParser(TrlParser):
    """TRL's `TrlParser` for the recipes: `--config` also takes a shipped recipe's name, a YAML key no recipe
    dataclass has stops the run (with what it was renamed to, or what is close), every value is checked against its
    field, and flags are never abbreviated. `prog` names the command in the messages (`trl-dpr sft`).
    """

    def __init__(self, dataclass_types=None, recipe_subfolder: str | None = None, **kwargs):
        # A flag is a key of the recipe, spelled out as in the YAML: argparse's abbreviations would take a typo
        # (`--max_prompt`) for the key it begins.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(dataclass_types, **kwargs)
        self.recipe_subfolder = recipe_subfolder  # where `--config NAME` is looked up first among the shipped recipes
        self.launcher_flags: dict[str, bool] = {}  # `trl-dpr <stage>` accepts accelerate's flags (cli.py sets them)
        # Keys of TRL's / transformers' dataclasses that no trl_dpr class declares (or re-declares with its default):
        # `--help` names them after trl_dpr's own, `--help-all` describes them.
        own = {
            name
            for dataclass_type in self.dataclass_types
            for cls in dataclass_type.__mro__
            if cls.__module__.startswith("trl_dpr")
            for name in cls.__dict__.get("__annotations__", {})
        }
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
        # The range rules the dataclasses' __post_init__ checks (`range_rules.RANGE_RULES`), checked here first.
        self._range_rules = list(
            dict.fromkeys(n for t in self.dataclass_types for n in getattr(t, "_RANGE_RULES", ()))
        )
        for action in self._actions:  # refused: --help does not offer them
            if action.dest in self._unused:
                action.help = argparse.SUPPRESS
            if action.type is dict:  # HfArgumentParser's `dict("{clip: 1.0}")` reads no text: the mapping forms do
                action.type = parse_mapping
        self._start_checks()

    @classmethod
    def from_description(cls, description: dict) -> RecipeParser:
        """The parser `describe()` described, rebuilt without its dataclasses (TRL's configs import torch: seconds):
        the same flags, types, choices, defaults, help and checks. It checks and parses; it builds no dataclass."""
        parser = cls(
            None,
            recipe_subfolder=description["recipe_subfolder"],
            prog=description["prog"],
            usage=description["usage"],
            description=description["description"],
            epilog=description["epilog"],
            allow_abbrev=description["allow_abbrev"],
        )
        converters = {
            "int": int,
            "float": float,
            "bool": _string_to_bool,
            "other": _as_given,
            "mapping": parse_mapping,
        }
        for argument in description["arguments"]:
            hidden = argument["help"] == argparse.SUPPRESS  # argparse tests `help is SUPPRESS`, its own object
            kwargs = {
                "dest": argument["dest"],
                "action": argument["action"],
                "default": argument["default"],
                "required": argument["required"],
                "help": argparse.SUPPRESS if hidden else argument["help"],
            }
            if argument["action"] == "store":
                kind, choices = argument["type"] or "", argument["choices"]
                converter = _choice_type(choices) if kind.startswith("choice") else converters.get(kind.split("|")[0])
                if converter is not None and kind.endswith("|null"):
                    converter = _nullable(converter)
                kwargs.update(
                    nargs=argument["nargs"],
                    const=argument["const"],
                    choices=choices,
                    metavar=argument["metavar"],
                    type=converter,
                )
            elif argument["action"] == "store_const":
                kwargs["const"] = argument["const"]
            parser.add_argument(*argument["flags"], **kwargs)
        parser._rules = description["rules"]
        parser._unused = {
            name: (tuple(accepted), reason) for name, (accepted, reason) in description["unused"].items()
        }
        parser._range_rules = description["range_rules"]
        parser.launcher_flags = description["launcher_flags"]
        parser.inherited_keys = set(description["inherited"])
        parser._start_checks()
        return parser

    # ---- parsing: TrlParser's, with the checks before and after --------------------------------------------------

    def parse_args_and_config(
        self,
        args: Iterable[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ):
        """TrlParser's. A key of the YAML no dataclass has is always an error (`fail_with_unknown_args` is kept for
        TrlParser's signature); a command-line flag none has is one unless `return_remaining_strings` asks for them
        (or it is one of `launcher_flags`, with its value)."""
        args = list(args) if args is not None else sys.argv[1:]
        if "--config" in args:
            index = args.index("--config") + 1
            if index >= len(args):
                raise ValueError(f"Expected a recipe after --config. {self.help_command} describes it.")
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
        self.check_unknown_flags(remaining, self.launcher_flags)
        return tuple(parsed)

    def check_recipe(self, args: list[str]) -> tuple[argparse.Namespace, list[str]]:
        """`parse_args_and_config(args)` without building the dataclasses (a parser `from_description`): the values
        (YAML, then command line) as a namespace, and the arguments left for the launcher."""
        namespace, remaining = self.parse_args_and_config(args, return_remaining_strings=True)
        self.check_unknown_flags(remaining, self.launcher_flags)
        return namespace, remaining

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        """TrlParser's (the YAML values become the arguments' defaults), after the checks: a key no argument has, or a
        YAML string a non-text field cannot read, stops the run with the file's name. The values are the file's as
        `load_recipe_yaml` reads it (TrlParser's own `yaml.safe_load` reads `{min_lr: 1e-6}` as text)."""
        if self._config_values is not None:  # the keys TrlParser passes (`env:` taken out), the values ours
            kwargs = {key: self._config_values.get(key, value) for key, value in kwargs.items()}
        self._config_keys = set(kwargs)
        actions = {}
        for action in self._actions:  # the first action of a dest (`--use_x`, not `--no_use_x`) converts its text
            actions.setdefault(action.dest, action)
        problems = []
        for key, value in kwargs.items():
            action = actions.get(key)
            if isinstance(value, str) and action is not None and action.type not in (None, str):
                try:
                    action.type(value)
                except (ValueError, TypeError, argparse.ArgumentTypeError):
                    expected = _describe(self._rules[key]["type"]) if key in self._rules else "another type"
                    problems.append(f"{key}: {value!r} is a string; expected {expected}")
        if problems:
            self._raise_invalid(problems, set(kwargs))
        unknown = [key for key in kwargs if key not in actions]
        if unknown:
            lines = []
            for key in unknown:
                if key in RENAMED_KEYS:  # a new name, or "(removed: ...)" / "(...)": what to do instead
                    instead = RENAMED_KEYS[key]
                    lines.append(
                        f"  - {key} {instead}" if instead.startswith("(") else f"  - {key} (renamed: use `{instead}`)"
                    )
                else:
                    close = difflib.get_close_matches(key, sorted(self.known_keys()), n=3)
                    lines.append(f"  - {key}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
            raise ValueError(
                f"Unknown key(s) in {self._config_path}; a recipe must not silently ignore settings:\n"
                + "\n".join(lines)
                + f"\nRemove or rename them. {self.help_command} lists every accepted key."
            )
        return super().set_defaults_with_config(**kwargs)

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, then every value that differs from its field's default is checked (`check_value`): the YAML's,
        which argparse passes through unchecked, and the command line's."""
        namespace, remaining = super().parse_known_args(args, namespace)
        problems = []
        for name, value in vars(namespace).items():
            rule = self._rules.get(name)
            if rule is None:
                continue
            default = rule.get("default", dataclasses.MISSING)
            try:
                if value == default or value == self._parser_defaults.get(name, dataclasses.MISSING):
                    continue
            except Exception:  # a value whose == is not a plain bool (an array): check it
                pass
            problem = check_value(name, value, rule["type"], default, rule.get("choices"))
            if problem:
                problems.append(problem)
        given = {a[2:].split("=")[0] for a in (args or []) if isinstance(a, str) and a.startswith("--")}
        for name, (accepted, reason) in self._unused.items():
            if name in given or name in self._config_keys:
                problem = unused_field_problem(name, getattr(namespace, name, None), accepted, reason)
                problems += [problem] if problem else []
        if not problems:  # the values have their types: the rules between them and on their ranges
            problems = range_problems(vars(namespace), self._range_rules)
        if problems:
            self._raise_invalid(problems, self._config_keys - given)
        return namespace, remaining

    # ---- the checks' helpers -------------------------------------------------------------------------------------

    def _start_checks(self) -> None:
        self._config_path = None
        self._config_values: dict | None = None  # the YAML's values, read by `locate_config`
        self._config_keys: set[str] = set()
        # What each argument's default was before a YAML replaced it (HfArgumentParser's may differ from the field's:
        # None for an empty list): a value equal to it or to the field's default was not given, and is not checked.
        self._parser_defaults = {}
        for action in self._actions:
            self._parser_defaults.setdefault(action.dest, action.default)

    @property
    def help_command(self) -> str:
        """The command whose --help lists every accepted key: `trl-dpr sft --help` (the parser's `prog`)."""
        return f"`{self.prog} --help`" if self.prog.startswith("trl-dpr ") else "`trl-dpr <stage> --help`"

    def known_keys(self) -> set[str]:
        return {action.dest for action in self._actions} - {"help"}

    def locate_config(self, path: str) -> str:
        """The YAML `--config` names (a file, or a shipped recipe), checked to parse."""
        self._config_path = find_recipe_file(path, self.recipe_subfolder)
        values = _check_yaml_syntax(self._config_path)
        self._config_values = values if isinstance(values, dict) else None
        from .secret_scan import refuse_pasted_secrets  # issue 42: a key pasted into any recipe is refused

        refuse_pasted_secrets(self._config_path)
        return self._config_path

    def error(self, message):
        # argparse's own errors (a value its type cannot read, a choice not offered, a missing value) print the whole
        # usage, hundreds of lines for TRL's configs, before the one line that matters: that line alone, as every
        # other mistake in the input is reported.
        raise ValueError(f"{message} (command line). {self.help_command} lists every flag with its type and default.")

    def check_unknown_flags(self, remaining: list[str], launcher_flags: dict[str, bool] | None = None) -> None:
        """The command-line arguments this parser left (`remaining`) are flags of the launcher (`launcher_flags`: flag →
        takes a value), with their values; anything else is a mistake, reported with the closest accepted flag."""
        own = [flag for action in self._actions for flag in action.option_strings]
        problem = unknown_flags(remaining, own, launcher_flags or {})
        if problem:
            raise ValueError(f"{problem}. {self.help_command} lists every accepted flag.")

    def _raise_invalid(self, problems: list, from_config: set[str]):
        """`problems`: "key: what is wrong" lines, or (key, message) pairs."""

        def where(problem) -> str:
            key = problem[0] if isinstance(problem, tuple) else problem.split(":")[0]
            in_config = self._config_path and key in from_config
            return f" (in {self._config_path})" if in_config else " (command line)"

        def text(problem) -> str:
            return problem[1] if isinstance(problem, tuple) else problem

        raise ValueError(
            "Invalid value(s); nothing was loaded or trained:\n"
            + "\n".join(f"  - {text(problem)}{where(problem)}" for problem in problems)
            + f"\nFix them in the YAML or on the command line. {self.help_command} lists every key with its type and "
            "default."
        )

    # ---- help and the description -----------------------------------------------------------------------------------

    def format_help(self, full: bool = False) -> str:
        """argparse's help; unless `full`, trl_dpr's own keys only, described, then the inherited ones (TRL's,
        transformers') by name, which `--help-all` describes."""
        if full or not self.inherited_keys:
            return super().format_help()
        hidden = [a for a in self._actions if a.dest in self.inherited_keys and a.help != argparse.SUPPRESS]
        saved = [a.help for a in hidden]
        try:
            for action in hidden:
                action.help = argparse.SUPPRESS
            own = super().format_help()
        finally:
            for action, text in zip(hidden, saved):
                action.help = text
        names = ", ".join(a.option_strings[0] for a in hidden)
        return (
            own
            + "\n"
            + textwrap.fill(
                f"Inherited from TRL and transformers ({len(hidden)} keys; `{self.prog} --help-all` describes each): {names}",
                width=120,
            )
            + "\n"
        )

    def describe(self) -> dict:
        """This parser's arguments and checks as plain JSON data, from which `from_description` rebuilds them. Call it
        before parsing: a parsed YAML's values have become the arguments' defaults."""
        arguments = []
        for action in self._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            kind = _ACTION_KINDS.get(type(action))
            if kind is None:
                raise TypeError(f"{action.option_strings}: {type(action).__name__} cannot be described for the cache.")
            arguments.append(
                {
                    "flags": list(action.option_strings),
                    "dest": action.dest,
                    "action": kind,
                    "nargs": action.nargs,
                    "const": _plain(action.const),
                    "default": _jsonable(_plain(action.default)),
                    "type": _type_name(action),
                    "choices": _plain(action.choices) if action.choices is not None else None,
                    "required": action.required,
                    "help": action.help,
                    "metavar": action.metavar,  # SUPPRESS is a string
                }
            )
        return {
            "prog": self.prog,
            "usage": self.usage,
            "description": self.description,
            "epilog": self.epilog,
            "allow_abbrev": self.allow_abbrev,
            "recipe_subfolder": self.recipe_subfolder,
            "arguments": arguments,
            # a rule whose default JSON cannot hold is left out: the rebuilt parser does not check that field, the
            # recipe's own parser still does
            "rules": {dest: rule for dest, rule in self._rules.items() if _jsonable(rule) is rule},
            "unused": {name: [list(accepted), reason] for name, (accepted, reason) in self._unused.items()},
            "range_rules": self._range_rules,
            "launcher_flags": self.launcher_flags,
            "inherited": sorted(self.inherited_keys),
        }


def load_evaluation_config(path: str, unset: dict | None = None, **replaced):
    """The `EvaluationConfig` of a `trl-dpr evaluate` YAML (a file, or a shipped recipe's name), checked as the recipe
    checks it (unknown keys and secrets are errors), with some fields replaced (`baseline=`, `output_dir=`, ...) and
    those the YAML does not set taken from `unset` (a pipeline's evaluation: the training's `trust_remote_code`)."""
    from ..evaluation.config import EvaluationConfig, check_config_has_no_secrets

    path = find_recipe_file(str(path), subfolder="evaluate")
    with open(path) as handle:
        values = load_recipe_yaml(handle) or {}
    check_config_has_no_secrets(values, path)
    (config,) = RecipeParser((EvaluationConfig,), prog="trl-dpr evaluate").parse_args_and_config(["--config", path])
    return dataclasses.replace(config, **{k: v for k, v in (unset or {}).items() if k not in values} | replaced)


def _rule(field: dataclasses.Field, annotation) -> dict:
    """What `check_value` checks a value of `field` against, as plain data."""
    rule = {"type": type_spec(annotation), "choices": _plain(field.metadata.get("choices"))}
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    if default is not dataclasses.MISSING:
        rule["default"] = _plain(default)
    return rule


# ---- the description's converters: how argparse reads each argument's text, by name --------------------------------

_ACTION_KINDS = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._StoreConstAction: "store_const",
}


def _jsonable(value):
    """`value` when JSON holds it as it is; else its text (a default shown in --help, never compared)."""
    try:
        return value if json.loads(json.dumps(value)) == value else str(value)
    except (TypeError, ValueError):
        return str(value)


def _type_name(action) -> str | None:
    """How argparse converts this argument's text: "int", "float", "bool", "choice", None (text) or "other", with
    "|null" when "none"/"null" give None (as TRL's parser does for optional non-text fields)."""
    converter = action.type
    try:
        nullable = converter is not None and converter("null") is None
    except Exception:  # the converter refuses "null": not a nullable field
        nullable = False
    name = getattr(converter, "__name__", None)  # TRL's wrapper for "null" keeps the name of the type it wraps
    if converter is parse_mapping:
        kind = "mapping"
    elif converter in (int, float) or (nullable and name in ("int", "float")):
        kind = name
    elif converter is _string_to_bool or name == "string_to_bool":  # HF's type for booleans
        kind = "bool"
    elif converter in (None, str):
        kind = None
    else:
        kind = "other"
    if action.choices is not None and kind in (None, "other"):  # a Literal or Enum: HF maps each choice's text to it
        kind = "choice"
    return f"{kind}|null" if nullable and kind else kind


def _as_given(text):
    """The light parser's type for an "other" type: the text, left to the recipe's own parser to convert."""
    return text


def _string_to_bool(text):
    """transformers' `string_to_bool`, the type of HfArgumentParser's boolean flags."""
    if isinstance(text, bool):
        return text
    if text.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if text.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {text} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


def _nullable(converter):
    """TRL's converter of an optional field: "none" or "null" (any case) is None, any other text is converted."""

    def convert(text):
        return None if text.lower() in ("none", "null") else converter(text)

    convert.__name__ = converter.__name__  # argparse's messages name the type ("invalid int value")
    return convert


def _choice_type(choices):
    """HfArgumentParser's type of a Literal or Enum field: the text of a choice → the choice."""
    by_text = {str(choice): choice for choice in choices}
    return lambda text: by_text.get(text, text)
