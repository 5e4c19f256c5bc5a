"""Recipe arguments for analysis runs: a recipe's YAML and command line, with a few keys replaced per run.

A sweep parses its script's arguments once, then each variant again with the variant's keys appended to the command
line (`parse_with_overrides`), so a variant's own keys win over both the YAML and the command line, and every key goes
through the same strict parser as the recipes (unknown keys are errors). Evaluations reuse `recipes/evaluate.py`'s
YAMLs the same way (`evaluation_config`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from trl import ModelConfig

from trl_dpr.config import DensePathConfig
from trl_dpr.evaluation import EvaluationConfig
from trl_dpr.running.pipeline import DPRScriptArguments
from trl_dpr.running.recipe_parser import RecipeParser, load_evaluation_config

__all__ = [
    "DPR_ARGUMENTS",
    "to_command_line",
    "check_override_keys",
    "select_overrides",
    "parse_with_overrides",
    "evaluation_config",
]

# The dataclasses of recipes/dpr.py: a sweep's variants may override any of their keys.
DPR_ARGUMENTS = (DPRScriptArguments, DensePathConfig, ModelConfig)


def to_command_line(values: dict) -> list[str]:
    """`{"gamma": 0.95, "whiten_advantages": False, "candidates": ["A=a"]}` → `--gamma 0.95 --whiten_advantages false
    --candidates A=a`. None cannot be written on a command line and is an error.

    Example:
        >>> to_command_line({"gamma": 0.95, "whiten_advantages": False, "candidates": ["A=a", "B=b"]})
        ['--gamma', '0.95', '--whiten_advantages', 'false', '--candidates', 'A=a', 'B=b']
    """
    args: list[str] = []
    for key, value in values.items():
        if value is None:
            raise ValueError(f"Cannot set {key} to null in a variant or override; leave the key out instead.")
        if isinstance(value, bool):
            words = ["true" if value else "false"]
        elif isinstance(value, (list, tuple)):
            if not value:
                raise ValueError(f"{key}: an empty list cannot be written on a command line.")
            words = [str(v) for v in value]
        else:
            words = [str(value)]
        args += [f"--{key}", *words]
    return args


def check_override_keys(
    overrides: dict, dataclass_types: Sequence[type], extra_keys: Iterable[str], where: str
) -> None:
    """Raise naming every key of `overrides` that is neither a field of `dataclass_types` nor in `extra_keys`.

    Example:
        >>> check_override_keys({"learnin_rate": 1e-4}, DPR_ARGUMENTS, {"oracle"}, "variant 'fast'")
        Traceback (most recent call last):
        ...
        ValueError: variant 'fast': unknown key(s) learnin_rate. ...
    """
    known = RecipeParser(dataclass_types).known_keys() | set(extra_keys)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)}. A variant may set any key of recipes/dpr.py "
            f"(`trl-dpr dpr --help`) and {sorted(extra_keys)}."
        )


def select_overrides(
    overrides_by_name: dict,
    only: Sequence[str] | None,
    dataclass_types: Sequence[type],
    extra_keys: Iterable[str],
    *,
    kind: str,
    yaml_key: str,
) -> list[str]:
    """The names to run (`only`, or every name in YAML order), each one's keys checked: a misspelled name or key is an
    error before anything trains.

    Example:
        >>> select_overrides({"a": {"gamma": 0.9}, "b": {}}, None, DPR_ARGUMENTS, (), kind="variant", yaml_key="variants")
        ['a', 'b']
        >>> select_overrides({"a": {}}, ["c"], DPR_ARGUMENTS, (), kind="variant", yaml_key="variants")
        Traceback (most recent call last):
        ...
        ValueError: --only names unknown variant(s) ['c']; the YAML defines ['a'].
    """
    if not overrides_by_name:
        raise ValueError(f"No {kind}s: add a `{yaml_key}:` mapping ({kind} name → keys to change) to the YAML.")
    selected = list(only or overrides_by_name)
    unknown = [name for name in selected if name not in overrides_by_name]
    if unknown:
        raise ValueError(f"--only names unknown {kind}(s) {unknown}; the YAML defines {list(overrides_by_name)}.")
    for name in selected:
        check_override_keys(overrides_by_name[name], dataclass_types, extra_keys, f"{kind} {name!r}")
    return selected


def parse_with_overrides(dataclass_types: Sequence[type], argv: Sequence[str], overrides: dict) -> tuple:
    """Parse `argv` (`--config file.yaml` and command-line keys) into `dataclass_types`, with `overrides` winning
    over both. A fresh parser each time: TrlParser keeps a YAML's values as defaults of the parser it used.

    Example:
        >>> argv = ["--output_dir", "runs/x", "--gamma", "0.9", "--use_cpu", "true", "--bf16", "false"]
        >>> _, args, _ = parse_with_overrides(DPR_ARGUMENTS, argv, {"gamma": 0.95, "output_dir": "runs/x/gamma0.95"})
        >>> args.gamma, args.output_dir
        (0.95, 'runs/x/gamma0.95')
    """
    return tuple(RecipeParser(dataclass_types).parse_args_and_config([*argv, *to_command_line(overrides)]))


def evaluation_config(path: str, **replaced) -> EvaluationConfig:
    """The `EvaluationConfig` of a `recipes/evaluate.py` YAML with some keys replaced (`baseline=`, `candidates=`,
    `output_dir=`, `temperature=`, ...). The YAML is checked as the recipe checks it: unknown keys and secrets are
    errors.

    Example:
        >>> config = evaluation_config("recipes/evaluate/demo.yaml", output_dir="runs/x", candidates=["G=runs/g"])
        >>> config.models(), config.judge
        ({'SFT': 'runs/demo/sft', 'G': 'runs/g'}, 'exact')
    """
    return load_evaluation_config(path, **replaced)
