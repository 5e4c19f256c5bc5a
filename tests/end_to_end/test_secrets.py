"""No token or key set in the environment ends up in any file a run writes: the stages (SFT → DPR → evaluation)
through `accelerate launch`, reporting to W&B (offline), TensorBoard and trackio, with every place a process may write
(home, caches, temporary files, tracker folders) inside the run's folder, and every file there scanned. The run is
tests/conftest.py's `recipe_run`, which tests/end_to_end/test_recipes_from_wheel.py checks for what the recipes write."""

import pytest

from trl_dpr.running.push import check_push, files_to_push
from trl_dpr.running.secret_scan import scan_for_secrets, secrets_from_environment

from ..conftest import FAKE_SECRETS


@pytest.mark.slow
def test_no_file_written_by_a_tracked_sft_then_dpr_run_holds_a_secret(recipe_run, tmp_path):
    work, env = recipe_run.work, recipe_run.env  # trl-dpr sft → trl-dpr dpr → the evaluation again, FAKE_SECRETS set

    # The run wrote what it should, where the scan looks: both models and their checkpoints (optimizer, RNG and trainer
    # states), the DPR model card (written at each checkpoint), the evaluation, all three trackers.
    written = [p for p in recipe_run.root.rglob("*") if p.is_file()]
    assert (work / "sft" / "dpr_reference" / "model.safetensors").is_file()
    assert (work / "sft" / "checkpoint-4" / "optimizer.pt").is_file() and (work / "dpr" / "checkpoint-2").is_dir()
    assert (work / "dpr" / "eval_results.json").is_file() and (work / "dpr" / "README.md").is_file()
    assert list(work.glob("wandb/offline-run-*/run-*.wandb")) and list(work.glob("*/runs/*/events.out.tfevents.*"))
    assert (work / "trackio" / "trl-dpr-secrets.db").is_file()
    assert len(written) > 40

    secrets = {**FAKE_SECRETS, **secrets_from_environment(env)}
    assert secrets_from_environment(env).keys() >= FAKE_SECRETS.keys()
    assert scan_for_secrets(written, secrets) == []
    # The scan would have seen them: the same values planted in a file are found.
    control = tmp_path / "control.txt"
    control.write_text(" ".join(FAKE_SECRETS.values()))
    assert sorted(f.secret_name for f in scan_for_secrets([control], FAKE_SECRETS)) == sorted(FAKE_SECRETS)
    # And what a push of either output would upload is among the clean files.
    for stage in ("sft", "dpr"):
        assert scan_for_secrets([work / stage / name for name in files_to_push(work / stage)], secrets) == []
        # and the push check (key shapes, compressed and base64 copies, .env files, links) passes a real run's output
        assert check_push(work / stage, secrets=secrets, portable=False) == files_to_push(work / stage)
