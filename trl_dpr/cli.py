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

# Only the standard library at module level: every `trl-dpr` call imports this module, `--help` and `recipes` included,
# and torch + transformers + TRL's trainers cost seconds. Each command imports what it needs when it runs.
import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["OPTIONAL_DEPENDENCIES", "main", "run"]

TRAINING_STAGES = ("sft", "dpr", "spin", "gsil")
IN_PROCESS = {"evaluate": "evaluate", "preview": "preview"}  # command → the recipe module (and its YAML subfolder)

# Modules of the optional extras (pyproject.toml) → the extra that installs them. A missing one is a fact about the
# install, not a bug: the command says which extra to install and exits 2, as for any other mistake in the input.
OPTIONAL_DEPENDENCIES = {
    "matplotlib": "plots",
    "openai": "judge",
    "bitsandbytes": "quantization",
    "deepspeed": "deepspeed",
    "vllm": "vllm",
    "wandb": "wandb",
    "tensorboard": "tracking",
    "trackio": "tracking",
}


def _user_errors() -> tuple[type[BaseException], ...]:
    from .checkpointing import OutputDirInUse
    from .evaluation.chat_models import MissingAPIKeyError

    # OSError covers the folders and files a user points at (missing, unwritable, full disk); the rest are checks.
    return (ValueError, OSError, OutputDirInUse, MissingAPIKeyError)


def _missing_optional_dependency(error: ImportError) -> str | None:
    """The extra that installs the module `error` could not import, when it is an optional dependency; else None."""
    name = (error.name or "").split(".")[0]
    return OPTIONAL_DEPENDENCIES.get(name)


def _debugging(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("TRL_DPR_DEBUG", "0").lower() in ("1", "true", "yes")


def run(main_function: Callable[[list[str]], object], argv: Sequence[str] | None = None) -> None:
    """Run a recipe's `main(argv)`; a mistake in the input exits with its message (code 2) and no traceback.

    What counts as a mistake in the input: the errors the package raises after checking it (`ValueError`,
    `FileNotFoundError`, `PermissionError`, a folder held by another run, a missing API key), and an optional
    dependency that is not installed (`OPTIONAL_DEPENDENCIES`: the message names the extra). `--debug` or
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
    except ImportError as error:
        extra = _missing_optional_dependency(error)
        if debug or extra is None:  # a module the base install has: a broken environment or a bug, with its traceback
            raise
        _exit_with_message(error, f"{error} (`pip install \"trl_dpr[{extra}]\"` installs {error.name.split('.')[0]})")
    except _user_errors() as error:
        if debug:
            raise
        _exit_with_message(error, str(error))


def _exit_with_message(error: BaseException, message: str):
    name = type(error).__name__
    print(f"error ({name}): {message}\n(run with --debug, or TRL_DPR_DEBUG=1, to see the traceback)", file=sys.stderr)
    raise SystemExit(2) from None


def _resolve_accelerate_config(launch_args: list[str]) -> list[str]:
    """`--accelerate_config NAME` → `--config_file PATH`: one of trl_dpr's shipped configs, else TRL's own resolution
    (a file, or one of TRL's configs), as `trl sft --accelerate_config NAME` does."""
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    from .recipe_parser import recipes_root

    if "--accelerate_config" not in launch_args:
        return launch_args
    index = launch_args.index("--accelerate_config")
    if index + 1 >= len(launch_args):
        raise ValueError("Expected a value after --accelerate_config (e.g. cpu, single_gpu, zero3).")
    name, ours = launch_args[index + 1], recipes_root() / "accelerate_configs"
    if not Path(name).is_file() and (ours / f"{name}.yaml").is_file():
        launch_args = [*launch_args[: index + 1], str(ours / f"{name}.yaml"), *launch_args[index + 2 :]]
    try:
        return resolve_accelerate_config_argument(launch_args)
    except ValueError:
        import importlib.resources

        theirs = sorted(p.name.removesuffix(".yaml") for p in importlib.resources.files("trl.accelerate_configs").iterdir()
                        if p.name.endswith(".yaml"))
        raise ValueError(
            f"--accelerate_config {name!r} is not a file, nor one of trl_dpr's {sorted(p.stem for p in ours.glob('*.yaml'))} "
            f"or TRL's {theirs}."
        ) from None


def _launch_training(stage: str, argv: list[str]) -> None:
    """TRL's training command (`trl sft ...`, `trl.cli.commands.training`) for a trl_dpr recipe: the recipe's parser
    checks the arguments here, before anything is launched; the arguments it does not know go to `accelerate launch`,
    the rest to the shipped recipe script, launched by TRL's `launch_training_script`."""
    from trl.cli.accelerate_launcher import launch_training_script

    from .recipe_parser import find_recipe_file, recipes_root

    if "--config" in argv:
        index = argv.index("--config") + 1
        argv[index] = find_recipe_file(argv[index])
    module = importlib.import_module(f"trl_dpr.recipes.{stage}")
    parser = module.make_parser()
    parser.prog = f"trl-dpr {stage}"
    # Unlike `trl sft`, a YAML key no dataclass has is an error (RecipeParser), not an argument for accelerate.
    *_, _, unknown = parser.parse_args_and_config(
        argv, return_remaining_strings=True, fail_with_unknown_args=False, separate_remaining_strings=True
    )
    launch_args = _resolve_accelerate_config(list(unknown))
    script_args = _without(argv, list(unknown))
    try:
        # TRL joins the script name to its own trl/scripts folder; an absolute path stands for itself (pathlib's
        # joinpath), so the shipped recipe is launched (tests/test_cli.py checks the script accelerate is given).
        launch_training_script(str(recipes_root() / f"{stage}.py"), launch_args, script_args)
    except subprocess.CalledProcessError as error:
        # The recipe's own processes have printed what went wrong (a mistake in the input: its message, exit code 2);
        # accelerate's launcher adding its traceback on top would only hide it.
        raise SystemExit(error.returncode) from None


def _without(items: list[str], subsequence: list[str]) -> list[str]:
    """`items` with the ordered `subsequence` removed (the arguments that go to accelerate). TRL has the same helper,
    private (`trl.cli.commands.training._subtract_subsequence`); a private name may change in any release."""
    rest, position = [], 0
    for item in items:
        if position < len(subsequence) and item == subsequence[position]:
            position += 1
        else:
            rest.append(item)
    return rest


def _list_recipes() -> None:
    from .recipe_parser import recipes_root

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
    try:
        _dispatch(argv)
        sys.stdout.flush()  # inside the try: a reader that went away (`trl-dpr recipes | head`) surfaces here
    except BrokenPipeError:
        # The reader closed the pipe: stop quietly, as `cat`, `grep` and `ls` do (no traceback; exit code 1, as
        # Python's own documentation recommends). Python would report the pipe again while flushing stdout at exit,
        # so stdout is pointed at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def _dispatch(argv: list[str]) -> None:
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
