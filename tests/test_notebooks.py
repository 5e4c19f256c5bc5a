"""The notebooks execute on the embedded offline default, the way CI runs them (papermill's `parameters` convention,
executed with nbclient on a kernel that is this interpreter), and are committed without outputs."""

import json
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A kernelspec that runs this interpreter (the project's .venv), found first on JUPYTER_PATH, and an offline,
    single-threaded environment for the kernel it starts."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "trl_dpr tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    for name, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                        "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                        "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}.items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "work"
    work.mkdir()
    return work


def execute(name: str, work: Path):
    notebook = inject_parameters(load(name), OFFLINE=True)
    NotebookClient(notebook, timeout=240, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}).execute()
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
    assert len(parameters) == 1 and "OFFLINE = True" in parameters[0].source


@pytest.mark.parametrize("name", NAMES)
def test_every_cell_is_valid_python_including_the_online_branches(name):
    for cell in load(name).cells:
        if cell.cell_type == "code":
            compile(TransformerManager().transform_cell(cell.source), f"{name}.ipynb", "exec")


@pytest.mark.parametrize("name", NAMES)
def test_open_in_colab_badge_points_to_the_notebook(name):
    first = load(name).cells[0]
    assert first.cell_type == "markdown"
    assert f"colab.research.google.com/github/YOUR-ORG/trl_dpr/blob/main/notebooks/{name}.ipynb" in first.source
    install = "\n".join(cell.source for cell in load(name).cells if "%pip install" in cell.source)
    assert "if not OFFLINE:" in install  # never installs anything offline


@pytest.mark.slow
def test_quickstart_runs_offline_from_sft_to_a_loadable_push(kernel_env):
    notebook = execute("quickstart", kernel_env)
    html = outputs(notebook, "text/html")
    assert html.count('class="pair"') == 4 + 2  # last rollouts, then the expert's and DPR's answers
    assert "data-reward=" in html
    text = outputs(notebook, "text/plain")
    assert "The pushed SFT output loads as the same reward model: True" in text
    assert "| `kl_coef` |" in text and "## Evaluation" in text
    run = kernel_env / "runs" / "quickstart"
    assert (run / "sft" / "dpr_reference.json").is_file() and (run / "as-pushed" / "sft" / "dpr_reference").is_dir()
    assert not (run / "as-pushed" / "sft" / "training_args.bin").exists()
    assert sorted(p.name for p in (run / "dpr" / "heatmaps").iterdir()) == ["step-00002.html", "step-00004.html"]


@pytest.mark.slow
def test_reward_inspection_compares_a_correct_and_a_corrupted_wages_answer(kernel_env):
    notebook = execute("reward_inspection", kernel_env)
    html = outputs(notebook, "text/html")
    assert html.count('class="pair"') == 2 and "Corrupted answer to:" in html and "dollars per hour" in html
    text = outputs(notebook, "text/plain")
    assert "π_ref: step 20 of 40" in text
    assert "  correct: Σ r̂ =" in text and "corrupted: Σ r̂ =" in text
    assert "r̂ = " in text.split("corrupted: Σ r̂")[-1]  # the first differing token's reward in both answers
