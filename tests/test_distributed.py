"""Two CPU processes (gloo) through a real `accelerate launch`: the same algorithm as one process."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from trl_dpr.algorithm import whiten

from .conftest import run_launch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_two_processes_whiten_globally_and_only_the_main_process_writes(tmp_path):
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "recipes" / "accelerate_configs" / "cpu_ddp.yaml"),
        str(ROOT / "tests" / "scripts" / "distributed_check.py"), str(tmp_path),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = run_launch(command, cwd=ROOT, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]

    # whiten() on two row slices, one per process == whiten() of the whole tensor in one process
    whitened = json.loads((tmp_path / "whiten.json").read_text())
    assert torch.allclose(torch.tensor(whitened["distributed"]), torch.tensor(whitened["single"]), atol=1e-6)

    # inside DensePathTrainer: the advantages each process used are its rows of the whole batch, whitened once
    ranks = [torch.load(tmp_path / f"advantages_rank{r}.pt") for r in (0, 1)]
    returns = torch.cat([_pad(r["returns"], ranks) for r in ranks])
    mask = torch.cat([_pad(r["mask"], ranks) for r in ranks])
    used = torch.cat([_pad(r["advantages"], ranks) for r in ranks])
    assert torch.allclose(used, whiten(returns, mask, distributed=False), atol=1e-5)
    assert not torch.allclose(ranks[0]["advantages"], whiten(ranks[0]["returns"], ranks[0]["mask"], distributed=False))

    writers = (tmp_path / "writers.log").read_text().split("\n")
    assert sorted(w for w in writers if w) == ["manifest 0", "model_card 0"]
    assert json.loads((tmp_path / "sft" / "dpr_reference.json").read_text())["step"] == 2


def _pad(tensor, ranks):
    """Right-pad a (B, T) tensor to the widest T of both processes (their completions differ in length)."""
    width = max(r["mask"].shape[1] for r in ranks)
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))

