"""The README's "From Python" example runs as written: offline, on the embedded default, from an empty folder; and
every command of its ```bash blocks is one a test or CI runs."""

import json
import math
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## From Python: SFTTrainer → CheckpointRewardModel → DensePathTrainer"


def readme_python_example() -> str:
    """The first ```python block after the section heading, exactly as a reader copies it."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    block = re.search(r"```python\n(.*?)```", text[text.index(SECTION) :], flags=re.S)
    assert block, f"README.md's section {SECTION!r} has no ```python block"
    return block.group(1)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The block executed once in a fresh working directory; returns (its folder, its variables)."""
    folder = tmp_path_factory.mktemp("readme")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        variables = {"__name__": "__main__"}
        exec(compile(readme_python_example(), "README.md (From Python)", "exec"), variables)
    return folder, variables


def test_sft_output_has_its_reference_checkpoint_and_manifest(ran):
    folder, variables = ran
    sft = folder / "runs" / "sft"
    assert (sft / "model.safetensors").is_file() and (sft / "dpr_reference" / "model.safetensors").is_file()
    manifest = json.loads((sft / "dpr_reference.json").read_text())
    assert manifest["fraction"] == 0.5
    assert manifest["step"] == variables["sft"].state.max_steps // 2  # π_ref at ⌊α·N⌋


def test_the_sft_output_records_that_it_trained_on_chat_messages(ran):
    """SFTTrainer from Python writes no record; the block's `mark_sft_complete` does, so a string prompt reaches this
    π_SFT (trained on chat messages) as a user turn, as after `trl-dpr sft`, not as an SFT "from elsewhere"."""
    from trl_dpr.reference_manifest import sft_output_problem, sft_trained_on_messages

    folder, variables = ran
    assert variables["demonstrations"][0]["prompt"][0]["role"] == "user"  # the embedded task's rows are messages
    assert sft_trained_on_messages(folder / "runs" / "sft") is True
    assert sft_output_problem(folder / "runs" / "sft") is None


def test_reward_model_scores_text_token_by_token(ran):
    _, variables = ran
    scored = variables["scored"]
    assert len(scored) == 1 and len(scored[0]["tokens"]) == len(scored[0]["rewards"]) > 1
    assert all(math.isfinite(r) for r in scored[0]["rewards"])
    assert any(r != 0 for r in scored[0]["rewards"])  # π_SFT and π_ref differ: the reward is not identically 0


def test_dpr_trains_its_steps_and_saves_the_policy(ran):
    folder, variables = ran
    trainer = variables["trainer"]
    assert trainer.state.global_step == trainer.args.max_steps > 0
    assert any("dense_reward/token_mean" in entry for entry in trainer.state.log_history)
    assert (folder / "runs" / "dpr" / "model.safetensors").is_file()


# Each command of the README's ```bash blocks, and where it is run. A command added to the README without a place that
# runs it fails here; an installation line names why no test runs it as written.
README_COMMANDS = {
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": "not run by a test (it needs PyTorch's index); `make test` installs the same torch==2.13.0 with uv",
    "pip install .": "tests/conftest.py's installed_wheel (pip wheel + pip install of this checkout)",
    'pip install ".[plots]"': "not run by a test (network); tests/running/test_cli_process.py checks the message that names it",
    "trl-dpr recipes": "tests/running/test_cli_process.py::test_help_and_recipes_load_no_torch",
    "make demo": ".ci/run (then experiments.readme_tables --check demo)",
    "make test": ".ci/run",
    "trl-dpr preview --config demo.yaml": "tests/analysis/test_preview.py::test_the_recipe_runs_from_the_command_line",
    "trl-dpr preview --config demo.yaml --policies DPR=runs/demo/dpr": "tests/analysis/test_preview.py::test_a_trained_policy_is_placed_with_its_own_quality_and_kl (in-process)",
    "trl-dpr evaluate --config my_eval.yaml": "tests/evaluation/test_your_own_task.py (the README's files, a process)",
    "trl-dpr preview --config my_preview.yaml": "tests/evaluation/test_your_own_task.py (the README's files, a process)",
}


def test_every_command_in_the_readme_is_one_a_test_or_ci_runs():
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        commands += [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands and not set(commands) - set(README_COMMANDS), sorted(set(commands) - set(README_COMMANDS))
