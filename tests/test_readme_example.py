"""The README's "From Python" example runs as written: offline, on the embedded default, from an empty folder."""

import json
import math
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## From Python: SFTTrainer → CheckpointRewardModel → DensePathTrainer"


def readme_python_example() -> str:
    """The first ```python block after the section heading, exactly as a reader copies it."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    block = re.search(r"```python\n(.*?)```", text[text.index(SECTION):], flags=re.S)
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
