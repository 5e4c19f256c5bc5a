"""`RecipeParser`: TRL's `TrlParser` (YAML `--config` + command-line overrides) that rejects unknown keys.

TRL's own scripts parse with `fail_with_unknown_args=False`, so a stale key does nothing without a word: since TRL 1.8
`torch_dtype:` is ignored (it is `dtype` now), and since transformers 5 `warmup_ratio:` is gone (`warmup_steps` takes
a ratio). A recipe that silently ignores a line is a recipe that silently trains something else, so here an unknown
key stops the run before anything is loaded, naming the key and, when we know it, its new name.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable

import yaml
from trl import TrlParser

__all__ = ["RecipeParser", "RENAMED_KEYS"]

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


class RecipeParser(TrlParser):
    """Parse recipe dataclasses from `--config file.yaml` and the command line; unknown YAML keys are an error.

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

    def known_keys(self) -> set[str]:
        return {action.dest for action in self._actions} - {"help"}

    def check_config_keys(self, config: dict, source: str) -> None:
        """Raise naming every key of `config` that no recipe dataclass has."""
        known = self.known_keys()
        unknown = [key for key in config if key not in known and key != "env"]
        if not unknown:
            return
        lines = []
        for key in unknown:
            if key in RENAMED_KEYS:
                lines.append(f"  - {key} (renamed: use `{RENAMED_KEYS[key]}`)")
            else:
                close = difflib.get_close_matches(key, sorted(known), n=3)
                lines.append(f"  - {key}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise ValueError(
            f"Unknown key(s) in {source}; a recipe must not silently ignore settings:\n"
            + "\n".join(lines)
            + "\nRemove or rename them. `python recipes/<script>.py --help` lists every accepted key."
        )

    def parse_args_and_config(
        self,
        args: Iterable[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ):
        args = list(args) if args is not None else sys.argv[1:]
        if "--config" in args:
            config_path = args[args.index("--config") + 1]
            with open(config_path) as f:
                config = yaml.safe_load(f) or {}
            if not isinstance(config, dict):
                raise ValueError(f"Config file {config_path} must contain a YAML mapping of key: value lines.")
            self.check_config_keys(config, config_path)
        return super().parse_args_and_config(
            args,
            return_remaining_strings=return_remaining_strings,
            fail_with_unknown_args=fail_with_unknown_args,
            separate_remaining_strings=separate_remaining_strings,
        )
