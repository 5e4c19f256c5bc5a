"""Bad input to the evaluation (its settings, its recipe, the win-rate callback, the judges, the prompt files) is a
clear error that says what was wrong, before any answer is generated or judged."""

import json

import pytest
import yaml

from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.evaluation import (
    EvaluationConfig,
    ExactAnswerJudge,
    LocalChatModel,
    OpenAIChatModel,
    WinRateCallback,
    combine_orders,
    load_prompt_set,
)
from trl_dpr.evaluation.prompt_sets import read_json_rows

from .test_evaluation_run import load_recipe
from .test_prompt_sets import LIMA_ROWS, write_jsonl
from .test_win_rate_callback import held_out, make_trainer


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"judge": "exact", "benchmarks": ["alpaca_eval"]}, "only the embedded task"),
        ({"benchmarks": ["alpacaeval"]}, "Unknown benchmarks"),
        ({"candidates": ["runs/dpr"]}, "NAME=PATH"),
        ({"candidates": ["SFT=runs/other"]}, "distinct"),
        ({"position_rule": "majority"}, "position_rule"),
    ],
)
def test_inconsistent_settings_are_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        EvaluationConfig(**{"judge": "exact", "benchmarks": ["demo"], **overrides})


def test_a_config_holding_a_secret_is_refused(tmp_path):
    path = tmp_path / "evaluate.yaml"
    path.write_text(yaml.safe_dump({"judge": "openai", "env": {"OPENAI_API_KEY": "sk-abc"}}))
    with pytest.raises(ValueError, match="Secrets never go in config files"):
        load_recipe().main(["--config", str(path)])
    path.write_text(yaml.safe_dump({"judge": "openai", "judge_api_key_env": "sk-proj-abcdef"}))
    with pytest.raises(ValueError, match="looks like a secret"):
        load_recipe().main(["--config", str(path)])


class ModelWouldLoad(Exception):
    """Raised where a model would be loaded to answer: every check before it passed."""


@pytest.mark.parametrize("fits", [False, True])
def test_answers_past_a_models_context_are_refused_before_any_model_loads(tokenizer, tmp_path, monkeypatch, fits):
    """The longest prompt counts as the model reads it (its chat template, the generation prompt); each model's own
    context: here the baseline's 128 positions, the candidate has 512."""
    import trl_dpr.evaluation.runner
    from trl_dpr.evaluation import run_evaluation

    for name, context in (("sft", 128), ("dpr", 512)):
        build_tiny_causal_lm(tokenizer, max_positions=context).save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    prompts = load_prompt_set("demo", num_prompts=4, seed=0)
    longest = max(
        len(tokenizer(text, add_special_tokens=False)["input_ids"])
        for text in (
            tokenizer.apply_chat_template(p.conversation([]), add_generation_prompt=True, tokenize=False)
            for p in prompts
        )
    )

    def load_answer_generator(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.evaluation.runner, "load_answer_generator", load_answer_generator)
    config = EvaluationConfig(
        baseline=f"SFT={tmp_path / 'sft'}",
        candidates=[f"DPR={tmp_path / 'dpr'}"],
        benchmarks=["demo"],
        demo_num_prompts=4,
        demo_seed=0,
        max_new_tokens=128 - longest + (0 if fits else 1),
        judge="exact",
        generation_backend="transformers",
        output_dir=str(tmp_path / "eval"),
    )
    with pytest.raises(ModelWouldLoad if fits else ValueError) as error:
        run_evaluation(config, show_progress=False)
    if not fits:
        assert str(error.value) == (
            f"the longest demo prompt {longest} + max_new_tokens {129 - longest} is more than model SFT's context of "
            f"128 tokens (max_position_embeddings in its config.json): lower max_new_tokens to at most {128 - longest}."
        )


def test_the_callback_checks_its_inputs(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, max_steps=1)
    prompts, answers = held_out(2)
    with pytest.raises(ValueError, match="2 references for 1 prompts"):
        WinRateCallback(ExactAnswerJudge(), trainer, prompts[:1], references=answers)
    with pytest.raises(ValueError, match="eval_steps"):
        WinRateCallback(ExactAnswerJudge(), trainer, prompts, eval_steps=0)
    with pytest.raises(ValueError, match="at least one"):
        WinRateCallback(ExactAnswerJudge(), trainer, [])


def test_a_local_judge_without_a_chat_template_is_refused(tokenizer):
    copy = type(tokenizer)(tokenizer_object=tokenizer.backend_tokenizer, pad_token="<|pad|>", eos_token="<|end|>")
    with pytest.raises(ValueError, match="no chat template"):
        LocalChatModel(build_tiny_causal_lm(tokenizer), copy)


def test_a_key_in_place_of_the_variable_name_is_refused():
    with pytest.raises(ValueError, match="NAME of an environment variable"):
        OpenAIChatModel(api_key_env="sk-proj-abcdefghijklmnopqrstuvwxyz0123456789")


def test_an_unknown_rule_or_outcome_is_an_error():
    with pytest.raises(ValueError, match="position rule"):
        combine_orders("win", "win", rule="majority")
    with pytest.raises(ValueError, match="Outcomes"):
        combine_orders("won", "win")


def test_a_file_without_the_expected_fields_says_which_are_missing(tmp_path):
    path = write_jsonl(tmp_path / "wrong.jsonl", [{"question": "What is 2+2?"}])
    with pytest.raises(ValueError, match=r"Row 0 of .*wrong.jsonl lacks \['instruction'\]; it has \['question'\]"):
        load_prompt_set("alpaca_eval", path)
    with pytest.raises(ValueError, match=r"lacks \['question_id', 'turns'\]"):
        load_prompt_set("arena_hard", path)


def test_a_missing_file_and_an_unknown_benchmark_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_prompt_set("lima", str(tmp_path / "nowhere.jsonl"))
    with pytest.raises(ValueError, match="Unknown benchmark 'alpacaeval'"):
        load_prompt_set("alpacaeval")


def test_a_broken_jsonl_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(LIMA_ROWS[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match="broken.jsonl:2"):
        read_json_rows(path)
