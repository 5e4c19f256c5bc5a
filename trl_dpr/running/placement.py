"""Where a run trains and in what precision, read once from the recipe (its YAML with the command line's overrides).

    recipe + flags ─► RunPlacement(use_cpu, mixed_precision) ─┬─► `accelerate launch` flags (cli.py)
                                                              ├─► checked against accelerate's settings (both ends)
                                                              └─► the pipeline's SFT stage and evaluation

Accelerate has its own copy of the recipe's `use_cpu` / `bf16` / `fp16`, and transformers merges the two without a word
(a `true` on either side wins). So they agree, or the run is refused before anything loads, with one line that says
which value to change: before the launch, and again in the launched script (for `accelerate launch` used directly).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# The recipe keys that decide the device and the precision: the SFT stage of a pipeline is given the run's values.
PLACEMENT_KEYS = ("use_cpu", "bf16", "fp16")
_RECIPE_SETTING = {"no": "--bf16 false --fp16 false", "bf16": "--bf16 true", "fp16": "--fp16 true"}
_SHOWN = {"no": "fp32", "bf16": "bf16 mixed precision", "fp16": "fp16 mixed precision"}


@dataclass(frozen=True)
class RunPlacement:
    """The device and precision a recipe asks for: `use_cpu`, and `mixed_precision` in accelerate's words
    ("no" = fp32, "bf16", "fp16").
    """

    use_cpu: bool
    mixed_precision: str

    @classmethod
    def of(cls, values) -> RunPlacement:
        """The placement of parsed recipe values (a namespace or TrainingArguments with use_cpu, bf16, fp16)."""
        bf16, fp16 = bool(getattr(values, "bf16", False)), bool(getattr(values, "fp16", False))
        if bf16 and fp16:
            raise ValueError("bf16 and fp16 are both true: set one of them (or neither, for fp32), e.g. --fp16 false.")
        return cls(bool(getattr(values, "use_cpu", False)), "bf16" if bf16 else "fp16" if fp16 else "no")

    def flags(self) -> list[str]:
        """The recipe flags that give another recipe (the pipeline's SFT stage) this placement."""
        as_text = lambda value: "true" if value else "false"  # noqa: E731
        return [
            "--use_cpu",
            as_text(self.use_cpu),
            "--bf16",
            as_text(self.mixed_precision == "bf16"),
            "--fp16",
            as_text(self.mixed_precision == "fp16"),
        ]

    def __str__(self) -> str:
        return f"{'CPU' if self.use_cpu else 'GPU'}, {self.precision_name}"

    @property
    def precision_name(self) -> str:
        return _SHOWN[self.mixed_precision]


@dataclass(frozen=True)
class LaunchPlacement:
    """What `accelerate launch` runs with: `use_cpu` (None: not known, as in the processes of a multi-process
    launch, whose environment does not say), `mixed_precision`, whether it is DeepSpeed, and where that came from.
    """

    use_cpu: bool | None
    mixed_precision: str
    deepspeed: bool
    source: str
    fsdp: bool = False  # known from the launch's config and flags only (the launched processes' variables do not say)

    @classmethod
    def from_launch_args(cls, launch_args: list[str]) -> LaunchPlacement:
        """Accelerate's reading of `accelerate launch LAUNCH_ARGS`: its flags, over its config file's values."""
        from accelerate.commands.config import default_config_file
        from accelerate.commands.config.config_args import load_config_from_file
        from accelerate.commands.launch import launch_command_parser

        given = launch_command_parser().parse_args([*launch_args, "script.py"])
        path = given.config_file or (default_config_file if os.path.isfile(default_config_file) else None)
        settings = load_config_from_file(path) if path else None
        config_precision = str(getattr(settings, "mixed_precision", None) or "no").lower()
        precision = str(given.mixed_precision or config_precision).lower()
        where = os.path.basename(path) if path else "accelerate's defaults"
        source = "--mixed_precision" if given.mixed_precision and given.mixed_precision != config_precision else where
        distributed = str(getattr(settings, "distributed_type", "") or "")
        return cls(
            use_cpu=bool(given.cpu or getattr(settings, "use_cpu", False)),
            mixed_precision=precision,
            deepspeed=bool(given.use_deepspeed) or distributed.endswith("DEEPSPEED"),
            source=source,
            fsdp=bool(given.use_fsdp) or distributed.endswith("FSDP"),
        )

    @classmethod
    def from_environment(cls, environ=None) -> LaunchPlacement | None:
        """What accelerate launched this process with (its ACCELERATE_* variables); None outside `accelerate launch`.
        Read it before the recipe is parsed: DeepSpeed and transformers may set these variables themselves."""
        environ = os.environ if environ is None else environ
        if "ACCELERATE_MIXED_PRECISION" not in environ:
            return None
        use_cpu = environ.get("ACCELERATE_USE_CPU")
        return cls(
            use_cpu=None if use_cpu is None else use_cpu.lower() in ("1", "true", "yes"),
            mixed_precision=environ["ACCELERATE_MIXED_PRECISION"].lower(),
            deepspeed=environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true",
            source="accelerate launch",
        )


def check_placement(run: RunPlacement, launch: LaunchPlacement | None, gpu_available: bool) -> None:
    """A ValueError (one line: what disagrees, and which value to change) when the recipe's device and precision
    cannot be what runs: a GPU asked for on a machine without one, or accelerate set up for another device or
    precision. DeepSpeed runs with use_cpu false (on a machine without CUDA, on DeepSpeed's CPU accelerator).
    """
    deepspeed = launch is not None and launch.deepspeed
    if deepspeed and run.use_cpu:
        raise ValueError(
            f"The recipe sets use_cpu: true but {launch.source} runs DeepSpeed, which accelerate switches "
            "off under use_cpu: set --use_cpu false (without CUDA, DeepSpeed runs on its CPU accelerator)."
        )
    if launch is not None and launch.fsdp and (run.use_cpu or launch.use_cpu):
        # accelerate turns FSDP on for accelerator devices only: on the CPU each process would train plain DDP (or
        # alone) while the command said FSDP (tests/scripts/sharded_check.py patches that one decision for its test).
        raise ValueError(
            f"{launch.source} runs FSDP, which accelerate does not run on the CPU (the processes would train as plain "
            "DDP): on the CPU use --accelerate_config cpu_ddp; FSDP needs GPUs (--use_cpu false)."
        )
    if not run.use_cpu and not gpu_available and not deepspeed:
        raise ValueError(
            "The recipe trains on the GPU (use_cpu: false) but no GPU is visible here: set --use_cpu true, "
            "or run on a machine with a GPU."
        )
    if launch is None:
        return
    if launch.use_cpu is not None and launch.use_cpu != run.use_cpu and not deepspeed:
        if run.use_cpu:
            raise ValueError(
                f"The recipe trains on the CPU (use_cpu: true) but {launch.source} is set up for the GPU "
                "(use_cpu: false): set --use_cpu false, or launch on the CPU (--accelerate_config cpu)."
            )
        raise ValueError(
            f"The recipe trains on the GPU (use_cpu: false) but {launch.source} runs on the CPU "
            "(use_cpu: true): set --use_cpu true, or pick a GPU config (--accelerate_config single_gpu)."
        )
    if launch.mixed_precision != run.mixed_precision:
        raise ValueError(
            f"The recipe trains in {_SHOWN[run.mixed_precision]} but {launch.source} sets mixed_precision: "
            f"{launch.mixed_precision}; change one of them: {_RECIPE_SETTING.get(launch.mixed_precision, '--bf16/--fp16')} "
            f"(the recipe), or --mixed_precision {run.mixed_precision} (accelerate launch)."
        )


def check_launched_run(training_args, launch: LaunchPlacement | None) -> RunPlacement:
    """In a launched recipe, before anything loads: `check_placement` against what accelerate launched this process
    with (read before the recipe was parsed)."""
    import torch

    run = RunPlacement.of(training_args)
    check_placement(run, launch, gpu_available=torch.cuda.is_available() or torch.backends.mps.is_available())
    return run
