"""The checks of a recipe's arguments that need no TRL: what `trl-dpr <stage>` runs before it imports torch.

    RecipeParser (TRL's dataclasses) ──describe()──► description (plain JSON) ──► LightRecipeParser (argparse only)
          └──────────────── RecipeChecks: the same checks, the same messages ────────────────┘

Importing TRL's dataclasses costs seconds, so every check is written once here against plain data (each field's
`type_spec`, default, choices): `--help`, a misspelled flag or a bad value are answered without TRL, with the
messages the recipe's own parser gives.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import json
import math
import types
import typing
from pathlib import Path

from ..field_checks import _plain, unused_field_problem

# The numeric fields whose negative values mean something. Every other number in the recipe dataclasses is a count, a
# size, a length, a rate, a coefficient, a probability or a time, and negative is a typo; a negative default is a
# sentinel (`max_steps: -1` = "train num_train_epochs"), accepted as itself and nothing else.
MAY_BE_NEGATIVE = frozenset({
    "gsil_shift",  # b in GSIL's f = β log π_θ/π_t + b
    "reward_weights",  # weights of several rewards (a negative one is a penalty)
    "loss_weights",  # weights of several DPO losses
})

# Keys that older TRL / transformers / alignment-handbook recipes use, and what replaced them.
RENAMED_KEYS = {
    "torch_dtype": "dtype",
    "warmup_ratio": "warmup_steps (a float below 1 is a ratio of the total steps)",
    "evaluation_strategy": "eval_strategy",
    "max_seq_length": "max_length",
    "dataset_text_field": "(removed: give the dataset a `messages` or `prompt`/`completion` column)",
    "use_flash_attention_2": "attn_implementation: flash_attention_2",
    "overwrite_output_dir": "(removed from transformers 5: use a fresh output_dir, or resume_from_checkpoint)",
    # trl_dpr's own renames
    "judge_backoff_s": "(removed: the openai client backs off by itself; judge_max_retries sets how often it retries)",
    "evaluate": "evaluation_config: recipes/evaluate/<setup>.yaml (the evaluation `trl-dpr evaluate` runs)",
    "num_eval_samples": "demo_num_prompts in the evaluation_config YAML",
    "eval_temperature": "temperature in the evaluation_config YAML",
    "eval_samples_per_prompt": "samples_per_prompt in the evaluation_config YAML",
    "eval_max_new_tokens": "max_new_tokens in the evaluation_config YAML",
}


def recipes_root() -> Path:
    """The folder of the recipes shipped with the package (`trl_dpr/recipes` in a wheel, `recipes/` in a clone)."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "recipes"  # a wheel: the YAMLs as package data (pyproject.toml, setup.py)
    return shipped if shipped.is_dir() else package.parent / "recipes"  # a clone (or an editable install)


def find_recipe_file(path: str, subfolder: str | None = None) -> str:
    """`path` itself when it exists; else the shipped recipe of that name (`demo/dpr.yaml`,
    `qwen2.5-7b/dpr/config_qlora.yaml`, `recipes/...` too), looked up in `subfolder` of the recipes first.
    """
    if Path(path).is_file():
        return str(path)
    root = recipes_root()
    name = path.removeprefix("recipes/")
    candidates = ([root / subfolder / name] if subfolder else []) + [root / name]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(
        f"Config file {path!r} not found: it is not a file here, nor a recipe shipped with trl_dpr (looked in "
        f"{', '.join(str(c) for c in candidates)}). `trl-dpr recipes` lists the shipped recipes."
    )


def _check_yaml_syntax(path: str) -> None:
    """A YAML file that does not parse is a `ValueError` naming the file, the line and the column (PyYAML's own
    message has them 0-based and is a traceback in TrlParser)."""
    import yaml

    with open(path) as handle:
        text = handle.read()
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        line = text.splitlines()[mark.line] if mark and mark.line < len(text.splitlines()) else ""
        what = " ".join(filter(None, [getattr(error, "context", None), getattr(error, "problem", None)])) or str(error)
        raise ValueError(
            f"{path}{where}: not valid YAML ({what})" + (f":\n    {line}" if line.strip() else "") + "\nA recipe is "
            "a YAML mapping of `key: value` lines; check that line's indentation, colon and quotes (a value with ': ' "
            "or ' #' in it needs quotes)."
        ) from None


# ---- a field's type as plain data -----------------------------------------------------------------------------------
# "int", "float", "bool", "str", "null", "dict", "any", {"any_of": [...]}, {"one_of": [values]} (a Literal or an
# Enum), {"list_of": spec or None}, {"other": "ClassName"} (a type these checks leave to the dataclass).


def type_spec(annotation):
    """The type `annotation` of a dataclass field as JSON, for the checks (`check_value`)."""
    if annotation in (typing.Any, object):
        return "any"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {"any_of": [type_spec(member) for member in typing.get_args(annotation)]}
    names = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null", dict: "dict"}
    if annotation in names:
        return names[annotation]
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return {"one_of": list(arguments)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"one_of": [member.value for member in annotation]}
    if origin in (list, tuple, set) or annotation in (list, tuple, set):
        return {"list_of": type_spec(arguments[0]) if arguments else None}
    if origin is dict:
        return "dict"
    if isinstance(annotation, type):
        return {"other": annotation.__name__}
    return "any"  # a typing construct these checks do not know (Callable, ...): left to the dataclass


def _members(spec) -> list:
    return spec["any_of"] if isinstance(spec, dict) and "any_of" in spec else [spec]


def _matches(value, spec) -> bool:
    """Whether `value` (as YAML or argparse gives it) is an instance of the field type `spec`."""
    if isinstance(spec, dict):
        if "any_of" in spec:
            return any(_matches(value, member) for member in spec["any_of"])
        if "one_of" in spec:
            return value in spec["one_of"]
        if "list_of" in spec:
            inner = spec["list_of"]
            if not isinstance(value, list | tuple):  # one item for a list of one, as `--key item` on the command line
                return inner is not None and _matches(value, inner)
            return inner is None or all(_matches(item, inner) for item in value)
        return True  # {"other": ...}: a type this check does not know, left to the dataclass
    if spec == "null":
        return value is None
    if spec == "bool":
        return isinstance(value, bool)
    if spec == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if spec == "float":  # an int is a float too (`learning_rate: 1`), a bool is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    if spec == "dict":
        return isinstance(value, dict)
    if spec == "str":  # YAML's `true` where the command line gives "true" (`resume_from_checkpoint: true`)
        return isinstance(value, str | bool)
    return True  # "any"


def _describe(spec) -> str:
    names = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string", "null": "null",
             "dict": "a mapping", "any": "anything"}
    parts = []
    for member in _members(spec):
        if not isinstance(member, dict):
            parts.append(names[member])
        elif "one_of" in member:
            parts.append(f"one of {member['one_of']}")
        elif "list_of" in member:
            inner = member["list_of"]
            parts.append(f"a list of {_describe(inner).removeprefix('a ').removeprefix('an ')}s" if inner else "a list")
        else:
            parts.append(member["other"])
    return " or ".join(dict.fromkeys(parts))


def check_value(name: str, value, spec, default=dataclasses.MISSING, choices=None) -> str | None:
    """Why `value` is not a valid value of the dataclass field `name`, or None when it is.

    Checked: the type (`spec`), `choices`, no NaN, and the sign (negative only for `MAY_BE_NEGATIVE` fields or a
    negative `default` given as itself).
    """
    value = value.value if isinstance(value, enum.Enum) else value
    shown = "null" if value is None else repr(value)
    if value is None:
        if any(member in ("null", "any") for member in _members(spec)):
            return None
        return f"{name}: null is not allowed; expected {_describe(spec)}"
    if not _matches(value, spec):
        return f"{name}: {shown} is {type(value).__name__ if not isinstance(value, bool) else 'a boolean'}; expected {_describe(spec)}"
    if choices and value not in choices:
        return f"{name}: {shown} is not one of {list(choices)}"
    if isinstance(value, float) and math.isnan(value):
        return f"{name}: NaN is not a number it can use; expected {_describe(spec)}"
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0 and name not in MAY_BE_NEGATIVE:
        if value == default:
            return None
        sentinel = f" (or {default}, its default)" if isinstance(default, int | float) and default < 0 else ""
        return f"{name}: {shown} is negative; expected >= 0{sentinel}"
    return None


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def unknown_flags(remaining: list[str], accepted: list[str], passed_on: dict[str, bool] | None = None) -> str | None:
    """What is wrong with the arguments argparse did not take (`remaining`), each unknown flag with the closest of
    `accepted` (difflib), or None when they are all flags of `passed_on` (the launcher's) with their values.
    """
    passed_on = passed_on or {}
    candidates = sorted({flag for flag in [*accepted, *passed_on] if flag.startswith("--")})
    problems, after_flag = [], False
    for token in remaining:
        if token.startswith("-") and not _is_number(token):
            flag, after_flag = token.split("=")[0], True
            if flag not in passed_on:
                close = difflib.get_close_matches(flag, candidates, n=1)
                problems.append(flag + (f" (did you mean {close[0]}?)" if close else ""))
        elif not after_flag:  # a value before any flag: nothing it belongs to (after one, it is that flag's value)
            problems.append(f"{token!r} (a value with no --key before it)")
    if not problems:
        return None
    return f"Unknown flag {problems[0]}" if len(problems) == 1 else "Unknown flags " + ", ".join(problems)


class CommandParser(argparse.ArgumentParser):
    """argparse for the commands that are not recipes (`heatmap`, `memory`): a mistake ends with exit code 2 in one
    line naming the closest flag; flags are never abbreviated, so a typo is not taken for another flag.
    """

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message):
        # argparse's own exit (code 2), which `python -m trl_dpr.running.memory` needs as much as `trl-dpr memory`
        self.exit(2, f"{self.prog}: error: {message.rstrip('.')}. `{self.prog} --help` lists every accepted flag.\n")

    def parse_args(self, args=None, namespace=None):
        namespace, remaining = self.parse_known_args(args, namespace)
        problem = unknown_flags(remaining, [flag for action in self._actions for flag in action.option_strings])
        if problem:
            self.error(problem)
        return namespace


# ---- the checks, on any argparse parser that has the plain data ---------------------------------------------------


class RecipeChecks:
    """The checks of `RecipeParser` and `LightRecipeParser`, on plain data: `_rules` (dest → {"type": type_spec,
    "default": ..., "choices": [...]}, from the dataclass fields), `_unused` (field → (accepted values, why not), from
    the dataclasses' `_UNUSED_FIELDS`) and `recipe_subfolder` (where `--config NAME` is looked up first)."""

    _rules: dict[str, dict]
    _unused: dict[str, tuple[tuple, str]]
    recipe_subfolder: str | None

    def _start_checks(self) -> None:
        self._config_path = None
        self._config_keys: set[str] = set()
        # What each argument's default was before a YAML replaced it (HfArgumentParser's may differ from the field's:
        # None for an empty list): a value equal to it or to the field's default was not given, and is not checked.
        self._parser_defaults = {action.dest: action.default for action in self._actions}

    @property
    def help_command(self) -> str:
        """The command whose --help lists every accepted key: `trl-dpr sft --help` (the parser's `prog`)."""
        return f"`{self.prog} --help`" if self.prog.startswith("trl-dpr ") else "`trl-dpr <stage> --help`"

    def known_keys(self) -> set[str]:
        return {action.dest for action in self._actions} - {"help"}

    def locate_config(self, path: str) -> str:
        """The YAML `--config` names (a file, or a shipped recipe), checked to parse."""
        self._config_path = find_recipe_file(path, self.recipe_subfolder)
        _check_yaml_syntax(self._config_path)
        from .secret_scan import refuse_pasted_secrets  # issue 42: a key pasted into any recipe is refused

        refuse_pasted_secrets(self._config_path)
        return self._config_path

    def error(self, message):
        # argparse's own errors (a value its type cannot read, a choice not offered, a missing value) print the whole
        # usage, hundreds of lines for TRL's configs, before the one line that matters: that line alone, as every
        # other mistake in the input is reported.
        raise ValueError(f"{message} (command line). {self.help_command} lists every flag with its type and default.")

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        """TrlParser's: the YAML values become the arguments' defaults; a key no argument has is an error.

        A YAML string for a non-text field is converted here as argparse would, so the message names the file.
        """
        self._config_keys = set(kwargs)
        actions = {action.dest: action for action in self._actions}
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
                if key in RENAMED_KEYS:
                    lines.append(f"  - {key} (renamed: use `{RENAMED_KEYS[key]}`)")
                else:
                    close = difflib.get_close_matches(key, sorted(self.known_keys()), n=3)
                    lines.append(f"  - {key}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
            raise ValueError(
                f"Unknown key(s) in {self._config_path}; a recipe must not silently ignore settings:\n"
                + "\n".join(lines)
                + f"\nRemove or rename them. {self.help_command} lists every accepted key."
            )
        for key, value in kwargs.items():
            actions[key].default = value
            actions[key].required = False
        return []

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
        if problems:
            self._raise_invalid(problems, self._config_keys - given)
        return namespace, remaining

    def check_unknown_flags(self, remaining: list[str], launcher_flags: dict[str, bool] | None = None) -> None:
        """The command-line arguments this parser left (`remaining`) are flags of the launcher (`launcher_flags`: flag →
        takes a value), with their values; anything else is a mistake, reported with the closest accepted flag."""
        own = [flag for action in self._actions for flag in action.option_strings]
        problem = unknown_flags(remaining, own, launcher_flags or {})
        if problem:
            raise ValueError(f"{problem}. {self.help_command} lists every accepted flag.")

    def _raise_invalid(self, problems: list[str], from_config: set[str]):
        where = lambda problem: (  # noqa: E731
            f" (in {self._config_path})" if self._config_path and problem.split(":")[0] in from_config else " (command line)"
        )
        raise ValueError(
            "Invalid value(s); nothing was loaded or trained:\n"
            + "\n".join(f"  - {problem}{where(problem)}" for problem in problems)
            + f"\nFix them in the YAML or on the command line. {self.help_command} lists every key with its type and "
            "default."
        )

    def describe(self) -> dict:
        """This parser's arguments and checks as plain JSON data, from which `LightRecipeParser` rebuilds them. Call it
        before parsing: a parsed YAML's values have become the arguments' defaults."""
        arguments = []
        for action in self._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            kind = _ACTION_KINDS.get(type(action))
            if kind is None:
                raise TypeError(f"{action.option_strings}: {type(action).__name__} cannot be described for the cache.")
            arguments.append({
                "flags": list(action.option_strings), "dest": action.dest, "action": kind, "nargs": action.nargs,
                "const": _plain(action.const), "default": _jsonable(_plain(action.default)),
                "type": _type_name(action), "choices": _plain(action.choices) if action.choices is not None else None,
                "required": action.required, "help": action.help, "metavar": action.metavar,  # SUPPRESS is a string
            })
        return {
            "prog": self.prog, "usage": self.usage, "description": self.description, "epilog": self.epilog,
            "allow_abbrev": self.allow_abbrev, "recipe_subfolder": self.recipe_subfolder, "arguments": arguments,
            # a rule whose default JSON cannot hold is left out: the light parser does not check that field, the
            # recipe's own parser still does
            "rules": {dest: rule for dest, rule in self._rules.items() if _jsonable(rule) is rule},
            "unused": {name: [list(accepted), reason] for name, (accepted, reason) in self._unused.items()},
            "launcher_flags": getattr(self, "launcher_flags", {}),
            "inherited": sorted(getattr(self, "inherited_keys", ())),
        }


_ACTION_KINDS = {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true",
                 argparse._StoreFalseAction: "store_false", argparse._StoreConstAction: "store_const"}


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


def parse_mapping(text: str) -> dict:
    """A mapping-valued key on the command line: a JSON or YAML flow mapping (`{"clip": 1.0}`, `{clip: 1.0}`), or
    `key=value` pairs separated by commas (`clip=1.0,scale=2`), each value read as YAML reads it (1.0 a number).
    """
    import yaml

    text = text.strip()
    try:
        if text.startswith("{"):
            value = yaml.safe_load(text)
            if isinstance(value, dict):
                return value
        elif all("=" in item for item in text.split(",")) or not text:
            return {key.strip(): yaml.safe_load(value) for key, value in
                    (item.split("=", 1) for item in text.split(",") if item.strip())}
    except yaml.YAMLError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a mapping: give it as {{key: value, ...}} (YAML or JSON, quoted for the shell) or as "
        "key=value,key=value"
    )


parse_mapping.__name__ = "mapping"  # argparse's messages name the type


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


class LightRecipeParser(RecipeChecks, argparse.ArgumentParser):
    """A stage's `RecipeParser` rebuilt from its `describe()` data with argparse alone: the same flags, types, choices,
    defaults and help, and the same checks, without importing TRL. It checks; it builds no dataclass.
    """

    def __init__(self, description: dict):
        super().__init__(prog=description["prog"], usage=description["usage"], description=description["description"],
                         epilog=description["epilog"], allow_abbrev=description["allow_abbrev"],
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        converters = {"int": int, "float": float, "bool": _string_to_bool, "other": _as_given, "mapping": parse_mapping}
        for argument in description["arguments"]:
            hidden = argument["help"] == argparse.SUPPRESS  # argparse tests `help is SUPPRESS`, its own object
            kwargs = {"dest": argument["dest"], "action": argument["action"], "default": argument["default"],
                      "required": argument["required"], "help": argparse.SUPPRESS if hidden else argument["help"]}
            if argument["action"] == "store":
                kind, choices = argument["type"] or "", argument["choices"]
                converter = _choice_type(choices) if kind.startswith("choice") else converters.get(kind.split("|")[0])
                if converter is not None and kind.endswith("|null"):
                    converter = _nullable(converter)
                kwargs.update(nargs=argument["nargs"], const=argument["const"], choices=choices,
                              metavar=argument["metavar"], type=converter)
            elif argument["action"] == "store_const":
                kwargs["const"] = argument["const"]
            self.add_argument(*argument["flags"], **kwargs)
        self.recipe_subfolder = description["recipe_subfolder"]
        self._rules = description["rules"]
        self._unused = {name: (tuple(accepted), reason) for name, (accepted, reason) in description["unused"].items()}
        self.launcher_flags = description["launcher_flags"]
        self.inherited_keys = set(description["inherited"])
        self._start_checks()

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
        import textwrap

        return own + "\n" + textwrap.fill(
            f"Inherited from TRL and transformers ({len(hidden)} keys; `{self.prog} --help-all` describes each): {names}",
            width=120) + "\n"

    def check_recipe(self, args: list[str]) -> tuple[argparse.Namespace, list[str]]:
        """Every check `RecipeParser.parse_args_and_config(args)` makes before it builds the dataclasses; returns the
        namespace of the values (YAML, then command line) and the arguments left for the launcher. Flags it does not
        know are errors, unless the description lists them as the launcher's (`launcher_flags`)."""
        import yaml

        args = list(args)
        if "--config" in args:
            index = args.index("--config")
            if index + 1 >= len(args):
                raise ValueError(f"Expected a recipe after --config. {self.help_command} describes it.")
            path = self.locate_config(args[index + 1])
            del args[index : index + 2]
            with open(path) as handle:
                config = yaml.safe_load(handle)
            if not isinstance(config, dict):  # TrlParser's check, in its words
                raise ValueError(f"Config file {path} must contain a YAML mapping.")
            config.pop("env", None)  # environment variables for the run (TrlParser sets them), not arguments
            self.set_defaults_with_config(**config)
        namespace, remaining = self.parse_known_args(args)
        self.check_unknown_flags(remaining, self.launcher_flags)
        return namespace, remaining
