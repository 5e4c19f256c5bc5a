"""The `trl-dpr` command, like TRL's `trl`: the recipes from a pip install, with the YAMLs shipped in the package.

    trl-dpr sft      --config qwen2.5-7b/sft/config_qlora.yaml [--accelerate_config single_gpu] [overrides...]
    trl-dpr dpr      --config demo/dpr.yaml                    [--accelerate_config cpu]         [overrides...]
    trl-dpr spin     --config demo/spin.yaml   (and gsil: the LfD baselines of Table 1, from an SFT output)
    trl-dpr evaluate --config demo.yaml                        (recipes/evaluate/*.yaml)
    trl-dpr preview  --config demo.yaml                        (recipes/preview/*.yaml)
    trl-dpr heatmap  --sft runs/demo/sft --prompt ... --response ...
    trl-dpr memory   --config llama-3.1-8b/dpr/config_qlora.yaml
    trl-dpr push     runs/demo/sft --to me/demo-sft            (or --to ./a-new-folder; after the secret check)
    trl-dpr recipes                                            (list the shipped YAMLs)

Training stages run under `accelerate launch` (unknown arguments go to it, as with `trl sft`). A mistake in the input
ends with its message and exit code 2, no traceback (`--debug` shows it). The manual: docs/cli.md.
"""

from __future__ import annotations

# Only the standard library at module level: every `trl-dpr` call imports this module, `--help` and `recipes` included,
# and torch + transformers + TRL's trainers cost seconds. Each command imports what it needs when it runs.
import hashlib
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # trl_dpr/
SCRIPTS = PACKAGE / "scripts"  # one module per stage, each with make_parser() and main(argv)

TRAINING_STAGES = ("sft", "dpr", "spin", "gsil")
IN_PROCESS = {
    "evaluate": "evaluate",
    "preview": "preview",
}  # command → its module in trl_dpr.scripts (and YAML subfolder)
STAGES = (*TRAINING_STAGES, *IN_PROCESS)
EXAMPLE_RECIPES = {
    "sft": "demo/sft.yaml",
    "dpr": "demo/dpr.yaml",
    "spin": "demo/spin.yaml",
    "gsil": "demo/gsil.yaml",
    "evaluate": "demo.yaml",
    "preview": "demo.yaml",
}

# Modules of the optional extras (pyproject.toml) → the extra that installs them. A missing one is a fact about the
# install, not a bug: the command says which extra to install and exits 2, as for any other mistake in the input.
OPTIONAL_DEPENDENCIES = {
    "matplotlib": "plots",
    "openai": "judge",
    "gguf": "gguf",
    "bitsandbytes": "quantization",
    "deepspeed": "deepspeed",
    "vllm": "vllm",
    "wandb": "wandb",
    "tensorboard": "tracking",
    "trackio": "tracking",
}


def _user_errors() -> tuple[type[BaseException], ...]:
    # OSError covers the folders and files a user points at (missing, unwritable, full disk); the rest are checks.
    errors = [ValueError, OSError]
    # A folder held by another run, a missing API key: an error of a class whose module was never imported cannot
    # have been raised, so only the loaded ones are asked for (none is imported for this: chat_models loads torch).
    for module, name in (
        ("trl_dpr.running.checkpointing", "OutputDirInUse"),
        ("trl_dpr.evaluation.chat_models", "MissingAPIKeyError"),
    ):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


def _missing_optional_dependency(error: ImportError) -> str | None:
    """The extra that installs the module `error` could not import, when it is an optional dependency; else None."""
    name = (error.name or "").split(".")[0]
    return OPTIONAL_DEPENDENCIES.get(name)


def _debugging(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("TRL_DPR_DEBUG", "0").lower() in ("1", "true", "yes")


def run(main_function: Callable[[list[str]], object], argv: Sequence[str] | None = None) -> None:
    """Run a recipe's `main(argv)`; a mistake in the input exits with its message (code 2) and no traceback.

    Mistakes in the input: the errors the package raises after checking it (`ValueError`, a held folder, a missing
    API key...) and a missing optional dependency (`OPTIONAL_DEPENDENCIES`). `--debug` re-raises them. Ctrl-C, SIGINT
    or SIGTERM (a scheduler's preemption) end it with one line saying what was saved (`_interrupted`), exit 128 + N.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _debugging(argv)
    argv = [a for a in argv if a != "--debug"]
    if debug:  # the processes `accelerate launch` starts never see --debug (taken out above): they read this
        os.environ["TRL_DPR_DEBUG"] = "1"
    with _stopping_on_signals() as received:
        try:
            main_function(argv)
        except KeyboardInterrupt as interrupt:  # Ctrl-C, or a signal (`_Signalled`)
            if debug:
                raise
            _end_interrupted(getattr(interrupt, "signum", received[0] if received else signal.SIGINT))
        except Exception as error:  # not `except _user_errors()`: Python would evaluate it for --help's SystemExit too
            if received and not debug:  # what failed after a signal failed because of it (a peer process gone)
                _end_interrupted(received[0])
            if isinstance(error, ImportError) and not debug:
                _exit_if_optional_dependency(error)
            if debug or not isinstance(error, _user_errors()):
                raise
            _exit_with_message(error, str(error))


def _exit_if_optional_dependency(error: ImportError) -> None:
    """Exit 2 with a one-line message naming the extra to install, when `error` is a missing optional dependency; a
    module the base install has (a broken environment or a bug) returns, to be raised with its traceback."""
    extra = _missing_optional_dependency(error)
    if extra is None:
        return
    install = f'pip install "trl_dpr[{extra}]"'
    _exit_with_message(
        error,
        str(error) if install in str(error) else f"{error} (`{install}` installs {error.name.split('.')[0]})",
    )


class _Signalled(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised once in a run: it ends as Ctrl-C does (the folder stays held until the process ends,
    so the line can name its checkpoint), with exit code 128 + `signum`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _stopping_on_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM raise `_Signalled` in the block, once; later ones are only recorded (the yielded list): a
    second signal (Ctrl-C pressed twice, a launcher passing on the shell's) must not cut the unwinding short, nor the
    exit that follows it (torch's atexit hooks), so after a signal they stay. Else the earlier handlers come back (a
    notebook, pytest)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield received
        return

    def stop(signum, frame):
        received.append(signum)
        if len(received) == 1:
            raise _Signalled(signum)

    previous = {number: signal.signal(number, stop) for number in _STOPPING_SIGNALS}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            if not received:
                signal.signal(number, handler)


def _end_interrupted(signum: int, folders: Sequence[os.PathLike] | None = None):
    """Exit 128 + `signum` (130 for Ctrl-C, 143 for SIGTERM), with the line of `_interrupted` from the main process
    only: the others hold no folder and would say nothing was saved."""
    if int(os.environ.get("RANK", "0")) == 0:
        print(_interrupted(folders), file=sys.stderr, flush=True)
    raise SystemExit(128 + signum) from None


def _interrupted(folders: Sequence[os.PathLike] | None = None) -> str:
    """The one line a Ctrl-C ends with: what the run's `folders` hold on disk (default: those this process holds), and
    how to go on from it."""
    if folders is None:
        checkpointing = sys.modules.get("trl_dpr.running.checkpointing")  # loaded once a run has claimed its folder
        if line := checkpointing and checkpointing.interrupted_before_writing():  # an earlier run kept: said first
            return line
        held = [folder for folder, _, pid in getattr(checkpointing, "_HELD_LOCKS", {}).values() if pid == os.getpid()]
    else:
        from . import checkpointing

        held = [Path(folder) for folder in folders]
    if finished := [str(folder) for folder in held if (folder / checkpointing.RUN_COMPLETE_NAME).is_file()]:
        return (  # in the evaluation, the merge or the push a pipeline runs once the run is finished
            f"Interrupted after training: {', '.join(finished)} holds the finished run; the same command again does "
            "only what did not finish (its evaluation or merge; for a push, it prints the `trl-dpr push` line)."
        )
    saved = [(folder, checkpointing.last_complete_checkpoint(folder)) for folder in held]
    if any(checkpoint for _, checkpoint in saved):
        where = "; ".join(f"{folder}: {checkpoint}" for folder, checkpoint in saved if checkpoint)
        return f"Interrupted. Saved: {where}. Resume with the same command and --resume_from_checkpoint true."
    folders = ", ".join(str(folder) for folder, _ in saved)
    return (
        "Interrupted. "
        + (f"No checkpoint was saved yet in {folders}: " if folders else "Nothing was saved: ")
        + "run the same command again to start over."
    )


def _exit_with_message(error: BaseException, message: str):
    name = type(error).__name__
    print(f"error ({name}): {message}\n(run with --debug, or TRL_DPR_DEBUG=1, to see the traceback)", file=sys.stderr)
    raise SystemExit(2) from None


def _resolve_accelerate_config(launch_args: list[str]) -> list[str]:
    """`--accelerate_config NAME` → `--config_file PATH`: one of trl_dpr's shipped configs, else TRL's own resolution
    (a file, or one of TRL's configs), as `trl sft --accelerate_config NAME` does."""
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    from .recipe_checks import recipes_root

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

        theirs = sorted(
            p.name.removesuffix(".yaml")
            for p in importlib.resources.files("trl.accelerate_configs").iterdir()
            if p.name.endswith(".yaml")
        )
        raise ValueError(
            f"--accelerate_config {name!r} is not a file, nor one of trl_dpr's {sorted(p.stem for p in ours.glob('*.yaml'))} "
            f"or TRL's {theirs}."
        ) from None


def _launch_defaults(launch_args: list[str], run=None) -> list[str]:
    """`launch_args` plus, explicitly, what `accelerate launch` would otherwise choose and warn about: without an
    accelerate config the recipe's device and precision (`run`; the `cpu` config for use_cpu), and a CPU run's
    threads (`_cpu_threads`). Flags the user passed win (accelerate's rule)."""
    from accelerate.commands.config import default_config_file
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    from .recipe_checks import recipes_root

    given = launch_command_parser().parse_args([*launch_args, "script.py"])  # accelerate's own reading of the flags
    extra = []
    config_file = given.config_file
    if config_file is None and (given.cpu or not os.path.isfile(default_config_file)):
        gpus = _gpu_count()
        if given.cpu or (run.use_cpu if run is not None else gpus == 0):
            config_file = str(recipes_root() / "accelerate_configs" / "cpu.yaml")
            extra += ["--config_file", config_file]
        else:
            processes = given.num_processes or gpus
            precision = run.mixed_precision if run is not None else "no"
            values = {"num_processes": gpus, "num_machines": 1, "mixed_precision": precision, "dynamo_backend": "no"}
            extra += [
                item
                for key, value in values.items()
                if getattr(given, key) is None
                for item in (f"--{key}", str(value))
            ]
            launchers = (given.multi_gpu, given.use_deepspeed, given.use_fsdp, given.use_megatron_lm, given.tpu)
            if gpus > 1 and processes > 1 and not any(launchers):
                extra.append("--multi_gpu")  # what accelerate enables itself, with a warning, for several GPUs
    settings = (
        load_config_from_file(config_file or default_config_file)
        if (config_file or os.path.isfile(default_config_file))
        else None
    )
    if (given.cpu or getattr(settings, "use_cpu", False)) and given.num_cpu_threads_per_process is None:
        extra += ["--num_cpu_threads_per_process", str(_cpu_threads())]
    return [*extra, *launch_args]


def _gpu_count() -> int:
    """The accelerator devices accelerate would launch on (CUDA, or Apple's MPS as one)."""
    import torch

    return torch.cuda.device_count() or int(torch.backends.mps.is_available())


def _cpu_threads() -> int:
    """Torch threads per process of a CPU run: OMP_NUM_THREADS, else 1. Not accelerate's every core: beside another
    job that runs many times slower (the demo: 30 s a step instead of 0.4 s)."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        threads = 0
    return threads if threads >= 1 else 1


def _launch_plan(argv: list[str], launch_args: list[str], values) -> tuple[list[str], list[str]]:
    """The arguments of `accelerate launch` and of the stage's script; the launch follows the recipe's `values`
    (device, precision), and an accelerate config that disagrees with them is refused (`check_placement`)."""
    from .placement import LaunchPlacement, RunPlacement, check_placement
    from .recipe_checks import find_recipe_file

    argv = list(argv)
    if "--config" in argv:
        index = argv.index("--config") + 1
        argv[index] = find_recipe_file(argv[index])
    script_args = _without(argv, launch_args)
    run = RunPlacement.of(values)
    launch_args = _launch_defaults(_resolve_accelerate_config(list(launch_args)), run)
    check_placement(run, LaunchPlacement.from_launch_args(launch_args), gpu_available=_gpu_count() > 0)
    return launch_args, script_args


def _launch_training(stage: str, argv: list[str], launch_args: list[str], values) -> None:
    """TRL's `launch_training_script` for `trl_dpr/scripts/<stage>.py`, once the arguments are checked. This process
    imports accelerate only, not TRL's trainers: the launched processes parse the arguments with TRL's dataclasses."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from trl.cli.accelerate_launcher import launch_training_script

    launch_args, script_args = _launch_plan(argv, launch_args, values)
    folders = [Path(values.output_dir)] if getattr(values, "output_dir", None) else []  # a recipe may name none
    try:
        with _passing_on_signals() as received:
            # TRL joins the script name to its own trl/scripts folder; an absolute path stands for itself (pathlib's
            # joinpath), so the package's own script is launched (tests/running/test_cli.py checks the script
            # accelerate is given).
            launch_training_script(str(SCRIPTS / f"{stage}.py"), launch_args, script_args)
    except _Signalled as interrupt:  # before a process was launched: nothing else will say it
        _end_interrupted(interrupt.signum, folders)
    except KeyboardInterrupt:
        # Ctrl-C reaches the launched processes too: theirs is the line that says what was saved (`run`).
        raise SystemExit(130) from None
    except SignalException as interrupt:  # torchrun's launcher passed the signal on and waited for its processes
        raise SystemExit(128 + interrupt.sigval) from None
    except subprocess.CalledProcessError as error:
        # The recipe's own processes have printed what went wrong (a mistake in the input: its message, exit code 2);
        # accelerate's launcher adding its traceback on top would only hide it.
        if received and error.returncode == -received[0]:  # it died of the signal before it could say so
            _end_interrupted(received[0], folders)
        raise SystemExit(_exit_code_of(error.returncode)) from None
    except ChildFailedError as error:  # the same, from a multi-process launch (torchrun's failure report)
        rank, failure = error.get_first_failure()
        raise SystemExit(_exit_code_of(failure.exitcode, rank)) from None


@contextmanager
def _passing_on_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM to the launching process go on to the processes it launched, and it waits for them: they
    say what was saved and exit 128 + N, which becomes its own code. A one-process launch (accelerate's
    `simple_launcher`) does not do it itself: its process would train on alone after a scheduler's SIGTERM. torchrun's
    launcher (several processes) sets its own handlers, which pass the signal on (`SignalException`); its warnings
    about doing so are left out (`_SignalNotices`). Before any process is launched, the signal stops this one."""
    import psutil

    received: list[int] = []

    def pass_on(signum, frame):
        children = psutil.Process().children()
        if not children:
            raise _Signalled(signum)
        received.append(signum)
        for child in children:
            try:
                child.send_signal(signum)
            except psutil.NoSuchProcess:
                pass

    notices = _SignalNotices()
    loggers = [logging.getLogger(name) for name in _SignalNotices.LOGGERS]
    previous = {number: signal.signal(number, pass_on) for number in _STOPPING_SIGNALS}
    for logger in loggers:
        logger.addFilter(notices)
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for logger in loggers:
            logger.removeFilter(notices)


class _SignalNotices(logging.Filter):
    """Drops torchrun's warnings that it got a signal and passes it on: the run's own line says what happened."""

    LOGGERS = ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(notice in str(record.msg) for notice in ("death signal", "closing signal"))


def _exit_code_of(returncode: int, rank: int | None = None) -> int:
    """The launching process's exit code for a launched process's `returncode`: the same for an exit, 128 + N (the
    shell's convention, which schedulers read as an OOM kill for 137) for a death by signal N, which a process cannot
    report itself, so this line says it."""
    if returncode >= 0:
        return returncode
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    process = "the training process" if rank is None else f"training process {rank}"
    hint = " (the system's out-of-memory killer sends it)" if -returncode == signal.SIGKILL else ""
    print(f"trl-dpr: {process} was killed by {name}{hint}.", file=sys.stderr, flush=True)
    return 128 - returncode


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


# ---- the stages' arguments, described once and checked before torch is imported -------------------------------------
# A stage's arguments are the fields of TRL's dataclasses (SFTConfig, GRPOConfig, ModelConfig: about 300 flags), and
# importing them costs seconds (torch, transformers, peft: `python -X importtime -c "from trl import SFTConfig"`). Their
# help, types and choices change only with the installed versions and trl_dpr's sources, so the first call describes
# every stage's arguments as plain JSON (`RecipeParser.describe`) in a cache, ~/.cache/trl_dpr/cli-<key>.json
# (`TRL_DPR_CACHE` moves it), keyed by those (`_fingerprint`). From then on `--help` and the checks of the recipe and the
# flags run on the same parser class rebuilt from it without the dataclasses (`RecipeParser.from_description`), before
# torch is imported; only a run that passes them imports it. The first call, or a cache that cannot be read or written,
# costs what it did before, and runs the same checks on the same description, built on the spot.

CACHE_FORMAT = 3  # raise when the description's layout changes: older cache files are then not read
CACHE_FILES_KEPT = 4  # a few environments (venvs, versions) sharing one cache each keep theirs

CONFIG_HELP = (
    "--config RECIPE is a YAML file, or the name of a recipe shipped with trl_dpr (`trl-dpr recipes` lists them). Each "
    "key of it can be overridden by its flag below (--learning_rate 1e-5); a key or flag not listed here is an error."
)
LAUNCHER_HELP = (
    "The run goes through `accelerate launch`: --accelerate_config NAME picks its config (trl_dpr's cpu, cpu_ddp, "
    "single_gpu, zero3_cpu; TRL's multi_gpu, zero3, fsdp2, ...; or a file), and the flags of `accelerate "
    "launch` (--num_processes 8, --mixed_precision bf16, ...) go to it."
)


def _stage_parser(stage: str):
    """The stage's own parser (`make_parser()` of trl_dpr.scripts.<stage>: TRL's dataclasses) as `trl-dpr <stage>`
    shows it: its usage, what --config takes, and for a training stage the launcher's flags, which it accepts."""
    module = importlib.import_module(f"trl_dpr.scripts.{stage}")
    parser = module.make_parser()
    parser.prog = f"trl-dpr {stage}"
    training = stage in TRAINING_STAGES
    parser.usage = f"{parser.prog} --config RECIPE [--KEY VALUE ...]" + (
        " [accelerate launch flags]" if training else ""
    )
    parser.description = module.__doc__.split("\n\n")[0] + "\n\n" + CONFIG_HELP
    if training:
        parser.epilog = LAUNCHER_HELP
        parser.launcher_flags = _launcher_flags()
    return parser


def _launcher_flags() -> dict[str, bool]:
    """The flags `accelerate launch` takes (flag → whether a value follows it), and --accelerate_config."""
    from accelerate.commands.launch import launch_command_parser

    flags = {flag: action.nargs != 0 for action in launch_command_parser()._actions for flag in action.option_strings}
    return {**flags, "--accelerate_config": True}


def _fingerprint(root: Path, files: Sequence[Path], versions: dict[str, str]) -> str:
    """The cache key: TRL's and transformers' versions and trl_dpr's sources (paths in the package, bytes), so an edit
    in a clone changes it and a reinstall of the same release shares it."""
    digest = hashlib.sha256(json.dumps([CACHE_FORMAT, sys.version, sorted(versions.items())]).encode())
    for path in sorted(files):
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _cache_file() -> Path:
    import importlib.metadata

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    files = list(PACKAGE.rglob("*.py"))  # the scripts included: trl_dpr/scripts/<stage>.py
    key = _fingerprint(
        PACKAGE, files, {name: version(name) for name in ("trl", "transformers", "accelerate", "peft", "torch")}
    )
    root = os.environ.get("TRL_DPR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trl_dpr"
    )
    return Path(root) / f"cli-{key}.json"


def _cached_descriptions() -> dict[str, dict]:
    """The stages' descriptions from the cache, or {} when there is none for this install (or it cannot be read)."""
    try:
        descriptions = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return descriptions if isinstance(descriptions, dict) and set(STAGES) <= set(descriptions) else {}


def _build_descriptions() -> dict[str, dict]:
    """Every stage's description, from the recipes' parsers (imports TRL: seconds), written to the cache."""
    descriptions = {stage: _stage_parser(stage).describe() for stage in STAGES}
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # renamed: a reader never sees half a file
        partial.write_text(json.dumps(descriptions))
        os.replace(partial, path)
        older = sorted(path.parent.glob("cli-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in older[CACHE_FILES_KEPT:]:
            stale.unlink(missing_ok=True)
    except OSError:
        pass  # an unwritable cache: each call describes the arguments again (seconds); nothing else changes
    return descriptions


def _light_parser(stage: str):
    """The stage's parser rebuilt from its description (`RecipeParser.from_description`): cached, else built now."""
    from .recipe_parser import RecipeParser

    description = _cached_descriptions().get(stage) or _build_descriptions()[stage]
    return RecipeParser.from_description(description)


def _recipe_flags() -> dict[str, bool]:
    """Every key flag of the `trl-dpr sft` and `trl-dpr dpr` recipes (flag → takes a value), from their descriptions:
    the overrides `trl-dpr memory` accepts."""
    return {
        flag: action.nargs != 0
        for stage in ("sft", "dpr")
        for action in _light_parser(stage)._actions
        for flag in action.option_strings
    }


def _check_before_importing(stage: str, argv: list[str], parser=None):
    """The checks of `trl-dpr <stage>` that need no TRL (`RecipeParser.check_recipe`, a GGUF reader); returns the
    recipe's values and the launcher's arguments, in their order."""
    from .gguf import check_gguf_reader

    if "--config" not in argv:
        raise ValueError(
            f"No recipe: run `trl-dpr {stage} --config <recipe> [--key value ...]`, the recipe a YAML file or the name "
            f"of one shipped with trl_dpr (`trl-dpr recipes` lists them; e.g. --config {EXAMPLE_RECIPES[stage]}). "
            f"`trl-dpr {stage} --help` lists the keys."
        )
    values, launch_args = (parser or _light_parser(stage)).check_recipe(argv)
    check_gguf_reader(getattr(values, "model_name_or_path", None))
    if getattr(values, "use_vllm", False) and not _installed("vllm"):  # TRL would say so after loading the models
        raise ValueError(
            f'use_vllm: true needs vLLM, which is not installed: `pip install "trl_dpr[{OPTIONAL_DEPENDENCIES["vllm"]}]"` '
            "installs it (TRL's own trl[vllm] extra), or set use_vllm: false."
        )
    return values, launch_args


def _installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (a None in sys.modules blocks it, as an absent one)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # `module.__spec__ is None`: blocked in sys.modules
        return False


def _run_stage(stage: str, argv: list[str]) -> None:
    """`trl-dpr <stage>`: its help, or the checks and then the run (imports TRL)."""
    parser = _light_parser(stage)
    if "-h" in argv or "--help" in argv or "--help-all" in argv:
        print(parser.format_help(full="--help-all" in argv), end="")
        return
    values, launch_args = _check_before_importing(stage, argv, parser)
    if stage in TRAINING_STAGES:
        _launch_training(stage, argv, launch_args, values)
    else:
        importlib.import_module(f"trl_dpr.scripts.{IN_PROCESS[stage]}").main(argv)


def _list_recipes() -> None:
    from .recipe_checks import recipes_root

    root = recipes_root()
    for path in sorted(root.rglob("*.yaml")):
        print(path.relative_to(root).as_posix())


def _help() -> str:
    return textwrap.indent(textwrap.dedent(__doc__.split("\n\n")[1]), "  ")


def main(argv: Sequence[str] | None = None) -> None:
    """The `trl-dpr` command (see the module docstring)."""
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
        print(
            "usage: trl-dpr <command> [--config YAML] [options]\n\n" + _help() + "\n\n" + __doc__.split("\n\n", 2)[2]
        )
        return
    command, rest = argv[0], argv[1:]
    if command in STAGES:
        run(lambda args: _run_stage(command, args), rest)
    elif command == "heatmap":
        heatmap = importlib.import_module("trl_dpr.scripts.heatmap").main

        run(lambda args: heatmap(args, prog="trl-dpr heatmap"), rest)
    elif command == "memory":
        from .memory import main as memory

        run(lambda args: memory(args, prog="trl-dpr memory", recipe_flags=_recipe_flags()), rest)
    elif command == "push":
        from .push import main as push

        run(lambda args: push(args, prog="trl-dpr push"), rest)
    elif command == "recipes":
        _list_recipes()
    else:
        print(
            f"trl-dpr: unknown command {command!r}. Commands: {', '.join([*STAGES, 'heatmap', 'memory', 'push', 'recipes'])}.",
            file=sys.stderr,
        )
        raise SystemExit(2)


if __name__ == "__main__":
    main()
