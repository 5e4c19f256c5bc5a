"""The checks of a recipe's values as plain functions on plain data: a field's type as JSON (`type_spec`), whether a
value fits it (`check_value`), unknown flags with the closest known one, finding a shipped recipe, a YAML that does not
parse. `RecipeParser` (recipe_parser.py) applies them around TrlParser; `CommandParser` is the argparse of the commands
that take no recipe (`heatmap`, `memory`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import functools
import math
import types
import typing
from pathlib import Path

from ..field_checks import LEGACY_REWARD_KEYS

# The numeric fields whose negative values mean something. Every other number in the recipe dataclasses is a count, a
# size, a length, a rate, a coefficient, a probability or a time, and negative is a typo; a negative default is a
# sentinel (`max_steps: -1` = "train num_train_epochs"), accepted as itself and nothing else.
MAY_BE_NEGATIVE = frozenset(
    {
        "gsil_shift",  # b in GSIL's f = β log π_θ/π_t + b
        "reward_weights",  # weights of several rewards (a negative one is a penalty)
        "loss_weights",  # weights of several DPO losses
    }
)

# Keys that older TRL / transformers / alignment-handbook recipes use, and what replaced them.
RENAMED_KEYS = {
    "torch_dtype": "dtype",
    "warmup_ratio": "warmup_steps (a float below 1 is a ratio of the total steps)",
    "evaluation_strategy": "eval_strategy",
    "max_seq_length": "max_length",
    "dataset_text_field": "(removed: give the dataset a `messages` or `prompt`/`completion` column)",
    "use_flash_attention_2": "attn_implementation: flash_attention_2",
    "overwrite_output_dir": "(a key of the training recipes only: sft, dpr, spin, gsil)",
    # trl_dpr's own renames
    "judge_backoff_s": "(removed: the openai client backs off by itself; judge_max_retries sets how often it retries)",
    "evaluate": "evaluation_config: recipes/evaluate/<setup>.yaml (the evaluation `trl-dpr evaluate` runs)",
    "num_eval_samples": "demo_num_prompts in the evaluation_config YAML",
    "eval_temperature": "temperature in the evaluation_config YAML",
    "eval_samples_per_prompt": "samples_per_prompt in the evaluation_config YAML",
    "eval_max_new_tokens": "max_new_tokens in the evaluation_config YAML",
    "lambdas": "kl_coefs (the preview's grid of DPR's kl_coef)",
    **LEGACY_REWARD_KEYS,
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


# YAML 1.2's floats (the core schema's): `1e-6`, `1E5`, `1.0e5`, `+1e+5`, `.5e-3`. PyYAML reads YAML 1.1, whose floats
# need a dot and a signed exponent, so `learning_rate: 1e-6` was the text "1e-6": argparse converted a top-level key,
# nothing converted one inside a mapping (`lr_scheduler_kwargs: {min_lr: 1e-6}`) or a list, and the run failed later.
_YAML12_FLOAT = r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"


@functools.cache
def _recipe_loader():
    """PyYAML's safe loader with YAML 1.2's floats added (1.1's ints, booleans and floats keep their meaning)."""
    import re

    import yaml

    class RecipeLoader(yaml.SafeLoader):
        pass

    # appended after 1.1's resolvers (add_implicit_resolver copies them for the subclass): an int stays an int
    RecipeLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(f"^{_YAML12_FLOAT}$"), list("-+0123456789.")
    )
    return RecipeLoader


def load_recipe_yaml(stream):
    """A recipe's YAML (text or an open file) as every reader of recipes reads it: `yaml.safe_load` with YAML 1.2's
    floats, at any depth (`1e-6` is 1e-06, as the user meant; quoted, it stays text)."""
    import yaml

    return yaml.load(stream, Loader=_recipe_loader())  # noqa: S506 (a SafeLoader subclass)


def _check_yaml_syntax(path: str):
    """The recipe's values (`load_recipe_yaml`); a YAML file that does not parse is a `ValueError` naming the file, the
    line and the column (PyYAML's own message has them 0-based and is a traceback in TrlParser)."""
    import yaml

    with open(path) as handle:
        text = handle.read()
    try:
        return load_recipe_yaml(text)
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
    names = {
        "bool": "true or false",
        "int": "an integer",
        "float": "a number",
        "str": "a string",
        "null": "null",
        "dict": "a mapping",
        "any": "anything",
    }
    parts = []
    for member in _members(spec):
        if not isinstance(member, dict):
            parts.append(names[member])
        elif "one_of" in member:
            parts.append(f"one of {member['one_of']}")
        elif "list_of" in member:
            inner = member["list_of"]
            parts.append(
                f"a list of {_describe(inner).removeprefix('a ').removeprefix('an ')}s" if inner else "a list"
            )
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
    `flags_help`: where the accepted flags are listed (by default `<prog> --help`).
    """

    def __init__(self, flags_help: str | None = None, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)
        self.flags_help = flags_help or f"`{self.prog} --help` lists every accepted flag"

    def error(self, message):
        # argparse's own exit (code 2), which `python -m trl_dpr.running.memory` needs as much as `trl-dpr memory`
        self.exit(2, f"{self.prog}: error: {message.rstrip('.')}. {self.flags_help}.\n")

    def parse_args(self, args=None, namespace=None):
        namespace, remaining = self.parse_known_args(args, namespace)
        problem = unknown_flags(remaining, [flag for action in self._actions for flag in action.option_strings])
        if problem:
            self.error(problem)
        return namespace


def parse_mapping(text: str) -> dict:
    """A mapping-valued key on the command line: a JSON or YAML flow mapping (`{"clip": 1.0}`, `{clip: 1.0}`), or
    `key=value` pairs separated by commas (`clip=1.0,scale=2`), each value read as a recipe's YAML (1e-1 a number).
    """
    import yaml

    text = text.strip()
    try:
        if text.startswith("{"):
            value = load_recipe_yaml(text)
            if isinstance(value, dict):
                return value
        elif all("=" in item for item in text.split(",")) or not text:
            return {
                key.strip(): load_recipe_yaml(value)
                for key, value in (item.split("=", 1) for item in text.split(",") if item.strip())
            }
    except yaml.YAMLError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a mapping: give it as {{key: value, ...}} (YAML or JSON, quoted for the shell) or as "
        "key=value,key=value"
    )


parse_mapping.__name__ = "mapping"  # argparse's messages name the type
