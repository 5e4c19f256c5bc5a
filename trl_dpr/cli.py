"""The `trl-dpr` command, like TRL's `trl`: the recipes from a pip install, with the YAMLs shipped in the package.

    trl-dpr sft      --config qwen2.5-7b/sft/config_qlora.yaml [--accelerate_config single_gpu] [overrides...]
    trl-dpr dpr      --config demo/dpr.yaml                    [--accelerate_config cpu]         [overrides...]
    trl-dpr spin     --config demo/spin.yaml   (and gsil: the LfD baselines of Table 1, from an SFT output)
    trl-dpr evaluate --config demo.yaml                        (recipes/evaluate/*.yaml)
    trl-dpr preview  --config demo.yaml                        (recipes/preview/*.yaml)
    trl-dpr heatmap  --sft runs/demo/sft --prompt ... --response ...
    trl-dpr memory   --config llama-3.1-8b/dpr/config_qlora.yaml
    trl-dpr recipes                                            (list the shipped YAMLs)

`--config` takes a path, or the name of a shipped recipe (`trl-dpr recipes`). Training stages run under `accelerate
launch`: `--accelerate_config NAME` picks one of the shipped accelerate configs (cpu, cpu_ddp, single_gpu, fsdp_cpu,
zero3_cpu) or TRL's (multi_gpu, zero3, fsdp2, ...), or a file; any other argument the recipe does not know
(`--num_processes 8`, ...) goes to `accelerate launch`, as with `trl sft`.

A mistake in the input (a bad key, a missing folder, a value out of range) ends with its message and exit code 2,
without a traceback; `--debug` (or `TRL_DPR_DEBUG=1`) shows the traceback.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from .recipe_parser import find_recipe_file, recipes_root

__all__ = ["main", "run"]

TRAINING_STAGES = ("sft", "dpr", "spin", "gsil")
IN_PROCESS = {"evaluate": "evaluate", "preview": "preview"}  # command → the recipe module (and its YAML subfolder)


def _user_errors() -> tuple[type[BaseException], ...]:
    from .checkpointing import OutputDirInUse
    from .evaluation.chat_models import MissingAPIKeyError

    # OSError covers the folders and files a user points at (missing, unwritable, full disk); the rest are checks.
    return (ValueError, OSError, OutputDirInUse, MissingAPIKeyError)


def _debugging(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("TRL_DPR_DEBUG", "0").lower() in ("1", "true", "yes")


def run(main_function: Callable[[list[str]], object], argv: Sequence[str] | None = None) -> None:
    """Run a recipe's `main(argv)`; a mistake in the input exits with its message (code 2) and no traceback.

    What counts as a mistake in the input: the errors the package raises after checking it (`ValueError`,
    `FileNotFoundError`, `PermissionError`, a folder held by another run, a missing API key). `--debug` or
    `TRL_DPR_DEBUG=1` re-raises them with their traceback.

    Example:
        ```python
        if __name__ == "__main__":
            run(main)          # in recipes/dpr.py
        ```
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _debugging(argv)
    argv = [a for a in argv if a != "--debug"]
    try:
        main_function(argv)
    except _user_errors() as error:
        if debug:
            raise
        name = type(error).__name__
        print(f"error ({name}): {error}\n(run with --debug, or TRL_DPR_DEBUG=1, to see the traceback)", file=sys.stderr)
        raise SystemExit(2) from None


def _resolve_accelerate_config(launch_args: list[str]) -> list[str]:
    """`--accelerate_config NAME` → `--config_file PATH`: a file, a shipped config, or one of TRL's."""
    if "--accelerate_config" not in launch_args:
        return launch_args
    index = launch_args.index("--accelerate_config")
    if index + 1 >= len(launch_args):
        raise ValueError("Expected a value after --accelerate_config (e.g. cpu, single_gpu, zero3).")
    name = launch_args[index + 1]
    import importlib.resources

    shipped = recipes_root() / "accelerate_configs" / f"{name}.yaml"
    trl_configs = importlib.resources.files("trl.accelerate_configs")
    for candidate in (Path(name), shipped, Path(str(trl_configs.joinpath(f"{name}.yaml")))):
        if candidate.is_file():
            rest = launch_args[:index] + launch_args[index + 2 :]
            return ["--config_file", str(candidate), *rest]
    ours = sorted(p.stem for p in (recipes_root() / "accelerate_configs").glob("*.yaml"))
    theirs = sorted(Path(str(p)).stem for p in trl_configs.iterdir() if str(p).endswith(".yaml"))
    raise ValueError(f"--accelerate_config {name!r} is not a file, nor one of trl_dpr's {ours} or TRL's {theirs}.")


def _launch_training(stage: str, argv: list[str]) -> None:
    """Split `argv` into the recipe's arguments and `accelerate launch`'s, then launch the shipped recipe script."""
    from accelerate.commands.launch import launch_command, launch_command_parser

    if "--config" in argv:
        index = argv.index("--config") + 1
        argv[index] = find_recipe_file(argv[index])
    module = importlib.import_module(f"trl_dpr.recipes.{stage}")
    parser = module.make_parser()
    parser.prog = f"trl-dpr {stage}"
    *_, _, unknown = parser.parse_args_and_config(
        argv, return_remaining_strings=True, fail_with_unknown_args=False, separate_remaining_strings=True
    )
    launch_args = _resolve_accelerate_config(list(unknown))
    script_args = _without(argv, list(unknown))
    script = recipes_root() / f"{stage}.py"
    try:
        launch_command(launch_command_parser().parse_args([*launch_args, str(script), *script_args]))
    except subprocess.CalledProcessError as error:
        # The recipe's own processes have printed what went wrong (a mistake in the input: its message, exit code 2);
        # accelerate's launcher adding its traceback on top would only hide it.
        raise SystemExit(error.returncode) from None


def _without(items: list[str], subsequence: list[str]) -> list[str]:
    """`items` with the ordered `subsequence` removed (the arguments that go to accelerate)."""
    rest, position = [], 0
    for item in items:
        if position < len(subsequence) and item == subsequence[position]:
            position += 1
        else:
            rest.append(item)
    return rest


def _list_recipes() -> None:
    root = recipes_root()
    for path in sorted(root.rglob("*.yaml")):
        print(path.relative_to(root).as_posix())


def _help() -> str:
    return textwrap.indent(textwrap.dedent(__doc__.split("\n\n")[1]), "  ")


def main(argv: Sequence[str] | None = None) -> None:
    """The `trl-dpr` command (see the module docstring).

    Example:
        ```bash
        trl-dpr dpr --config demo/dpr.yaml     # the embedded demo: SFT → DPR → evaluation, offline on CPU
        ```
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: trl-dpr <command> [--config YAML] [options]\n\n" + _help() + "\n\n" + __doc__.split("\n\n", 2)[2])
        return
    command, rest = argv[0], argv[1:]
    if command in TRAINING_STAGES:
        run(lambda args: _launch_training(command, args), rest)
    elif command in IN_PROCESS:
        module = importlib.import_module(f"trl_dpr.recipes.{IN_PROCESS[command]}")
        run(module.main, rest)
    elif command == "heatmap":
        from .visualize import main as heatmap

        run(heatmap, rest)
    elif command == "memory":
        from .memory import main as memory

        run(memory, rest)
    elif command == "recipes":
        _list_recipes()
    else:
        print(f"trl-dpr: unknown command {command!r}. Commands: {', '.join([*TRAINING_STAGES, *IN_PROCESS, 'heatmap', 'memory', 'recipes'])}.",
              file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    main()
