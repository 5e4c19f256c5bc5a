"""recipes/spin.py and recipes/gsil.py: strict parsing, the papers' values in every backbone config, the same
demonstrations as SFT and DPR, and the embedded default end to end."""

import importlib
import json
from pathlib import Path

import pytest
import yaml
from trl import ModelConfig

from trl_dpr.lfd import GSILConfig, SelfPlayScriptArguments, SPINConfig
from trl_dpr.running.memory import MemoryTarget
from trl_dpr.running.recipe_parser import RecipeParser

from ..conftest import demo_evaluation_yaml, run_forked

ROOT = Path(__file__).resolve().parents[2]
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
    assert (
        args.per_device_train_batch_size * PROCESSES[layout] * args.gradient_accumulation_steps == GLOBAL_BATCH[method]
    )
    assert target.num_gpus == PROCESSES[layout] and target.gpu_memory_gib == 79
    assert args.learning_rate == (5e-6 if layout == "qlora" else 5e-7)  # LoRA at 10x, as the SFT and DPR recipes
    assert (args.beta, args.optim.value, args.lr_scheduler_type.value, args.warmup_steps) == (
        0.1,
        "rmsprop",
        "linear",
        0.1,
    )
    assert (args.max_new_tokens, args.max_length) == (256, 1024)
    defaults = CONFIGS[method](output_dir="x", use_cpu=True, bf16=False)
    for key in (
        "num_iterations",
        "generation_temperature",
        "generation_top_p",
        "previous_iteration_pairs",
        "num_train_epochs",
    ):
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


def run_demo_recipe(method, tmp_path, tokenizer, *extra, before=None):
    """recipes/<method>.py's `main` on the demo recipe, shrunk (one iteration, 6 prompts, a 4-prompt evaluation), from a
    tiny SFT output into tmp_path/<method>, in a forked process as the script runs it (`extra` arguments added,
    `before()` run in it first); returns the finished process."""
    from trl_dpr.running.cli import run

    from ..conftest import save_sft_output

    sft = tmp_path / "sft"
    if not sft.exists():
        save_sft_output(sft, tokenizer)
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml", demo_num_prompts=4, samples_per_prompt=1)
    recipe = importlib.import_module(f"trl_dpr.scripts.{method}")  # what recipes/<method>.py runs, as it runs it
    argv = [
        "--config",
        str(RECIPES / "demo" / f"{method}.yaml"),
        "--model_name_or_path",
        str(sft),
        "--sft_config",
        "",
        "--evaluation_config",
        evaluation,
        "--output_dir",
        str(tmp_path / method),
        "--num_train_samples",
        "6",
        "--num_iterations",
        "1",
        "--max_new_tokens",
        "6",
        "--per_device_train_batch_size",
        "3",
        "--generation_batch_size",
        "3",
        *extra,
    ]
    return run_forked(lambda args: run(recipe.main, args), argv, folder=tmp_path, cwd=ROOT, before=before)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_the_recipe_runs_self_play_then_the_evaluation_against_sft(method, tmp_path, tokenizer):
    result = run_demo_recipe(method, tmp_path, tokenizer)
    assert result.returncode == 0, result.stderr[-3000:]
    name = method.upper()
    assert f"| {name} |" in result.stdout and "accuracy % (95% CI)" in result.stdout
    assert (tmp_path / method / "model.safetensors").is_file()
    assert (tmp_path / method / "generations" / "iteration-0.jsonl").read_text().count("\n") == 6


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_the_same_recipe_again_on_its_finished_run_exits_0_with_its_evaluation_table(method, tmp_path, tokenizer):
    first = run_demo_recipe(method, tmp_path, tokenizer)
    assert first.returncode == 0, first.stderr[-3000:]
    table = json.loads((tmp_path / method / "eval_results.json").read_text())["table_markdown"]
    assert table in first.stdout and f"| {method.upper()} |" in table  # the evaluation it printed, kept for a re-run
    weights = (tmp_path / method / "model.safetensors").read_bytes()
    again = run_demo_recipe(method, tmp_path, tokenizer)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert f"Already finished: {tmp_path / method} holds this run" in again.stdout and table in again.stdout
    assert "Stage" not in again.stdout  # nothing trained or evaluated again
    assert (tmp_path / method / "model.safetensors").read_bytes() == weights


@pytest.mark.slow  # two forked `trl-dpr spin` processes, one tiny iteration trained: about a minute
def test_a_previous_iterations_answers_lacking_a_row_that_trains_are_refused_in_one_line(tmp_path, tokenizer):
    """`previous_iteration_pairs` with iteration 0 run by an earlier process: its cached answers (the real
    generations/iteration-0.jsonl, one row deleted) must hold every row that trains now; one missing is refused with
    what to do, before iteration 1 generates or trains, its error one line; iteration 0 is left as it was."""
    from trl_dpr.running.cli import main

    from ..conftest import save_sft_output

    sft, output = save_sft_output(tmp_path / "sft", tokenizer), tmp_path / "spin"
    spin = ["spin", "--config", str(RECIPES / "demo" / "spin.yaml"), "--model_name_or_path", str(sft)]
    spin += ["--sft_config", "", "--evaluation_config", "", "--output_dir", str(output), "--num_train_samples", "6"]
    spin += ["--max_new_tokens", "6", "--per_device_train_batch_size", "3", "--generation_batch_size", "3"]
    spin += ["--previous_iteration_pairs", "true"]
    first = run_forked(main, [*spin, "--num_iterations", "1"], folder=tmp_path, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-3000:]
    cache = output / "generations" / "iteration-0.jsonl"
    rows = cache.read_text().splitlines(keepends=True)
    assert len(rows) == 6  # every row trains: none past max_length
    cache.write_text("".join(rows[:2] + rows[3:]))
    dropped = json.loads(rows[2])["prompt_index"]
    weights = (output / "iteration-0" / "model.safetensors").read_bytes()

    again = run_forked(main, [*spin, "--num_iterations", "2"], folder=tmp_path, cwd=ROOT)
    assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr[-3000:]
    (line,) = [line for line in again.stderr.splitlines() if line.startswith("error")]
    assert f"Iteration 0's answers ({cache}) lack 1 of the prompts that train now (rows [{dropped}])" in line
    assert line.endswith("Start the self-play again with overwrite_output_dir: true.")
    assert not (output / "generations" / "iteration-1.jsonl").exists()  # refused before π_1 answered
    assert not (output / "iteration-1" / "model.safetensors").exists()
    assert (output / "iteration-0" / "model.safetensors").read_bytes() == weights


# ---- the run's folder: a rerun refused, started over, resumed -----------------------------------------------------


def plant_finished_self_play(root: Path, settings: dict) -> None:
    """A finished self-play run as `trl-dpr spin` leaves it in `root`: its settings (self_play.json), an iteration, its
    answers, π_T, the record of being finished and the evaluation table; beside them a file of the user's."""
    from trl_dpr.running.checkpointing import mark_run_finished

    (root / "iteration-0").mkdir(parents=True)
    (root / "iteration-0" / "self_play_iteration.json").write_text(json.dumps({"iteration": 0}))
    (root / "iteration-0" / "model.safetensors").write_bytes(b"pi_1")
    (root / "generations").mkdir()
    (root / "generations" / "iteration-0.jsonl").write_text("{}\n")
    (root / "self_play.json").write_text(json.dumps({"settings": settings, "iterations": [{"iteration": 0}]}))
    (root / "model.safetensors").write_bytes(b"pi_T")
    mark_run_finished(root, "the finished run's fingerprint")
    (root / "eval_results.json").write_text(json.dumps({"table_markdown": "| SPIN | 42.0 |"}))
    (root / "notes.txt").write_text("the user's own file")


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def demo_settings(method, tmp_path, *extra) -> dict:
    """The settings `trl-dpr <method>` records for `run_demo_recipe`'s arguments (plus `extra`)."""
    from trl_dpr.lfd.self_play import _run_settings, recipe_parser

    argv = ["--config", str(RECIPES / "demo" / f"{method}.yaml"), "--model_name_or_path", str(tmp_path / "sft")]
    argv += ["--num_train_samples", "6", "--num_iterations", "1", "--max_new_tokens", "6"]
    argv += ["--per_device_train_batch_size", "3", "--generation_batch_size", "3", "--use_cpu", "true", *extra]
    script, args, model, _ = recipe_parser(CONFIGS[method]).parse_args_and_config(argv)
    return _run_settings(script, args, model)


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_a_rerun_with_other_settings_is_refused_and_keeps_the_finished_runs_record_and_table(
    method, tmp_path, tokenizer
):
    """Before the fix the claim deleted run_complete.json and eval_results.json before the settings were compared."""
    from ..conftest import save_sft_output

    save_sft_output(tmp_path / "sft", tokenizer)
    root = tmp_path / method
    plant_finished_self_play(root, {**demo_settings(method, tmp_path), "learning_rate": 1.0})
    before = folder_bytes(root)
    result = run_demo_recipe(method, tmp_path, tokenizer)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "holds a self-play run with other settings (learning_rate: 1.0 → " in result.stderr
    assert folder_bytes(root) == before


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_overwrite_deletes_the_earlier_run_only_once_every_check_passed(method, tmp_path, tokenizer):
    """--overwrite_output_dir true: a mistake found after the claim (the demonstrations too long for max_length) leaves
    the earlier run byte for byte; a run killed after the checks (π_0 failing to load) leaves none of it, π_T included,
    and the user's file. Before the fix the claim deleted the record and table at once, and π_T was never deleted."""
    from ..conftest import save_sft_output

    save_sft_output(tmp_path / "sft", tokenizer)
    root = tmp_path / method
    plant_finished_self_play(root, demo_settings(method, tmp_path))
    before = folder_bytes(root)
    refused = run_demo_recipe(method, tmp_path, tokenizer, "--overwrite_output_dir", "true", "--max_length", "4")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert folder_bytes(root) == before

    def killed_at_the_first_load():
        import trl_dpr.lfd.self_play

        def load_policy(*args):
            raise RuntimeError("killed")

        trl_dpr.lfd.self_play.load_policy = load_policy

    killed = run_demo_recipe(
        method, tmp_path, tokenizer, "--overwrite_output_dir", "true", before=killed_at_the_first_load
    )
    assert killed.returncode != 0 and "RuntimeError: killed" in killed.stderr, killed.stderr[-3000:]
    assert sorted(path.name for path in root.iterdir()) == ["notes.txt", "self_play.json"]
    assert json.loads((root / "self_play.json").read_text()) == {
        "settings": demo_settings(method, tmp_path),
        "iterations": [],
    }


def test_overwrite_with_resume_continues_the_run_as_dpr_does(tmp_path, tokenizer):
    """--overwrite_output_dir true --resume_from_checkpoint true: resuming wins, as for DPR; the trained iteration is
    kept and not trained again. Before the fix its iterations were deleted and trained again."""
    from ..conftest import save_sft_output

    save_sft_output(tmp_path / "sft", tokenizer)
    root = tmp_path / "spin"
    plant_finished_self_play(root, demo_settings("spin", tmp_path))
    (root / "eval_results.json").unlink()
    result = run_demo_recipe(
        "spin",
        tmp_path,
        tokenizer,
        "--overwrite_output_dir",
        "true",
        "--resume_from_checkpoint",
        "true",
        "--evaluation_config",
        "",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "iteration 0" not in result.stdout  # nothing trained
    assert (
        (root / "iteration-0" / "model.safetensors").read_bytes()
        == (root / "model.safetensors").read_bytes()
        == b"pi_1"
    )
