"""`reward_funcs` in a DPR recipe: outcome reward functions named as TRL's scripts name them (TRL's own, a dotted import
path, or `module:function`), from the user's folder, weighted by `reward_weights` beside r̂; a name that cannot work is
one line before any model loads, and the names are part of the run's record."""

import json
import sys
from pathlib import Path
from statistics import mean

import pytest
import yaml

from ..conftest import save_sft_output
from .test_cli_process import ROOT, cli_cache, trl_dpr_forked  # noqa: F401 (cli_cache: its own cache of the arguments)

# The user's file: an answer check that records what TRL called it with and what it returned (calls.jsonl beside it).
MY_CHECKS = """
import json, os

def right_answer(completions, answer, **kwargs):
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    scores = [1.0 if a in text else 0.25 for text, a in zip(texts, answer)]
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
        f.write(json.dumps({"answer": list(answer), "texts": texts, "scores": scores}) + "\\n")
    return scores

def needs_solution(completions, solution, **kwargs):
    return [0.0 for _ in completions]

ANSWER = "42"
"""


@pytest.fixture
def folder(tmp_path, tokenizer):
    """The user's folder: `runs/p/sft` (a tiny SFT output), `my_checks.py`, and `dpr.yaml`, the demo's DPR recipe cut
    to one step of 4 prompts from that SFT output, its log and its checkpoint written at that step."""
    root = tmp_path / "work"
    save_sft_output(root / "runs" / "p" / "sft", tokenizer)
    (root / "my_checks.py").write_text(MY_CHECKS)
    recipe = {
        **yaml.safe_load((ROOT / "recipes" / "demo" / "dpr.yaml").read_text()),
        "model_name_or_path": "runs/p/sft",
        "sft_config": None,
        "evaluation_config": None,
        "output_dir": "runs/p/dpr",
        "num_train_samples": 8,
        "max_steps": 1,
        "per_device_train_batch_size": 4,
        "max_completion_length": 4,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": 1,
    }
    (root / "dpr.yaml").write_text(yaml.safe_dump(recipe))
    return root


def with_recipe(root: Path, **changes) -> None:
    recipe = yaml.safe_load((root / "dpr.yaml").read_text())
    (root / "dpr.yaml").write_text(yaml.safe_dump({**recipe, **changes}))


def step_log(run: Path) -> dict:
    """The metrics the trainer logged at its one step (the checkpoint's trainer_state.json)."""
    (entry,) = [e for e in json.loads((run / "checkpoint-1" / "trainer_state.json").read_text())["log_history"]]
    return entry


def recorded_calls(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "calls.jsonl").read_text().splitlines()]


@pytest.mark.slow  # `trl-dpr dpr` processes, each launching a run: seconds to a minute each
def test_a_recipes_reward_function_from_the_users_folder_is_added_to_the_dense_reward_with_its_weight(
    folder, tmp_path
):
    with_recipe(folder, reward_funcs=["my_checks.right_answer"], reward_weights=[1.0, 3.0])
    result = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    (call,) = recorded_calls(folder)  # one generation batch: 4 prompts, one completion each
    assert len(call["scores"]) == 4 and all(call["answer"])  # called with the prompts' `answer` column
    assert call["scores"] == [1.0 if a in t else 0.25 for t, a in zip(call["texts"], call["answer"])]
    log = step_log(folder / "runs" / "p" / "dpr")
    assert log["rewards/right_answer/mean"] == pytest.approx(mean(call["scores"]))
    # TRL's `reward`: w_0 Σ_t r̂_t + w_1 R, with the recipe's weights
    assert log["reward"] == pytest.approx(log["rewards/dense_path/mean"] + 3.0 * mean(call["scores"]), abs=1e-6)
    card = (folder / "runs" / "p" / "dpr" / "README.md").read_text()
    assert "- **Outcome rewards** (`reward_funcs`, each added at its completion's last token): `right_answer` " in card
    assert "(weight 3); r̂'s weight 1." in card


@pytest.mark.slow  # `trl-dpr dpr` processes, each launching a run: seconds to a minute each
def test_reward_funcs_on_the_command_line_take_trls_names_and_module_colon_function(folder, tmp_path):
    from trl.rewards import think_format_reward

    overrides = ["--reward_funcs", "think_format_reward", "my_checks:right_answer"]
    overrides += ["--reward_weights", "0.5", "1.0", "2.0"]
    result = trl_dpr_forked("dpr", "--config", "dpr.yaml", *overrides, tmp_path=tmp_path, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    (call,) = recorded_calls(folder)
    think = think_format_reward([[{"role": "assistant", "content": text}] for text in call["texts"]])
    log = step_log(folder / "runs" / "p" / "dpr")
    assert log["rewards/think_format_reward/mean"] == pytest.approx(mean(think))
    assert log["rewards/right_answer/mean"] == pytest.approx(mean(call["scores"]))
    expected = 0.5 * log["rewards/dense_path/mean"] + 1.0 * mean(think) + 2.0 * mean(call["scores"])
    assert log["reward"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.slow  # `trl-dpr dpr` processes, each launching a run: seconds to a minute each
@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"reward_funcs": ["my_chex.right_answer"]},
            "reward_funcs 'my_chex.right_answer': cannot import 'my_chex' (No module named 'my_chex'); give a name of "
            "TRL's (accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment), a "
            "dotted import path (my_checks.right_answer, as TRL's scripts take it) or module:function",
        ),
        (
            {"reward_funcs": ["my_checks.right_answr"]},
            "reward_funcs 'my_checks.right_answr': 'my_checks' has no 'right_answr'; give a name of TRL's",
        ),
        (
            {"reward_funcs": ["my_checks:ANSWER"]},
            "reward_funcs 'my_checks:ANSWER': my_checks.ANSWER is a str, not a function; it must be `def ANSWER("
            "prompts, completions, **kwargs) -> list[float]`",
        ),
        (
            {"reward_funcs": ["my_checks.right_answer"], "reward_weights": [1.0]},
            "reward_weights has 1 entries but DensePathTrainer needs 2: the dense reward r̂ first, then one per reward "
            "function (1 given)",
        ),
        (
            {"reward_funcs": ["my_checks.needs_solution"]},
            "Reward function needs_solution needs 'solution', which train_dataset has no column for (columns: ['answer', "
            "'completion', 'kind', 'prompt'])",
        ),
    ],
    ids=["module not importable", "no such function", "not callable", "weights of another length", "missing column"],
)
def test_a_reward_function_that_cannot_work_is_one_line_before_any_model_loads(folder, tmp_path, changes, message):
    with_recipe(folder, **changes)
    result = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=folder)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert message in line
    assert "Dense-Path REINFORCE from" not in result.stdout  # the training stage never started
    assert not list((folder / "runs" / "p").glob("dpr/*.safetensors"))


@pytest.mark.slow  # a `trl-dpr dpr` process: seconds
def test_a_reward_function_that_cannot_work_is_refused_before_the_recipes_sft_stage(folder, tmp_path):
    """With sft_config and no SFT output yet, the reward functions (their columns: checked last) are refused before
    the SFT is spent."""
    sft_recipe = yaml.safe_load((ROOT / "recipes" / "demo" / "sft.yaml").read_text())
    (folder / "sft.yaml").write_text(yaml.safe_dump({**sft_recipe, "output_dir": "runs/q/sft", "max_steps": 2}))
    with_recipe(
        folder, sft_config="sft.yaml", model_name_or_path="runs/q/sft", reward_funcs=["my_checks.needs_solution"]
    )
    result = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=folder)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "error (ValueError): Reward function needs_solution needs 'solution'" in result.stderr
    assert "Stage 1/" not in result.stdout and not (folder / "runs" / "q").exists()


def finished_with_right_answer(folder: Path) -> tuple:
    """`folder`'s recipe with `reward_funcs: [my_checks.right_answer]`, recorded finished in runs/p/dpr as `trl-dpr dpr`
    records it (run from `folder`); its parsed arguments."""
    from trl_dpr.running.checkpointing import mark_run_finished, run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    with_recipe(folder, reward_funcs=["my_checks.right_answer"])
    parsed = make_parser().parse_args_and_config(["--config", "dpr.yaml"])[:3]
    (folder / "runs" / "p" / "dpr").mkdir()
    (folder / "runs" / "p" / "dpr" / "model.safetensors").write_bytes(b"weights of the finished run")
    mark_run_finished(parsed[1].output_dir, run_fingerprint(*parsed))
    return parsed


@pytest.mark.slow  # `trl-dpr dpr` processes, each launching a run: seconds to a minute each
def test_a_finished_run_is_another_run_with_another_reward_function(folder, tmp_path, monkeypatch):
    """run_complete.json's digest holds the names: the same recipe with another function is not `Already finished`."""
    from trl_dpr.running.checkpointing import run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    monkeypatch.chdir(folder)
    parsed = finished_with_right_answer(folder)
    other = make_parser().parse_args_and_config(["--config", "dpr.yaml", "--reward_funcs", "think_format_reward"])
    assert run_fingerprint(*other[:3]).parts["arguments"] != run_fingerprint(*parsed).parts["arguments"]

    again = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=folder)
    assert again.returncode == 0 and "Already finished" in again.stdout, again.stderr[-3000:]
    changed = trl_dpr_forked(
        "dpr", "--config", "dpr.yaml", "--reward_funcs", "think_format_reward", tmp_path=tmp_path, cwd=folder
    )
    assert changed.returncode == 2 and "Already finished" not in changed.stdout, changed.stderr[-3000:]
    (line,) = [line for line in changed.stderr.splitlines() if line.startswith("error")]
    assert "already holds a run (model.safetensors), finished with other arguments" in line
    assert (folder / "runs" / "p" / "dpr" / "model.safetensors").read_bytes() == b"weights of the finished run"


@pytest.mark.slow  # `trl-dpr dpr` processes, each launching a run: seconds to a minute each
def test_a_finished_run_is_another_run_once_its_reward_functions_file_is_edited(folder, tmp_path, monkeypatch):
    """The same name after an edit of my_checks.py is another function: the refusal says the reward functions changed,
    and the arguments did not."""
    from trl_dpr.running.checkpointing import run_fingerprint

    monkeypatch.chdir(folder)
    parsed = finished_with_right_answer(folder)
    before = run_fingerprint(*parsed)
    (folder / "my_checks.py").write_text(MY_CHECKS.replace("0.25", "0.5"))
    after = run_fingerprint(*parsed)
    assert after != before and after.parts["arguments"] == before.parts["arguments"]
    assert after.parts["reward function files"] != before.parts["reward function files"]

    edited = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=folder)
    assert edited.returncode == 2 and "Already finished" not in edited.stdout, edited.stderr[-3000:]
    (line,) = [line for line in edited.stderr.splitlines() if line.startswith("error")]
    assert "finished with other reward functions (the reward_funcs files in the folder it runs from: edited)" in line
    assert (folder / "runs" / "p" / "dpr" / "model.safetensors").read_bytes() == b"weights of the finished run"


def test_trls_names_and_installed_modules_add_no_file_to_the_runs_record(folder, monkeypatch):
    from trl_dpr.running.checkpointing import run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    monkeypatch.chdir(folder)
    names = ["think_format_reward", "trl.rewards.think_format_reward", "trl_dpr.evaluation.answer_checks:_text"]
    parsed = make_parser().parse_args_and_config(["--config", "dpr.yaml", "--reward_funcs", *names])[:3]
    assert "reward function files" not in run_fingerprint(*parsed).parts


def test_reward_funcs_named_in_the_recipe_and_passed_from_python_are_refused(tmp_path):
    from trl_dpr import DensePathConfig
    from trl_dpr.running.pipeline import DPRScriptArguments, check_dpr_inputs

    script_args = DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", reward_funcs=["think_format_reward"])
    args = DensePathConfig(str(tmp_path / "dpr"), per_device_train_batch_size=2, bf16=False, use_cpu=True)
    with pytest.raises(ValueError, match=r"named in the recipe \(\['think_format_reward'\]\) and passed from Python"):
        check_dpr_inputs(script_args, args, reward_funcs=[lambda completions, **kwargs: [0.0] * len(completions)])
    assert not (tmp_path / "dpr").exists()


def test_run_dpr_refuses_reward_funcs_beside_inputs_checked_without_them(tmp_path):
    from trl import ModelConfig

    from trl_dpr import DensePathConfig
    from trl_dpr.running.pipeline import DPRInputs, DPRScriptArguments, run_dpr

    args = DensePathConfig(str(tmp_path / "dpr"), per_device_train_batch_size=2, bf16=False, use_cpu=True)
    inputs = DPRInputs(prompts=None)  # what check_dpr_inputs returned, with no reward function
    with pytest.raises(ValueError, match="got inputs from check_dpr_inputs and reward_funcs: pass reward_funcs to it"):
        run_dpr(DPRScriptArguments(), args, ModelConfig(), inputs=inputs, reward_funcs=[lambda completions, **kw: []])


def test_a_run_finished_before_reward_funcs_existed_is_still_finished_while_it_names_none(folder, monkeypatch):
    """run_complete.json of a trl_dpr whose DPRScriptArguments had no `reward_funcs`: the same recipe again (none
    named) is that run; one that names a function is another."""
    import hashlib
    from dataclasses import asdict

    from trl_dpr.running.checkpointing import finished_run, mark_run_finished, run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    monkeypatch.chdir(folder)
    parsed = make_parser().parse_args_and_config(["--config", "dpr.yaml"])[:3]
    not_the_run = ("overwrite_output_dir", "resume_from_checkpoint", "local_rank", "hub_token")
    arguments = {  # what the earlier run_fingerprint digested: every field, none called reward_funcs
        type(values).__name__: {
            key: value
            for key, value in (values.to_dict() if hasattr(values, "to_dict") else asdict(values)).items()
            if key not in not_the_run and key != "reward_funcs"
        }
        for values in parsed
    }
    earlier = hashlib.sha256(json.dumps(arguments, default=str, sort_keys=True).encode()).hexdigest()
    run = folder / "runs" / "p" / "dpr"
    run.mkdir()
    (run / "model.safetensors").write_bytes(b"weights of the finished run")
    mark_run_finished(run, earlier)
    assert parsed[0].reward_funcs is None and finished_run(run, run_fingerprint(*parsed))
    named = make_parser().parse_args_and_config(["--config", "dpr.yaml", "--reward_funcs", "think_format_reward"])
    assert not finished_run(run, run_fingerprint(*named[:3]))


@pytest.mark.slow  # a `trl-dpr dpr` process launching a run: seconds to a minute
def test_a_users_module_named_as_a_trl_dpr_script_is_the_users_not_the_script(folder, tmp_path):
    """The launched script's folder (trl_dpr/scripts/, which holds evaluate.py) comes first on its `sys.path`: the
    user's ./evaluate.py is still the one imported, as it is the one the run's record digests."""
    (folder / "evaluate.py").write_text((folder / "my_checks.py").read_text())
    with_recipe(folder, reward_funcs=["evaluate.right_answer"], reward_weights=[1.0, 2.0])
    result = trl_dpr_forked("dpr", "--config", "dpr.yaml", tmp_path=tmp_path, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    (call,) = recorded_calls(folder)  # written by the user's evaluate.py, beside it
    assert step_log(folder / "runs" / "p" / "dpr")["rewards/right_answer/mean"] == pytest.approx(mean(call["scores"]))


def test_a_users_module_comes_before_a_same_named_one_earlier_on_sys_path(folder, monkeypatch):
    import trl_dpr.scripts
    from trl_dpr.rewards import load_reward_func

    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(Path(trl_dpr.scripts.__file__).parent))  # as a launched `trl-dpr dpr` child's
    (folder / "sft.py").write_text("def right(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    try:
        func = load_reward_func("sft.right")
        assert Path(func.__code__.co_filename) == folder / "sft.py"
    finally:
        sys.modules.pop("sft", None)


def test_a_users_module_shadowed_by_one_imported_already_is_refused_in_one_line(folder, monkeypatch):
    from trl_dpr.rewards import load_reward_func

    monkeypatch.chdir(folder)
    (folder / "yaml.py").write_text("def f(completions, **kwargs):\n    return [0.0] * len(completions)\n")
    with pytest.raises(ValueError, match=r"cannot import 'yaml' \(./yaml.py is shadowed by the module of that name "):
        load_reward_func("yaml.f")
    assert sys.modules["yaml"].__file__ == yaml.__file__  # the installed one, still


def test_a_reward_function_packages_other_files_and_its_modules_local_imports_are_the_run(folder, monkeypatch):
    """Every .py of a package (its __init__ re-exports `.impl`), and a module's local imports (`import helper`), are
    digested; a file nothing imports, and __pycache__, are not."""
    from trl_dpr.running.checkpointing import run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    monkeypatch.chdir(folder)
    (folder / "pkg" / "__pycache__").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("from .impl import right\n")
    (folder / "pkg" / "impl.py").write_text("def right(completions, **kw):\n    return [0.0] * len(completions)\n")
    (folder / "checks2.py").write_text("from helper import SCORE\n\ndef f(completions, **kw):\n    return [SCORE]\n")
    (folder / "helper.py").write_text("SCORE = 0.0\n")
    (folder / "unrelated.py").write_text("X = 1\n")

    def files(*funcs):
        argv = ["--config", "dpr.yaml", "--reward_funcs", *funcs, "--reward_weights", *["1"] * (len(funcs) + 1)]
        return run_fingerprint(*make_parser().parse_args_and_config(argv)[:3]).parts["reward function files"]

    package, module = files("pkg.right"), files("checks2.f")
    (folder / "pkg" / "__pycache__" / "impl.cpython-311.pyc").write_bytes(b"compiled")
    (folder / "unrelated.py").write_text("X = 2\n")
    assert (files("pkg.right"), files("checks2.f")) == (package, module)
    (folder / "pkg" / "impl.py").write_text("def right(completions, **kw):\n    return [1.0] * len(completions)\n")
    (folder / "helper.py").write_text("SCORE = 1.0\n")
    assert files("pkg.right") != package and files("checks2.f") != module


def test_a_single_reward_function_written_as_a_yaml_string_is_a_list_of_one(folder, monkeypatch):
    from trl_dpr.running.checkpointing import run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    monkeypatch.chdir(folder)
    with_recipe(folder, reward_funcs="my_checks.right_answer", reward_weights=[1.0, 2.0])
    assert "reward_funcs: my_checks.right_answer\n" in (folder / "dpr.yaml").read_text()  # a scalar, not a list
    scalar = make_parser().parse_args_and_config(["--config", "dpr.yaml"])[:3]
    assert scalar[0].reward_funcs == ["my_checks.right_answer"]
    with_recipe(folder, reward_funcs=["my_checks.right_answer"])
    assert run_fingerprint(*scalar) == run_fingerprint(
        *make_parser().parse_args_and_config(["--config", "dpr.yaml"])[:3]
    )


def test_trls_soft_overlong_punishment_is_built_for_the_runs_max_completion_length(tmp_path):
    """DAPO's Eq. 13 with L_max = the run's max_completion_length and L_cache = a quarter of it: a run that stops at
    16 tokens is penalised from 13 on (TRL's script values, 1280 and 256, would never penalise it)."""
    from trl_dpr import DensePathConfig
    from trl_dpr.running.checkpointing import release_output_dir
    from trl_dpr.running.pipeline import DPRScriptArguments, check_dpr_inputs

    script_args = DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", reward_funcs="get_soft_overlong_punishment")
    args = DensePathConfig(
        str(tmp_path / "dpr"), max_completion_length=16, per_device_train_batch_size=2, bf16=False, use_cpu=True
    )
    (punishment,) = check_dpr_inputs(script_args, args).reward_funcs
    release_output_dir(args.output_dir)
    lengths = [8, 12, 13, 14, 16]
    expected = [0.0 if n <= 12 else (12 - n) / 4 for n in lengths]  # 0 up to L_max − L_cache, then down to −1 at L_max
    assert punishment(completion_ids=[[7] * n for n in lengths]) == pytest.approx(expected)
    assert expected[-2:] == [-0.5, -1.0]


def test_the_model_card_lists_every_outcome_reward_also_two_of_one_name(tokenizer, tmp_path):
    from ..conftest import dpr_trainer

    def scoring(value):
        def right(completions, **kwargs):  # one name, two functions (two modules' `right`)
            return [value] * len(completions)

        return right

    trainer, *_ = dpr_trainer(tokenizer, tmp_path, reward_funcs=[scoring(1.0), scoring(0.0)], reward_weights=[1, 2, 3])
    card = "\n".join(trainer._card_sections())
    assert "`right` (weight 2), `right` (weight 3); r̂'s weight 1." in card


def test_a_users_module_imported_from_one_folder_is_imported_again_from_another(tmp_path, monkeypatch):
    """One process, two working folders (a notebook, the tests) each with its own checks_xy.py: each is its own."""
    from trl_dpr.rewards import load_reward_func

    for name, score in (("a", 1.0), ("b", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "checks_xy.py").write_text(f"def f(completions, **kw):\n    return [{score}]\n")
    try:
        monkeypatch.chdir(tmp_path / "a")
        assert load_reward_func("checks_xy.f")(["x"]) == [1.0]
        monkeypatch.chdir(tmp_path / "b")
        assert load_reward_func("checks_xy.f")(["x"]) == [2.0]
    finally:
        sys.modules.pop("checks_xy", None)
