"""`RecipeParser`: TRL's `TrlParser` (YAML `--config` + command-line overrides) that rejects unknown keys, and
`find_recipe_file`: a YAML given by path, or by its name among the recipes shipped with the package.

TRL's own scripts parse with `fail_with_unknown_args=False`, so a stale key does nothing without a word: since TRL 1.8
`torch_dtype:` is ignored (it is `dtype` now), and since transformers 5 `warmup_ratio:` is gone (`warmup_steps` takes
a ratio). A recipe that silently ignores a line is a recipe that silently trains something else, so here an unknown
key stops the run before anything is loaded, naming the key and, when we know it, its new name.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from pathlib import Path

from trl import TrlParser

__all__ = ["RENAMED_KEYS", "RecipeParser", "find_recipe_file", "recipes_root"]

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

    def known_keys(self) -> set[str]:
        return {action.dest for action in self._actions} - {"help"}

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        """TrlParser's: YAML values become defaults, and the keys it could not place come back. Those are an error."""
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
        return super().parse_args_and_config(
            args,
            return_remaining_strings=return_remaining_strings,
            fail_with_unknown_args=fail_with_unknown_args,
            separate_remaining_strings=separate_remaining_strings,
        )
