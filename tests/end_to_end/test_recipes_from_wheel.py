"""The recipes: strict YAML parsing, the paper's values in every backbone config, and the stages from a built wheel
installed outside the repository, through a real `accelerate launch`."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from datasets import Dataset
from trl import ModelConfig, SFTConfig

from trl_dpr import DensePathConfig
from trl_dpr.data import load_demonstrations, openorca_to_conversation, prompts_for_rl
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.pipeline import DPRScriptArguments, SFTScriptArguments
from trl_dpr.running.recipe_parser import RecipeParser

from ..conftest import run_launch

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
BACKBONES = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "mistral-7b-v0.1": "mistralai/Mistral-7B-v0.1",
    "gemma-3-4b": "google/gemma-3-4b-pt",
}
# GPUs each layout is launched on (the accelerate config named in the YAML's header).
PROCESSES = {"qlora": 1, "full": 8}
# LoRA runs at 10x the paper's full-fine-tuning learning rate (documented in the YAMLs).
LEARNING_RATE = {("sft", "full"): 5e-6, ("sft", "qlora"): 5e-5, ("dpr", "full"): 5e-7, ("dpr", "qlora"): 5e-6}


def sft_parser():
    return RecipeParser((SFTScriptArguments, SFTConfig, ModelConfig, MemoryTarget))


def dpr_parser():
    return RecipeParser((DPRScriptArguments, DensePathConfig, ModelConfig, MemoryTarget))


def write_yaml(tmp_path, values):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def test_unknown_yaml_key_is_an_error_that_names_it(tmp_path):
    config = write_yaml(tmp_path, {"output_dir": str(tmp_path), "torch_dtype": "bfloat16", "learnin_rate": 1e-5})
    with pytest.raises(ValueError) as error:
        sft_parser().parse_args_and_config(["--config", config, "--use_cpu", "true"])
    message = str(error.value)
    assert "torch_dtype (renamed: use `dtype`)" in message
    assert "learnin_rate (did you mean learning_rate" in message


def test_command_line_overrides_the_yaml(tmp_path):
    config = write_yaml(tmp_path, {"output_dir": str(tmp_path), "learning_rate": 1e-5, "kl_coef": 0.1})
    _, args, _, _ = dpr_parser().parse_args_and_config(["--config", config, "--kl_coef", "0.3", "--use_cpu", "true"])
    assert (args.learning_rate, args.kl_coef) == (1e-5, 0.3)


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("layout", ["qlora", "full"])
def test_sft_config_parses_and_carries_the_papers_values(backbone, layout):
    path = RECIPES / backbone / "sft" / f"config_{layout}.yaml"
    script, args, model, _ = sft_parser().parse_args_and_config(["--config", str(path), "--use_cpu", "true"])
    assert model.model_name_or_path == BACKBONES[backbone]
    assert (script.dataset_name, script.num_train_samples, script.reference_fraction) == (
        "Open-Orca/OpenOrca",
        100_000,
        0.5,
    )
    assert args.per_device_train_batch_size * PROCESSES[layout] * args.gradient_accumulation_steps == 256
    assert args.learning_rate == LEARNING_RATE[("sft", layout)]
    assert args.warmup_steps == 0.03 and args.max_length == 2048
    assert (model.load_in_4bit and model.use_peft) == (layout == "qlora")


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("layout", ["qlora", "full"])
def test_dpr_config_parses_and_carries_the_papers_values(backbone, layout):
    path = RECIPES / backbone / "dpr" / f"config_{layout}.yaml"
    script, args, model, _ = dpr_parser().parse_args_and_config(["--config", str(path), "--use_cpu", "true"])
    assert model.model_name_or_path == f"runs/{backbone}/sft-{layout}"
    assert args.per_device_train_batch_size * PROCESSES[layout] * args.gradient_accumulation_steps == 128
    assert args.generation_batch_size == 1024 and args.num_generations == 1
    assert args.learning_rate == LEARNING_RATE[("dpr", layout)]
    assert (args.kl_coef, args.temperature, args.gamma, args.epsilon, args.warmup_steps) == (1e-5, 1.0, 1.0, 0.2, 0.03)
    assert (args.max_prompt_length, args.max_completion_length) == (1024, 1024)
    assert args.dense_reward is None and args.reward_granularity == "token"
    assert (script.dataset_name, script.num_train_samples) == ("Open-Orca/OpenOrca", 100_000)


def test_sft_and_dpr_configs_sample_the_same_prompts():
    for backbone in BACKBONES:
        for layout in ("qlora", "full"):
            sft = yaml.safe_load((RECIPES / backbone / "sft" / f"config_{layout}.yaml").read_text())
            dpr = yaml.safe_load((RECIPES / backbone / "dpr" / f"config_{layout}.yaml").read_text())
            for key in ("dataset_name", "dataset_format", "num_train_samples", "seed"):
                assert sft[key] == dpr[key], (backbone, layout, key)
            assert dpr["model_name_or_path"] == sft["output_dir"]


def test_openorca_rows_become_conversations():
    row = {"id": "x", "system_prompt": "", "question": "Name a colour.", "response": "Blue."}
    assert openorca_to_conversation(row) == {
        "prompt": [{"role": "user", "content": "Name a colour."}],
        "completion": [{"role": "assistant", "content": "Blue."}],
    }


def test_a_local_openorca_jsonl_loads_as_demonstrations_and_prompts(tmp_path):
    path = tmp_path / "orca.jsonl"
    rows = [{"id": str(i), "system_prompt": "Be brief.", "question": f"q{i}", "response": f"a{i}"} for i in range(10)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    first = load_demonstrations(str(path), num_samples=4, seed=3)
    again = load_demonstrations(str(path), num_samples=4, seed=3)
    assert first["prompt"] == again["prompt"]  # same seed, same prompts (SFT and DPR)
    assert first[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert set(prompts_for_rl(first, "orca").column_names) >= {"prompt"}


def test_datasets_without_demonstrations_or_prompts_are_rejected(tmp_path):
    path = tmp_path / "text.jsonl"
    path.write_text(json.dumps({"text": "just text"}))
    with pytest.raises(ValueError, match="`messages` column"):
        load_demonstrations(str(path))
    with pytest.raises(ValueError, match="no prompts"):
        prompts_for_rl(Dataset.from_list([{"text": "x"}]), "text-only")


@pytest.mark.slow
def test_sft_then_dpr_recipes_through_accelerate_launch(recipe_run):
    """`trl-dpr sft` then `trl-dpr dpr` (with its evaluation) as real launched processes from the installed wheel, on
    the embedded tiny model (the run of tests/conftest.py's `recipe_run`, which tests/end_to_end/test_secrets.py scans)."""
    sft_dir, dpr_dir = recipe_run.work / "sft", recipe_run.work / "dpr"
    assert json.loads((sft_dir / "dpr_reference.json").read_text())["step"] == 2
    assert "Stage 2/2: Evaluation: DPR vs SFT" in recipe_run.dpr_stdout
    results = json.loads((dpr_dir / "eval_results.json").read_text())
    (pairwise,) = results["pairwise"]
    assert pairwise["win_rate"]["n"] == 6 and 0.0 <= pairwise["win_rate"]["win_rate"] <= 1.0
    assert [a["method"] for a in results["accuracy"]] == ["SFT", "DPR"]
    assert (dpr_dir / "model.safetensors").is_file()
    # the run's evaluation lands beside the run (runs/x/dpr → runs/x/eval/dpr), not in the YAML's output_dir
    assert (recipe_run.work / "eval" / "dpr" / "results.json").is_file() and not (
        recipe_run.root / "yaml_output_dir"
    ).exists()

    # One evaluation path: `trl-dpr evaluate`'s main with the same YAML, into a fresh folder (no cached answers), gives
    # the same numbers as the evaluation `trl-dpr dpr` ran.
    repeated = json.loads((recipe_run.work / "eval_again" / "results.json").read_text())
    assert repeated["pairwise"][0]["win_rate"] == pairwise["win_rate"]
    assert repeated["accuracy"] == results["accuracy"]


@pytest.mark.slow
def test_the_recipes_write_model_cards_that_name_the_base_and_carry_the_evaluation(recipe_run):
    """`trl-dpr sft` and `trl-dpr dpr` each leave a card in their output folder; the DPR one is written again after the
    evaluation, so it holds its table, and it names the model the SFT started from, not the SFT folder."""
    sft_dir, dpr_dir = recipe_run.work / "sft", recipe_run.work / "dpr"
    sft_card, dpr_card = (sft_dir / "README.md").read_text(), (dpr_dir / "README.md").read_text()
    assert json.loads((sft_dir / "sft_complete.json").read_text())["base_model"] == "trl_dpr/embedded-tiny-llama"
    assert "fine-tuned version of `trl_dpr/embedded-tiny-llama`" in sft_card and "dpr_reference/" in sft_card
    assert "fine-tuned version of `trl_dpr/embedded-tiny-llama`" in dpr_card
    table = json.loads((dpr_dir / "eval_results.json").read_text())["table_markdown"]
    assert table in dpr_card and dpr_card.index("## Evaluation") < dpr_card.index("## Citations")
    assert f'model="{dpr_dir}"' in dpr_card  # not pushed: the quick start loads the output folder


@pytest.mark.slow
def test_a_built_wheel_runs_the_stages_outside_the_repository(installed_wheel, recipe_run, first_use_launch, tmp_path):
    """The wheel holds the package and its recipes, not the repository's experiments or tests; installed by pip into a
    folder of its own, `trl-dpr` runs from elsewhere on it: `trl-dpr recipes` lists the shipped ones, and `trl-dpr sft`
    then `trl-dpr dpr` with its evaluation ran from it through `accelerate launch` (tests/conftest.py's `recipe_run`,
    checked here for what a user sees and in tests/end_to_end/test_recipes_from_wheel.py for what it wrote).

    A mistake found inside the launched recipe ends as its message alone. It is made as a first `trl-dpr dpr` of the
    shipped demo recipe on a CPU machine would: no `accelerate config` was run, OMP_NUM_THREADS unset, no
    --accelerate_config. The `trl-dpr` process exits with the recipe's code and adds no traceback of the launcher, and
    accelerate warned of no value it had to choose itself (it did, for --num_processes and, under the cpu config,
    --num_cpu_threads_per_process, before trl_dpr passed them)."""
    names = zipfile.ZipFile(installed_wheel.wheel).namelist()
    assert "trl_dpr/recipes/demo/dpr.yaml" in names and "trl_dpr/recipes/qwen2.5-7b/dpr/config_qlora.yaml" in names
    assert "trl_dpr/py.typed" in names and not any(n.startswith(("experiments/", "tests/")) for n in names)
    assert "trl_dpr/recipes/model_configs/llama-3.1-8b/config.json" in names  # `trl-dpr memory` offline
    assert "trl_dpr/scripts/dpr.py" in names and "trl_dpr/running/cli.py" in names
    assert not any(n.startswith("trl_dpr/recipes/") and n.endswith(".py") for n in names)  # the YAMLs, not the entries

    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(installed_wheel.site), "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-c",
        "from trl_dpr.running.cli import main; main()",
    ]  # what the trl-dpr entry point runs
    where = subprocess.run([*command, "recipes"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0 and "demo/dpr.yaml" in where.stdout, where.stderr[-2000:]
    located = subprocess.run(
        [sys.executable, "-c", "import trl_dpr; print(trl_dpr.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert located.stdout.strip().splitlines()[-1].startswith(str(installed_wheel.site))  # the wheel, not the clone
    assert recipe_run.env["PYTHONPATH"] == str(installed_wheel.site) and "Traceback" not in recipe_run.dpr_stdout
    assert "| DPR |" in recipe_run.dpr_stdout  # the evaluation's table, printed by the launched DPR
    assert (recipe_run.work / "dpr" / "model.safetensors").is_file()

    bad = first_use_launch.result
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "no_sft' does not exist" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "accelerate launch` and had defaults used instead" not in bad.stderr, bad.stderr[-2000:]
    assert "was set to" not in bad.stderr, bad.stderr[-2000:]


@pytest.fixture(scope="module")
def first_use_launch(installed_wheel, tmp_path_factory):
    """A first `trl-dpr dpr` of the shipped demo recipe from the installed wheel, as on a CPU machine where no
    `accelerate config` was run and OMP_NUM_THREADS is unset, in a folder that holds the user's `my_rewards.py`, named
    by the recipe key with its kwargs given on the command line; its SFT model path does not exist, so the launched
    recipe stops with exit code 2 once the arguments (and the reward) are built. Returns `result` and `tmp`."""
    from types import SimpleNamespace

    tmp = tmp_path_factory.mktemp("first_use")
    work = tmp / "work"
    work.mkdir()
    (work / "my_rewards.py").write_text(
        "class ClipOne:\n    model_names = ('sft', 'ref')\n\n    def __init__(self, clip=1.0):\n        self.clip = clip\n\n"
        "    def __call__(self, scored):\n        r = scored.logps['sft'] - scored.logps['ref']\n"
        "        return r.clamp(-self.clip, self.clip) * scored.completion_mask\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(installed_wheel.site),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp / "hf_home"),
    }  # accelerate's default config lives under it: none there
    env.pop("OMP_NUM_THREADS", None)
    command = [sys.executable, "-c", "from trl_dpr.running.cli import main; main()"]  # the trl-dpr entry point's code
    result = run_launch(
        [
            *command,
            "dpr",
            "--config",
            "demo/dpr.yaml",
            "--model_name_or_path",
            str(tmp / "no_sft"),
            "--sft_config",
            "",
            "--output_dir",
            str(tmp / "runs" / "x"),
            "--dense_reward",
            "my_rewards:ClipOne",
            "--dense_reward_kwargs",
            "clip=1.0",
        ],
        cwd=work,
        env=env,
        timeout=300,
    )
    return SimpleNamespace(result=result, tmp=tmp)


@pytest.mark.slow
def test_a_launched_run_imports_the_users_reward_from_the_folder_it_runs_in_with_kwargs_from_the_command_line(
    first_use_launch,
):
    # The launched script's sys.path starts at trl_dpr/scripts, not the user's folder: the reward (and its kwargs, built
    # with it while the recipe is parsed) must resolve there before the run reaches its missing SFT model.
    stderr = first_use_launch.result.stderr
    assert "cannot import" not in stderr and "expected a mapping" not in stderr, stderr[-2000:]
    assert "no_sft' does not exist" in stderr, stderr[-2000:]


@pytest.mark.slow
def test_a_launched_run_that_fails_leaves_no_empty_folder_it_created(first_use_launch):
    assert first_use_launch.result.returncode == 2
    assert not (first_use_launch.tmp / "runs").exists()  # runs/x/ was created, claimed, then the run failed


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_dpr_qlora_lora_keys_describe_the_sft_adapter_they_continue(backbone):
    """The DPR policy continues the SFT adapter: the DPR recipe's lora_* keys (read by the memory plan) must be its."""
    keys = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
    sft = yaml.safe_load((RECIPES / backbone / "sft" / "config_qlora.yaml").read_text())
    dpr = yaml.safe_load((RECIPES / backbone / "dpr" / "config_qlora.yaml").read_text())
    assert {k: dpr.get(k) for k in keys} == {k: sft.get(k) for k in keys}


def test_lora_keys_that_differ_from_the_sft_adapter_are_refused_before_loading(tmp_path):
    from trl import ModelConfig

    from trl_dpr.running.pipeline import check_adapter_settings

    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"r": 64, "lora_alpha": 128, "lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"]})
    )
    check_adapter_settings(
        str(tmp_path),
        ModelConfig(use_peft=True, lora_r=64, lora_alpha=128, lora_dropout=0.05, lora_target_modules="all-linear"),
    )  # agrees: fine
    check_adapter_settings(str(tmp_path), ModelConfig(use_peft=False, lora_r=8))  # no LoRA asked: fine
    with pytest.raises(ValueError, match=r"lora_r: 16 in the recipe, 64 in the adapter.*lora_target_modules"):
        check_adapter_settings(
            str(tmp_path),
            ModelConfig(use_peft=True, lora_r=16, lora_alpha=128, lora_dropout=0.05, lora_target_modules=["k_proj"]),
        )


def test_the_texts_a_pip_user_reads_name_trl_dpr_commands_not_the_clones_scripts():
    """`python recipes/<stage>.py` runs only in a clone; the recipes' docstrings and YAML comments (shipped in the
    wheel), the package's messages and the docs name `trl-dpr <stage>` (a clone's route, `accelerate launch
    recipes/dpr.py ...`, may stay where it says so)."""
    files = [
        *(ROOT / "trl_dpr").rglob("*.py"),
        *RECIPES.rglob("*.py"),
        *RECIPES.rglob("*.yaml"),
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "experiments").rglob("*.py"),
        ROOT / "Makefile",
    ]
    clone_only = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "python recipes/" in line and "in a clone" not in line
    ]
    assert not clone_only, "\n".join(clone_only)


def test_the_memory_plan_of_a_shipped_recipe_reads_the_shipped_backbone_config_offline():
    """recipes/README.md's first `trl-dpr memory` line is planned from recipes/model_configs/, offline (the tests run
    with HF_HUB_OFFLINE=1, conftest.py), and the README's comment says so rather than "from the Hub"."""
    from trl_dpr.running.memory import plan_recipe, recipe_model_config

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    readme = (RECIPES / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("trl-dpr memory --config llama-3.1-8b/"))
    assert "model_configs" in line and "offline" in line and "Hub" not in line, line
    recipe = str(RECIPES / line.split("--config ")[1].split()[0])
    shipped = json.loads((RECIPES / "model_configs" / "llama-3.1-8b" / "config.json").read_text())
    assert recipe_model_config(recipe).num_hidden_layers == shipped["num_hidden_layers"]
    assert plan_recipe(recipe).total_gib > 0
