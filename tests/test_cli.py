"""The `trl-dpr` command: shipped recipes found by name, accelerate configs by name, user errors without a traceback
(the path from a built wheel installed outside the repository: tests/test_recipes.py)."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from trl_dpr.running.cli import _launch_defaults, _resolve_accelerate_config, main, run
from trl_dpr.running.recipe_parser import find_recipe_file, recipes_root

ROOT = Path(__file__).resolve().parents[1]


def test_a_shipped_recipe_is_found_by_name_or_by_its_repository_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository: names resolve to the shipped recipes
    assert Path(find_recipe_file("demo/dpr.yaml")) == recipes_root() / "demo" / "dpr.yaml"
    assert Path(find_recipe_file("recipes/qwen2.5-7b/dpr/config_qlora.yaml")).resolve() == (
        recipes_root() / "qwen2.5-7b" / "dpr" / "config_qlora.yaml").resolve()
    assert Path(find_recipe_file("demo.yaml", subfolder="evaluate")) == recipes_root() / "evaluate" / "demo.yaml"
    assert Path(find_recipe_file("demo.yaml", subfolder="preview")) == recipes_root() / "preview" / "demo.yaml"


def test_a_file_that_exists_wins_and_a_missing_one_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "dpr.yaml").write_text("learning_rate: 1.0\n")
    assert find_recipe_file("demo/dpr.yaml") == "demo/dpr.yaml"  # the user's own file, not the shipped one
    with pytest.raises(FileNotFoundError, match=r"'llama/dpr\.yaml' not found.*trl-dpr recipes"):
        find_recipe_file("llama/dpr.yaml")


def test_accelerate_configs_by_name_ours_then_trls(tmp_path):
    assert _resolve_accelerate_config(["--accelerate_config", "cpu", "--num_processes", "2"]) == [
        "--config_file", str(recipes_root() / "accelerate_configs" / "cpu.yaml"), "--num_processes", "2"]
    zero3 = _resolve_accelerate_config(["--accelerate_config", "zero3"])[1]
    assert Path(zero3).name == "zero3.yaml" and "trl" in Path(zero3).parts and yaml.safe_load(Path(zero3).read_text())[
        "deepspeed_config"]["zero_stage"] == 3
    own = tmp_path / "mine.yaml"
    own.write_text("num_processes: 1\n")
    assert _resolve_accelerate_config(["--accelerate_config", str(own)])[:2] == ["--config_file", str(own)]
    with pytest.raises(ValueError, match=r"'tpu9'.*'cpu'.*'zero3'"):
        _resolve_accelerate_config(["--accelerate_config", "tpu9"])
    assert _resolve_accelerate_config(["--num_processes", "2"]) == ["--num_processes", "2"]


# ---- what `trl-dpr <stage>` passes to `accelerate launch` (trl_dpr.running.cli._launch_defaults) ----------------------------

ACCELERATE_DEFAULTS_WARNING = "were not passed to `accelerate launch` and had defaults used instead"


@pytest.fixture
def no_accelerate_config(tmp_path, monkeypatch):
    """A machine where `accelerate config` was never run, and OMP_NUM_THREADS is not set."""
    for module in ("accelerate.commands.config", "accelerate.commands.config.config_args",
                   "accelerate.commands.launch"):  # each module reads its own copy of the path
        monkeypatch.setattr(f"{module}.default_config_file", str(tmp_path / "default_config.yaml"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return tmp_path / "default_config.yaml"


def accelerate_validates(launch_args: list[str], caplog):
    """accelerate's own reading of `accelerate launch ARGS script.py` (what `launch_command` does first): its settings
    and the warnings it logs."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    caplog.clear()
    with caplog.at_level("WARNING", logger="accelerate.commands.launch"):
        args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*launch_args, "script.py"]))
    return args, caplog.text


def test_without_a_gpu_or_accelerate_config_the_launch_gets_the_cpu_config_and_no_accelerate_warning(
        no_accelerate_config, monkeypatch, caplog):
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    cpu = str(recipes_root() / "accelerate_configs" / "cpu.yaml")
    _, warned_before = accelerate_validates([], caplog)
    assert "`--num_processes` was set" in warned_before  # what a bare `accelerate launch` says here

    launch_args = _launch_defaults([])
    assert launch_args == ["--config_file", cpu, "--num_cpu_threads_per_process", "1"]
    args, warned = accelerate_validates(launch_args, caplog)
    assert ACCELERATE_DEFAULTS_WARNING not in warned and args.use_cpu and args.num_processes == 1


def test_a_cpu_run_gets_one_torch_thread_per_process_unless_omp_num_threads_is_set(no_accelerate_config, monkeypatch,
                                                                                   caplog):
    # accelerate's own choice is every physical core: tiny models crawl with it beside any other job on the machine.
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    monkeypatch.setattr("psutil.cpu_count", lambda logical=True: 16)
    accelerates_choice, _ = accelerate_validates(["--config_file", str(recipes_root() / "accelerate_configs" / "cpu.yaml")],
                                                 caplog)
    assert accelerates_choice.num_cpu_threads_per_process == 16
    args, _ = accelerate_validates(_launch_defaults([]), caplog)
    assert args.num_cpu_threads_per_process == 1


def test_the_cpu_thread_count_is_omp_num_threads_where_it_is_set(no_accelerate_config, monkeypatch, caplog):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    launch_args = _launch_defaults(_resolve_accelerate_config(["--accelerate_config", "cpu_ddp"]))
    assert launch_args[:2] == ["--num_cpu_threads_per_process", "3"]
    args, warned = accelerate_validates(launch_args, caplog)
    assert args.num_cpu_threads_per_process == 3 and args.num_processes == 2 and ACCELERATE_DEFAULTS_WARNING not in warned


def test_the_users_launch_flags_are_kept_and_not_repeated(no_accelerate_config, monkeypatch):
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    cpu = str(recipes_root() / "accelerate_configs" / "cpu.yaml")
    mine = ["--config_file", cpu, "--num-cpu-threads-per-process", "5"]
    assert _launch_defaults(mine) == mine
    assert _launch_defaults(["--num_processes", "2"])[:2] == ["--config_file", cpu]


def test_an_accelerate_config_of_the_user_is_used_as_it_is(no_accelerate_config, monkeypatch, caplog):
    no_accelerate_config.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "NO",
                                                    "num_machines": 1, "num_processes": 1, "mixed_precision": "no",
                                                    "use_cpu": False}))
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    assert _launch_defaults([]) == []  # `accelerate config` wrote it: accelerate reads it, warning of nothing
    assert ACCELERATE_DEFAULTS_WARNING not in accelerate_validates([], caplog)[1]


def test_on_gpus_without_an_accelerate_config_accelerates_defaults_are_passed_explicitly(no_accelerate_config,
                                                                                       monkeypatch, caplog):
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 2)
    launch_args = _launch_defaults([])
    assert launch_args == ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                           "--dynamo_backend", "no", "--multi_gpu"]
    args, warned = accelerate_validates(launch_args, caplog)
    assert args.multi_gpu and args.num_processes == 2 and ACCELERATE_DEFAULTS_WARNING not in warned
    assert _launch_defaults(["--num_processes", "1"]) == ["--num_machines", "1", "--mixed_precision", "no",
                                                          "--dynamo_backend", "no", "--num_processes", "1"]


def test_a_user_error_exits_with_its_message_and_no_traceback(capsys):
    def failing(argv):
        raise ValueError("num_generations must be >= 1 (the paper uses 1), got 0.")

    with pytest.raises(SystemExit) as stop:
        run(failing, [])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "error (ValueError): num_generations must be >= 1" in err and "--debug" in err and "Traceback" not in err


def test_debug_shows_the_traceback(monkeypatch):
    def failing(argv):
        raise FileNotFoundError("no such folder")

    with pytest.raises(FileNotFoundError):
        run(failing, ["--debug"])
    monkeypatch.setenv("TRL_DPR_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        run(failing, [])


def test_ctrl_c_ends_with_one_line_saying_what_was_saved_and_how_to_resume(tmp_path, monkeypatch, capsys):
    from trl_dpr.running import checkpointing

    def interrupted_run(argv):
        checkpointing.claim_output_dir(tmp_path / "dpr")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpointing, "last_complete_checkpoint", lambda folder: f"{folder}/checkpoint-4")
    try:
        with pytest.raises(SystemExit) as stop:
            run(interrupted_run, [])
    finally:
        checkpointing.release_output_dir(tmp_path / "dpr")
    err = capsys.readouterr().err
    assert stop.value.code == 130 and err.count("\n") == 1, err
    assert f"Saved: {tmp_path / 'dpr'}: {tmp_path / 'dpr'}/checkpoint-4" in err and "--resume_from_checkpoint true" in err


def test_ctrl_c_before_any_checkpoint_says_nothing_was_saved(tmp_path, capsys):
    from trl_dpr.running import checkpointing

    def interrupted_run(argv):
        checkpointing.claim_output_dir(tmp_path / "dpr")
        raise KeyboardInterrupt

    try:
        with pytest.raises(SystemExit):
            run(interrupted_run, [])
    finally:
        checkpointing.release_output_dir(tmp_path / "dpr")
    assert capsys.readouterr().err == f"Interrupted. No checkpoint was saved yet in {tmp_path / 'dpr'}: run the same command again to start over.\n"


def test_the_launching_process_adds_nothing_to_a_ctrl_c(monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("trl.cli.accelerate_launcher.launch_training_script", interrupted)
    with pytest.raises(SystemExit) as stop:
        run(lambda argv: main(["dpr", "--config", "demo/dpr.yaml", "--accelerate_config", "cpu"]), [])
    assert stop.value.code == 130 and capsys.readouterr().err == ""


def test_a_bug_is_not_dressed_as_a_user_error():
    def buggy(argv):
        raise KeyError("internal")

    with pytest.raises(KeyError):
        run(buggy, [])


def test_help_lists_the_commands_and_recipes_lists_the_shipped_yamls(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    assert all(f"trl-dpr {command}" in out for command in ("sft", "dpr", "evaluate", "preview", "heatmap", "memory"))
    main(["recipes"])
    listed = capsys.readouterr().out.split()
    assert "demo/dpr.yaml" in listed and "qwen2.5-7b/dpr/config_qlora.yaml" in listed and "evaluate/demo.yaml" in listed
    with pytest.raises(SystemExit) as stop:
        main(["trian"])
    assert stop.value.code == 2


# ---- the arguments checked before TRL is imported (trl_dpr.running.cli._check_before_importing) ----------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_DPR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def demo_recipe(tmp_path, recipe: str, **changes) -> str:
    values = yaml.safe_load((recipes_root() / recipe).read_text())
    path = tmp_path / Path(recipe).name
    path.write_text(yaml.safe_dump({**values, **changes}))
    return str(path)


MISTAKES = [  # (stage, recipe, YAML changes, command line)
    ("sft", "demo/sft.yaml", {"learnig_rate": 1e-5}, []),
    ("sft", "demo/sft.yaml", {"max_steps": 2.5}, []),
    ("sft", "demo/sft.yaml", {"learning_rate": "fast"}, []),
    ("sft", "demo/sft.yaml", {"eval_strategy": "steps"}, []),
    ("dpr", "demo/dpr.yaml", {"torch_dtype": "bfloat16"}, []),
    ("sft", "demo/sft.yaml", {}, ["--max_steps", "2.5"]),
    ("sft", "demo/sft.yaml", {}, ["--dtype", "float33"]),
    ("sft", "demo/sft.yaml", {}, ["--max_steps", "-3"]),
    ("sft", "demo/sft.yaml", {}, ["--bf16", "maybe"]),
    ("sft", "demo/sft.yaml", {}, ["--learnig_rate", "1e-5"]),
    ("spin", "demo/spin.yaml", {}, ["--num_iteration", "2"]),
    ("evaluate", "evaluate/demo.yaml", {}, ["--max_prompt", "3"]),
    ("preview", "preview/demo.yaml", {"seed": -1}, []),
]


@pytest.mark.parametrize(("stage", "recipe", "changes", "extra"), MISTAKES, ids=[f"{m[0]}-{m[2] or m[3]}" for m in MISTAKES])
def test_the_check_before_importing_says_what_the_recipe_parser_says(tmp_path, cache, stage, recipe, changes, extra):
    """The quick check (a parser rebuilt from the cached description) and the recipe's own parser (TRL's dataclasses,
    in the launched process) give the same message for the same mistake, whichever catches it."""
    from trl_dpr.running.cli import _check_before_importing, _stage_parser

    argv = ["--config", demo_recipe(tmp_path, recipe, **changes), *extra]
    with pytest.raises(ValueError) as quick:
        _check_before_importing(stage, list(argv))
    with pytest.raises(ValueError) as full:
        _stage_parser(stage).parse_args_and_config(list(argv))
    assert str(quick.value) == str(full.value)
    assert f"`trl-dpr {stage} --help`" in str(quick.value) and "python recipes/" not in str(quick.value)


def test_a_recipe_script_names_the_trl_dpr_command_in_its_messages(tmp_path):
    from trl_dpr.scripts.sft import make_parser

    with pytest.raises(ValueError, match=r"(?s)learnig_rate \(did you mean learning_rate\?\).*`trl-dpr sft --help`"):
        make_parser().parse_args_and_config(["--config", demo_recipe(tmp_path, "demo/sft.yaml", learnig_rate=1.0)])


def test_a_stage_help_describes_trl_dprs_own_keys_first_and_names_trls_after_them(cache, capsys):
    main(["dpr", "--help"])
    brief = capsys.readouterr().out
    main(["dpr", "--help-all"])
    full = capsys.readouterr().out
    own, inherited = brief.split("Inherited from TRL and transformers")
    assert "--kl_coef KL_COEF" in own and "--dense_reward_kwargs DENSE_REWARD_KWARGS" in own
    assert "--gradient_accumulation_steps" not in own and "--gradient_accumulation_steps," in inherited
    assert "`trl-dpr dpr --help-all` describes each" in inherited
    assert "--gradient_accumulation_steps GRADIENT_ACCUMULATION_STEPS" in full and "Inherited from TRL" not in full
    assert len(brief.splitlines()) * 4 < len(full.splitlines())


def test_a_mapping_key_takes_json_yaml_flow_or_key_value_on_the_command_line(cache):
    from trl_dpr.running.cli import _check_before_importing, _stage_parser

    for form in ['{"clip": 0.5, "name": "x"}', "{clip: 0.5, name: x}", "clip=0.5,name=x"]:
        argv = ["--config", "demo/dpr.yaml", "--dense_reward", "tests.user_rewards.my_rewards:NotAReward",
                "--dense_reward_kwargs", form]
        quick, _ = _light_parser_values(argv)
        assert quick.dense_reward_kwargs == {"clip": 0.5, "name": "x"}, form
        full, _ = _stage_parser("dpr").parse_known_args(["--dense_reward_kwargs", form])  # the launched script's
        assert full.dense_reward_kwargs == {"clip": 0.5, "name": "x"}, form
    with pytest.raises(ValueError, match=r"'clip 0\.5' is not a mapping"):
        _check_before_importing("dpr", ["--config", "demo/dpr.yaml", "--dense_reward_kwargs", "clip 0.5"])


def _light_parser_values(argv):
    from trl_dpr.running.cli import _light_parser

    return _light_parser("dpr").check_recipe(list(argv))


def test_launcher_flags_and_a_valid_recipe_pass_the_check(cache):
    from trl_dpr.running.cli import _check_before_importing

    _check_before_importing("sft", ["--config", "demo/sft.yaml", "--accelerate_config", "cpu", "--num_processes", "2",
                                    "--max_steps", "3", "--bf16", "false", "--gradient_checkpointing"])
    with pytest.raises(ValueError, match=r"--num_proceses \(did you mean --num_processes\?\)"):
        _check_before_importing("dpr", ["--config", "demo/dpr.yaml", "--num_proceses", "2"])


def test_the_description_of_the_arguments_survives_the_cache(cache):
    """A parser rebuilt from the cached description describes itself the same: nothing is lost in JSON."""
    from trl_dpr.running.cli import _build_descriptions, _cached_descriptions
    from trl_dpr.running.recipe_checks import LightRecipeParser

    built = _build_descriptions()
    assert _cached_descriptions() == json.loads(json.dumps(built))
    for stage, description in _cached_descriptions().items():
        assert LightRecipeParser(description).describe() == description, stage


def test_a_cache_file_that_cannot_be_read_is_rebuilt(cache):
    from trl_dpr.running.cli import _cache_file, _light_parser

    _cache_file().parent.mkdir(parents=True)
    _cache_file().write_text("{not json")
    assert "--learning_rate" in _light_parser("sft").format_help()
    assert "sft" in json.loads(_cache_file().read_text())


def test_the_cache_key_changes_with_the_sources_and_the_versions_not_with_where_they_are(tmp_path):
    from trl_dpr.running.cli import _fingerprint

    clone, installed = tmp_path / "clone" / "trl_dpr", tmp_path / "site" / "trl_dpr"
    for root in (clone, installed):
        (root / "scripts").mkdir(parents=True)
        (root / "config.py").write_text("x: int = 1\n")
        (root / "scripts" / "sft.py").write_text("y = 2\n")

    def key(root, trl="1.16.0"):
        return _fingerprint(root, [root / "config.py", root / "scripts" / "sft.py"], {"trl": trl})

    first = key(clone)
    assert key(clone) == first and key(installed) == first  # the same sources elsewhere: a wheel installed from them
    assert key(clone, trl="1.16.1") != first
    (clone / "config.py").write_text("x: int = 2\n")  # the same size: an edit a size-and-time key could miss
    assert key(clone) != first
    (clone / "config.py").write_text("x: int = 1\n")
    (clone / "scripts" / "sft.py").rename(clone / "sft.py")  # the same bytes in another module
    assert _fingerprint(clone, [clone / "config.py", clone / "sft.py"], {"trl": "1.16.0"}) != first


def test_a_gguf_file_without_the_gguf_package_is_a_user_error_naming_the_extra(tmp_path, monkeypatch, capsys):
    from trl_dpr.running.gguf import convert_gguf

    monkeypatch.setitem(sys.modules, "gguf", None)  # as if not installed
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(SystemExit) as stop:
        run(lambda argv: convert_gguf(tmp_path / "model.gguf", tmp_path / "out"), [])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and 'pip install "trl_dpr[gguf]"' in err and err.count("pip install") == 1, err
