"""recipes/spin.py and recipes/gsil.py: strict parsing, the papers' values in every backbone config, the same
demonstrations as SFT and DPR, and the embedded default end to end."""

import os
import sys
from pathlib import Path

import pytest
import yaml
from trl import ModelConfig

from trl_dpr.lfd import GSILConfig, SelfPlayScriptArguments, SPINConfig
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.recipe_parser import RecipeParser

from .conftest import demo_evaluation_yaml, run_launch

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
BACKBONES = ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "gemma-3-4b"]
CONFIGS = {"spin": SPINConfig, "gsil": GSILConfig}
PROCESSES = {"qlora": 1, "full": 8}
GLOBAL_BATCH = {"spin": 64, "gsil": 128}  # uclaml/SPIN configs/config.yaml; tengxiao1/GSIL scripts/finetune.sh


def parse(method, path, *extra):
    parser = RecipeParser((SelfPlayScriptArguments, CONFIGS[method], ModelConfig, MemoryTarget))
    return parser.parse_args_and_config(["--config", str(path), "--use_cpu", "true", *extra])


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("layout", ["qlora", "full"])
@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_backbone_config_parses_and_carries_the_papers_values(method, backbone, layout):
    script, args, model, target = parse(method, RECIPES / backbone / method / f"config_{layout}.yaml")
    assert model.model_name_or_path == f"runs/{backbone}/sft-{layout}"
    assert args.output_dir == f"runs/{backbone}/{method}-{layout}"
    assert args.per_device_train_batch_size * PROCESSES[layout] * args.gradient_accumulation_steps == GLOBAL_BATCH[method]
    assert target.num_gpus == PROCESSES[layout] and target.gpu_memory_gib == 79
    assert args.learning_rate == (5e-6 if layout == "qlora" else 5e-7)  # LoRA at 10x, as the SFT and DPR recipes
    assert (args.beta, args.optim.value, args.lr_scheduler_type.value, args.warmup_steps) == (0.1, "rmsprop", "linear", 0.1)
    assert (args.max_new_tokens, args.max_length) == (256, 1024)
    defaults = CONFIGS[method](output_dir="x", use_cpu=True, bf16=False)
    for key in ("num_iterations", "generation_temperature", "generation_top_p", "previous_iteration_pairs", "num_train_epochs"):
        assert getattr(args, key) == getattr(defaults, key), key  # the recipe runs the paper's defaults
    assert (model.load_in_4bit and model.use_peft) == (layout == "qlora")


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_backbone_configs_use_the_sft_and_dpr_demonstrations(method):
    for backbone in BACKBONES:
        for layout in ("qlora", "full"):
            sft = yaml.safe_load((RECIPES / backbone / "sft" / f"config_{layout}.yaml").read_text())
            lfd = yaml.safe_load((RECIPES / backbone / method / f"config_{layout}.yaml").read_text())
            for key in ("dataset_name", "dataset_format", "num_train_samples", "seed"):
                assert sft[key] == lfd[key], (backbone, layout, key)
            assert lfd["model_name_or_path"] == sft["output_dir"]


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_demo_config_starts_from_the_demo_sft_on_its_demonstrations(method):
    script, args, model, _ = parse(method, RECIPES / "demo" / f"{method}.yaml")
    sft = yaml.safe_load((RECIPES / "demo" / "sft.yaml").read_text())
    dpr = yaml.safe_load((RECIPES / "demo" / "dpr.yaml").read_text())
    assert model.model_name_or_path == sft["output_dir"] == dpr["model_name_or_path"]
    assert script.sft_config == dpr["sft_config"] and script.dataset_name == sft["dataset_name"] == dpr["dataset_name"]
    assert script.evaluation_config == "recipes/evaluate/demo.yaml" and args.seed == sft["seed"]


def test_an_unknown_key_in_a_self_play_recipe_is_an_error_that_names_it(tmp_path):
    path = tmp_path / "spin.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path), "num_iteration": 2, "loss_type": "sigmoid"}))
    with pytest.raises(ValueError, match=r"num_iteration \(did you mean num_iterations"):
        parse("spin", path)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_the_recipe_runs_self_play_then_the_evaluation_against_sft(method, tmp_path, tokenizer):
    from .conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml", demo_num_prompts=4, samples_per_prompt=1)
    command = [
        sys.executable, str(RECIPES / f"{method}.py"), "--config", str(RECIPES / "demo" / f"{method}.yaml"),
        "--model_name_or_path", str(sft), "--sft_config", "", "--evaluation_config", evaluation,
        "--output_dir", str(tmp_path / method), "--num_train_samples", "6", "--num_iterations", "1",
        "--max_new_tokens", "6", "--per_device_train_batch_size", "3", "--generation_batch_size", "3",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = run_launch(command, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    name = method.upper()
    assert f"| {name} |" in result.stdout and "accuracy % (95% CI)" in result.stdout
    assert (tmp_path / method / "model.safetensors").is_file()
    assert (tmp_path / method / "generations" / "iteration-0.jsonl").read_text().count("\n") == 6


@pytest.mark.slow
def test_spin_under_zero3_on_two_processes_answers_with_each_full_iterate(tmp_path, tokenizer):
    """ZeRO-3 loads π_t partitioned: its answers must still be those of the whole model (gathered for generation),
    and the second iteration must get a fresh DeepSpeed accelerator. Two CPU processes (gloo)."""
    pytest.importorskip("deepspeed")
    import json

    from trl_dpr.data import load_demonstrations
    from trl_dpr.lfd.self_play import answer_prompts, load_policy, prompts_and_demonstrations

    from .conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    out = tmp_path / "spin"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        str(RECIPES / "accelerate_configs" / "zero3_cpu.yaml"),
        str(ROOT / "tests" / "scripts" / "without_shm_op.py"), str(RECIPES / "spin.py"),  # no g++ build of a CPU op
        "--config", str(RECIPES / "demo" / "spin.yaml"), "--model_name_or_path", str(sft), "--sft_config", "",
        "--evaluation_config", "", "--output_dir", str(out), "--num_train_samples", "6", "--num_iterations", "2",
        "--max_new_tokens", "6", "--per_device_train_batch_size", "2", "--generation_batch_size", "2",
        "--use_cpu", "false", "--ddp_backend", "gloo",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions")}
    result = run_launch(command, cwd=ROOT, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    # no CPU op was built or loaded (each takes a lock there that a killed build leaves behind, hanging later runs)
    assert not (tmp_path / "torch_extensions").exists()

    # One process, the same batches (2 prompts, seeded by their first index): the answers each iterate gives.
    prompts = prompts_and_demonstrations(load_demonstrations("trl_dpr/embedded-demo", num_samples=6, seed=0), "demo")[0]
    for t, model_dir in enumerate([sft, out / "iteration-0"]):
        model = load_policy(str(model_dir), {"dtype": "float32"})
        again = answer_prompts(model, tokenizer, prompts, tmp_path / f"again-{t}.jsonl", temperature=0.8, top_p=0.95,
                               max_new_tokens=6, batch_size=2, seed=100_003 * t, show_progress=False)
        cached = [json.loads(line) for line in (out / "generations" / f"iteration-{t}.jsonl").read_text().splitlines()]
        assert {r["prompt_index"]: r["completion_ids"] for r in cached} == {a["prompt_index"]: a["completion_ids"] for a in again}
