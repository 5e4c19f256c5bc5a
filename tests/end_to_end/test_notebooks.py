"""The notebooks execute on the embedded offline default, the way CI runs them (papermill's `parameters` convention,
executed with nbclient on a kernel that is this interpreter, one kernel for both), and are committed without outputs."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient

from trl_dpr.running.recipe_parser import find_recipe_file

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NAMES = ("quickstart", "reward_inspection")
KERNEL = "trl-dpr-test"


def load(name: str):
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def inject_parameters(notebook, **parameters):
    """papermill's convention: a cell tagged `injected-parameters` right after the one tagged `parameters`."""
    tagged = [i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1, f"expected exactly one cell tagged 'parameters', found {len(tagged)}"
    source = "\n".join(f"{name} = {value!r}" for name, value in parameters.items())
    injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(tagged[0] + 1, injected)
    return notebook


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel for the notebooks of this file: a kernelspec that runs this interpreter (the project's .venv), found
    first on JUPYTER_PATH, started in an offline, single-threaded environment. A kernel per notebook would import torch
    and TRL again (~10 s); `execute` empties the kernel's namespace before each notebook, so a notebook sees only what
    its own cells define (the modules others imported stay loaded, as any kernel's own imports do)."""
    from jupyter_client import KernelManager

    root = tmp_path_factory.mktemp("kernel")
    spec = root / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "trl_dpr tests", "language": "python"})
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TQDM_DISABLE": "1",
        "PYTHONPATH": str(ROOT),
        "JUPYTER_PATH": str(root / "jupyter"),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", env["JUPYTER_PATH"])
        manager = KernelManager(kernel_name=KERNEL)
        manager.start_kernel(cwd=str(root), env=env)
    try:
        yield manager
    finally:
        manager.shutdown_kernel(now=True)


# The tests check what each cell shows, not how well the tiny model learns: SFT of 8 steps instead of the notebooks' 40.
SFT_STEPS = 8


def execute(name: str, kernel, work: Path):
    """The notebook with papermill's parameters injected, run on `kernel` in the folder `work`, after a first cell that
    empties the kernel's namespace (`%reset -f`) and enters `work`, defining no name."""
    work.mkdir()
    notebook = inject_parameters(load(name), OFFLINE=True, SFT_STEPS=SFT_STEPS)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(f"%reset -f\n__import__('os').chdir({str(work)!r})"))
    NotebookClient(notebook, timeout=240, km=kernel).execute()
    return notebook


def outputs(notebook, mime: str) -> str:
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and mime == "text/plain":
                texts.append(output.text)
            elif mime in output.get("data", {}):
                texts.append(output.data[mime])
    return "\n".join(texts)


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_no_outputs_and_one_parameters_cell(name):
    notebook = load(name)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    parameters = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    assert (
        len(parameters) == 1 and "OFFLINE = True" in parameters[0].source and "SFT_STEPS = 40" in parameters[0].source
    )


@pytest.mark.parametrize("name", NAMES)
def test_every_cell_is_valid_python_including_the_online_branches(name):
    for cell in load(name).cells:
        if cell.cell_type == "code":
            compile(TransformerManager().transform_cell(cell.source), f"{name}.ipynb", "exec")


class RecordingShell:
    """Stands in for IPython where the install cell runs: records the magics instead of running pip."""

    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line):
        self.magics.append((name, line))


def run_install_cell(name, installed: bool, package_source):
    (cell,) = [c for c in load(name).cells if "%pip install" in c.source]
    shell = RecordingShell()
    find_spec = importlib.util.find_spec
    namespace = {"get_ipython": lambda: shell, "PACKAGE_SOURCE": package_source}
    try:
        importlib.util.find_spec = lambda module, *a: (
            find_spec(module, *a) if installed or module != "trl_dpr" else None
        )
        exec(TransformerManager().transform_cell(cell.source), namespace)
    finally:
        importlib.util.find_spec = find_spec
    return shell.magics


@pytest.mark.parametrize("name", NAMES)
def test_the_install_cell_installs_only_where_trl_dpr_is_missing_and_from_one_named_source(name):
    assert run_install_cell(name, installed=True, package_source=None) == []  # CI, a clone: nothing to do
    source = "trl_dpr[quantization,tracking] @ git+https://example.org/trl_dpr"
    assert run_install_cell(name, installed=False, package_source=source) == [
        ("pip", 'install --quiet "$PACKAGE_SOURCE"')
    ]
    with pytest.raises(RuntimeError, match="Set PACKAGE_SOURCE in the parameters cell"):
        run_install_cell(name, installed=False, package_source=None)
    text = json.dumps(load(name))
    assert "YOUR-ORG" not in text and "colab.research.google.com" not in text  # no badge without a real URL
    parameters = next(c for c in load(name).cells if "parameters" in c.metadata.get("tags", []))
    assert "PACKAGE_SOURCE = None" in parameters.source


def test_the_quickstart_gpu_preset_is_the_shipped_t4_recipes():
    parameters = next(c for c in load("quickstart").cells if "parameters" in c.metadata.get("tags", []))
    values = {}
    exec(parameters.source, values)
    for key in ("GPU_SFT_RECIPE", "GPU_DPR_RECIPE"):
        recipe = yaml.safe_load(Path(find_recipe_file(values[key])).read_text())
        assert recipe["gpu_memory_gib"] == 15 and recipe["load_in_4bit"] and recipe["fp16"]  # a T4: 16 GB, no bf16


@pytest.mark.slow
def test_quickstart_runs_offline_from_sft_to_a_loadable_push(kernel, tmp_path):
    notebook = execute("quickstart", kernel, tmp_path / "work")
    html = outputs(notebook, "text/html")
    assert html.count('class="pair"') == 4 + 2  # last rollouts, then the expert's and DPR's answers
    assert "data-reward=" in html
    text = outputs(notebook, "text/plain")
    assert "The pushed SFT output loads as the same reward model: True" in text
    assert "| `kl_coef` |" in text and "## Evaluation" in text
    run = tmp_path / "work" / "runs" / "quickstart"
    assert (run / "sft" / "dpr_reference.json").is_file() and (run / "as-pushed" / "sft" / "dpr_reference").is_dir()
    assert not (run / "as-pushed" / "sft" / "training_args.bin").exists()
    assert sorted(p.name for p in (run / "dpr" / "heatmaps").iterdir()) == ["step-00002.html", "step-00004.html"]
    preview = json.loads((run / "preview" / "preview.json").read_text())  # the preview cell ran on π_SFT's samples
    assert (preview["num_prompts"], preview["samples_per_prompt"]) == (8, 4) and "DPR preview: quality = exact" in text
    assert "image/png" in {
        kind for cell in notebook.cells for out in cell.get("outputs", []) for kind in out.get("data", {})
    }


@pytest.mark.slow
def test_reward_inspection_compares_a_correct_and_a_corrupted_wages_answer(kernel, tmp_path):
    notebook = execute("reward_inspection", kernel, tmp_path / "work")
    html = outputs(notebook, "text/html")
    assert html.count('class="pair"') == 2 and "Corrupted answer to:" in html and "dollars per hour" in html
    text = outputs(notebook, "text/plain")
    assert f"π_ref: step {SFT_STEPS // 2} of {SFT_STEPS}" in text  # the injected parameter reached the SFT
    assert "  correct: Σ r̂ =" in text and "corrupted: Σ r̂ =" in text
    assert "r̂ = " in text.split("corrupted: Σ r̂")[-1]  # the first differing token's reward in both answers
