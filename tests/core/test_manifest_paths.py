"""A manifest names files inside its own folder only (issue 42, finding 4): `dpr_reference.json`'s `path` (a manifest
from the Hub could point π_ref at any local folder), `sft_complete.json`'s and a checkpoint manifest's file lists."""

import json

import pytest

from trl_dpr.reference_manifest import MANIFEST_NAME, SFT_COMPLETE_NAME, resolve_reference, sft_output_problem
from trl_dpr.running.checkpointing import CHECKPOINT_MANIFEST, checkpoint_problem

MANIFEST = {"fraction": 0.5, "step": 2, "total_steps": 4, "is_adapter": False}


@pytest.fixture
def outside(tmp_path):
    """A real model folder beside the SFT output: what a manifest pointing out of its folder would load as π_ref."""
    folder = tmp_path / "someone-elses-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_reference_manifest_pointing_out_of_its_folder_is_refused(tmp_path, outside, where):
    sft = tmp_path / "sft"
    sft.mkdir()
    path = "../someone-elses-model" if where == "relative" else str(outside)
    (sft / MANIFEST_NAME).write_text(json.dumps({**MANIFEST, "path": path}))
    with pytest.raises(ValueError, match="outside the SFT model's folder") as refused:
        resolve_reference(str(sft))
    assert "\n" not in str(refused.value) and "ref_model_name_or_path=" in str(refused.value)


def test_a_reference_folder_that_is_a_link_out_of_the_sft_folder_is_refused(tmp_path, outside):
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "dpr_reference").symlink_to(outside, target_is_directory=True)
    (sft / MANIFEST_NAME).write_text(json.dumps({**MANIFEST, "path": "dpr_reference"}))
    with pytest.raises(ValueError, match="a link out of the SFT model's folder"):
        resolve_reference(str(sft))


def test_a_reference_folder_inside_is_found(tmp_path):
    sft = tmp_path / "sft"
    (sft / "dpr_reference").mkdir(parents=True)
    (sft / MANIFEST_NAME).write_text(json.dumps({**MANIFEST, "path": "dpr_reference"}))
    assert resolve_reference(str(sft))[1] == str(sft / "dpr_reference")


def test_an_sft_completion_record_listing_a_file_outside_its_folder_is_not_a_finished_run(tmp_path, outside):
    sft = tmp_path / "sft"
    sft.mkdir()
    size = (outside / "config.json").stat().st_size  # right size: only the path can give it away
    (sft / SFT_COMPLETE_NAME).write_text(json.dumps({"files": {"../someone-elses-model/config.json": size}}))
    assert (
        sft_output_problem(sft) == "it lists '../someone-elses-model/config.json', outside the folder (a manifest "
        "names only files inside it)"
    )


def test_a_checkpoint_manifest_listing_a_file_outside_its_folder_is_not_complete(tmp_path, outside):
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text("{}")
    files = {"trainer_state.json": 2, str(outside / "config.json"): 2}
    (checkpoint / CHECKPOINT_MANIFEST).write_text(json.dumps({"files": files}))
    assert "outside the folder" in checkpoint_problem(checkpoint)
