"""Bad input to the evaluation (its settings, its recipe, the win-rate callback, the judges, the prompt files) is a
clear error that says what was wrong, before any answer is generated or judged."""

import dataclasses
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


@pytest.mark.parametrize("in_yaml", [True, None])
def test_trust_remote_code_of_the_evaluation_yaml_reaches_the_model_loading(tokenizer, tmp_path, monkeypatch, in_yaml):
    """A model whose config is code of its own (`auto_map`) is loaded with the YAML's trust_remote_code (not set:
    false). The loading call is recorded: a model with remote modeling code cannot be fetched offline."""
    import transformers

    from trl_dpr.evaluation import run_evaluation
    from trl_dpr.running.recipe_parser import load_evaluation_config

    from ..running.test_bad_input import save_remote_code_model

    model = save_remote_code_model(tmp_path / "ctx", tokenizer, max_positions=512)
    calls = []

    def from_pretrained(path, **kwargs):
        calls.append((path, kwargs.get("trust_remote_code")))
        raise ModelWouldLoad

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    values = {
        "baseline": f"SFT={model}",
        "candidates": [f"DPR={model}"],
        "benchmarks": ["demo"],
        "demo_num_prompts": 2,
        "max_new_tokens": 4,
        "judge": "exact",
        "generation_backend": "transformers",
        "output_dir": str(tmp_path / "eval"),
    }
    (tmp_path / "evaluate.yaml").write_text(
        yaml.safe_dump(values | ({"trust_remote_code": in_yaml} if in_yaml else {}))
    )
    config = load_evaluation_config(str(tmp_path / "evaluate.yaml"))
    with pytest.raises(ModelWouldLoad):
        run_evaluation(config, show_progress=False)
    assert calls == [(str(model), bool(in_yaml))]


def test_the_context_of_a_remote_code_model_is_checked_with_the_evaluations_trust_remote_code(tokenizer, tmp_path):
    """Trusted, its config is read and answers past its 64 positions are refused; not trusted, it is unreadable here
    (not checked before it loads, where transformers refuses it)."""
    from trl_dpr.evaluation.runner import check_answers_fit_context

    from ..running.test_bad_input import save_remote_code_model

    model = save_remote_code_model(tmp_path / "ctx", tokenizer, max_positions=64)
    config = two_model_evaluation(tokenizer, tmp_path, 512, 512, max_new_tokens=64)
    models = {"SFT": str(model)}
    check_answers_fit_context(config, models)
    with pytest.raises(ValueError, match=r"max_new_tokens 64 is more than model SFT's context of 64 tokens"):
        check_answers_fit_context(dataclasses.replace(config, trust_remote_code=True), models)


def longest_demo_prompt(tokenizer, num_prompts: int = 4) -> int:
    """The tokens of the longest of the demo's first `num_prompts` prompts as the model reads it (chat template)."""
    prompts = load_prompt_set("demo", num_prompts=num_prompts, seed=0)
    rendered = [
        tokenizer.apply_chat_template(p.conversation([]), add_generation_prompt=True, tokenize=False) for p in prompts
    ]
    return max(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in rendered)


def two_model_evaluation(tokenizer, tmp_path, sft_context: int, dpr_context: int, max_new_tokens: int):
    """An exact-judged demo evaluation of SFT and DPR, tiny models of the given contexts saved under tmp_path."""
    for name, context in (("sft", sft_context), ("dpr", dpr_context)):
        build_tiny_causal_lm(tokenizer, max_positions=context).save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    return EvaluationConfig(
        baseline=f"SFT={tmp_path / 'sft'}",
        candidates=[f"DPR={tmp_path / 'dpr'}"],
        benchmarks=["demo"],
        demo_num_prompts=4,
        demo_seed=0,
        max_new_tokens=max_new_tokens,
        judge="exact",
        generation_backend="transformers",
        output_dir=str(tmp_path / "eval"),
    )


def test_answers_past_several_contexts_are_refused_with_the_value_that_fits_them_all(tokenizer, tmp_path):
    """The first model checked (SFT) has room for 40 new tokens, the second (DPR) for 20: 20 fits both."""
    from trl_dpr.evaluation import run_evaluation

    longest = longest_demo_prompt(tokenizer)
    config = two_model_evaluation(tokenizer, tmp_path, longest + 40, longest + 20, max_new_tokens=50)
    with pytest.raises(ValueError) as error:
        run_evaluation(config, show_progress=False)
    assert str(error.value) == (
        f"the longest demo prompt {longest} + max_new_tokens 50 is more than model DPR's context of {longest + 20} "
        "tokens (max_position_embeddings in its config.json): lower max_new_tokens to at most 20."
    )


def test_a_prompt_that_alone_fills_a_models_context_says_what_can_be_done_about_it(tokenizer, tmp_path):
    from trl_dpr.evaluation import run_evaluation

    longest = longest_demo_prompt(tokenizer)
    config = two_model_evaluation(tokenizer, tmp_path, longest, longest + 20, max_new_tokens=8)
    with pytest.raises(ValueError) as error:
        run_evaluation(config, show_progress=False)
    assert str(error.value) == (
        f"the longest demo prompt {longest} + max_new_tokens 8 is more than model SFT's context of {longest} tokens "
        "(max_position_embeddings in its config.json): the longest demo prompt alone fills it: leave demo out of "
        "benchmarks, evaluate fewer of its prompts (max_prompts) so that the longest is left out, or use a model with a "
        "longer context."
    )


class Answers:
    """A generator that answers every prompt with the same text, without a model."""

    def __init__(self, *args, **kwargs):
        pass

    def generate(self, conversations):
        return ["The answer is 7."] * len(conversations)


def test_a_model_whose_answers_are_all_cached_is_not_refused_for_its_context(tokenizer, tmp_path, monkeypatch):
    """Its answers were cached when its config said 512 positions; it now says fewer, but no model loads."""
    import trl_dpr.evaluation.runner
    from trl_dpr.evaluation import run_evaluation

    longest = longest_demo_prompt(tokenizer)
    config = two_model_evaluation(tokenizer, tmp_path, 512, 512, max_new_tokens=32)
    monkeypatch.setattr(trl_dpr.evaluation.runner, "load_answer_generator", Answers)
    run_evaluation(config, show_progress=False)  # every answer cached
    sft_config = json.loads((tmp_path / "sft" / "config.json").read_text())  # the same weights, a shorter context
    sft_config["max_position_embeddings"] = longest + 16  # 16 < 32
    (tmp_path / "sft" / "config.json").write_text(json.dumps(sft_config))

    def load_answer_generator(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.evaluation.runner, "load_answer_generator", load_answer_generator)
    report = run_evaluation(config, show_progress=False)
    assert {result.method for result in report.accuracy} == {"SFT", "DPR"}


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


def test_a_json_file_is_a_list_or_one_object_per_line_as_datasets_reads_it_and_a_bad_line_is_named(tmp_path):
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "lines.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_json_rows(tmp_path / "list.json") == read_json_rows(tmp_path / "lines.json") == rows
    (tmp_path / "cut.json").write_text('[{"prompt": "a"},\n {"prom')
    with pytest.raises(ValueError, match=r"cut\.json:2 is not valid JSON .*expected a list of objects"):
        read_json_rows(tmp_path / "cut.json")
    (tmp_path / "list_line.jsonl").write_text(json.dumps(rows[0]) + "\n[1, 2]\n")
    with pytest.raises(ValueError, match=r"list_line\.jsonl:2 is not a JSON object \(a list\)"):
        read_json_rows(tmp_path / "list_line.jsonl")


def test_a_jsonl_file_with_a_byte_order_mark_or_a_line_separator_in_a_string_reads_as_datasets_reads_it(tmp_path):
    """A file saved with a UTF-8 byte-order mark, and a string holding U+2028 or U+0085 (json.dumps with
    ensure_ascii=False leaves them unescaped; str.splitlines splits at them): `datasets` reads both, so must the one
    reader that checks a user's file before it (a false refusal otherwise). `datasets` itself is the reference."""
    from datasets import load_dataset

    from trl_dpr.data import load_demonstrations

    rows = [
        {
            "messages": [
                {"role": "user", "content": f"line\u2028break {n}\u0085"},
                {"role": "assistant", "content": "ok"},
            ]
        }
        for n in range(3)
    ]
    path = tmp_path / "marked.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())
    assert read_json_rows(path) == list(load_dataset("json", data_files=str(path), split="train")) == rows
    assert list(load_demonstrations(str(path))) == rows
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(rows[0], ensure_ascii=False) + "\n" + '{"messages": [\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl:2 is not a JSON object"):
        load_demonstrations(str(broken))  # `datasets` fails first; the one reader names the line
