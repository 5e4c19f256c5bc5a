"""The `trl-dpr` command: shipped recipes found by name, accelerate configs by name, user errors without a traceback
(the path from a built wheel installed outside the repository: tests/end_to_end/test_recipes_from_wheel.py)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trl_dpr.running.cli import _launch_defaults, _resolve_accelerate_config, main, run
from trl_dpr.running.recipe_parser import find_recipe_file, recipes_root

ROOT = Path(__file__).resolve().parents[2]


def test_a_shipped_recipe_is_found_by_name_or_by_its_repository_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository: names resolve to the shipped recipes
    assert Path(find_recipe_file("demo/dpr.yaml")) == recipes_root() / "demo" / "dpr.yaml"
    assert (
        Path(find_recipe_file("recipes/qwen2.5-7b/dpr/config_qlora.yaml")).resolve()
        == (recipes_root() / "qwen2.5-7b" / "dpr" / "config_qlora.yaml").resolve()
    )
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
        "--config_file",
        str(recipes_root() / "accelerate_configs" / "cpu.yaml"),
        "--num_processes",
        "2",
    ]
    zero3 = _resolve_accelerate_config(["--accelerate_config", "zero3"])[1]
    assert (
        Path(zero3).name == "zero3.yaml"
        and "trl" in Path(zero3).parts
        and yaml.safe_load(Path(zero3).read_text())["deepspeed_config"]["zero_stage"] == 3
    )
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
    for module in (
        "accelerate.commands.config",
        "accelerate.commands.config.config_args",
        "accelerate.commands.launch",
    ):  # each module reads its own copy of the path
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
    no_accelerate_config, monkeypatch, caplog
):
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    cpu = str(recipes_root() / "accelerate_configs" / "cpu.yaml")
    _, warned_before = accelerate_validates([], caplog)
    assert "`--num_processes` was set" in warned_before  # what a bare `accelerate launch` says here

    launch_args = _launch_defaults([])
    assert launch_args == ["--config_file", cpu, "--num_cpu_threads_per_process", "1"]
    args, warned = accelerate_validates(launch_args, caplog)
    assert ACCELERATE_DEFAULTS_WARNING not in warned and args.use_cpu and args.num_processes == 1


def test_a_cpu_run_gets_one_torch_thread_per_process_unless_omp_num_threads_is_set(
    no_accelerate_config, monkeypatch, caplog
):
    # accelerate's own choice is every physical core: tiny models crawl with it beside any other job on the machine.
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    monkeypatch.setattr("psutil.cpu_count", lambda logical=True: 16)
    accelerates_choice, _ = accelerate_validates(
        ["--config_file", str(recipes_root() / "accelerate_configs" / "cpu.yaml")], caplog
    )
    assert accelerates_choice.num_cpu_threads_per_process == 16
    args, _ = accelerate_validates(_launch_defaults([]), caplog)
    assert args.num_cpu_threads_per_process == 1


def test_the_cpu_thread_count_is_omp_num_threads_where_it_is_set(no_accelerate_config, monkeypatch, caplog):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    launch_args = _launch_defaults(_resolve_accelerate_config(["--accelerate_config", "cpu_ddp"]))
    assert launch_args[:2] == ["--num_cpu_threads_per_process", "3"]
    args, warned = accelerate_validates(launch_args, caplog)
    assert (
        args.num_cpu_threads_per_process == 3 and args.num_processes == 2 and ACCELERATE_DEFAULTS_WARNING not in warned
    )


def test_the_users_launch_flags_are_kept_and_not_repeated(no_accelerate_config, monkeypatch):
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    cpu = str(recipes_root() / "accelerate_configs" / "cpu.yaml")
    mine = ["--config_file", cpu, "--num-cpu-threads-per-process", "5"]
    assert _launch_defaults(mine) == mine
    assert _launch_defaults(["--num_processes", "2"])[:2] == ["--config_file", cpu]


def test_an_accelerate_config_of_the_user_is_used_as_it_is(no_accelerate_config, monkeypatch, caplog):
    no_accelerate_config.write_text(
        yaml.safe_dump(
            {
                "compute_environment": "LOCAL_MACHINE",
                "distributed_type": "NO",
                "num_machines": 1,
                "num_processes": 1,
                "mixed_precision": "no",
                "use_cpu": False,
            }
        )
    )
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 0)
    assert _launch_defaults([]) == []  # `accelerate config` wrote it: accelerate reads it, warning of nothing
    assert ACCELERATE_DEFAULTS_WARNING not in accelerate_validates([], caplog)[1]


def test_on_gpus_without_an_accelerate_config_accelerates_defaults_are_passed_explicitly(
    no_accelerate_config, monkeypatch, caplog
):
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 2)
    launch_args = _launch_defaults([])
    assert launch_args == [
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--multi_gpu",
    ]
    args, warned = accelerate_validates(launch_args, caplog)
    assert args.multi_gpu and args.num_processes == 2 and ACCELERATE_DEFAULTS_WARNING not in warned
    assert _launch_defaults(["--num_processes", "1"]) == [
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_processes",
        "1",
    ]


def test_a_user_error_exits_with_its_message_and_no_traceback(capsys):
    def failing(argv):
        raise ValueError("num_generations must be >= 1 (the paper uses 1), got 0.")

    with pytest.raises(SystemExit) as stop:
        run(failing, [])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "error (ValueError): num_generations must be >= 1" in err and "--debug" in err and "Traceback" not in err


def test_debug_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("TRL_DPR_DEBUG", "0")  # --debug sets it to 1 for the launched processes: undone after the test

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
    monkeypatch.setattr(
        checkpointing, "_HELD_LOCKS", {}
    )  # only this run's folder: another test's trainer may hold one
    try:
        with pytest.raises(SystemExit) as stop:
            run(interrupted_run, [])
    finally:
        checkpointing.release_output_dir(tmp_path / "dpr")
    err = capsys.readouterr().err
    assert stop.value.code == 130 and err.count("\n") == 1, err
    assert (
        f"Saved: {tmp_path / 'dpr'}: {tmp_path / 'dpr'}/checkpoint-4" in err and "--resume_from_checkpoint true" in err
    )


def test_ctrl_c_before_any_checkpoint_says_nothing_was_saved(tmp_path, monkeypatch, capsys):
    from trl_dpr.running import checkpointing

    monkeypatch.setattr(
        checkpointing, "_HELD_LOCKS", {}
    )  # only this run's folder: another test's trainer may hold one

    def interrupted_run(argv):
        checkpointing.claim_output_dir(tmp_path / "dpr")
        raise KeyboardInterrupt

    try:
        with pytest.raises(SystemExit):
            run(interrupted_run, [])
    finally:
        checkpointing.release_output_dir(tmp_path / "dpr")
    assert (
        capsys.readouterr().err
        == f"Interrupted. No checkpoint was saved yet in {tmp_path / 'dpr'}: run the same command again to start over.\n"
    )


def test_ctrl_c_in_the_evaluation_of_a_finished_run_says_the_same_command_does_only_what_did_not_finish(
    tmp_path, monkeypatch, capsys
):
    from trl_dpr.running import checkpointing

    monkeypatch.setattr(checkpointing, "_HELD_LOCKS", {})  # only this run's folder

    def interrupted_evaluation(argv):  # as scripts/dpr.py holds its folder: trained, recorded finished, evaluating
        checkpointing.claim_output_dir(tmp_path / "dpr")
        with checkpointing.releasing_output_dir(tmp_path / "dpr"):
            checkpointing.mark_run_finished(tmp_path / "dpr", "fingerprint")
            raise KeyboardInterrupt

    try:
        with pytest.raises(SystemExit) as stop:
            run(interrupted_evaluation, [])
        assert checkpointing.is_claimed(tmp_path / "dpr")  # held until the process ends (`_release_all`)
    finally:
        checkpointing.release_output_dir(tmp_path / "dpr")
    assert stop.value.code == 130
    assert capsys.readouterr().err == (
        f"Interrupted after training: {tmp_path / 'dpr'} holds the finished run; the same command again does "
        "only what did not finish (its evaluation or merge; for a push, it prints the `trl-dpr push` line).\n"
    )


def test_sigterm_ends_a_run_with_the_interrupted_line_and_exit_code_143(tmp_path, monkeypatch, capsys):
    """A scheduler's preemption (SIGTERM) ends a run as Ctrl-C does, once however many signals follow (also while the
    process exits)."""
    import signal

    from trl_dpr.running import checkpointing

    monkeypatch.setattr(checkpointing, "_HELD_LOCKS", {})  # only this run's folder
    monkeypatch.setattr(checkpointing, "last_complete_checkpoint", lambda folder: f"{folder}/checkpoint-4")
    before, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def preempted_run(argv):
        checkpointing.claim_output_dir(tmp_path / "dpr")
        assert signal.getsignal(signal.SIGTERM) is not before  # else the signal below would end pytest itself
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at once
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one, while the first unwinds: only recorded
            time.sleep(0.1)

    try:
        with pytest.raises(SystemExit) as stop:
            run(preempted_run, [])
        os.kill(os.getpid(), signal.SIGTERM)  # as the process exits: recorded only
    finally:
        checkpointing.release_output_dir(tmp_path / "dpr")
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, before_int)
    assert stop.value.code == 128 + signal.SIGTERM
    assert capsys.readouterr().err == (
        f"Interrupted. Saved: {tmp_path / 'dpr'}: {tmp_path / 'dpr'}/checkpoint-4. Resume with the same command and "
        "--resume_from_checkpoint true.\n"
    )


def test_after_a_signal_a_peer_process_failing_ends_the_run_as_interrupted_and_only_rank_0_says_so(
    monkeypatch, capsys
):
    """Rank 1 of a launch says nothing (it holds no folder: it would say nothing was saved), and the error its
    collective raises once rank 0 is gone is the interruption, not a traceback."""
    import signal

    monkeypatch.setenv("RANK", "1")
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def rank_1(argv):
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise RuntimeError(
                "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
            ) from None

    try:
        with pytest.raises(SystemExit) as stop:
            run(rank_1, [])
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    assert stop.value.code == 130 and capsys.readouterr().err == ""


@pytest.mark.parametrize("flag", ["--overwrite_output_dir", "--resume_from_checkpoint"])
def test_ctrl_c_before_training_in_a_finished_runs_folder_says_the_earlier_run_is_kept(
    flag, tmp_path, monkeypatch, capsys
):
    """`trl-dpr dpr` with overwrite (or resume) on a run finished with other arguments, Ctrl-C while the models load:
    the earlier run is there byte for byte, and the line says so. Before the fix it said "Interrupted after training:
    ... holds the finished run" (overwrite), or deleted the record at the claim (resume)."""
    import trl_dpr.scripts.dpr
    from trl_dpr.running import checkpointing

    monkeypatch.setattr(checkpointing, "_HELD_LOCKS", {})  # only this run's folder
    output = tmp_path / "dpr"
    output.mkdir()
    (output / "model.safetensors").write_bytes(b"the earlier run's weights")
    checkpointing.mark_run_finished(output, "the earlier run's fingerprint")
    (output / "eval_results.json").write_text(json.dumps({"table_markdown": "| DPR | 84.2 |"}))
    before = {path.name: path.read_bytes() for path in output.iterdir()}

    def loading_the_models(*args, **kwargs):  # run_dpr loads π_SFT and π_ref before its trainer's train()
        raise KeyboardInterrupt

    monkeypatch.setattr(trl_dpr.scripts.dpr, "run_dpr", loading_the_models)
    argv = ["--config", str(ROOT / "recipes/demo/dpr.yaml"), "--sft_config", "", "--evaluation_config", ""]
    try:
        with pytest.raises(SystemExit) as stop:
            run(
                trl_dpr.scripts.dpr.main,
                [*argv, "--output_dir", str(output), "--num_train_samples", "8", flag, "true"],
            )
    finally:
        checkpointing.release_output_dir(output)
    assert stop.value.code == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"Interrupted before training; the earlier run in {output} is kept as it was."
    )
    assert {path.name: path.read_bytes() for path in output.iterdir()} == before


def test_ctrl_c_in_the_sft_stage_names_its_checkpoint_and_the_kept_earlier_run(tmp_path, monkeypatch, capsys):
    """`trl-dpr dpr --overwrite_output_dir true` claims its folder, then its SFT stage trains and saves a checkpoint in
    another: a Ctrl-C then names both."""
    from trl_dpr.running import checkpointing

    from .test_checkpoint_safety import _checkpoint, plant_finished_sft

    monkeypatch.setattr(checkpointing, "_HELD_LOCKS", {})  # only this run's folders
    dpr, sft = tmp_path / "dpr", tmp_path / "sft"
    dpr.mkdir()
    plant_finished_sft(dpr)

    def interrupted_sft(argv):
        checkpointing.claim_output_dir(dpr, overwrite=True)  # check_dpr_inputs
        checkpointing.claim_output_dir(sft)  # the SFT stage's run_sft
        _checkpoint(sft / "checkpoint-4", 4)
        raise KeyboardInterrupt

    try:
        with pytest.raises(SystemExit):
            run(interrupted_sft, [])
    finally:
        checkpointing.release_output_dir(dpr)
        checkpointing.release_output_dir(sft)
    assert capsys.readouterr().err == (
        f"Interrupted before training; the earlier run in {dpr} is kept as it was. Saved: {sft}: {sft}/checkpoint-4. "
        "Resume with the same command and --resume_from_checkpoint true.\n"
    )


def test_the_launching_process_adds_nothing_to_a_ctrl_c(monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("trl.cli.accelerate_launcher.launch_training_script", interrupted)
    with pytest.raises(SystemExit) as stop:
        run(lambda argv: main(["dpr", "--config", "demo/dpr.yaml", "--accelerate_config", "cpu"]), [])
    assert stop.value.code == 130 and capsys.readouterr().err == ""


@pytest.mark.parametrize("launcher", ["one process", "several processes"])
@pytest.mark.parametrize("exitcode,expected", [(2, 2), (-9, 137), (-11, 139)])
def test_the_launching_process_adds_no_traceback_to_a_failed_run_and_exits_with_its_code(
    monkeypatch, capsys, launcher, exitcode, expected
):
    """The launched processes printed what went wrong; accelerate's launcher then raises (CalledProcessError for one
    process, torchrun's ChildFailedError for several): the launching process exits with the run's code, silently. A
    process killed by a signal (-N: the OOM killer's SIGKILL, a segfault) cannot say so itself: one line says which
    signal, and the exit code is the shell's 128 + N."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failed(*args):
        if launcher == "one process":
            raise subprocess.CalledProcessError(returncode=exitcode, cmd=["python", "dpr.py"])
        failure = ProcessFailure(local_rank=1, pid=1234, exitcode=exitcode, error_file="<N/A>")
        raise ChildFailedError("dpr.py", {1: failure})

    monkeypatch.setattr("trl.cli.accelerate_launcher.launch_training_script", failed)
    with pytest.raises(SystemExit) as stop:
        run(lambda argv: main(["dpr", "--config", "demo/dpr.yaml", "--accelerate_config", "cpu"]), [])
    err = capsys.readouterr().err
    assert stop.value.code == expected and "Traceback" not in err
    if exitcode > 0:
        assert err == ""
    else:
        process = "the training process" if launcher == "one process" else "training process 1"
        name = {-9: "SIGKILL", -11: "SIGSEGV"}[exitcode]
        assert err.startswith(f"trl-dpr: {process} was killed by {name}") and ("out-of-memory" in err) == (
            exitcode == -9
        )


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
    assert (
        "demo/dpr.yaml" in listed and "qwen2.5-7b/dpr/config_qlora.yaml" in listed and "evaluate/demo.yaml" in listed
    )
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


@pytest.mark.parametrize(
    ("stage", "recipe", "changes", "extra"), MISTAKES, ids=[f"{m[0]}-{m[2] or m[3]}" for m in MISTAKES]
)
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
        argv = [
            "--config",
            "demo/dpr.yaml",
            "--dense_reward",
            "tests.user_rewards.my_rewards:NotAReward",
            "--dense_reward_kwargs",
            form,
        ]
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

    _check_before_importing(
        "sft",
        [
            "--config",
            "demo/sft.yaml",
            "--accelerate_config",
            "cpu",
            "--num_processes",
            "2",
            "--max_steps",
            "3",
            "--bf16",
            "false",
            "--gradient_checkpointing",
        ],
    )
    with pytest.raises(ValueError, match=r"--num_proceses \(did you mean --num_processes\?\)"):
        _check_before_importing("dpr", ["--config", "demo/dpr.yaml", "--num_proceses", "2"])


def test_the_description_of_the_arguments_survives_the_cache(cache):
    """A parser rebuilt from the cached description describes itself the same: nothing is lost in JSON."""
    from trl_dpr.running.cli import _build_descriptions, _cached_descriptions
    from trl_dpr.running.recipe_parser import RecipeParser

    built = _build_descriptions()
    assert _cached_descriptions() == json.loads(json.dumps(built))
    for stage, description in _cached_descriptions().items():
        assert RecipeParser.from_description(description).describe() == description, stage


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


# ---- one device and precision for the whole run: the launch, the training arguments, the SFT stage of a pipeline -----
# (trl_dpr.running.placement). What the launched process runs with is worked out as accelerate and transformers do it:
# accelerate's reading of the launch flags and the environment its launcher gives the script
# (`prepare_simple_launcher_cmd_env`), then the stage's own parser building TrainingArguments in that environment,
# whose `mixed_precision` is what the Trainer's Accelerator gets.


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine with one bf16-capable GPU, as `trl-dpr` and transformers' checks of bf16 see it."""
    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: 1)
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)


@pytest.fixture(scope="module")
def dpr_description():
    from trl_dpr.running.cli import _stage_parser

    return _stage_parser("dpr").describe()


def launched(argv: list[str], description: dict, monkeypatch):
    """`trl-dpr dpr ARGV` up to the launch (the real argument building), and what the launched script would run with:
    (launch_args, accelerate's environment for the script, the script's parsed TrainingArguments)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    from trl_dpr.running.cli import _check_before_importing, _launch_plan
    from trl_dpr.running.recipe_parser import RecipeParser
    from trl_dpr.scripts.dpr import make_parser

    values, launch_args = _check_before_importing("dpr", list(argv), RecipeParser.from_description(description))
    launch_args, script_args = _launch_plan(argv, launch_args, values)
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*launch_args, "script.py"]))
    _, env = prepare_simple_launcher_cmd_env(args)
    for name in ("ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.setenv(name, env[name])
    training_args = make_parser().parse_args_and_config(script_args)[1]
    return launch_args, env, training_args


# (key, its value in the YAML, the other value): each written in the YAML, and overridden on the command line.
OVERRIDES = [
    ("use_cpu", False, True),
    ("use_cpu", True, False),
    ("bf16", True, False),
    ("bf16", False, True),
    ("fp16", True, False),
    ("fp16", False, True),
]


@pytest.mark.parametrize(("key", "value", "other"), OVERRIDES, ids=[f"{k}-{v}" for k, v, _ in OVERRIDES])
def test_a_command_line_override_launches_and_trains_as_the_same_value_in_the_yaml(
    tmp_path, no_accelerate_config, one_gpu, monkeypatch, dpr_description, key, value, other
):
    base = {"use_cpu": False} if key != "use_cpu" else {}  # bf16/fp16 on the GPU
    (tmp_path / "written").mkdir(), (tmp_path / "overridden").mkdir()
    written = demo_recipe(tmp_path / "written", "demo/dpr.yaml", **base, **{key: value})
    overridden = demo_recipe(tmp_path / "overridden", "demo/dpr.yaml", **base, **{key: other})
    as_written = launched(["--config", written], dpr_description, monkeypatch)
    as_overridden = launched(["--config", overridden, f"--{key}", str(value).lower()], dpr_description, monkeypatch)
    assert (
        as_written[0] == as_overridden[0]
        and as_written[1]["ACCELERATE_MIXED_PRECISION"] == as_overridden[1]["ACCELERATE_MIXED_PRECISION"]
        and as_written[1]["ACCELERATE_USE_CPU"] == as_overridden[1]["ACCELERATE_USE_CPU"]
    )
    for _, env, training_args in (as_written, as_overridden):
        assert getattr(training_args, key) is value
        recipe_precision = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "no"
        # the launch and the training arguments agree, with each other and with what the recipe says
        assert env["ACCELERATE_MIXED_PRECISION"] == training_args.mixed_precision == recipe_precision
        assert (env["ACCELERATE_USE_CPU"] == "True") is training_args.use_cpu


def test_the_reported_gpu_run_of_the_cpu_demo_launches_on_the_gpu_in_the_recipes_precision(
    no_accelerate_config, one_gpu, monkeypatch, dpr_description
):
    """`trl-dpr dpr --config demo/dpr.yaml --accelerate_config single_gpu --use_cpu false` crashed on a GPU; now it is
    refused for its precision (fp32 recipe, bf16 config), and with --bf16 true it launches on the GPU in bf16."""
    argv = ["--config", "demo/dpr.yaml", "--accelerate_config", "single_gpu", "--use_cpu", "false"]
    with pytest.raises(
        ValueError,
        match=r"recipe trains in fp32 but single_gpu\.yaml sets mixed_precision: bf16; "
        r"change one of them: --bf16 true \(the recipe\), or --mixed_precision no",
    ):
        launched(argv, dpr_description, monkeypatch)
    _, env, training_args = launched([*argv, "--bf16", "true"], dpr_description, monkeypatch)
    assert env["ACCELERATE_USE_CPU"] == "False" and not training_args.use_cpu
    assert env["ACCELERATE_MIXED_PRECISION"] == training_args.mixed_precision == "bf16"
    _, env, training_args = launched([*argv, "--mixed_precision", "no"], dpr_description, monkeypatch)
    assert env["ACCELERATE_MIXED_PRECISION"] == training_args.mixed_precision == "no" and not training_args.use_cpu


IMPOSSIBLE = [  # (command line, GPUs on the machine, what the one line says)
    (
        ["--use_cpu", "false"],
        0,
        r"trains on the GPU \(use_cpu: false\) but no GPU is visible here: set --use_cpu true",
    ),
    (["--accelerate_config", "cpu", "--use_cpu", "false"], 1, r"trains on the GPU .* but cpu\.yaml runs on the CPU"),
    (
        ["--accelerate_config", "single_gpu", "--bf16", "true"],
        1,
        r"trains on the CPU \(use_cpu: true\) but single_gpu\.yaml is set up for the GPU",
    ),
    (["--accelerate_config", "single_gpu"], 1, r"trains on the CPU \(use_cpu: true\) but single_gpu\.yaml"),
    (["--use_cpu", "false", "--bf16", "true", "--fp16", "true"], 1, r"bf16 and fp16 are both true"),
    (["--accelerate_config", "zero3_cpu"], 0, r"use_cpu: true but zero3_cpu\.yaml runs DeepSpeed"),
    (["--accelerate_config", "fsdp_cpu"], 0, r"fsdp_cpu\.yaml runs FSDP, which accelerate does not run on the CPU"),
]


@pytest.mark.parametrize(("extra", "gpus", "message"), IMPOSSIBLE, ids=[" ".join(i[0]) for i in IMPOSSIBLE])
def test_a_device_or_precision_that_cannot_run_is_refused_before_the_launch_in_one_line(
    no_accelerate_config, monkeypatch, capsys, dpr_description, extra, gpus, message
):
    import re

    from trl_dpr.running.recipe_parser import RecipeParser

    monkeypatch.setattr("trl_dpr.running.cli._gpu_count", lambda: gpus)
    monkeypatch.setattr(
        "trl_dpr.running.cli._light_parser", lambda stage: RecipeParser.from_description(dpr_description)
    )
    monkeypatch.setattr("trl.cli.accelerate_launcher.launch_training_script", lambda *a: pytest.fail("launched"))
    with pytest.raises(SystemExit) as stop:
        main(["dpr", "--config", "demo/dpr.yaml", *extra])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err and re.search(message, err), err
    assert len(err.splitlines()) == 2  # the message, and where --debug shows the traceback


def test_the_pipelines_sft_stage_runs_on_the_runs_device_and_precision(one_gpu, capsys):
    from trl_dpr.running.placement import RunPlacement
    from trl_dpr.running.stages import sft_stage_of_pipeline

    _, training_args, _ = sft_stage_of_pipeline(
        "recipes/demo/sft.yaml", RunPlacement(use_cpu=False, mixed_precision="bf16")
    )
    assert (training_args.use_cpu, training_args.bf16, training_args.fp16) == (False, True, False)
    assert "runs as the rest of this run, on GPU, bf16 mixed precision (its own use_cpu/bf16/fp16 say CPU, fp32)" in (
        capsys.readouterr().out
    )
    _, training_args, _ = sft_stage_of_pipeline(
        "recipes/demo/sft.yaml", RunPlacement(use_cpu=True, mixed_precision="no")
    )
    assert (training_args.use_cpu, training_args.bf16, training_args.fp16) == (True, False, False)
    assert capsys.readouterr().out == ""  # the same as its YAML: nothing to say


def accelerate_configs() -> list[str]:
    """Every accelerate config `--accelerate_config NAME` reaches: trl_dpr's and TRL's."""
    import importlib.resources

    ours = [p.stem for p in (recipes_root() / "accelerate_configs").glob("*.yaml")]
    theirs = [
        p.name.removesuffix(".yaml")
        for p in importlib.resources.files("trl.accelerate_configs").iterdir()
        if p.name.endswith(".yaml")
    ]
    return sorted(set(ours) | set(theirs))


@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
@pytest.mark.parametrize("name", accelerate_configs())
def test_the_recipe_and_the_accelerate_config_agree_on_the_precision_or_the_run_is_refused(name, precision):
    """The rule for precision: the recipe's bf16/fp16 and the accelerate config's mixed_precision are the same, or
    the run stops before launching with one line naming both ways out; `--mixed_precision` on the command line is the
    launcher's value, so it reconciles them. The config's own values are read here from its YAML."""
    from trl_dpr.running.placement import LaunchPlacement, RunPlacement, check_placement

    launch_args = _resolve_accelerate_config(["--accelerate_config", name])
    settings = yaml.safe_load(Path(launch_args[1]).read_text())
    written = str(settings.get("mixed_precision", "no"))
    deepspeed = settings.get("distributed_type") == "DEEPSPEED"
    run = RunPlacement(use_cpu=bool(settings.get("use_cpu")) and not deepspeed, mixed_precision=precision)
    launch = LaunchPlacement.from_launch_args(launch_args)
    if settings.get("distributed_type") == "FSDP" and run.use_cpu:  # fsdp_cpu: refused whatever the precision
        with pytest.raises(ValueError, match=r"runs FSDP, which accelerate does not run on the CPU"):
            check_placement(run, launch, gpu_available=True)
        return
    if precision == written:
        check_placement(run, launch, gpu_available=True)
    else:
        with pytest.raises(ValueError) as refused:
            check_placement(run, launch, gpu_available=True)
        line = str(refused.value)
        assert (
            "\n" not in line
            and f"sets mixed_precision: {written};" in line
            and f"--mixed_precision {precision} " in line
        )
        recipe_flag = {"no": "--bf16 false --fp16 false", "bf16": "--bf16 true", "fp16": "--fp16 true"}[written]
        assert f"{recipe_flag} (the recipe)" in line
    check_placement(run, LaunchPlacement.from_launch_args([*launch_args, "--mixed_precision", precision]), True)
