"""`trl-dpr` as a user's shell runs it: a real process each time, its exit code, its stderr (no traceback), and what it
imports before it knows it needs it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
CLI = "from trl_dpr.cli import main; main()"  # what the `trl-dpr` entry point runs


def trl_dpr(*args, prelude: str = "", cwd=None, timeout=120, **kwargs) -> subprocess.CompletedProcess:
    """`trl-dpr ARGS` in a fresh interpreter; `prelude` runs first (to simulate a missing module)."""
    return subprocess.run([sys.executable, "-c", prelude + CLI, *args], cwd=cwd or ROOT, env=ENV, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


# Simulates a base install without the `plots` extra: `import matplotlib` raises ModuleNotFoundError as it would if the
# package were not installed (a None entry in sys.modules is Python's documented way to block an import), and
# importlib.util.find_spec answers None, as for an absent package.
WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None\n"


def test_importing_the_cli_imports_neither_torch_nor_transformers_nor_trl():
    loaded = subprocess.run([sys.executable, "-c", "import sys, trl_dpr.cli; print(sorted(sys.modules))"], env=ENV,
                            capture_output=True, text=True, timeout=60)
    modules = set(eval(loaded.stdout))
    assert not modules & {"torch", "transformers", "trl", "accelerate", "peft", "datasets"}


def test_help_and_recipes_load_no_torch():
    for args in (["--help"], ["recipes"]):
        loaded = subprocess.run([sys.executable, "-c", CLI + "; import sys; print('torch' in sys.modules, "
                                 "'transformers' in sys.modules, file=sys.stderr)", *args], env=ENV,
                                capture_output=True, text=True, timeout=60)
        assert loaded.returncode == 0 and loaded.stderr.strip().splitlines()[-1] == "False False", loaded.stderr


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_the_package_still_exports_its_public_names_on_first_use():
    names = subprocess.run([sys.executable, "-c", "import sys, trl_dpr; assert 'torch' not in sys.modules; "
                            "print(trl_dpr.DensePathConfig.__module__, trl_dpr.whiten.__module__)"], env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert names.stdout.split() == ["trl_dpr.config", "trl_dpr.algorithm"], names.stderr[-2000:]


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    read, write = os.pipe()
    os.close(read)  # `trl-dpr recipes | head -0`: the reader is gone before the first line is written
    try:
        listing = subprocess.run([sys.executable, "-c", CLI, "recipes"], cwd=ROOT, env=ENV, stdout=write,
                                 stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert listing.returncode == 1 and listing.stderr == ""


def test_heatmap_png_without_matplotlib_exits_2_naming_the_extra_before_loading_a_model(tmp_path):
    result = trl_dpr("heatmap", "--sft", str(tmp_path / "no_model"), "--prompt", "2+2?", "--response", "4",
                     prelude=WITHOUT_MATPLOTLIB)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert 'pip install "trl_dpr[plots]"' in result.stderr and "--formats html" in result.stderr


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_preview_without_matplotlib_exits_2_naming_the_extra(tmp_path):
    result = trl_dpr("preview", "--config", "demo.yaml", "--model_name_or_path", str(tmp_path / "no_sft"),
                     "--output_dir", str(tmp_path / "out"), prelude=WITHOUT_MATPLOTLIB)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "plot: false" in result.stderr and "trl_dpr[plots]" in result.stderr


@pytest.mark.slow  # a process that imports torch: seconds
def test_a_missing_base_dependency_is_still_a_traceback():
    # Only the optional extras are install advice; anything else missing is a broken environment, shown as it is.
    result = trl_dpr("heatmap", "--sft", "x", "--prompt", "a", "--response", "b", "--formats", "html",
                     prelude="import sys; sys.modules['safetensors'] = None\n")
    assert result.returncode == 1 and "Traceback" in result.stderr


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


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_memory_plans_a_shipped_recipe_without_the_hub_from_outside_the_repository(tmp_path):
    result = trl_dpr("memory", "--config", "llama-3.1-8b/dpr/config_qlora.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "**total per GPU**" in result.stdout


@pytest.mark.slow  # a process that imports torch and TRL: seconds
def test_memory_for_an_unknown_backbone_offline_says_how_to_plan_it(tmp_path):
    recipe = tmp_path / "mine.yaml"
    lines = (ROOT / "recipes" / "qwen2.5-7b" / "dpr" / "config_qlora.yaml").read_text().splitlines()
    recipe.write_text("\n".join(["# someone/NoSuchModel-1B: my recipe", *lines[1:]]) + "\n")
    result = trl_dpr("memory", "--config", str(recipe), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "HF_HUB_OFFLINE=1" in result.stderr and "--model-config FOLDER" in result.stderr


def test_trls_launcher_launches_the_shipped_recipe_script():
    """`_launch_training` hands TRL's `launch_training_script` the absolute path of the shipped script; TRL joins it to
    its own trl/scripts folder, where an absolute path stands for itself. If TRL changed that, this fails."""
    from trl.cli.accelerate_launcher import launch_training_script

    from trl_dpr.recipe_parser import recipes_root

    launched = []
    script = recipes_root() / "dpr.py"
    launch_training_script(str(script), ["--num_processes", "1"], ["--config", "demo/dpr.yaml"],
                           launch_command_fn=launched.append)
    assert launched[0].training_script == str(script)
    assert launched[0].training_script_args == ["--config", "demo/dpr.yaml"] and launched[0].num_processes == 1


@pytest.mark.slow  # imports torch: seconds
def test_the_package_imports_without_fcntl():
    # Simulates Windows, which has no fcntl: the output-folder lock is filelock's, which picks msvcrt there.
    result = subprocess.run([sys.executable, "-c", "import sys; sys.modules['fcntl'] = None\n"
                             "import trl_dpr.checkpointing, trl_dpr.trainer"], env=ENV, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_vllm_extra_is_trls_own_within_the_pinned_trl():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    trl_pin = next(d for d in project["dependencies"] if d.startswith("trl"))
    assert project["optional-dependencies"]["vllm"] == [trl_pin.replace("trl", "trl[vllm]", 1)]
