"""`RecipeParser`: TRL's `TrlParser` (YAML `--config` + command-line overrides) that rejects unknown keys, and
`find_recipe_file`: a YAML given by path, or by its name among the recipes shipped with the package.

TRL's own scripts parse with `fail_with_unknown_args=False`, so a stale key does nothing without a word: since TRL 1.8
`torch_dtype:` is ignored (it is `dtype` now), and since transformers 5 `warmup_ratio:` is gone (`warmup_steps` takes
a ratio). A recipe that silently ignores a line is a recipe that silently trains something else, so here an unknown
key stops the run before anything is loaded, naming the key and, when we know it, its new name.

The same holds for values. argparse converts and checks only what comes from the command line: a YAML value becomes
an argparse *default*, which goes to the dataclass as it is, so `learning_rate: null`, `dtype: float33` or
`max_steps: -5` would reach the trainer. `RecipeParser` checks every value, from the YAML or the command line,
against its dataclass field (`check_value`): its type, its `choices`, and its sign. A YAML syntax error is reported
with its line. All of this happens while parsing, before any model is built.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import math
import sys
import types
import typing
from collections.abc import Iterable
from pathlib import Path

from trl import TrlParser

__all__ = ["MAY_BE_NEGATIVE", "RENAMED_KEYS", "RecipeParser", "check_value", "find_recipe_file", "recipes_root"]

# The numeric fields whose negative values mean something. Every other number in the recipe dataclasses is a count, a
# size, a length, a rate, a coefficient, a probability or a time, and negative is a typo; a negative default is a
# sentinel (`max_steps: -1` = "train num_train_epochs"), accepted as itself and nothing else.
MAY_BE_NEGATIVE = frozenset({
    "gsil_shift",  # b in GSIL's f = β log π_θ/π_t + b
    "reward_weights",  # weights of several rewards (refused by DPR anyway)
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
    "evaluate": "evaluation_config: recipes/evaluate/<setup>.yaml (the evaluation recipes/evaluate.py runs)",
    "num_eval_samples": "demo_num_prompts in the evaluation_config YAML",
    "eval_temperature": "temperature in the evaluation_config YAML",
    "eval_samples_per_prompt": "samples_per_prompt in the evaluation_config YAML",
    "eval_max_new_tokens": "max_new_tokens in the evaluation_config YAML",
}


def recipes_root() -> Path:
    """The folder of the recipes shipped with the package (`trl_dpr/recipes` in a wheel, `recipes/` in a clone).

    Example:
        >>> (recipes_root() / "demo" / "dpr.yaml").is_file()
        True
    """
    import importlib.resources

    try:
        return Path(str(importlib.resources.files("trl_dpr.recipes")))
    except ModuleNotFoundError:  # a clone on sys.path without the package installed: the repository's folder
        return Path(__file__).resolve().parent.parent / "recipes"


def _union_members(annotation) -> tuple:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _matches(value, annotation) -> bool:
    """Whether `value` (as YAML or argparse gives it) is an instance of the field type `annotation`."""
    if annotation in (typing.Any, object):
        return True
    if any(member is not annotation for member in _union_members(annotation)):
        return any(_matches(value, member) for member in _union_members(annotation))
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if origin is typing.Literal:
        return value in arguments
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return isinstance(value, annotation) or value in [member.value for member in annotation]
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:  # an int is a float too (`learning_rate: 1`), a bool is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (list, tuple, set) or annotation in (list, tuple, set):
        if not isinstance(value, list | tuple):  # one item for a list of one, as `--key item` on the command line
            return bool(arguments) and _matches(value, arguments[0])
        return all(_matches(item, arguments[0]) for item in value if arguments)
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    if annotation is str:  # YAML's `true` where the command line gives "true" (`resume_from_checkpoint: true`)
        return isinstance(value, str | bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True  # a type this check does not know: left to the dataclass


def _describe(annotation) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null",
             dict: "a mapping"}
    parts = []
    for member in _union_members(annotation):
        origin = typing.get_origin(member)
        if member in names:
            parts.append(names[member])
        elif origin is typing.Literal:
            parts.append(f"one of {list(typing.get_args(member))}")
        elif isinstance(member, type) and issubclass(member, enum.Enum):
            parts.append(f"one of {[m.value for m in member]}")
        elif origin in (list, tuple, set) or member in (list, tuple, set):
            inner = typing.get_args(member)
            parts.append(f"a list of {_describe(inner[0]).removeprefix('a ').removeprefix('an ')}s" if inner else "a list")
        elif origin is dict or member is dict:
            parts.append("a mapping")
        else:
            parts.append(getattr(member, "__name__", str(member)))
    return " or ".join(dict.fromkeys(parts))


def check_value(name: str, value, field: dataclasses.Field, annotation, choices=None) -> str | None:
    """Why `value` is not a valid value of the dataclass field `name`, or None when it is.

    Checked: the type (`annotation`, the field's resolved type: `null` only where it allows None, an integer where it
    says `int`), `choices` (the field's `metadata["choices"]`, its `Literal` or `Enum`), a number that is not NaN, and
    the sign: negative only for `MAY_BE_NEGATIVE` fields, or a negative default given as itself.

    Example:
        >>> from dataclasses import dataclass, field, fields
        >>> @dataclass
        ... class Args:
        ...     max_steps: int = -1
        ...     learning_rate: float = 1e-5
        ...     dtype: str = field(default="auto", metadata={"choices": ["auto", "float32"]})
        >>> f = {f.name: f for f in fields(Args)}
        >>> check_value("max_steps", -1, f["max_steps"], int) is None   # the default sentinel
        True
        >>> check_value("max_steps", -5, f["max_steps"], int)
        'max_steps: -5 is negative; expected >= 0 (or -1, its default)'
        >>> check_value("learning_rate", None, f["learning_rate"], float)
        'learning_rate: null is not allowed; expected a number'
        >>> check_value("dtype", "float33", f["dtype"], str, ["auto", "float32"])
        "dtype: 'float33' is not one of ['auto', 'float32']"
    """
    shown = "null" if value is None else repr(value)
    if value is None:
        if any(member is type(None) for member in _union_members(annotation)) or annotation in (typing.Any, object):
            return None
        return f"{name}: null is not allowed; expected {_describe(annotation)}"
    if not _matches(value, annotation):
        return f"{name}: {shown} is {type(value).__name__ if not isinstance(value, bool) else 'a boolean'}; expected {_describe(annotation)}"
    if choices:
        allowed = [c.value if isinstance(c, enum.Enum) else c for c in choices]
        if (value.value if isinstance(value, enum.Enum) else value) not in allowed:
            return f"{name}: {shown} is not one of {allowed}"
    if isinstance(value, float) and math.isnan(value):
        return f"{name}: NaN is not a number it can use; expected {_describe(annotation)}"
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0 and name not in MAY_BE_NEGATIVE:
        default = field.default
        if value == default:
            return None
        sentinel = f" (or {default}, its default)" if isinstance(default, int | float) and default < 0 else ""
        return f"{name}: {shown} is negative; expected >= 0{sentinel}"
    return None


def find_recipe_file(path: str, subfolder: str | None = None) -> str:
    """`path` itself when it exists; else the shipped recipe of that name (`demo/dpr.yaml`,
    `qwen2.5-7b/dpr/config_qlora.yaml`, `recipes/...` too), looked up in `subfolder` of the recipes first.

    Example:
        >>> Path(find_recipe_file("demo/dpr.yaml")).relative_to(recipes_root()).as_posix()
        'demo/dpr.yaml'
        >>> Path(find_recipe_file("demo.yaml", subfolder="evaluate")).relative_to(recipes_root()).as_posix()
        'evaluate/demo.yaml'
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


class RecipeParser(TrlParser):
    """TRL's `TrlParser` for the recipes: `--config` also takes a shipped recipe's name, and a YAML key no recipe
    dataclass has stops the run (TrlParser detects it; this parser says what it was renamed to, or what is close).

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Args:
        ...     learning_rate: float = 1e-5
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "c.yaml")
        >>> _ = open(path, "w").write("learning_rate: 3.0e-6\\ntorch_dtype: bfloat16\\n")
        >>> RecipeParser([Args]).parse_args_and_config(["--config", path])
        Traceback (most recent call last):
        ...
        ValueError: ...torch_dtype (renamed: use `dtype`)...
    """

    def __init__(self, dataclass_types=None, recipe_subfolder: str | None = None, **kwargs):
        super().__init__(dataclass_types, **kwargs)
        self.recipe_subfolder = recipe_subfolder  # where `--config NAME` is looked up first among the shipped recipes
        self._config_path = None
        self._config_keys: set[str] = set()
        # dest → (field, resolved type): what each value is checked against (the first dataclass that has the field
        # wins, as HfArgumentParser registers it once).
        self._fields: dict[str, tuple[dataclasses.Field, object]] = {}
        for dataclass_type in self.dataclass_types:
            hints = typing.get_type_hints(dataclass_type)
            for f in dataclasses.fields(dataclass_type):
                if f.init:
                    self._fields.setdefault(f.name, (f, hints.get(f.name, typing.Any)))
        # Fields a dataclass declares unused by the recipes (`_UNUSED_BY_RECIPES`: name → (accepted values, reason)).
        self._unused: dict[str, tuple[tuple, str]] = {}
        for dataclass_type in self.dataclass_types:
            self._unused.update(getattr(dataclass_type, "_UNUSED_BY_RECIPES", {}))
        # What HfArgumentParser made of each default (it may differ from the field's: None for an empty list), before a
        # YAML replaces them: a value equal to either was not given, and is not checked.
        self._parser_defaults = {action.dest: action.default for action in self._actions}

    def known_keys(self) -> set[str]:
        return {action.dest for action in self._actions} - {"help"}

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        """TrlParser's: YAML values become defaults, and the keys it could not place come back. Those are an error.

        A YAML string for a field of another type (`learning_rate: fast`) is converted here as argparse would, so the
        message names the file; every value is checked against its field once parsing is done (`parse_known_args`).
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
                    annotation = self._fields[key][1] if key in self._fields else None
                    expected = _describe(annotation) if annotation is not None else "another type"
                    problems.append(f"{key}: {value!r} is a string; expected {expected}")
        if problems:
            self._raise_invalid(problems, set(kwargs))
        remaining = super().set_defaults_with_config(**kwargs)
        unknown = [item[2:] for item in remaining[::2]]  # TrlParser returns them as ["--key", "value", ...]
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
                + "\nRemove or rename them. `python recipes/<script>.py --help` lists every accepted key."
            )
        return remaining

    def parse_args_and_config(
        self,
        args: Iterable[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ):
        args = list(args) if args is not None else sys.argv[1:]
        if "--config" in args:
            index = args.index("--config") + 1
            self._config_path = args[index] = find_recipe_file(args[index], self.recipe_subfolder)
            _check_yaml_syntax(self._config_path)
        return super().parse_args_and_config(
            args,
            return_remaining_strings=return_remaining_strings,
            fail_with_unknown_args=fail_with_unknown_args,
            separate_remaining_strings=separate_remaining_strings,
        )

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, then every value that differs from its field's default is checked (`check_value`): the YAML's,
        which argparse passes through unchecked, and the command line's."""
        namespace, remaining = super().parse_known_args(args, namespace)
        problems = []
        for name, value in vars(namespace).items():
            if name not in self._fields:
                continue
            field, annotation = self._fields[name]
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            try:
                if value == default or value == self._parser_defaults.get(name, dataclasses.MISSING):
                    continue
            except Exception:  # a value whose == is not a plain bool (an array): check it
                pass
            problem = check_value(name, value, field, annotation, field.metadata.get("choices"))
            if problem:
                problems.append(problem)
        given = {a[2:].split("=")[0] for a in (args or []) if isinstance(a, str) and a.startswith("--")}
        for name, (accepted, reason) in self._unused.items():
            value = getattr(namespace, name, None)
            value = getattr(value, "value", value)  # an Enum (IntervalStrategy.STEPS) as its YAML value
            if (name in given or name in self._config_keys) and value not in accepted:
                off = f" or set it to {accepted[0]!r}" if accepted else ""
                problems.append(f"{name}: {value!r} is not used: {reason}. Remove it{off}")
        if problems:
            self._raise_invalid(problems, self._config_keys - given)
        return namespace, remaining

    def _raise_invalid(self, problems: list[str], from_config: set[str]):
        where = lambda problem: (  # noqa: E731
            f" (in {self._config_path})" if self._config_path and problem.split(":")[0] in from_config else " (command line)"
        )
        raise ValueError(
            "Invalid value(s); nothing was loaded or trained:\n"
            + "\n".join(f"  - {problem}{where(problem)}" for problem in problems)
            + "\nFix them in the YAML or on the command line. `python recipes/<script>.py --help` lists every key "
            "with its type and default."
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
