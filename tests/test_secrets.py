"""No token or key set in the environment ends up in any file a run writes: the recipes (SFT → DPR → evaluation)
through `accelerate launch`, reporting to W&B (offline), TensorBoard and trackio, with every place a process may write
(home, caches, temporary files, tracker folders) inside the test's folder, and every file there scanned."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trl_dpr.running.hub import files_to_push, scan_for_secrets, secrets_from_environment

from .conftest import demo_evaluation_yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
FAKE_SECRETS = {
    "HF_TOKEN": "hf_FAKEhubTOKENforTESTS0123456789",
    "HUGGING_FACE_HUB_TOKEN": "hf_FAKElegacyHUBtokenFORtests987",
    "WANDB_API_KEY": "FAKEwandbKEYforTESTS0123456789abcdef0123",  # 40 characters, as W&B keys are
    "OPENAI_API_KEY": "sk-FAKEjudgeKEYforTESTS0123456789",
}


@pytest.mark.slow
def test_no_file_written_by_a_tracked_sft_then_dpr_run_holds_a_secret(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (tmp_path / "tmp").mkdir()
    common = {"dtype": "float32", "dataset_name": "trl_dpr/embedded-demo", "num_train_samples": 32, "bf16": False,
              "use_cpu": True, "save_strategy": "steps", "save_steps": 2, "gradient_checkpointing": False, "seed": 0,
              "report_to": ["wandb", "tensorboard", "trackio"], "project": "trl-dpr-secrets"}
    sft_config, dpr_config = tmp_path / "sft.yaml", tmp_path / "dpr.yaml"
    sft_config.write_text(yaml.safe_dump({**common, "model_name_or_path": "trl_dpr/embedded-tiny-llama",
                                          "output_dir": str(work / "sft"), "max_steps": 4,
                                          "per_device_train_batch_size": 8, "learning_rate": 1e-3, "max_length": 128,
                                          "run_name": "sft"}))
    dpr_config.write_text(yaml.safe_dump({**common, "model_name_or_path": str(work / "sft"), "sft_config": str(sft_config),
                                          "output_dir": str(work / "dpr"), "max_steps": 2,
                                          "per_device_train_batch_size": 4, "max_completion_length": 8,
                                          "learning_rate": 1e-4, "logging_steps": 1, "log_completions": True,
                                          "evaluation_config": demo_evaluation_yaml(tmp_path / "eval.yaml", demo_num_prompts=4),
                                          "run_name": "dpr"}))
    env = {**os.environ, **FAKE_SECRETS, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_CONFIG_HOME": str(home / ".config"), "HF_HOME": str(home / "hf"), "TMPDIR": str(tmp_path / "tmp"),
           "WANDB_MODE": "offline", "WANDB_DIR": str(work), "WANDB_SILENT": "true",
           "TRACKIO_DIR": str(work / "trackio"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
              str(RECIPES / "accelerate_configs" / "cpu.yaml"), str(RECIPES / "dpr.py"), "--config", str(dpr_config)]
    run = subprocess.run(launch, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]

    # The run wrote what it should, where the scan looks: both models and their checkpoints (optimizer, RNG and trainer
    # states), the DPR model card (written at each checkpoint), the evaluation, all three trackers.
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
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
