"""A user's own task as the README's "Your data" section shows it: their `my_checks.py`, their JSONL of prompts with
negative and decimal answers (°C → °F), through the real `trl-dpr evaluate` and `trl-dpr preview` in processes of
their own, on tiny SFT outputs; and the same files read by each stage, or refused with one line."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trl_dpr.evaluation import EvaluationConfig
from trl_dpr.evaluation.answer_checks import answer_check_from, load_answer_check, pattern_check
from trl_dpr.evaluation.answers import weights_fingerprint
from trl_dpr.evaluation.prompt_sets import load_prompt_set
from trl_dpr.reference_manifest import mark_sft_complete

from ..conftest import save_sft_output

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Your data"


def readme_blocks(language: str) -> list[str]:
    """The ```language blocks of the README's "Your data" section, as a reader copies them."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


# The user's SFT demonstrations, in `messages` form: the file SFT trains on and the preview reads too.
DEMONSTRATIONS = [
    {
        "messages": [
            {"role": "system", "content": "Answer in °F."},
            {"role": "user", "content": f"Convert {c} °C to Fahrenheit."},
            {"role": "assistant", "content": f"{c} × 9/5 + 32 = {f} °F."},
        ]
    }
    for c, f in ((-40, -40), (37, 98.6), (100, 212), (-17.5, 0.5))
]


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory, tokenizer):
    """The user's folder: the README's my_checks.py, held_out.jsonl and YAMLs, their demonstrations, two SFT-like
    outputs (tiny random Llamas, recorded as trained on messages) as runs/my-sft and runs/my-dpr."""
    folder = tmp_path_factory.mktemp("my-task")
    (python,) = readme_blocks("python")
    (held_out,) = readme_blocks("json")
    eval_yaml, preview_yaml = readme_blocks("yaml")
    (folder / "my_checks.py").write_text(python)
    (folder / "held_out.jsonl").write_text(
        held_out
        + "\n".join(
            json.dumps({"prompt": f"Convert {c} °C to Fahrenheit.", "answer": a})
            for c, a in ((100, "212"), (-17.5, "0.5"))
        )
        + "\n"
    )
    (folder / "my_eval.yaml").write_text(eval_yaml)
    (folder / "my_preview.yaml").write_text(preview_yaml)
    (folder / "demonstrations.jsonl").write_text("".join(json.dumps(row) + "\n" for row in DEMONSTRATIONS))
    (folder / "runs").mkdir()
    for name, seed in (("my-sft", 0), ("my-dpr", 2)):  # as `trl-dpr sft` leaves an SFT on the demonstrations
        mark_sft_complete(save_sft_output(folder / "runs" / name, tokenizer, sft_seed=seed), conversational=True)
    return folder


def trl_dpr(folder, *args):
    """`trl-dpr ARGS` as the user runs it from their folder: a new interpreter, the package's console entry point."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "trl_dpr.running.cli", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# Answers planted in the evaluation's answer cache (what each model "said"), and whether each is right, by hand.
PLANTED = {
    "SFT": (["It is -40 °F.", "About 99 °F.", "212 °F.", "I do not know."], [1, 0, 1, 0]),
    "DPR": (["-40.0 °F", "98.6 °F", "100 °F", "It is 0.5 °F."], [1, 1, 0, 1]),
}


def planted_settings(user_folder, name: str) -> dict:
    """The settings the evaluation reads back for `name`'s answers: its folder and the weights saved there now."""
    return {
        "model_path": f"runs/my-{name.lower()}",
        "weights": weights_fingerprint(str(user_folder / "runs" / f"my-{name.lower()}")),
        "backend": "transformers",
        "temperature": 0.7,
        "max_new_tokens": 8,
        "seed": 0,
    }


def test_your_check_decides_the_evaluation_of_your_prompts(user_folder):
    """`trl-dpr evaluate --config my_eval.yaml`: each model's accuracy and DPR's win rate against SFT, by the user's
    function on answers planted in the cache (right or wrong by hand: -40 = -40.0, 98.6 ≠ 99, a decimal, a negative)."""
    for name, (answers, _) in PLANTED.items():
        settings = planted_settings(user_folder, name)
        cache = user_folder / "runs" / "my-eval" / "answers" / "jsonl" / f"{name}.jsonl"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(
            "".join(
                json.dumps({"model": name, "prompt_id": str(i), "turn": 0, "answer": a, "settings": settings}) + "\n"
                for i, a in enumerate(answers)
            )
        )
    run = trl_dpr(
        user_folder,
        "evaluate",
        "--config",
        "my_eval.yaml",
        "--max_new_tokens",
        "8",
        "--generation_backend",
        "transformers",
        "--bootstrap_resamples",
        "200",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((user_folder / "runs" / "my-eval" / "results.json").read_text())
    accuracy = {r["method"]: r["accuracy"] for r in results["accuracy"]}
    assert accuracy == {name: sum(right) / 4 for name, (_, right) in PLANTED.items()}  # 0.5 and 0.75
    sft_right, dpr_right = PLANTED["SFT"][1], PLANTED["DPR"][1]
    by_hand = sum(0.5 if d == s else float(d > s) for d, s in zip(dpr_right, sft_right)) / 4  # ties count ½
    (pairwise,) = results["pairwise"]
    assert pairwise["win_rate"]["win_rate"] == pytest.approx(by_hand) == 0.625
    assert (pairwise["win_rate"]["wins"], pairwise["win_rate"]["ties"], pairwise["win_rate"]["losses"]) == (2, 1, 1)
    assert pairwise["judge"] == "exact-answer:my_checks:fahrenheit"


def test_a_dpr_retrained_in_its_folder_is_evaluated_again_not_from_its_cached_answers(
    user_folder, tmp_path, tokenizer
):
    """`rm -r runs/my-dpr`, train again, `trl-dpr evaluate --config my_eval.yaml` again: DPR's cached answers were made
    by the old weights, so DPR answers again (a warning says so); SFT's, unchanged, are read back."""
    folder = tmp_path / "my-task"
    shutil.copytree(user_folder, folder, ignore=shutil.ignore_patterns("my-eval"))
    cache = folder / "runs" / "my-eval" / "answers" / "jsonl"
    cache.mkdir(parents=True)
    for name, (answers, _) in PLANTED.items():
        settings = planted_settings(folder, name)
        (cache / f"{name}.jsonl").write_text(
            "".join(
                json.dumps({"model": name, "prompt_id": str(i), "turn": 0, "answer": a, "settings": settings}) + "\n"
                for i, a in enumerate(answers)
            )
        )
    evaluate = ("evaluate", "--config", "my_eval.yaml", "--max_new_tokens", "8", "--bootstrap_resamples", "200")
    evaluate += ("--generation_backend", "transformers")
    run = trl_dpr(folder, *evaluate)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((folder / "runs" / "my-eval" / "results.json").read_text())
    assert {r["method"]: r["accuracy"] for r in results["accuracy"]} == {"SFT": 0.5, "DPR": 0.75}  # the planted ones

    shutil.rmtree(folder / "runs" / "my-dpr")  # the README's way to retrain: other weights in the same folder
    save_sft_output(folder / "runs" / "my-dpr", tokenizer, sft_seed=3)
    run = trl_dpr(folder, *evaluate)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "DPR.jsonl was made with other weights" in run.stderr and "SFT.jsonl was made" not in run.stderr
    rows = [json.loads(line) for line in (cache / "DPR.jsonl").read_text().splitlines()]
    answers = [row["answer"] for row in rows]
    assert len(answers) == 4 and not set(answers) & set(PLANTED["DPR"][0])  # sampled again, none of the old ones
    assert {row["settings"]["weights"] for row in rows} == {weights_fingerprint(str(folder / "runs" / "my-dpr"))}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        check = load_answer_check("my_checks:fahrenheit")
    prompts = load_prompt_set("jsonl", str(folder / "held_out.jsonl"))
    right = check(answers, [p.references[0] for p in prompts], [p.as_written() for p in prompts])
    results = json.loads((folder / "runs" / "my-eval" / "results.json").read_text())
    assert {r["method"]: r["accuracy"] for r in results["accuracy"]} == {"SFT": 0.5, "DPR": sum(right) / 4}


def test_a_judge_of_yours_named_as_module_class_decides_the_win_rate(user_folder, tmp_path, monkeypatch):
    """`judge: my_judges:MentionsTheAnswer`, a class in the user's folder (the candidate wins when only it states the
    reference answer): the win rate is the one its verdicts give, counted by hand."""
    from trl_dpr.evaluation import run_evaluation

    (user_folder / "my_judges.py").write_text(
        "class MentionsTheAnswer:\n"
        "    name = 'mentions-the-answer'\n\n"
        "    def judge_pairs(self, pairs):\n"
        "        said = [(p.reference in p.candidate, p.reference in p.baseline) for p in pairs]\n"
        "        return ['tie' if c == b else 'win' if c else 'loss' for c, b in said]\n"
    )
    monkeypatch.chdir(user_folder)
    output = tmp_path / "eval"
    for name, (answers, _) in PLANTED.items():
        settings = planted_settings(user_folder, name)
        cache = output / "answers" / "jsonl" / f"{name}.jsonl"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(
            "".join(
                json.dumps({"model": name, "prompt_id": str(i), "turn": 0, "answer": a, "settings": settings}) + "\n"
                for i, a in enumerate(answers)
            )
        )
    config = EvaluationConfig(
        output_dir=str(output),
        baseline="SFT=runs/my-sft",
        candidates=["DPR=runs/my-dpr"],
        benchmarks=["jsonl"],
        jsonl_path="held_out.jsonl",
        judge="my_judges:MentionsTheAnswer",
        max_new_tokens=8,
        generation_backend="transformers",
        bootstrap_resamples=100,
    )
    report = run_evaluation(config, show_progress=False)
    # -40 in both: tie; 98.6 only in DPR's: win; 212 only in SFT's: loss; 0.5 only in DPR's: win
    (pairwise,) = report.pairwise
    assert pairwise.judge == "mentions-the-answer" and pairwise.win_rate.value == pytest.approx((0.5 + 1 + 0 + 1) / 4)
    assert (pairwise.win_rate.wins, pairwise.win_rate.ties, pairwise.win_rate.losses) == (2, 1, 1)
    assert report.accuracy == []  # no answer check: no accuracy


def test_a_check_written_for_trls_conversational_format_decides_the_evaluation_of_your_sft_file(
    user_folder, tmp_path, monkeypatch
):
    """The SFT file (`messages`) as `jsonl_path`, checked by a function as TRL's docs write a reward function for a
    conversational dataset (`completion[0]["content"]`): it gets message lists, and its verdicts are the README
    check's on the same planted answers (the references are the demonstrations, read by the same pattern)."""
    from trl_dpr.evaluation import run_evaluation

    (user_folder / "chat_checks.py").write_text(
        "import re\n\n"
        "def last(text):\n"
        "    found = re.findall(r'(-?\\d+(?:\\.\\d+)?) ?°F', text)\n"
        "    return float(found[-1]) if found else None\n\n"
        "def fahrenheit(completions, answer, prompts, **kwargs):\n"
        "    assert all(prompt[-1]['role'] == 'user' for prompt in prompts)\n"
        "    contents = [completion[0]['content'] for completion in completions]\n"
        "    return [float(last(c) is not None and abs(last(c) - last(a)) < 0.05) for c, a in zip(contents, answer)]\n"
    )
    monkeypatch.chdir(user_folder)
    output = tmp_path / "eval"
    for name, (answers, _) in PLANTED.items():
        settings = planted_settings(user_folder, name)
        cache = output / "answers" / "jsonl" / f"{name}.jsonl"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(
            "".join(
                json.dumps({"model": name, "prompt_id": str(i), "turn": 0, "answer": a, "settings": settings}) + "\n"
                for i, a in enumerate(answers)
            )
        )
    config = EvaluationConfig(
        output_dir=str(output),
        baseline="SFT=runs/my-sft",
        candidates=["DPR=runs/my-dpr"],
        benchmarks=["jsonl"],
        jsonl_path="demonstrations.jsonl",
        judge="exact",
        answer_check="chat_checks:fahrenheit",
        max_new_tokens=8,
        generation_backend="transformers",
        bootstrap_resamples=100,
    )
    report = run_evaluation(config, show_progress=False)
    accuracy = {r.method: r.accuracy for r in report.accuracy}
    assert accuracy == {name: sum(right) / 4 for name, (_, right) in PLANTED.items()}  # 0.5 and 0.75
    (pairwise,) = report.pairwise
    assert (pairwise.win_rate.wins, pairwise.win_rate.ties, pairwise.win_rate.losses) == (2, 1, 1)


@pytest.mark.parametrize(
    "prompt",
    [
        "Convert 37 °C to Fahrenheit.",
        [{"role": "system", "content": "Answer in °F."}, {"role": "user", "content": "37?"}],
    ],
    ids=["standard", "conversational"],
)
def test_a_check_gets_completions_and_prompts_as_trl_gives_them_to_a_reward_function(prompt):
    from trl.data_utils import is_conversational

    from trl_dpr.evaluation.answer_checks import AnswerCheck

    given = {}

    def record(completions, answer, prompts, **kwargs):
        given.update(completions=completions, answer=answer, prompts=prompts)
        return [1.0] * len(completions)

    AnswerCheck(record, "record")(["98.6 °F", "99 °F"], ["98.6", "98.6"], [prompt, prompt])
    # What GRPOTrainer decodes for each format (without a response parser), and passes on with the prompts unchanged.
    if is_conversational({"prompt": prompt}):
        expected = [[{"role": "assistant", "content": "98.6 °F"}], [{"role": "assistant", "content": "99 °F"}]]
    else:
        expected = ["98.6 °F", "99 °F"]
    assert given == {"completions": expected, "answer": ["98.6", "98.6"], "prompts": [prompt, prompt]}


def test_your_demonstrations_preview_with_your_check_and_it_says_when_it_cannot_tell(user_folder):
    """`trl-dpr preview --config my_preview.yaml` on the SFT file itself (`messages`): the answers are read from the
    assistant's turns by the user's check; a tiny random π_SFT is never right, so the preview cannot tell, and says so."""
    run = trl_dpr(
        user_folder,
        "preview",
        "--config",
        "my_preview.yaml",
        "--dataset_name",
        "demonstrations.jsonl",
        "--num_prompts",
        "4",
        "--samples_per_prompt",
        "3",
        "--min_ess",
        "2",
        "--max_new_tokens",
        "6",
        "--batch_size",
        "12",
        "--bootstrap_resamples",
        "100",
        "--plot",
        "false",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "quality = exact (my_checks:fahrenheit), 4 prompts × 3 samples" in run.stdout
    assert "| cannot tell |" in run.stdout and "nan" not in run.stdout
    assert "Cannot tell: π_SFT was right on none of its 4 × 3 samples" in run.stdout
    summary = json.loads((user_folder / "runs" / "my-preview" / "preview.json").read_text())["summary"]
    assert [row["helps"] for row in summary] == [None, None]  # DPR and wo/Baseline


def test_the_same_demonstrations_are_your_evaluation_prompts(user_folder):
    """The SFT file as `jsonl_path`: the prompt is everything before the assistant's turn (its system message kept),
    the reference is the assistant's text, and the README's check reads the answer out of it."""
    prompts = load_prompt_set("jsonl", str(user_folder / "demonstrations.jsonl"))
    assert [p.turns for p in prompts][1] == ("Convert 37 °C to Fahrenheit.",)
    assert prompts[1].system == "Answer in °F." and prompts[1].references == ("37 × 9/5 + 32 = 98.6 °F.",)
    assert prompts[1].conversation([])[0] == {"role": "system", "content": "Answer in °F."}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(user_folder)
        check = load_answer_check("my_checks:fahrenheit")
    completions = ["-40 °F", "98.60 °F", "213 °F", "0.5 °F"]
    assert check(completions, [p.references[0] for p in prompts]) == [1.0, 1.0, 0.0, 1.0]


def test_every_stage_reads_the_same_prompts_from_the_sft_file_and_the_answers_file(user_folder):
    """One file for all stages: SFT trains on the conversations, and DPR, the preview and the evaluation take the turns
    before the assistant's as the prompt; the prompt + answer file gives the same prompts to the last three (SFT
    refuses it with one line: tests/running/test_bad_input.py)."""
    from trl_dpr.analysis.preview import PreviewConfig, _held_out_rows
    from trl_dpr.data import load_demonstrations
    from trl_dpr.running.pipeline import DPRScriptArguments, dpr_prompts

    demonstrations = str(user_folder / "demonstrations.jsonl")
    expected = sorted(json.dumps(row["messages"][:-1]) for row in DEMONSTRATIONS)  # the file's own rows, cut by hand
    assert load_demonstrations(demonstrations)["messages"] == [row["messages"] for row in DEMONSTRATIONS]  # SFT
    assert (
        sorted(json.dumps(p) for p in dpr_prompts(DPRScriptArguments(dataset_name=demonstrations), 0)["prompt"])
        == expected
    )
    preview = _held_out_rows(PreviewConfig(dataset_name=demonstrations, num_prompts=4))
    assert sorted(json.dumps(p) for p in preview.prompts) == expected
    assert sorted(preview.demonstrations) == sorted(row["messages"][-1]["content"] for row in DEMONSTRATIONS)
    evaluation = load_prompt_set("jsonl", demonstrations)
    assert (
        sorted(
            json.dumps([{"role": "system", "content": p.system}, {"role": "user", "content": p.turns[0]}])
            for p in evaluation
        )
        == expected
    )

    answers = str(user_folder / "held_out.jsonl")
    questions = sorted(
        json.loads(line)["prompt"] for line in (user_folder / "held_out.jsonl").read_text().splitlines()
    )
    assert sorted(dpr_prompts(DPRScriptArguments(dataset_name=answers), 0)["prompt"]) == questions
    assert sorted(_held_out_rows(PreviewConfig(dataset_name=answers, num_prompts=4)).prompts) == questions
    assert sorted(p.turns[0] for p in load_prompt_set("jsonl", answers)) == questions


def test_an_answer_pattern_compares_numbers_as_numbers_and_reads_demonstrations():
    check = pattern_check(r"(-?[0-9.]+) ?°F")
    assert check(["so -40 °F", "98.6°F", "-17.5 °F", "no number"], ["-40.0", "It is 98.60 °F.", "0.5", "1"]) == [
        1.0,
        1.0,
        0.0,
        0.0,
    ]


def test_your_evaluation_file_in_the_other_formats_gives_the_same_prompts(tmp_path):
    rows = {
        "plain": {"prompt": "Convert 37 °C to Fahrenheit.", "answer": "98.6"},
        "chat": {"prompt": [{"role": "user", "content": "Convert 37 °C to Fahrenheit."}], "answer": "98.6"},
        "demonstration": {
            "prompt": [{"role": "user", "content": "Convert 37 °C to Fahrenheit."}],
            "completion": [{"role": "assistant", "content": "It is 98.6 °F."}],
        },
    }
    loaded = {}
    for name, row in rows.items():
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
        (prompt,) = load_prompt_set("jsonl", str(tmp_path / f"{name}.jsonl"))
        loaded[name] = prompt
    assert {p.turns for p in loaded.values()} == {("Convert 37 °C to Fahrenheit.",)}
    assert [p.references for p in loaded.values()] == [("98.6",), ("98.6",), ("It is 98.6 °F.",)]


# ---- one line for each mistake, before any model loads -------------------------------------------------------------


def evaluation(**overrides):
    values = dict(
        baseline="SFT=a",
        candidates=["DPR=b"],
        benchmarks=["jsonl"],
        jsonl_path="p.jsonl",
        judge="exact",
        answer_check="my_checks:fahrenheit",
    )
    return EvaluationConfig(**{**values, **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"jsonl_path": None}, "benchmarks: [jsonl] needs jsonl_path"),
        ({"answer_check": None}, "judge: exact on benchmarks: [jsonl] needs to know a right answer: set answer_check"),
        ({"benchmarks": ["jsonl", "alpaca_eval"]}, "or an LLM judge (openai / local) for ['alpaca_eval']"),
        ({"benchmarks": ["demo"]}, "the embedded task (demo) has its own check"),
        ({"judge": "gpt4"}, "judge must be one of ('openai', 'local', 'exact') or 'module:Class'"),
        (
            {"judge": "my_judges:MentionsTheAnswer", "benchmarks": ["jsonl", "mt_bench"], "answer_check": None},
            "mt_bench is graded 1–10 by a chat model",
        ),
    ],
)
def test_an_evaluation_of_your_task_that_cannot_work_is_refused_by_its_config(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        evaluation(**overrides)


def test_a_check_that_cannot_be_used_says_what_it_needs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad_checks.py").write_text(
        "def one_score(completions, answer, **kw):\n    return [1.0]\n"
        "def percent(completions, answer, **kw):\n    return [100.0 for _ in completions]\n"
        "def crashes(completions, answer, **kw):\n    return [float(a) for a in answer]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="answer_check must be 'module:Name'"):
        load_answer_check("bad_checks.one_score")
    with pytest.raises(ValueError, match="cannot import 'no_such_checks'"):
        load_answer_check("no_such_checks:f")
    with pytest.raises(ValueError, match=r"has no 'missing'; it needs `def missing\(completions, answer"):
        load_answer_check("bad_checks:missing")
    with pytest.raises(ValueError, match="returned a list of 1 for 2 completions"):
        load_answer_check("bad_checks:one_score")(["a", "b"], ["1", "2"])
    with pytest.raises(ValueError, match=r"returned 100.0; each score must be a number in \[0, 1\]"):
        load_answer_check("bad_checks:percent")(["a"], ["1"])
    with pytest.raises(
        ValueError, match="raised ValueError: could not convert string to float.*the first: 'It is 1 °F.'"
    ):
        load_answer_check("bad_checks:crashes")(["a"], ["It is 1 °F."])
    with pytest.raises(ValueError, match="not both"):
        answer_check_from("bad_checks:percent", "(x)")
    with pytest.raises(ValueError, match="is not a regular expression"):
        pattern_check("(unclosed")


def test_a_recipe_naming_a_check_that_does_not_import_exits_2_before_any_model_loads(user_folder, tmp_path, capsys):
    recipe = yaml.safe_load((user_folder / "my_eval.yaml").read_text())
    recipe.update(answer_check="my_chekcs:fahrenheit", output_dir=str(tmp_path / "eval"))
    (user_folder / "typo.yaml").write_text(yaml.safe_dump(recipe))
    from trl_dpr.running.cli import main

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(user_folder)
        with pytest.raises(SystemExit) as exit_code:
            main(["evaluate", "--config", "typo.yaml"])
    assert exit_code.value.code == 2
    assert "answer_check 'my_chekcs:fahrenheit': cannot import 'my_chekcs'" in capsys.readouterr().err
    assert not (tmp_path / "eval" / "answers").exists()
