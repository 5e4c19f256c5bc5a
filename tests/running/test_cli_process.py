"""`trl-dpr` as a user's shell runs it: a real process each time, its exit code, its stderr (no traceback), and what it
imports before it knows it needs it. A command that imports torch and TRL anyway runs in a process forked from this
one (`trl_dpr_forked`), which has imported them: the same process behaviour, without ~13 s of imports per call."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trl_dpr.running.checkpointing import RUN_COMPLETE_NAME

from ..conftest import run_forked, run_launch, save_sft_output

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
CLI = "from trl_dpr.running.cli import main; main()"  # what the `trl-dpr` entry point runs
# Printed at exit, whatever the exit code: the heavy packages the command imported. TRL's `TrlParser` (trl.scripts,
# the parser every recipe goes through) is light: it imports neither torch nor transformers; TRL's trainers do.
REPORT_IMPORTS = (
    "import atexit, sys\natexit.register(lambda: print('heavy imports:', sorted({'torch', 'transformers', "
    "'trl.trainer', 'trl.models'} & set(sys.modules)), file=sys.stderr))\n"
)
NO_HEAVY_IMPORTS = "heavy imports: []"


def trl_dpr(*args, prelude: str = "", cwd=None, timeout=120, **kwargs) -> subprocess.CompletedProcess:
    """`trl-dpr ARGS` in a fresh interpreter; `prelude` runs first (to simulate a missing module)."""
    return subprocess.run(
        [sys.executable, "-c", prelude + CLI, *args],
        cwd=cwd or ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def trl_dpr_forked(*args, tmp_path, cwd=None, env=None, before=None) -> subprocess.CompletedProcess:
    """`trl-dpr ARGS` in a process forked from this one (tests/conftest.py's `run_forked`), for a command that imports
    torch and TRL anyway; `before()` runs first in that process (to simulate a missing module)."""
    from trl_dpr.running.cli import main

    return run_forked(main, args, folder=tmp_path, cwd=cwd or ROOT, env={**ENV, **(env or {})}, before=before)


def without_matplotlib():
    """A base install without the `plots` extra, in a process that may have imported matplotlib already."""
    for name in [name for name in sys.modules if name == "matplotlib" or name.startswith("matplotlib.")]:
        del sys.modules[name]
    sys.modules["matplotlib"] = None


@pytest.fixture(scope="module", autouse=True)
def cli_cache(tmp_path_factory):
    """The description of every stage's arguments, built once here (this process has imported TRL anyway) in a cache
    of its own, which the `trl-dpr` processes below read: what a user's second call finds in ~/.cache/trl_dpr."""
    from trl_dpr.running.cli import _build_descriptions

    ENV["TRL_DPR_CACHE"] = str(tmp_path_factory.mktemp("trl_dpr_cache"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRL_DPR_CACHE", ENV["TRL_DPR_CACHE"])
        _build_descriptions()
    yield
    del ENV["TRL_DPR_CACHE"]


# Simulates a base install without the `plots` extra: `import matplotlib` raises ModuleNotFoundError as it would if the
# package were not installed (a None entry in sys.modules is Python's documented way to block an import), and
# importlib.util.find_spec answers None, as for an absent package.
WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None\n"


def test_importing_the_cli_imports_neither_torch_nor_transformers_nor_trl():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, trl_dpr.running.cli; print(sorted(sys.modules))"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    modules = set(eval(loaded.stdout))
    assert not modules & {"torch", "transformers", "trl", "accelerate", "peft", "datasets"}


def test_help_and_recipes_load_no_torch():
    for args in (["--help"], ["recipes"]):
        loaded = subprocess.run(
            [
                sys.executable,
                "-c",
                CLI + "; import sys; print('torch' in sys.modules, 'transformers' in sys.modules, file=sys.stderr)",
                *args,
            ],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert loaded.returncode == 0 and loaded.stderr.strip().splitlines()[-1] == "False False", loaded.stderr


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    read, write = os.pipe()
    os.close(read)  # `trl-dpr recipes | head -0`: the reader is gone before the first line is written
    try:
        listing = subprocess.run(
            [sys.executable, "-c", CLI, "recipes"],
            cwd=ROOT,
            env=ENV,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert listing.returncode == 1 and listing.stderr == ""


def test_heatmap_png_without_matplotlib_exits_2_naming_the_extra_before_loading_a_model(tmp_path):
    result = trl_dpr(
        "heatmap",
        "--sft",
        str(tmp_path / "no_model"),
        "--prompt",
        "2+2?",
        "--response",
        "4",
        prelude=WITHOUT_MATPLOTLIB,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert 'pip install "trl_dpr[plots]"' in result.stderr and "--formats html" in result.stderr


def test_preview_without_matplotlib_exits_2_naming_the_extra(tmp_path):
    result = trl_dpr_forked(
        "preview",
        "--config",
        "demo.yaml",
        "--model_name_or_path",
        str(tmp_path / "no_sft"),
        "--output_dir",
        str(tmp_path / "out"),
        tmp_path=tmp_path,
        before=without_matplotlib,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "plot: false" in result.stderr and "trl_dpr[plots]" in result.stderr


def test_a_missing_base_dependency_is_still_a_traceback():
    # Only the optional extras are install advice; anything else missing is a broken environment, shown as it is. PyYAML
    # (which transformers and datasets require) is the first dependency a stage's check imports: no torch, under a second.
    result = trl_dpr("sft", "--config", "demo/sft.yaml", prelude="import sys; sys.modules['yaml'] = None\n")
    assert result.returncode == 1 and "Traceback" in result.stderr and "yaml" in result.stderr, result.stderr[-2000:]


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_a_yaml_syntax_error_names_its_line_and_exits_2(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("learning_rate: 1.0e-6\nmax_steps: 10\n  output_dir: runs/x\n")
    result = trl_dpr("dpr", "--config", str(broken))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "line 3" in result.stderr and "output_dir: runs/x" in result.stderr


@pytest.mark.slow  # a process that imports torch and TRL: seconds
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dtype": "float33"}, r"dtype: 'float33' is not one of \['auto', 'bfloat16', 'float16', 'float32'\]"),
        ({"max_steps": -5}, r"max_steps: -5 is negative; expected >= 0 \(or -1, its default\)"),
        ({"learning_rate": None}, r"learning_rate: null is not allowed; expected a number"),
    ],
)
def test_an_invalid_value_in_a_shipped_recipe_exits_2_before_anything_is_launched(tmp_path, changes, message):
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    recipe.update(changes)
    path = tmp_path / "dpr.yaml"
    path.write_text(yaml.safe_dump(recipe))
    result = trl_dpr("dpr", "--config", str(path), "--output_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert re.search(message, result.stderr), result.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # nothing launched: no output folder claimed


def test_memory_plans_a_shipped_recipe_without_the_hub_from_outside_the_repository(tmp_path):
    result = trl_dpr_forked(
        "memory", "--config", "llama-3.1-8b/dpr/config_qlora.yaml", cwd=tmp_path, tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "**total per GPU**" in result.stdout


def test_memory_plans_a_shipped_dpr_recipe_without_max_prompt_length_and_takes_its_keys_as_flags(tmp_path):
    result = trl_dpr_forked("memory", "--config", "demo/dpr.yaml", cwd=tmp_path, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        "max_prompt_length is unset: planned at " in result.stdout
        and "prompts of trl_dpr/embedded-demo" in result.stdout
    )
    assert "| weights (fp32) |" in result.stdout  # demo/dpr.yaml trains in float32
    given = trl_dpr_forked(
        "memory", "--config", "demo/dpr.yaml", "--max_prompt_length", "32", cwd=tmp_path, tmp_path=tmp_path
    )
    assert given.returncode == 0, given.stderr[-2000:]
    assert "| 32 × 32 × (4·128 + 3·256) × 4 B |" in given.stdout  # prefill: 32 prompts × 32 tokens
    assert "max_prompt_length is unset" not in given.stdout


@pytest.mark.slow  # two launches through accelerate, one preview in process: about a minute
@pytest.mark.parametrize(
    ("stage", "recipe"), [("sft", "demo/sft.yaml"), ("dpr", "demo/dpr.yaml"), ("preview", "demo.yaml")]
)
def test_a_broken_jsonl_line_is_one_message_naming_it_before_any_model_loads(tmp_path, stage, recipe, tokenizer):
    from trl_dpr.reference_manifest import mark_sft_complete

    from ..conftest import save_sft_output

    mark_sft_complete(
        save_sft_output(tmp_path / "sft", tokenizer)
    )  # the preview's SFT output (its model is checked first)
    good = json.dumps({"prompt": "What is 2+2?", "completion": "4"})
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f"{good}\n" for _ in range(50)) + '{"prompt": "What is 3+3?", "compl\n' + f"{good}\n")
    args = (
        "--dataset_name",
        str(data),
        *(
            ("--num_prompts", "8", "--model_name_or_path", str(tmp_path / "sft"))
            if stage == "preview"
            else ("--num_train_samples", "8")
        ),
    )
    result = trl_dpr(
        stage, "--config", recipe, *args, "--output_dir", str(tmp_path / "out"), cwd=tmp_path, timeout=300
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert errors == [
        f"error (ValueError): {data}:51 is not a JSON object (Unterminated string starting at); expected one object "
        "per line."
    ]
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()  # no run folder, no SFT stage run


def test_memory_for_an_unknown_backbone_offline_says_how_to_plan_it(tmp_path):
    recipe = tmp_path / "mine.yaml"
    lines = (ROOT / "recipes" / "qwen2.5-7b" / "dpr" / "config_qlora.yaml").read_text().splitlines()
    recipe.write_text("\n".join(["# someone/NoSuchModel-1B: my recipe", *lines[1:]]) + "\n")
    result = trl_dpr_forked("memory", "--config", str(recipe), cwd=tmp_path, tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "HF_HUB_OFFLINE=1" in result.stderr and "--model-config FOLDER" in result.stderr


REFUSING_REWARD = """
class Refusing:
    model_names = ("sft",)

    def __init__(self):
        raise ValueError("this reward refuses to be built")
"""


@pytest.mark.slow  # one launch through accelerate (~20 s)
@pytest.mark.parametrize("debug", [True, False])
def test_debug_shows_the_traceback_of_a_mistake_the_launched_process_finds(tmp_path, debug):
    """--debug reaches the processes `accelerate launch` starts (the dense_reward is built there, before any model
    loads): with it their traceback, without it one line that says how to see it."""
    (tmp_path / "refusing.py").write_text(REFUSING_REWARD)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"use_cpu: true\nmodel_name_or_path: {tmp_path / 'sft'}\ndense_reward: refusing:Refusing\n")
    command = [sys.executable, "-c", CLI, "dpr", "--config", str(recipe), *(["--debug"] if debug else [])]
    env = {key: value for key, value in ENV.items() if key != "TRL_DPR_DEBUG"}
    result = run_launch(command, cwd=tmp_path, env=env, timeout=300)
    assert "this reward refuses to be built" in result.stderr, result.stderr[-3000:]
    assert ("Traceback" in result.stderr) == debug, result.stderr[-3000:]
    assert ("error (ValueError): this reward refuses" in result.stderr) == (not debug), result.stderr[-3000:]
    assert result.returncode == (1 if debug else 2)


def test_trls_launcher_launches_the_packages_stage_script():
    """`_launch_training` hands TRL's `launch_training_script` the absolute path of trl_dpr/scripts/<stage>.py; TRL
    joins it to its own trl/scripts folder, where an absolute path stands for itself. If TRL changed that, this fails."""
    from trl.cli.accelerate_launcher import launch_training_script

    from trl_dpr.running.cli import SCRIPTS

    launched = []
    script = SCRIPTS / "dpr.py"
    assert script.is_file()
    launch_training_script(
        str(script), ["--num_processes", "1"], ["--config", "demo/dpr.yaml"], launch_command_fn=launched.append
    )
    assert launched[0].training_script == str(script)
    assert launched[0].training_script_args == ["--config", "demo/dpr.yaml"] and launched[0].num_processes == 1


def test_a_training_stage_is_launched_without_importing_trls_trainers_in_the_launching_process(tmp_path):
    """`trl-dpr dpr` splits its arguments into the launcher's and the script's with the cached description, so the
    process that runs `accelerate launch` imports accelerate (and torch), not TRL's trainers or transformers' Trainer
    (~7 s more here, paid again by the launched processes). The split is the recipe parser's: the script gets the
    recipe and its keys, accelerate its own flags, each in order."""
    record = tmp_path / "launched.txt"
    prelude = (  # TRL's launcher replaced by one that writes what it was given, then the imports at that point
        "import sys, trl.cli.accelerate_launcher as launcher\n"
        f"def record(script, launch_args, script_args): open({str(record)!r}, 'w').write(repr((script, launch_args, "
        "script_args, sorted(m for m in ('trl.trainer', 'transformers.trainer', 'trl_dpr.running.pipeline') "
        "if m in sys.modules))))\n"
        "launcher.launch_training_script = record\n"
    )
    result = trl_dpr(
        "dpr",
        "--config",
        "demo/dpr.yaml",
        "--num_processes",
        "1",
        "--max_steps",
        "3",
        "--main_process_port=29555",
        "--kl_coef",
        "0.5",
        prelude=prelude,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    script, launch_args, script_args, imported = eval(record.read_text())
    assert imported == [] and script.endswith("trl_dpr/scripts/dpr.py")
    recipe = str(ROOT / "recipes" / "demo" / "dpr.yaml")
    assert script_args == ["--config", recipe, "--max_steps", "3", "--kl_coef", "0.5"]
    assert launch_args[-3:] == ["--num_processes", "1", "--main_process_port=29555"]  # after the defaults trl_dpr adds


def test_the_package_imports_no_torch_until_a_public_name_is_used_and_its_lock_imports_without_fcntl():
    # Lazy exports: `import trl_dpr` loads no torch; a public name loads its module when first used. And Windows, which
    # has no fcntl: the output-folder lock is filelock's, which picks msvcrt there and imports without fcntl (no module
    # of the package imports fcntl at import time: test_every_public_name_is_exported_from_the_module_that_defines_it_
    # and_none_imports_fcntl).
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['fcntl'] = None\n"
            "import trl_dpr; assert 'torch' not in sys.modules\n"
            "print(trl_dpr.whiten.__module__, 'torch' in sys.modules)\n"
            "from filelock import FileLock",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0].split() == ["trl_dpr.algorithm", "True"], result.stdout[-2000:]


def test_every_public_name_is_exported_from_the_module_that_defines_it_and_none_imports_fcntl():
    import ast
    import importlib

    import trl_dpr

    for name in trl_dpr.__all__:
        value = getattr(trl_dpr, name)
        assert (
            value.__module__.startswith("trl_dpr.")
            and getattr(importlib.import_module(value.__module__), name) is value
        )
    assert sorted(trl_dpr.__all__) == sorted(trl_dpr._LAZY)
    at_import_time = []  # `import fcntl` outside any function (a function imports it when it runs, on POSIX only)
    for path in (ROOT / "trl_dpr").rglob("*.py"):
        tree = ast.parse(path.read_text())
        inside_functions = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        at_import_time += [
            f"{path.relative_to(ROOT)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            and id(node) not in inside_functions
            and "fcntl" in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module])
        ]
    assert not at_import_time, at_import_time


def test_the_vllm_extra_is_trls_own_within_the_pinned_trl():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    trl_pin = next(d for d in project["dependencies"] if d.startswith("trl"))
    assert project["optional-dependencies"]["vllm"] == [trl_pin.replace("trl", "trl[vllm]", 1)]


# ---- answered at once: from the cached description of the arguments, before torch, transformers or TRL ---------------


@pytest.mark.parametrize("stage", ["sft", "dpr", "spin", "gsil", "evaluate", "preview"])
def test_a_stage_help_lists_its_flags_without_importing_torch(stage):
    result = trl_dpr(stage, "--help", prelude=REPORT_IMPORTS)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"usage: trl-dpr {stage} --config RECIPE")
    assert "--output_dir" in result.stdout and "`trl-dpr recipes`" in result.stdout
    assert NO_HEAVY_IMPORTS in result.stderr


@pytest.mark.parametrize("stage", ["sft", "dpr", "spin", "gsil"])
def test_a_training_stage_help_hides_the_keys_the_recipes_refuse_and_names_the_launcher(stage):
    result = trl_dpr(stage, "--help")
    assert "--learning_rate" in result.stdout and "--accelerate_config" in result.stdout
    for refused in ("--dataset_test_split", "--eval_strategy", "--dataset_streaming"):
        assert refused not in result.stdout


@pytest.mark.parametrize("stage", ["dpr", "spin", "gsil"])
@pytest.mark.parametrize("where", ["command line", "yaml"])
def test_reference_fraction_on_a_run_from_an_sft_output_is_refused_naming_the_sft_recipe(tmp_path, stage, where):
    """α is the SFT output's (its π_ref): on `trl-dpr dpr|spin|gsil` it was listed in --help, accepted and ignored."""
    output = tmp_path / "out"
    if where == "yaml":
        recipe = yaml.safe_load((ROOT / "recipes" / "demo" / f"{stage}.yaml").read_text())
        (tmp_path / "run.yaml").write_text(yaml.safe_dump({**recipe, "reference_fraction": 0.25}))
        args = ["--config", str(tmp_path / "run.yaml")]
    else:
        args = ["--config", f"demo/{stage}.yaml", "--reference_fraction", "0.25"]
    result = trl_dpr(stage, *args, "--output_dir", str(output), prelude=REPORT_IMPORTS)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "reference_fraction: 0.25 is not used: α is the SFT stage's" in result.stderr
    assert "set it in the SFT recipe: sft_config's reference_fraction. Remove it" in result.stderr
    assert "Traceback" not in result.stderr and NO_HEAVY_IMPORTS in result.stderr and not output.exists()
    assert "--reference_fraction" not in trl_dpr(stage, "--help").stdout


def test_reference_fraction_stays_a_key_of_the_sft_stage():
    assert "--reference_fraction" in trl_dpr("sft", "--help").stdout


def test_a_dpr_run_whose_sft_recipe_asks_another_alpha_than_the_sft_output_found_is_refused_untouched(
    tmp_path, tokenizer
):
    """The SFT recipe now says α=0.25, its output folder holds a finished SFT with π_ref at α=0.5: "found, skipped"
    would train against the α=0.5 π_ref; the command stops with one line, the SFT output and the DPR folder untouched."""
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    before = {p: p.read_bytes() for p in sft.rglob("*") if p.is_file()}
    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**sft_recipe, "output_dir": "sft", "reference_fraction": 0.25}))
    dpr_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"sft_config": "sft.yaml", "model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None}
    (tmp_path / "dpr.yaml").write_text(yaml.safe_dump({**dpr_recipe, **changes}))
    result = trl_dpr_forked("dpr", "--config", "dpr.yaml", cwd=tmp_path, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        "error (ValueError): sft holds a finished SFT whose π_ref is at α=0.5 (dpr_reference.json), but sft.yaml asks "
        "for reference_fraction 0.25. To train π_ref at α=0.25, remove sft or give sft.yaml another output_dir"
    ) in result.stderr
    assert "Traceback" not in result.stderr and "Stage 2/" not in result.stdout
    assert {p: p.read_bytes() for p in sft.rglob("*") if p.is_file()} == before and not (tmp_path / "dpr").exists()


def test_dpr_refuses_completions_past_the_sft_recipes_model_context_before_its_sft_stage(tmp_path):
    """With sft_config, π_SFT does not exist yet: max_completion_length 5000 is checked against the context of the model
    the SFT recipe trains (512 positions in the embedded base's config.json), before any SFT step."""
    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**sft_recipe, "output_dir": "sft", "max_steps": 2}))
    dpr_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"sft_config": "sft.yaml", "model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None}
    (tmp_path / "dpr.yaml").write_text(yaml.safe_dump({**dpr_recipe, **changes}))
    result = trl_dpr_forked(
        "dpr", "--config", "dpr.yaml", "--max_completion_length", "5000", cwd=tmp_path, tmp_path=tmp_path
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        "error (ValueError): max_completion_length 5000 is more than trl_dpr/embedded-pretrained-llama's context of "
        "512 tokens (max_position_embeddings in its config.json): lower max_completion_length to at most 512."
    ) in result.stderr
    assert "Traceback" not in result.stderr and "Stage 1/" not in result.stdout
    assert not (tmp_path / "sft").exists() and not (tmp_path / "dpr").exists()


def test_dpr_refuses_the_folder_its_sft_stage_writes_as_its_reference_before_that_stage(tmp_path):
    """With sft_config and no SFT output yet, `--ref_model_name_or_path` naming the folder the SFT stage will write is
    π_SFT itself: refused before the SFT is spent."""
    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**sft_recipe, "output_dir": "sft", "max_steps": 2}))
    dpr_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"sft_config": "sft.yaml", "model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None}
    (tmp_path / "dpr.yaml").write_text(yaml.safe_dump({**dpr_recipe, **changes, "max_steps": 1}))
    result = trl_dpr_forked(
        "dpr", "--config", "dpr.yaml", "--ref_model_name_or_path", "sft/", cwd=tmp_path, tmp_path=tmp_path
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error (ValueError): ref_model_name_or_path 'sft/' is π_SFT itself ('sft')" in result.stderr
    assert "Stage 1/" not in result.stdout and not (tmp_path / "sft").exists() and not (tmp_path / "dpr").exists()


@pytest.mark.slow  # a 2-step `trl-dpr sft`, then two `trl-dpr dpr` (one refused, one a 1-step run): about a minute
def test_a_pipeline_skips_the_sft_output_of_its_own_sft_recipe_and_refuses_one_of_other_arguments_untouched(tmp_path):
    """The field tester's stale π_SFT: `trl-dpr sft --config sft.yaml`, then a DPR recipe whose sft_config differs in
    learning_rate alone was "found, skipped" and trained on the old π_SFT. Now the pipeline reads the SFT output's run
    record as `trl-dpr sft` does: other arguments stop it in one line before the DPR stage, the SFT output and the DPR
    folder untouched; the same SFT recipe skips it and trains."""
    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    sft_recipe.update(output_dir="sft", max_steps=2, num_train_samples=8, per_device_train_batch_size=4)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(sft_recipe))
    (tmp_path / "sft_changed.yaml").write_text(yaml.safe_dump({**sft_recipe, "learning_rate": 3e-4}))
    sft = trl_dpr("sft", "--config", "sft.yaml", cwd=tmp_path, timeout=300, start_new_session=True)
    assert sft.returncode == 0, sft.stderr[-2000:]
    before = {p: p.read_bytes() for p in (tmp_path / "sft").rglob("*") if p.is_file()}
    dpr_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None, "max_steps": 1}
    changes |= {"num_train_samples": 8, "per_device_train_batch_size": 4, "max_completion_length": 4}
    (tmp_path / "dpr.yaml").write_text(yaml.safe_dump({**dpr_recipe, **changes, "sft_config": "sft_changed.yaml"}))

    changed = trl_dpr_forked("dpr", "--config", "dpr.yaml", cwd=tmp_path, tmp_path=tmp_path)
    assert changed.returncode == 2, changed.stderr[-2000:]
    (line,) = [line for line in changed.stderr.splitlines() if line.startswith("error")]
    assert line == (
        "error (ValueError): 'sft' already holds a run (model.safetensors), finished with other arguments; its model "
        "is left as it is. To train it with sft_changed.yaml: overwrite_output_dir: true in sft_changed.yaml, or "
        "another output_dir there (and this recipe's model_name_or_path the same); to start from the SFT output that "
        'is there: --sft_config "" (or sft_config: null in the recipe).'
    )
    assert "Traceback" not in changed.stderr and "Stage 2/" not in changed.stdout
    assert {p: p.read_bytes() for p in (tmp_path / "sft").rglob("*") if p.is_file()} == before
    assert not (tmp_path / "dpr").exists()

    same = trl_dpr_forked("dpr", "--config", "dpr.yaml", "--sft_config", "sft.yaml", cwd=tmp_path, tmp_path=tmp_path)
    assert same.returncode == 0, same.stderr[-2000:]
    assert (
        "Stage 1/2: SFT of trl_dpr/embedded-pretrained-llama (reference checkpoint at α=0.5): found in sft, skipped"
        in (same.stdout)
    )
    assert "no run record" not in same.stdout
    assert {p: p.read_bytes() for p in (tmp_path / "sft").rglob("*") if p.is_file()} == before
    assert (tmp_path / "dpr" / "model.safetensors").is_file()


def test_dpr_refuses_the_sft_model_itself_as_its_reference_in_one_line(tmp_path, tokenizer):
    """`--ref_model_name_or_path` naming the SFT output: r̂ ≡ 0, DPR would train on nothing; refused before training."""
    save_sft_output(tmp_path / "sft", tokenizer)
    dpr_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    changes = {"sft_config": None, "model_name_or_path": "sft", "output_dir": "dpr", "evaluation_config": None}
    (tmp_path / "dpr.yaml").write_text(yaml.safe_dump({**dpr_recipe, **changes}))
    result = trl_dpr_forked(
        "dpr",
        "--config",
        "dpr.yaml",
        "--ref_model_name_or_path",
        "./sft",
        "--max_steps",
        "1",
        cwd=tmp_path,
        tmp_path=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        "error (ValueError): ref_model_name_or_path './sft' is π_SFT itself ('sft'): r̂ = log π_SFT − log π_ref would "
        "be 0 on every token."
    ) in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "dpr").exists()


def test_a_preview_with_no_more_samples_than_min_ess_is_refused_before_sampling(tmp_path):
    """ESS < N at every finite kl_coef: with N = min_ess = 4 no point could be trusted and `helps` would be `no` by
    construction; refused in one line before a model loads."""
    output = tmp_path / "preview"
    result = trl_dpr(
        "preview", "--config", "demo.yaml", "--samples_per_prompt", "4", "--output_dir", str(output), cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "samples_per_prompt 4 is not more than min_ess 4:" in result.stderr
    assert "Use samples_per_prompt >= 5" in result.stderr and "Traceback" not in result.stderr
    assert not output.exists()


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("heatmap", "usage: trl-dpr heatmap [-h] --sft SFT"),
        ("memory", "usage: trl-dpr memory [-h] --config CONFIG"),
        ("push", "usage: trl-dpr push [-h] --to REPO_OR_DIR"),
    ],
)
def test_heatmap_memory_and_push_help_show_their_own_usage_without_importing_torch(command, usage):
    result = trl_dpr(command, "--help", prelude=REPORT_IMPORTS)
    assert result.returncode == 0 and result.stdout.startswith(usage), result.stdout[:500]
    assert NO_HEAVY_IMPORTS in result.stderr


def test_parsing_push_help_in_python_imports_neither_torch_nor_transformers():
    """`push.main` itself, not only the CLI's dispatch: its module and its parser stay light (a fresh interpreter, so
    this process's own imports do not count)."""
    code = (
        "import sys\nfrom trl_dpr.running.push import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as end:\n    assert end.code == 0, end.code\n"
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "[]" and "--to REPO_OR_DIR" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["push", "runs/x"], "the following arguments are required: --to"),
        (
            ["push", "no-such-run", "--to", "./pushed"],
            "'no-such-run' is not a finished run to push: the folder does not",
        ),
        (["push", ".", "--to", "./pushed"], "'.' is not a finished run to push: no final model"),
    ],
    ids=["missing --to", "missing folder", "not a run"],
)
def test_a_push_mistake_is_one_message_before_torch(tmp_path, args, message):
    result = trl_dpr(*args, prelude=REPORT_IMPORTS, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and NO_HEAVY_IMPORTS in result.stderr
    assert not (tmp_path / "pushed").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sft", "--config", "demo/sft.yaml", "--learnig_rate", "1e-5"],
            "--learnig_rate (did you mean --learning_rate?)",
        ),
        (
            ["dpr", "--config", "demo/dpr.yaml", "--num_generation", "2"],
            "--num_generation (did you mean --num_generations?)",
        ),
        (["evaluate", "--config", "demo.yaml", "--max_prompt", "3"], "--max_prompt (did you mean --max_prompts?)"),
        (["heatmap", "--sft", "x", "--promt", "a", "--response", "b"], "--promt (did you mean --prompt?)"),
        (["memory", "--config", "demo/dpr.yaml", "--detail"], "--detail (did you mean --details?)"),
    ],
)
def test_a_misspelled_flag_gets_a_suggestion_and_no_usage_dump(args, message):
    result = trl_dpr(*args, prelude=REPORT_IMPORTS)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and f"`trl-dpr {args[0]} --help`" in result.stderr
    assert "usage:" not in result.stderr and "Traceback" not in result.stderr
    assert NO_HEAVY_IMPORTS in result.stderr


def test_a_misspelled_recipe_key_on_memory_points_to_the_help_that_lists_recipe_keys():
    """`trl-dpr memory --help` lists its own flags, not the recipe keys it also takes: the line names where those are."""
    result = trl_dpr("memory", "--config", "demo/dpr.yaml", "--max_promt_length", "10", prelude=REPORT_IMPORTS)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--max_promt_length (did you mean --max_prompt_length?)" in result.stderr
    assert "`trl-dpr memory --help` lists its own flags" in result.stderr
    assert "`trl-dpr dpr --help` and `trl-dpr sft --help` list the recipe keys" in result.stderr
    assert "usage:" not in result.stderr and "Traceback" not in result.stderr
    assert NO_HEAVY_IMPORTS in result.stderr


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max_steps", "2.5", "argument --max_steps/--max-steps: invalid int value: '2.5'"),
        ("--dtype", "float33", "argument --dtype: invalid choice: 'float33'"),
        ("--learning_rate", "null", "argument --learning_rate/--learning-rate: invalid float value: 'null'"),
        ("--max_steps", "-3", "max_steps: -3 is negative; expected >= 0 (or -1, its default) (command line)"),
    ],
)
def test_a_bad_value_on_the_command_line_is_one_message_before_torch(tmp_path, flag, value, message):
    result = trl_dpr(
        "sft", "--config", "demo/sft.yaml", flag, value, "--output_dir", str(tmp_path / "out"), prelude=REPORT_IMPORTS
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and "`trl-dpr sft --help`" in result.stderr
    assert "usage:" not in result.stderr and "Traceback" not in result.stderr
    assert NO_HEAVY_IMPORTS in result.stderr and not (tmp_path / "out").exists()


# Each range rule of a launched stage's config (range_rules.RANGE_RULES), broken on the command line: (stage, the
# dataclass whose __post_init__ checks it, the values, the start of its message). A negative generation_temperature is
# the parser's sign rule first ("is negative; expected >= 0"), as every other negative value.
RANGE_CASES = [
    ("dpr", "DensePathConfig", {"gamma": 2.0}, "gamma must be in (0, 1], got 2.0"),
    ("dpr", "DensePathConfig", {"temperature": 0.0}, "temperature must be > 0"),
    ("dpr", "DensePathConfig", {"max_completion_length": 0}, "max_completion_length must be a positive number"),
    ("dpr", "DensePathConfig", {"max_prompt_length": 0}, "max_prompt_length must be a positive number of tokens"),
    (
        "dpr",
        "DensePathConfig",
        {"beta": 0.1},
        "beta=0.1 (GRPO's KL in the loss) and kl_coef=1.0",
    ),  # the demo's kl_coef
    (
        "dpr",
        "DensePathConfig",
        {"per_device_train_batch_size": 3, "generation_batch_size": 4},
        "generation_batch_size 4 is not a multiple of",
    ),
    ("dpr", "DensePathConfig", {"num_generations": 0}, "num_generations must be >= 1"),
    ("dpr", "DensePathConfig", {"reward_token_chunk_size": 0}, "reward_token_chunk_size must be a positive number"),
    ("dpr", "DensePathConfig", {"reward_granularity": "episode"}, "reward_granularity must be 'token' or 'sentence'"),
    ("dpr", "DPRScriptArguments", {"num_train_samples": 0}, "num_train_samples must be a positive number of rows"),
    ("dpr", "DPRScriptArguments", {"heatmap_steps": 5, "heatmap_samples": 0}, "heatmap_samples must be at least 1"),
    (
        "sft",
        "SFTScriptArguments",
        {"reference_fraction": 1.0},
        "reference_fraction α must be strictly between 0 and 1",
    ),
    ("spin", "SPINConfig", {"num_iterations": 0}, "num_iterations must be >= 1"),
    ("gsil", "GSILConfig", {"generation_top_p": 1.5}, "generation_top_p must be in (0, 1]"),
    (
        "gsil",
        "GSILConfig",
        {"max_new_tokens": 0, "generation_batch_size": 8},
        "max_new_tokens and generation_batch_size must be >= 1",
    ),
    ("spin", "SPINConfig", {"beta": 0.0}, "beta must be > 0"),
]


def _config_message(name: str, changes: dict) -> str:
    """The message the dataclass `name` raises from Python for `changes`."""
    from trl_dpr import DensePathConfig
    from trl_dpr.lfd import GSILConfig, SPINConfig
    from trl_dpr.running.pipeline import DPRScriptArguments, SFTScriptArguments

    trainer = {"output_dir": "unused", "report_to": "none", "use_cpu": True, "bf16": False}
    build = {
        "DensePathConfig": lambda: DensePathConfig(**trainer, kl_coef=1.0, **changes),
        "DPRScriptArguments": lambda: DPRScriptArguments(dataset_name="d", **changes),
        "SFTScriptArguments": lambda: SFTScriptArguments(dataset_name="d", **changes),
        "SPINConfig": lambda: SPINConfig(**trainer, **changes),
        "GSILConfig": lambda: GSILConfig(**trainer, **changes),
    }[name]
    with pytest.raises(ValueError) as error:
        build()
    return str(error.value)


@pytest.mark.parametrize(
    ("stage", "config", "changes", "message"), RANGE_CASES, ids=[f"{s}-{','.join(c)}" for s, _, c, _ in RANGE_CASES]
)
def test_a_value_out_of_range_is_the_configs_own_message_before_torch(tmp_path, stage, config, changes, message):
    """Found by the checks before anything is launched (they took 30-40 s, after `accelerate launch`), with the one
    message the config gives a Python user."""
    from_python = _config_message(config, changes)
    assert from_python.startswith(message)
    flags = [item for key, value in changes.items() for item in (f"--{key}", str(value))]
    out = tmp_path / "out"
    recipe = f"demo/{stage}.yaml"
    result = trl_dpr(stage, "--config", recipe, *flags, "--output_dir", str(out), prelude=REPORT_IMPORTS)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"  - {from_python} (command line)" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and NO_HEAVY_IMPORTS in result.stderr and not out.exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_steps": 2.5}, "max_steps: 2.5 is float; expected an integer"),
        ({"learning_rate": None}, "learning_rate: null is not allowed; expected a number"),
        ({"learnig_rate": 1e-5}, "learnig_rate (did you mean learning_rate?)"),
        ({"dataset_streaming": True}, "dataset_streaming: True is not used"),
    ],
)
def test_a_bad_key_or_value_in_the_yaml_is_found_before_torch(tmp_path, changes, message):
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({**recipe, **changes}))
    result = trl_dpr("sft", "--config", str(path), prelude=REPORT_IMPORTS)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        message in result.stderr and "`trl-dpr sft --help`" in result.stderr and "python recipes/" not in result.stderr
    )
    assert NO_HEAVY_IMPORTS in result.stderr


@pytest.mark.parametrize("args", [["sft"], ["sft", "--max_steps", "3"], ["dpr"], ["evaluate"], ["preview"]])
def test_a_stage_without_a_config_says_to_pass_one(args):
    stage = args[0]
    result = trl_dpr(*args, prelude=REPORT_IMPORTS)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"trl-dpr {stage} --config <recipe>" in result.stderr and "`trl-dpr recipes`" in result.stderr
    assert "bf16/gpu" not in result.stderr and "Traceback" not in result.stderr
    assert NO_HEAVY_IMPORTS in result.stderr


def test_use_vllm_without_vllm_exits_2_with_the_install_line_before_anything_loads(tmp_path):
    """It was TRL's ImportError traceback, after 50 s and two model loads."""
    out = tmp_path / "out"
    result = trl_dpr(
        "dpr",
        "--config",
        "demo/dpr.yaml",
        "--use_vllm",
        "true",
        "--output_dir",
        str(out),
        prelude="import sys; sys.modules['vllm'] = None\n" + REPORT_IMPORTS,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert 'use_vllm: true needs vLLM, which is not installed: `pip install "trl_dpr[vllm]"`' in result.stderr
    assert "Traceback" not in result.stderr and NO_HEAVY_IMPORTS in result.stderr and not out.exists()


def test_a_gguf_recipe_without_the_gguf_extra_exits_2_with_the_install_line(tmp_path):
    # A missing dataset stops the launched run before any model loads: were the GGUF check not made first (before the
    # launch), the run would end with that message instead, without the install line.
    result = trl_dpr(
        "sft",
        "--config",
        "smollm2-135m/sft/config_full.yaml",
        "--output_dir",
        str(tmp_path / "out"),
        "--dataset_name",
        str(tmp_path / "missing.jsonl"),
        prelude="import sys; sys.modules['gguf'] = None\n" + REPORT_IMPORTS,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert 'pip install "trl_dpr[gguf]"' in result.stderr and "Traceback" not in result.stderr
    assert NO_HEAVY_IMPORTS in result.stderr and not (tmp_path / "out").exists()


def test_without_a_cache_the_same_mistake_gets_the_same_message(tmp_path):
    """An unwritable or empty cache only makes the answer slower: the arguments are described from TRL's dataclasses
    on the spot, and checked by the same code."""
    args = ["sft", "--config", "demo/sft.yaml", "--learnig_rate", "1e-5"]
    cold = trl_dpr_forked(*args, tmp_path=tmp_path, env={"TRL_DPR_CACHE": str(tmp_path / "empty")})
    warm = trl_dpr(*args)
    assert cold.returncode == warm.returncode == 2 and cold.stderr == warm.stderr, cold.stderr[-2000:]
    assert list((tmp_path / "empty").glob("cli-*.json"))  # written for the next call


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_the_readmes_demo_command_again_on_its_finished_run_exits_0_with_its_table_and_no_traceback(
    tmp_path, monkeypatch
):
    from trl_dpr.running.checkpointing import mark_run_finished, run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    recipe["output_dir"] = str(tmp_path / "dpr")
    path = tmp_path / "dpr.yaml"
    path.write_text(yaml.safe_dump(recipe))
    # What `make demo` leaves in runs/demo/dpr: the model, its evaluation, and, written last, the record of the run.
    (tmp_path / "dpr").mkdir()
    (tmp_path / "dpr" / "model.safetensors").write_bytes(b"weights of the finished run")
    table = "| Method | accuracy % (95% CI) |\n|---|---|\n| DPR | 84.2 (82.5–85.9) |"
    (tmp_path / "dpr" / "eval_results.json").write_text(json.dumps({"table_markdown": table}))
    monkeypatch.chdir(ROOT)  # the recipe's paths are the repository's, as for `make demo`
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(["--config", str(path)])
    mark_run_finished(training_args.output_dir, run_fingerprint(script_args, training_args, model_args))
    cpu = str(ROOT / "recipes" / "accelerate_configs" / "cpu.yaml")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", cpu, "recipes/dpr.py"]
    result = run_launch([*command, "--config", str(path)], cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"Already finished: {tmp_path / 'dpr'} holds this run" in result.stdout
    assert table in result.stdout and "--overwrite_output_dir true" in result.stdout
    assert (tmp_path / "dpr" / "model.safetensors").read_bytes() == b"weights of the finished run"


@pytest.mark.slow  # two processes forked from this one: seconds
def test_a_finished_run_whose_local_training_file_was_edited_is_not_taken_for_finished(
    tmp_path, monkeypatch, tokenizer
):
    """`trl-dpr dpr` again after editing train.jsonl: not `Already finished` (that run trained on other data), but the
    folder's refusal, naming the data as what changed and the way to train again (not to resume: the run is
    finished); the finished run's model is left as it was."""
    from trl_dpr.running.checkpointing import mark_run_finished, run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    train = tmp_path / "train.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"{n} km in m?"}, {"role": "assistant", "content": f"{n}000 m"}]}
        for n in range(1, 6)
    ]
    train.write_text("".join(json.dumps(row) + "\n" for row in rows[:4]))
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    sft = save_sft_output(tmp_path / "sft", tokenizer)  # a fresh clone has no runs/demo/sft
    recipe.update(output_dir=str(tmp_path / "dpr"), dataset_name=str(train), model_name_or_path=str(sft))
    recipe.update(sft_config=None, evaluation_config=None)  # the run alone: no SFT stage, nothing left to evaluate
    path = tmp_path / "dpr.yaml"
    path.write_text(yaml.safe_dump(recipe))
    (tmp_path / "dpr").mkdir()
    (tmp_path / "dpr" / "model.safetensors").write_bytes(b"weights of the finished run")
    monkeypatch.chdir(ROOT)  # the recipe's paths are the repository's
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(["--config", str(path)])
    mark_run_finished(training_args.output_dir, run_fingerprint(script_args, training_args, model_args))

    again = trl_dpr_forked("dpr", "--config", str(path), tmp_path=tmp_path)
    assert again.returncode == 0 and f"Already finished: {tmp_path / 'dpr'} holds this run" in again.stdout
    with open(train, "a") as f:
        f.write(json.dumps(rows[4]) + "\n")
    edited = trl_dpr_forked("dpr", "--config", str(path), tmp_path=tmp_path)
    assert edited.returncode == 2 and "Already finished" not in edited.stdout, edited.stdout[-2000:]
    (line,) = [line for line in edited.stderr.splitlines() if line.startswith("error")]
    assert "already holds a run (model.safetensors), finished with other data (the dataset_name files" in line
    assert "--overwrite_output_dir true" in line and "Resume" not in line
    assert "Traceback" not in edited.stderr
    assert (tmp_path / "dpr" / "model.safetensors").read_bytes() == b"weights of the finished run"


@pytest.mark.slow  # a process forked from this one: seconds
def test_dpr_again_on_a_finished_run_whose_push_failed_exits_0_with_the_push_line_of_its_recipe(tmp_path, monkeypatch):
    """A run whose push failed after training (its record lists the push pending): the same command again trains
    nothing, says it is finished and prints the `trl-dpr push` line with the recipe's repo, merge, privacy and branch;
    the run's files are left as they were."""
    import shlex

    from trl_dpr.running.checkpointing import mark_run_finished, run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    recipe.update(output_dir=str(tmp_path / "my dpr"), push_to_hub=True, hub_model_id="me/dpr-demo")
    recipe.update(hub_private_repo=True, hub_revision="exp-1", merge_adapter=True)
    path = tmp_path / "dpr.yaml"
    path.write_text(yaml.safe_dump(recipe))
    (tmp_path / "my dpr").mkdir()
    (tmp_path / "my dpr" / "model.safetensors").write_bytes(b"weights of the finished run")
    (tmp_path / "my dpr" / "eval_results.json").write_text(json.dumps({"table_markdown": "| DPR | 84.2 |"}))
    monkeypatch.chdir(ROOT)  # the recipe's paths are the repository's
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(["--config", str(path)])
    mark_run_finished(training_args.output_dir, run_fingerprint(script_args, training_args, model_args), ["push"])

    again = trl_dpr_forked("dpr", "--config", str(path), tmp_path=tmp_path)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-2000:]
    assert (
        f"Already finished: {tmp_path / 'my dpr'} holds this run" in again.stdout and "| DPR | 84.2 |" in again.stdout
    )
    (line,) = [line for line in again.stdout.splitlines() if line.startswith("Not pushed yet: ")]
    command = line.removeprefix("Not pushed yet: ").removesuffix(" (its push did not finish)")
    flags = ["--merge_adapter", "--private", "--revision", "exp-1"]
    assert shlex.split(command) == ["trl-dpr", "push", str(tmp_path / "my dpr"), "--to", "me/dpr-demo", *flags]
    assert (tmp_path / "my dpr" / "model.safetensors").read_bytes() == b"weights of the finished run"
    assert json.loads((tmp_path / "my dpr" / RUN_COMPLETE_NAME).read_text())["pending"] == ["push"]


@pytest.mark.slow  # three launches of `trl-dpr sft`, one of them a 2-step SFT: about a minute
def test_sft_again_on_its_finished_run_exits_0_and_overwrite_output_dir_starts_it_over(tmp_path):
    from trl_dpr.running.checkpointing import mark_run_finished, run_fingerprint
    from trl_dpr.scripts.sft import make_parser

    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    recipe.update(output_dir=str(tmp_path / "sft"), max_steps=2, num_train_samples=8, per_device_train_batch_size=4)
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(recipe))
    weights = tmp_path / "sft" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights of the finished run")  # what the same recipe left, recorded last as finished
    mark_run_finished(
        weights.parent, run_fingerprint(*make_parser().parse_args_and_config(["--config", str(path)])[:3])
    )
    sft = ("sft", "--config", str(path))

    again = trl_dpr(*sft, cwd=tmp_path, timeout=300, start_new_session=True)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-2000:]
    assert f"Already finished: {tmp_path / 'sft'} holds this run" in again.stdout
    assert "--overwrite_output_dir true" in again.stdout
    assert weights.read_bytes() == b"weights of the finished run"

    old_checkpoint = weights.parent / "checkpoint-6"  # the old run's, which a killed new run would have resumed
    old_checkpoint.mkdir()
    (old_checkpoint / "trainer_state.json").write_text('{"global_step": 6}')
    (weights.parent / "notes.txt").write_text("the user's own file")
    over = trl_dpr(*sft, "--overwrite_output_dir", "true", cwd=tmp_path, timeout=300, start_new_session=True)
    assert over.returncode == 0 and "Traceback" not in over.stderr, over.stderr[-2000:]
    assert weights.read_bytes() != b"weights of the finished run"  # trained again, from the start
    assert not old_checkpoint.exists() and (weights.parent / "notes.txt").read_text() == "the user's own file"
    assert (tmp_path / "sft" / "sft_complete.json").is_file()
    # That run recorded itself: the plain command again has nothing to do.
    assert "Already finished" in trl_dpr(*sft, cwd=tmp_path, timeout=300, start_new_session=True).stdout


# ---- --overwrite_output_dir true with a mistake: the finished run stays as it was ----------------------------------------


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def plant_finished_run(folder: Path, tokenizer=None) -> dict[str, bytes]:
    """A finished run in `folder` as its recipe leaves it: with `tokenizer`, an SFT output (a tiny π_SFT, π_ref in
    dpr_reference/, its manifest, sft_complete.json); else a policy's weights and config. Both with trainer_state.json,
    a complete checkpoint, the evaluation table and run_complete.json. Returns `folder_bytes(folder)`."""
    from trl_dpr.reference_manifest import mark_sft_complete
    from trl_dpr.running.checkpointing import mark_run_finished, write_checkpoint_manifest

    if tokenizer is not None:
        mark_sft_complete(save_sft_output(folder, tokenizer))
    else:
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights of the finished run")
        (folder / "config.json").write_text("{}")
    (folder / "trainer_state.json").write_text('{"global_step": 6}')
    (folder / "checkpoint-6").mkdir()
    (folder / "checkpoint-6" / "trainer_state.json").write_text('{"global_step": 6}')
    write_checkpoint_manifest(folder / "checkpoint-6")
    (folder / "eval_results.json").write_text(json.dumps({"table_markdown": "| old | 1.0 |"}))
    mark_run_finished(folder, "0" * 64, [])
    return folder_bytes(folder)


def refused_in_one_line(result: subprocess.CompletedProcess) -> str:
    """The one `error ...` line of a command that exited 2 without a traceback."""
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error")]
    return line


def assert_started_over(folder: Path, old: dict[str, bytes]) -> None:
    """The run in `folder` trained again from the start: the old checkpoint, table and record gone, new weights."""
    new = folder_bytes(folder)
    assert not [name for name in new if name.startswith("checkpoint-6/")] and "eval_results.json" not in new
    assert new["model.safetensors"] != old["model.safetensors"]
    assert json.loads(new[RUN_COMPLETE_NAME])["arguments_sha256"] != "0" * 64


PUSH_OFFLINE = "push_to_hub is on but the Hub is switched off (HF_HUB_OFFLINE=1)"


@pytest.mark.slow  # `trl-dpr sft` forked from this process three times, the last a 2-step SFT: about a minute
def test_sft_started_over_with_a_mistake_keeps_the_finished_run_byte_for_byte(tmp_path, tokenizer):
    """Checked after the folder's claim: the push, the data. Before the fix the claim had deleted π_SFT, π_ref and their
    markers by then."""
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    recipe.update(output_dir="sft", max_steps=2, num_train_samples=8, per_device_train_batch_size=4)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(recipe))
    old = plant_finished_run(tmp_path / "sft", tokenizer)
    over = ("sft", "--config", "sft.yaml", "--overwrite_output_dir", "true")
    for mistake, message in (
        (("--push_to_hub", "true"), PUSH_OFFLINE),
        (("--dataset_name", "missing.jsonl"), "missing.jsonl"),
    ):
        assert message in refused_in_one_line(trl_dpr_forked(*over, *mistake, cwd=tmp_path, tmp_path=tmp_path))
        assert folder_bytes(tmp_path / "sft") == old
    started = trl_dpr_forked(*over, cwd=tmp_path, tmp_path=tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert_started_over(tmp_path / "sft", old)
    assert folder_bytes(tmp_path / "sft")["dpr_reference/model.safetensors"] != old["dpr_reference/model.safetensors"]


def tiny_dpr_recipe_in(folder: Path, **changes) -> None:
    """`folder/dpr.yaml`: one DPR step from the SFT output `folder/sft` into `folder/dpr`, no evaluation."""
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    recipe.update(
        {
            "model_name_or_path": "sft",
            "sft_config": None,
            "evaluation_config": None,
            "output_dir": "dpr",
            "num_train_samples": 8,
            "max_steps": 1,
            "per_device_train_batch_size": 4,
            "max_completion_length": 4,
            **changes,
        }
    )
    (folder / "dpr.yaml").write_text(yaml.safe_dump(recipe))


@pytest.mark.slow  # `trl-dpr dpr` forked from this process four times, the last a 1-step DPR: about a minute
def test_dpr_started_over_with_a_mistake_keeps_the_finished_run_byte_for_byte(tmp_path, tokenizer):
    """Checked after the folder's claim: the push, the prompts, the evaluation YAML. Before the fix the claim had
    deleted the policy, its checkpoint and its record by then."""
    save_sft_output(tmp_path / "sft", tokenizer)
    tiny_dpr_recipe_in(tmp_path)
    old = plant_finished_run(tmp_path / "dpr")
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump({"benchmarks": ["demo"], "judge": "exact", "no_such_key": 1}))
    over = ("dpr", "--config", "dpr.yaml", "--overwrite_output_dir", "true")
    for mistake, message in (
        (("--push_to_hub", "true"), PUSH_OFFLINE),
        (("--dataset_name", "missing.jsonl"), "missing.jsonl"),
        (("--evaluation_config", "eval.yaml"), "Unknown key(s) in eval.yaml"),
    ):
        assert message in refused_in_one_line(trl_dpr_forked(*over, *mistake, cwd=tmp_path, tmp_path=tmp_path))
        assert folder_bytes(tmp_path / "dpr") == old
    started = trl_dpr_forked(*over, cwd=tmp_path, tmp_path=tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert_started_over(tmp_path / "dpr", old)


@pytest.mark.slow  # `trl-dpr dpr` forked from this process three times, the last a 1-step DPR: about a minute
def test_an_sft_then_dpr_pipeline_started_over_with_a_bad_sft_recipe_keeps_both_runs_byte_for_byte(
    tmp_path, tokenizer
):
    """Checked after the DPR folder's claim: the SFT recipe (its output folder, its α). Before the fix the claim had
    deleted the finished DPR run by then."""
    plant_finished_run(tmp_path / "sft", tokenizer)  # π_ref at α=0.5
    # No run record: an SFT output made from Python, used as found (one with a record of other arguments is refused).
    (tmp_path / "sft" / RUN_COMPLETE_NAME).unlink()
    sft_old = folder_bytes(tmp_path / "sft")
    dpr_old = plant_finished_run(tmp_path / "dpr")
    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    for name, changes in (
        ("sft", {}),
        ("elsewhere", {"output_dir": "elsewhere"}),
        ("alpha", {"reference_fraction": 0.25}),
    ):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**sft_recipe, "output_dir": "sft", **changes}))
    tiny_dpr_recipe_in(tmp_path, sft_config="sft.yaml")
    over = ("dpr", "--config", "dpr.yaml", "--overwrite_output_dir", "true")
    for sft_config, message in (
        ("elsewhere.yaml", "elsewhere.yaml writes the SFT model to 'elsewhere' but DPR starts from"),
        ("alpha.yaml", "alpha.yaml asks for reference_fraction 0.25"),
    ):
        refused = trl_dpr_forked(*over, "--sft_config", sft_config, cwd=tmp_path, tmp_path=tmp_path)
        assert message in refused_in_one_line(refused)
        assert folder_bytes(tmp_path / "dpr") == dpr_old and folder_bytes(tmp_path / "sft") == sft_old
    started = trl_dpr_forked(*over, cwd=tmp_path, tmp_path=tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    assert "found in sft, skipped" in started.stdout and folder_bytes(tmp_path / "sft") == sft_old
    assert_started_over(tmp_path / "dpr", dpr_old)


@pytest.mark.slow  # two launches of `trl-dpr sft`, one of them a 1-step SFT: about a minute
def test_sft_trains_on_a_local_csv_file_and_refuses_a_split_of_it_in_one_line(tmp_path):
    """A .csv `dataset_name` went to the Hub (offline: "Couldn't reach"), ./x.csv was read as JSON; a split named for a
    single file trained on the whole file. Now the CSV trains, and the split is refused before anything loads."""
    rows = "".join(f"What is {n} + 1?,The answer is {n + 1}.\n" for n in range(8))
    (tmp_path / "rows.csv").write_text("prompt,completion\n" + rows)
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    recipe.update(dataset_name="./rows.csv", output_dir="sft", max_steps=1, per_device_train_batch_size=4)
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(recipe))

    split = ("sft", "--config", "sft.yaml", "--dataset_train_split", "test", "--output_dir", "split")
    refused = trl_dpr(*split, cwd=tmp_path, timeout=300, start_new_session=True)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("error")]
    assert line == (
        "error (ValueError): The split 'test' (dataset_train_split) is not in './rows.csv': a single file is all of "
        "split 'train'. Remove dataset_train_split (or set it to train), or give a folder or a Hub dataset with that "
        "split."
    )
    assert not (tmp_path / "split").exists()

    trained = trl_dpr("sft", "--config", "sft.yaml", cwd=tmp_path, timeout=300, start_new_session=True)
    assert trained.returncode == 0 and "Traceback" not in trained.stderr, trained.stderr[-2000:]
    assert (tmp_path / "sft" / "model.safetensors").is_file() and (tmp_path / "sft" / "run_complete.json").is_file()


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_make_demos_launch_on_a_folder_holding_another_run_ends_with_one_line_and_no_traceback(tmp_path):
    recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text())
    recipe["output_dir"] = str(tmp_path / "dpr")
    path = tmp_path / "dpr.yaml"
    path.write_text(yaml.safe_dump(recipe))
    (tmp_path / "dpr").mkdir()
    (tmp_path / "dpr" / "model.safetensors").write_bytes(b"weights of a run with other arguments")
    cpu = str(ROOT / "recipes" / "accelerate_configs" / "cpu.yaml")
    assert (
        "accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml"
        in (ROOT / "Makefile").read_text()
    )
    command = [sys.executable, "-m", "accelerate.commands.launch", "--quiet", "--config_file", cpu, "recipes/dpr.py"]
    result = run_launch([*command, "--config", str(path)], cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert "already holds a run (model.safetensors)" in line and "--overwrite_output_dir true" in line
    assert (tmp_path / "dpr" / "model.safetensors").read_bytes() == b"weights of a run with other arguments"


# ---- a pipeline's evaluation: a folder per run, after the run is finished ----------------------------------------------


@pytest.fixture(scope="module")
def tiny_dpr_recipe(tmp_path_factory, tokenizer):
    """A folder holding `runs/p/sft` (a tiny SFT output), `dpr.yaml` (one DPR step from it into `runs/p/dpr`, with its
    evaluation: `eval.yaml`, the exact judge on 2 prompts), for `trl-dpr dpr` run from there."""
    from ..conftest import demo_evaluation_yaml, save_sft_output

    root = tmp_path_factory.mktemp("ablation")
    save_sft_output(root / "runs" / "p" / "sft", tokenizer)
    recipe = {
        **yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text()),
        "model_name_or_path": "runs/p/sft",
        "sft_config": None,
        "evaluation_config": demo_evaluation_yaml(root / "eval.yaml", demo_num_prompts=2, max_new_tokens=4),
        "output_dir": "runs/p/dpr",
        "num_train_samples": 8,
        "max_steps": 1,
        "per_device_train_batch_size": 4,
        "max_completion_length": 4,
    }
    (root / "dpr.yaml").write_text(yaml.safe_dump(recipe))
    return root


def answer_paths(answers_file: Path) -> set[str]:
    return {json.loads(line)["settings"]["model_path"] for line in answers_file.read_text().splitlines()}


@pytest.mark.slow  # two DPR runs, each a launched process that imports torch and TRL: about a minute
def test_an_ablation_beside_a_finished_dpr_run_is_evaluated_in_a_folder_of_its_own(tiny_dpr_recipe, tmp_path):
    """The field tester's ablation: `--output_dir runs/p/dpr_sr --reward_granularity sentence` beside a finished run was
    refused at its evaluation, after training, for the first run's cached answers under the same name."""
    root = tiny_dpr_recipe
    first = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=root)
    assert first.returncode == 0, first.stderr[-3000:]
    first_report = json.loads((root / "runs" / "p" / "dpr" / "eval_results.json").read_text())
    ablation = ["--output_dir", "runs/p/dpr_sr", "--reward_granularity", "sentence"]
    second = trl_dpr_forked("dpr", "--config", "dpr.yaml", *ablation, tmp_path=tmp_path, cwd=root)
    assert second.returncode == 0, second.stderr[-3000:]
    assert (root / "runs" / "p" / "dpr_sr" / RUN_COMPLETE_NAME).is_file()
    evaluations = root / "runs" / "p" / "eval"
    for run in ("dpr", "dpr_sr"):  # each policy's answers are its own, in its own folder
        assert answer_paths(evaluations / run / "answers" / "demo" / "DPR.jsonl") == {f"runs/p/{run}"}
    for run in ("dpr", "dpr_sr"):  # each report is its run's (the first one kept)
        assert json.loads((evaluations / run / "results.json").read_text()) == json.loads(
            (root / "runs" / "p" / run / "eval_results.json").read_text()
        )
    assert json.loads((root / "runs" / "p" / "dpr" / "eval_results.json").read_text()) == first_report


@pytest.mark.slow  # two launched processes that import torch and TRL, one of them a DPR run: about a minute
def test_a_dpr_run_whose_evaluation_fails_is_kept_finished_and_the_same_command_again_only_evaluates(
    tiny_dpr_recipe, tmp_path
):
    root, run = tiny_dpr_recipe, ["dpr", "--config", "dpr.yaml", "--output_dir", "runs/p/dpr_x"]
    # The evaluation fails after training: SFT answers cached with other settings in the run's evaluation folder.
    cached = root / "runs" / "p" / "eval" / "dpr_x" / "answers" / "demo" / "SFT.jsonl"
    cached.parent.mkdir(parents=True)
    cached.write_text(
        json.dumps({"model": "SFT", "prompt_id": "0", "turn": 0, "answer": "4", "settings": {"model_path": "x"}})
        + "\n"
    )
    failed = trl_dpr_forked(*run, tmp_path=tmp_path, cwd=root)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    kept, error = [line for line in failed.stderr.splitlines() if line.startswith(("The evaluation", "error"))]
    assert (
        kept.endswith("the same command again runs only its evaluation, then what follows it.")
        and "was made with other settings" in error
    )
    policy = root / "runs" / "p" / "dpr_x"
    assert (policy / RUN_COMPLETE_NAME).is_file() and not (policy / "eval_results.json").exists()
    weights = (policy / "model.safetensors").read_bytes()

    cached.unlink()  # as the error says
    again = trl_dpr_forked(*run, tmp_path=tmp_path, cwd=root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "its evaluation did not finish: evaluating it" in again.stdout and "Stage 1/2" not in again.stdout
    assert (policy / "model.safetensors").read_bytes() == weights  # not trained again
    table = json.loads((policy / "eval_results.json").read_text())["table_markdown"]
    assert (
        f"## Evaluation\n\n<!-- trl_dpr evaluation -->\n\n{table}\n\n<!-- /trl_dpr evaluation -->\n"
        in (policy / "README.md").read_text()
    )  # the card carries it, as after training


@pytest.mark.slow  # four launched processes that import torch and TRL, one of them a DPR run: about a minute
def test_an_evaluation_yaml_fixed_after_its_evaluation_failed_evaluates_the_finished_run_and_an_edit_does_again(
    tiny_dpr_recipe, tmp_path
):
    """The evaluation settings are not the run: the user fixes the evaluation YAML's `answer_check` after the
    evaluation failed, and the same command evaluates the trained run with it (not `another run`); a later edit to the
    YAML evaluates it again with that (the table shown is the one the command asks for); unchanged, `Already finished`.
    The model is never trained again."""
    root, run = tiny_dpr_recipe, ["dpr", "--config", "dpr.yaml", "--output_dir", "runs/p/dpr_fixed"]
    (root / "my_checks.py").write_text(
        "def strict(completions, answer, **kwargs):\n    raise KeyError('score')\n\n\n"
        "def one_km(completions, answer, **kwargs):  # right on the 1 km prompt only\n"
        "    return [float(a == '1000') for a in answer]\n"
    )
    rows = [{"prompt": f"{n} km in m?", "answer": f"{n}000"} for n in (1, 2)]
    (root / "held_out.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    evaluation = root / "my_eval.yaml"
    settings = yaml.safe_load((root / "eval.yaml").read_text()) | {
        "benchmarks": ["jsonl"],
        "jsonl_path": "held_out.jsonl",
    }
    settings.pop("demo_num_prompts")

    def evaluate_with(**changed):
        evaluation.write_text(yaml.safe_dump(settings | changed))
        return trl_dpr_forked(*run, "--evaluation_config", "my_eval.yaml", tmp_path=tmp_path, cwd=root)

    def accuracy(report) -> dict:
        return {row["method"]: row["accuracy"] for row in report["accuracy"]}

    policy = root / "runs" / "p" / "dpr_fixed"
    failed = evaluate_with(answer_check="my_checks:strict")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "answer_check my_checks:strict raised KeyError" in failed.stderr
    assert json.loads((policy / RUN_COMPLETE_NAME).read_text())["pending"] == ["evaluation"]
    weights = (policy / "model.safetensors").read_bytes()

    fixed = evaluate_with(answer_check="my_checks:one_km")
    assert fixed.returncode == 0 and "Traceback" not in fixed.stderr, fixed.stderr[-3000:]
    assert "its evaluation did not finish: evaluating it." in fixed.stdout and "Stage 1/2" not in fixed.stdout
    report = json.loads((policy / "eval_results.json").read_text())
    assert accuracy(report) == {"SFT": 0.5, "DPR": 0.5}  # 1 of the 2 prompts, whatever the models answer
    assert json.loads((policy / RUN_COMPLETE_NAME).read_text())["pending"] == []

    edited = evaluate_with(answer_check="my_checks:one_km", max_prompts=1)  # the 1 km prompt alone
    assert edited.returncode == 0 and "Traceback" not in edited.stderr, edited.stderr[-3000:]
    assert "its evaluation settings (evaluation_config) changed since it was evaluated: evaluating it again." in (
        edited.stdout
    )
    report = json.loads((policy / "eval_results.json").read_text())
    assert accuracy(report) == {"SFT": 1.0, "DPR": 1.0}
    marked = f"<!-- trl_dpr evaluation -->\n\n{report['table_markdown']}\n\n<!-- /trl_dpr evaluation -->"
    assert f"## Evaluation\n\n{marked}\n" in (policy / "README.md").read_text()  # the card's too

    same = evaluate_with(answer_check="my_checks:one_km", max_prompts=1)
    assert same.returncode == 0, same.stderr[-3000:]
    assert "Already finished: runs/p/dpr_fixed holds this run" in same.stdout and "evaluating it" not in same.stdout
    assert report["table_markdown"] in same.stdout
    assert json.loads((policy / "eval_results.json").read_text()) == report  # not evaluated again
    assert (policy / "model.safetensors").read_bytes() == weights  # never trained again


@pytest.mark.slow  # a launched DPR process that imports torch and TRL: about half a minute
def test_ctrl_c_during_dpr_names_the_checkpoint_it_saved_and_how_to_resume(tiny_dpr_recipe, tmp_path):
    """Ctrl-C in a shell reaches the whole process group: the launcher and the training process."""
    import signal
    import time

    root, folder = tiny_dpr_recipe, "runs/p/dpr_interrupted"
    steps = ["--max_steps", "500", "--save_strategy", "steps", "--save_steps", "2", "--evaluation_config", ""]
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", CLI, "dpr", "--config", "dpr.yaml", "--output_dir", folder, *steps],
            cwd=root,
            env=ENV,
            stdout=out,
            stderr=err,
            start_new_session=True,  # a process group of its own, as a shell's job
        )
        try:
            deadline = time.monotonic() + 300
            while not (root / folder / "checkpoint-2").is_dir():
                assert process.poll() is None, (tmp_path / "err").read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint in time"
                time.sleep(0.05)
            os.killpg(process.pid, signal.SIGINT)
            assert process.wait(120) == 130
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    stderr = (tmp_path / "err").read_text()
    saved = max(
        (path for path in (root / folder).glob("checkpoint-*") if (path / "checkpoint_manifest.json").is_file()),
        key=lambda path: int(path.name.split("-")[1]),
    )
    assert not (root / folder / "model.safetensors").exists(), "the run ended before Ctrl-C"
    assert (
        f"Interrupted. Saved: {folder}: {folder}/{saved.name}. Resume with the same command and "
        "--resume_from_checkpoint true.\n" in stderr
    ), stderr[-3000:]
    assert "Nothing was saved" not in stderr and "Traceback" not in stderr, stderr[-6000:]
    assert not (root / folder / ".trl_dpr.lock.json").exists()  # the folder is free for that command


def newest_complete_checkpoint(folder: Path) -> str:
    """The newest checkpoint-N of `folder` with its manifest (written last: a complete save), read from the folder."""
    saved = [path for path in folder.glob("checkpoint-*") if (path / "checkpoint_manifest.json").is_file()]
    return max(saved, key=lambda path: int(path.name.split("-")[1])).name


@pytest.mark.slow  # a launched DPR run (one or two processes) that imports torch and TRL: about half a minute each
@pytest.mark.parametrize(
    "launch,signum,to_group",
    [
        (["--accelerate_config", "cpu"], "SIGTERM", False),  # a one-process launch: its launcher alone was killed
        (["--accelerate_config", "cpu_ddp"], "SIGTERM", False),  # a scheduler preempting the launcher
        (["--accelerate_config", "cpu_ddp"], "SIGINT", True),  # Ctrl-C in the shell
        (["--accelerate_config", "cpu_ddp", "--num_processes", "1"], "SIGTERM", True),  # `kill -TERM -PGID`
    ],
    ids=["1 process, launcher", "2 processes, launcher", "2 processes, Ctrl-C", "cpu_ddp 1 process, group"],
)
def test_a_signal_stops_every_launched_process_with_one_line_and_exit_code_128_plus_n(
    tiny_dpr_recipe, tmp_path, launch, signum, to_group
):
    """The field tester's preemptions: SIGTERM to a one-process launcher left its training process running alone to the
    end; with two processes a signal ended in torchrun's traceback (exit 1), rank 1 saying nothing was saved."""
    import contextlib
    import signal
    import time

    import psutil

    signum = getattr(signal, signum)
    root, folder = tiny_dpr_recipe, f"runs/p/dpr_{signum.name}_{'_'.join(launch[1:])}_{to_group}"
    steps = ["--max_steps", "500", "--save_strategy", "steps", "--save_steps", "2", "--evaluation_config", ""]
    command = [sys.executable, "-c", CLI, "dpr", "--config", "dpr.yaml", "--output_dir", folder, *steps, *launch]
    launched, still_running = [], []
    with open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(
            command, cwd=root, env=ENV, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 300
            while not (root / folder / "checkpoint-2").is_dir():
                assert process.poll() is None, (tmp_path / "err").read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint in time"
                time.sleep(0.05)
            launched = psutil.Process(process.pid).children(recursive=True)
            assert launched, "no training process"
            (os.killpg if to_group else os.kill)(process.pid, signum)
            assert process.wait(120) == 128 + signum, (tmp_path / "err").read_text()[-3000:]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            for child in launched:  # left behind by a failed run: not to slow the next test
                with contextlib.suppress(psutil.NoSuchProcess):
                    if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                        still_running.append(child.pid)
                        child.kill()
    assert not still_running, "a launched process outlived its launcher"
    stderr = (tmp_path / "err").read_text()
    assert not (root / folder / "model.safetensors").exists(), "the run ended before the signal"
    said = [line for line in stderr.splitlines() if "Interrupted" in line or "Nothing was saved" in line]
    # The line may follow the trainer's progress bar on its terminal line (tqdm ends it with a carriage return).
    interrupted = [line[line.find("Interrupted") :] if "Interrupted" in line else line for line in said]
    assert interrupted == [
        f"Interrupted. Saved: {folder}: {folder}/{newest_complete_checkpoint(root / folder)}. Resume with the same "
        "command and --resume_from_checkpoint true."
    ], stderr[-3000:]
    assert not [word for word in ("Traceback", "SignalException", "death signal", "closing signal") if word in stderr]
    assert not list((root / folder).glob(".trl_dpr.lock*"))  # the folder is free for that command


@pytest.mark.slow  # two launched DPR runs on two processes: about a minute
def test_resuming_a_run_with_other_arguments_or_processes_is_refused_in_one_line_before_a_step(
    tiny_dpr_recipe, tmp_path
):
    """The field tester resumed a 2-process run stopped at checkpoint-10 with another learning rate, on 1 process: it
    trained on silently (the global batch halved) and recorded the new arguments as the run's."""
    import signal
    import time

    root, folder = tiny_dpr_recipe, "runs/p/dpr_resumed"
    run = ["dpr", "--config", "dpr.yaml", "--output_dir", folder, "--evaluation_config", "", "--max_steps", "500"]
    run += ["--save_strategy", "steps", "--save_steps", "2", "--accelerate_config", "cpu_ddp"]
    with open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", CLI, *run],
            cwd=root,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 300
            while not (root / folder / "checkpoint-2").is_dir():
                assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "err").read_text()[-3000:]
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            assert process.wait(120) == 128 + signal.SIGTERM
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    checkpoints = {path: path.read_bytes() for path in (root / folder).rglob("*") if path.is_file()}
    newest = newest_complete_checkpoint(root / folder)
    other = ["--resume_from_checkpoint", "true", "--learning_rate", "5e-5", "--num_processes", "1"]
    resumed = run_launch([sys.executable, "-c", CLI, *run, *other], cwd=root, env=ENV, timeout=300)
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("error")]
    assert errors == [
        f"error (ValueError): Cannot resume from {folder}/{newest}: its run had other learning_rate, the number of "
        "processes (2, now 1); resumed, it would continue as neither run. Resume with the arguments it started with, "
        "or start over: --overwrite_output_dir true without --resume_from_checkpoint (or another --output_dir)."
    ], resumed.stderr[-3000:]
    assert "Traceback" not in resumed.stderr and "Resuming from" not in resumed.stdout
    after = {path: path.read_bytes() for path in (root / folder).rglob("*") if path.is_file()}
    assert after == checkpoints  # nothing trained, nothing written


@pytest.mark.slow  # two launched processes that import torch and TRL: about half a minute
def test_a_two_process_run_refusing_the_gguf_conversion_folder_ends_with_its_message_alone(tmp_path, smollm2_gguf):
    """Field trial C: the main process's refusal, then the other process's gloo traceback 36 s later."""
    notes = tmp_path / "runs" / "G" / "SmolLM2-135M-Instruct.Q4_1-hf" / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("x")
    args = ["sft", "--config", "smollm2-135m/sft/config_full.yaml", "--accelerate_config", "cpu_ddp"]
    args += ["--output_dir", "runs/G/sft", "--max_steps", "2", "--per_device_train_batch_size", "1"]
    args += ["--max_length", "64", "--num_train_samples", "16"]
    result = run_launch([sys.executable, "-c", CLI, *args], cwd=tmp_path, env=ENV, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "holds no gguf_source.json" in errors[0], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Connection closed" not in result.stderr, result.stderr[-3000:]
    assert notes.read_text() == "x" and sorted(p.name for p in notes.parent.iterdir()) == ["notes.txt"]
