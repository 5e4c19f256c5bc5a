"""The GPU tier (`make test-gpu`; `bash benchmarks/gpu_run.sh` on a bare GPU machine): what only CUDA can show.

Each test marked `gpu` is skipped without CUDA (tests/conftest.py) and left out of `make test`. Where the check is
cheap on CPU too, the same body runs there as a `cpu` variant in the ordinary suite, so its logic is tested on every
run and only the device differs on the GPU machine. Sized for ≤ 4 minutes on one GPU (docs/gpu_tests.md):

- the demo pipeline (SFT → DPR → evaluation) through `trl-dpr`, on CUDA, in fp32 and in bf16, checked by what a
  finished run leaves (its `cpu-fp32` variant, in the slow tier, proves the check);
- QLoRA (4-bit base + LoRA adapters, bitsandbytes): SFT → DPR through `trl-dpr`;
- the dense reward on CUDA against a float64 forward on the CPU;
- kill-and-resume of DPR on CUDA (tests/scripts/tiny_run.py --device cuda).

The memory plan against a measured peak is not here: the 8B stages of `benchmarks/gpu_run.sh` measure it at the
recipe's settings (goal: within ±10%), and tests/running/test_memory_plan.py pins what an H200 measured.
"""

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.conftest import demo_evaluation_yaml, run_launch
from tests.core.test_token_rewards import expected_rewards, make_batch
from trl_dpr import CheckpointRewardModel
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.running.recipe_checks import recipes_root

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    "HF_HUB_OFFLINE": "1",
    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def trl_dpr(*argv, cwd, timeout=300):
    """`trl-dpr ARGV` as a user runs it (a new interpreter, accelerate launch and all); the finished process."""
    result = run_launch([sys.executable, "-m", "trl_dpr.running.cli", *argv], timeout=timeout, cwd=cwd, env=ENV)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def demo_pipeline(folder: Path, sft_steps=20, dpr_steps=10, **changes) -> Path:
    """The demo's DPR recipe (SFT first, evaluation after), shortened and writing under `folder`; its path."""
    sft = {
        **yaml.safe_load((recipes_root() / "demo" / "sft.yaml").read_text()),
        "output_dir": str(folder / "sft"),
        "max_steps": sft_steps,
        **changes.pop("sft", {}),
    }
    (folder / "sft.yaml").write_text(yaml.safe_dump(sft))
    evaluation = demo_evaluation_yaml(folder / "evaluate.yaml", demo_num_prompts=32, max_new_tokens=32)
    dpr = {
        **yaml.safe_load((recipes_root() / "demo" / "dpr.yaml").read_text()),
        "sft_config": str(folder / "sft.yaml"),
        "model_name_or_path": str(folder / "sft"),
        "output_dir": str(folder / "dpr"),
        "max_steps": dpr_steps,
        "evaluation_config": evaluation,
        "max_completion_length": 32,
        **changes,
    }
    (folder / "dpr.yaml").write_text(yaml.safe_dump(dpr))
    return folder / "dpr.yaml"


QLORA = {
    "load_in_4bit": True,
    "use_bnb_nested_quant": True,
    "use_peft": True,
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_target_modules": ["all-linear"],
    "dtype": "bfloat16",
    "learning_rate": 2.0e-4,
}


@pytest.mark.parametrize("layout", ["full", "qlora"])
def test_the_gpu_tiers_recipes_pass_the_recipe_checks(tmp_path, layout):
    """On CPU, every run: the shortened recipes the GPU tests launch parse (their keys and values are valid), and the
    SFT stage of the pipeline gets the run's device and precision and the recipe's quantisation."""
    from trl_dpr.running.placement import RunPlacement
    from trl_dpr.running.stages import sft_stage_of_pipeline
    from trl_dpr.scripts.dpr import make_parser

    changes = {**QLORA, "sft": dict(QLORA), "evaluation_config": None} if layout == "qlora" else {}
    recipe = demo_pipeline(tmp_path, **changes)
    script_args, training_args, model_args, _ = make_parser().parse_args_and_config(["--config", str(recipe)])
    assert (training_args.max_steps, model_args.load_in_4bit) == (10, layout == "qlora")
    _, sft_training_args, sft_model_args = sft_stage_of_pipeline(script_args.sft_config, RunPlacement(True, "no"))
    assert (sft_training_args.output_dir, sft_training_args.max_steps) == (model_args.model_name_or_path, 20)
    assert sft_model_args.use_peft is (layout == "qlora") and sft_training_args.use_cpu


# ---- the demo pipeline on CUDA, fp32 and bf16: the reported `--use_cpu false` run ------------------------------------


def check_finished_dpr_run(folder: Path, console: str, shown: str) -> None:
    """What a finished `trl-dpr dpr` of `demo_pipeline(folder)` leaves (no trainer_state.json: the demo saves no
    checkpoint): a policy trained away from π_SFT with finite weights, a card saying where and in what precision it
    ran, the evaluation's table, and a finite final train_loss on the console."""
    trained, start = (
        load_file(str(folder / "dpr" / "model.safetensors")),
        load_file(str(folder / "sft" / "model.safetensors")),
    )
    assert trained.keys() == start.keys() and all(torch.isfinite(t).all() for t in trained.values())
    assert any(not torch.equal(trained[name], start[name]) for name in trained), "DPR left π_SFT's weights unchanged"
    device, precision = shown.split(", ")
    card = (folder / "dpr" / "README.md").read_text()
    assert f"on {'the CPU' if device == 'CPU' else 'CUDA'} in {precision} (weights in float32)" in card
    assert json.loads((folder / "dpr" / "eval_results.json").read_text())["table_markdown"]
    dpr_stage = console.split("Dense-Path REINFORCE from ", 1)[1].split("Stage 3/3")[0]
    (final,) = [line for line in dpr_stage.splitlines() if line.startswith("{'train_runtime'")]
    assert _finite(float(final.split("'train_loss': ")[1].split(",")[0])), final


@pytest.mark.parametrize(
    "device,precision",
    [
        pytest.param("cpu", "fp32", marks=pytest.mark.slow, id="cpu-fp32"),
        pytest.param("cuda", "fp32", marks=pytest.mark.gpu, id="fp32"),
        pytest.param("cuda", "bf16", marks=pytest.mark.gpu, id="bf16"),
    ],
)
def test_the_demo_pipeline_runs_on_cuda_through_trl_dpr(tmp_path, device, precision):
    """The CPU demo recipe with `--use_cpu false` (and `--bf16 true`): SFT, DPR and the evaluation all on the GPU, in
    the precision the recipe says; the console says which ran, and the run leaves what a finished run leaves. Its
    `cpu-fp32` variant runs the same checks on the CPU in `make test`."""
    recipe = demo_pipeline(tmp_path, sft_steps=4, dpr_steps=4)
    flags = ["--use_cpu", str(device == "cpu").lower(), *(["--bf16", "true"] if precision == "bf16" else [])]
    result = trl_dpr("dpr", "--config", str(recipe), *flags, cwd=tmp_path)
    shown = f"{'CPU' if device == 'cpu' else 'GPU'}, {'bf16 mixed precision' if precision == 'bf16' else 'fp32'}"
    assert f"Dense-Path REINFORCE from {tmp_path / 'sft'} ({shown}, dtype float32)" in result.stdout
    if device == "cuda":
        assert "runs as the rest of this run, on " + shown in result.stdout  # the SFT stage's YAML said CPU
    check_finished_dpr_run(tmp_path, result.stdout, shown)


def _finite(value) -> bool:
    return value == value and abs(value) != float("inf")


# ---- QLoRA: a 4-bit base with adapters, SFT → DPR -------------------------------------------------------------------


@pytest.mark.gpu
def test_qlora_sft_then_dpr_on_cuda(tmp_path):
    """bitsandbytes' 4-bit base with LoRA adapters, SFT then DPR on the shared base (π_SFT, π_ref and the policy as
    adapters of one 4-bit model), bf16 compute."""
    recipe = demo_pipeline(tmp_path, **QLORA, sft=dict(QLORA), evaluation_config=None)
    trl_dpr("dpr", "--config", str(recipe), "--use_cpu", "false", "--bf16", "true", cwd=tmp_path)
    adapter = json.loads((tmp_path / "dpr" / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and (tmp_path / "sft" / "dpr_reference" / "adapter_config.json").is_file()


# ---- the dense reward on the device against a float64 CPU forward ----------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_the_dense_reward_on_the_device_is_a_float64_cpu_forward(tokenizer, device, dtype):
    """The scorer's token rewards (log π_SFT − log π_ref, padded batch, chunked head) with both models on `device` in
    `dtype`, against an unpadded float64 forward of the same weights on the CPU. bf16 rounds the logits to ~3
    significant digits: its tolerance is that rounding, far below the error of a shifted or misaligned token."""
    sft = build_tiny_causal_lm(tokenizer, seed=0).eval().to(dtype)
    ref = build_tiny_causal_lm(tokenizer, seed=1).eval().to(dtype)
    prompts, completions, batch = make_batch(tokenizer)
    expected = expected_rewards(
        copy.deepcopy(sft).double(),
        copy.deepcopy(ref).double(),
        prompts,
        completions,
        tokenizer.eos_token_id,
        use_baseline=True,
        eliminate_value=True,
    )
    scorer = CheckpointRewardModel(sft.to(device), ref.to(device))
    rewards = scorer.token_rewards(*(t.to(device) for t in batch))
    assert rewards.device.type == device and rewards.dtype == torch.float32
    tolerance = 1e-4 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(rewards.double().cpu(), expected, atol=tolerance, rtol=0)
    assert torch.all(rewards[batch[3].to(device) == 0] == 0.0)


# ---- kill-and-resume on CUDA -----------------------------------------------------------------------------------------


def start_tiny_run(*argv) -> subprocess.Popen:
    """tests/scripts/tiny_run.py ARGV in a new interpreter (a fork of a process that used CUDA cannot use it)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "scripts" / "tiny_run.py"), *map(str, argv)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finished(process: subprocess.Popen) -> None:
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]


@pytest.mark.gpu
def test_a_killed_dpr_run_on_cuda_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    started = []  # every tiny_run: their own sessions, so a stopped tier (SIGINT) must end them here

    def tiny_run(*argv) -> subprocess.Popen:
        started.append(start_tiny_run(*argv))
        return started[-1]

    try:
        _kill_and_resume(tmp_path, tiny_run)
    finally:
        for process in started:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _kill_and_resume(tmp_path, tiny_run) -> None:
    sft = tmp_path / "sft"
    finished(tiny_run("sft", sft, "--device", "cuda"))
    # The uninterrupted run and the one to kill run side by side: tiny models, one GPU, half the tier's wait.
    uninterrupted = tiny_run("dpr", tmp_path / "uninterrupted", "--sft-dir", sft, "--device", "cuda")
    killed = tmp_path / "killed"
    run = tiny_run("dpr", killed, "--sft-dir", sft, "--device", "cuda", "--step-seconds", "1")
    deadline = time.time() + 240
    while not (killed / "checkpoint-2").is_dir():
        assert run.poll() is None and time.time() < deadline, "the run ended or stalled before checkpoint-2"
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    assert not (killed / "model.safetensors").exists()  # it stopped mid-run
    finished(tiny_run("dpr", killed, "--sft-dir", sft, "--device", "cuda", "--resume"))
    finished(uninterrupted)
    resumed, expected = (
        load_file(str(killed / "model.safetensors")),
        load_file(str(tmp_path / "uninterrupted" / "model.safetensors")),
    )
    assert resumed.keys() == expected.keys()
    for name in resumed:
        # CUDA kernels (atomic adds in the embedding's backward) are not bitwise reproducible; a resume that lost the
        # optimizer state, the RNG or the data order moves the weights by far more than their rounding.
        torch.testing.assert_close(resumed[name], expected[name], rtol=1e-3, atol=1e-5, msg=name)
