"""Bad input to SPIN and GSIL (their configs, trainers, losses and recipes) is a clear error that says what was wrong
and what to do, before any generation or training."""

import json

import pytest
import yaml
from datasets import Dataset
from trl import ModelConfig

import trl_dpr.lfd.self_play
from trl_dpr.embedded.task import demo_corpus
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
from trl_dpr.lfd import GSILConfig, SelfPlayScriptArguments, SPINConfig, SPINTrainer
from trl_dpr.lfd.losses import gsil_loss, spin_loss

from .test_losses import as_tensors
from .test_recipes import parse
from .test_spin_gsil import run_args


@pytest.mark.parametrize(
    ("config_class", "overrides", "match"),
    [
        (SPINConfig, {"loss_type": ["ipo"]}, r"loss_type: \['ipo'\] is not used: .*spin_loss_type"),
        (GSILConfig, {"sync_ref_model": True}, "reference is π_t"),
        (GSILConfig, {"ld_alpha": 0.5}, "whole-sequence"),
        (SPINConfig, {"spin_loss_type": "logistic"}, r"one of \('sigmoid', 'hinge'\)"),
        (GSILConfig, {"gsil_loss_type": "sigmoid"}, "'bernoulli' is the logistic loss"),
        (SPINConfig, {"num_iterations": 0}, "num_iterations must be >= 1"),
        (GSILConfig, {"generation_top_p": 0.0}, r"generation_top_p must be in \(0, 1\]"),
        (SPINConfig, {"beta": 0.0}, "beta must be > 0"),
    ],
)
def test_configs_refuse_what_the_methods_would_ignore_or_break(config_class, overrides, match):
    with pytest.raises(ValueError, match=match):
        config_class(output_dir="out", use_cpu=True, bf16=False, **overrides)


def test_each_trainer_refuses_the_other_methods_config(tmp_path):
    tok = build_tokenizer(demo_corpus(size=50))
    with pytest.raises(TypeError, match="SPINTrainer needs a SPINConfig"):
        SPINTrainer(
            model=build_tiny_causal_lm(tok), args=run_args(GSILConfig, tmp_path), train_dataset=Dataset.from_list([{}])
        )


def test_an_unknown_loss_type_is_an_error_that_lists_the_choices():
    args = as_tensors()
    with pytest.raises(ValueError, match=r"one of \('sigmoid', 'hinge'\)"):
        spin_loss(*args, loss_type="logistic")
    with pytest.raises(ValueError, match=r"one of \('bernoulli', 'brier', 'hinge', 'kliep', 'lsif'\)"):
        gsil_loss(*args, loss_type="sigmoid")


def test_log_probabilities_of_different_shapes_are_an_error():
    a, b, c, d = as_tensors()
    with pytest.raises(ValueError, match="one shape"):
        spin_loss(a, b[:2], c, d)
    with pytest.raises(ValueError, match="summed over each completion"):
        gsil_loss(a.unsqueeze(1).expand(-1, 3), b, c, d)


def test_an_unknown_key_in_a_self_play_recipe_is_an_error_that_names_it(tmp_path):
    path = tmp_path / "spin.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path), "num_iteration": 2, "loss_type": "sigmoid"}))
    with pytest.raises(ValueError, match=r"num_iteration \(did you mean num_iterations"):
        parse("spin", path)


class ModelWouldLoad(Exception):
    """Raised where π_0 would load to answer: every check before it passed."""


def long_demonstrations(path, demonstration_words: int):
    """Two prompt/completion rows, the second with a demonstration of `demonstration_words` × 2 characters."""
    rows = [
        {
            "prompt": [{"role": "user", "content": "Add 2 and 3."}],
            "completion": [{"role": "assistant", "content": "5"}],
        },
        {
            "prompt": [{"role": "user", "content": "Count the sevens in this long list of numbers, please."}],
            "completion": [{"role": "assistant", "content": "7 " * demonstration_words}],
        },
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def chat_tokens(tokenizer, messages, generation_prompt: bool) -> int:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def self_play_until_loading(tokenizer, tmp_path, monkeypatch, demonstration_words=4, **overrides):
    """`run_self_play` (SPIN) from a tiny SFT output of 512 positions on `long_demonstrations`, stopped where π_0 loads."""
    from trl_dpr.lfd.self_play import run_self_play

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    rows = long_demonstrations(tmp_path / "demos.jsonl", demonstration_words)

    def load_policy(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.lfd.self_play, "load_policy", load_policy)
    script_args = SelfPlayScriptArguments(dataset_name=str(tmp_path / "demos.jsonl"), num_train_samples=2)
    args = run_args(SPINConfig, tmp_path, **overrides)
    run = lambda: run_self_play(script_args, args, ModelConfig(model_name_or_path=str(sft), dtype="float32"))  # noqa: E731
    return sft, rows, run


@pytest.mark.parametrize("fits", [False, True])
def test_answers_past_the_sft_models_context_are_refused_before_any_generation(tokenizer, tmp_path, monkeypatch, fits):
    """The longest prompt counts as π_t reads it (chat template, generation prompt); a refused run records no settings,
    so that the corrected command is not refused as another run's."""
    longest_prompt = chat_tokens(tokenizer, long_demonstrations(tmp_path / "probe.jsonl", 4)[1]["prompt"], True)
    max_new_tokens = 512 - longest_prompt + (0 if fits else 1)
    sft, _, run = self_play_until_loading(tokenizer, tmp_path, monkeypatch, max_new_tokens=max_new_tokens)
    with pytest.raises(ModelWouldLoad if fits else ValueError) as error:
        run()
    if not fits:
        assert str(error.value) == (
            f"the longest prompt {longest_prompt} + max_new_tokens {max_new_tokens} is more than {sft}'s context of 512 "
            f"tokens (max_position_embeddings in its config.json): lower max_new_tokens to at most {512 - longest_prompt}."
        )
        assert not (tmp_path / "run" / "self_play.json").exists()


@pytest.mark.parametrize("max_length", [1024, None, 512])
def test_demonstration_pairs_past_the_context_are_refused_unless_max_length_cuts_them_to_it(
    tokenizer, tmp_path, monkeypatch, max_length
):
    """A demonstration of 600 tokens: its pair (prompt + demonstration) is longer than the 512 positions; cut at a
    max_length of at most 512 it fits, longer or not cut it does not."""
    sft, rows, run = self_play_until_loading(tokenizer, tmp_path, monkeypatch, 300, max_length=max_length)
    pair = chat_tokens(tokenizer, rows[1]["prompt"] + rows[1]["completion"], False)
    assert pair > 512
    with pytest.raises(ModelWouldLoad if max_length == 512 else ValueError) as error:
        run()
    context = f"{sft}'s context of 512 tokens (max_position_embeddings in its config.json)"
    if max_length == 1024:
        assert str(error.value) == (
            f"max_length 1024 is more than {context}: lower max_length to at most 512. The longest prompt + "
            f"demonstration is {pair} tokens: cut at max_length 1024, it still reaches past the context."
        )
    elif max_length is None:
        assert str(error.value) == (
            "max_length is null, so DPOTrainer does not cut the pairs, and the longest prompt + demonstration "
            f"(prompt 1, counted from 0) is {pair} tokens: more than {context}. Set max_length to at most 512 "
            "(DPOTrainer cuts each pair to it)."
        )


def user_prompts(*contents: str) -> list:
    return [[{"role": "user", "content": content}] for content in contents]


@pytest.mark.parametrize("rows", [1, 3, 1000])
@pytest.mark.parametrize("fits", [False, True])
def test_only_the_prompts_whose_pairs_train_are_answered_and_bound_max_new_tokens(
    tokenizer, tmp_path, monkeypatch, fits, rows
):
    """A prompt of max_length tokens or more leaves no room for a completion: DPOTrainer would drop its pair, so π_t
    does not answer it, and it does not bound max_new_tokens; the longest of the others does. The check returns the
    rows answered; rendered in chunks of `rows` prompts, it finds the same."""
    from trl_dpr.lfd.self_play import check_lengths_fit_context

    from ..conftest import save_sft_output

    monkeypatch.setattr(trl_dpr.lfd.self_play, "_CHECK_ROWS", rows)
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    prompts = user_prompts("Add 2 and 3.", "7 " * 140, "Add 4 and 5, then 6.", "Add 2 and 3.", "7 " * 150)
    tokens = [chat_tokens(tokenizer, prompt, True) for prompt in prompts]
    assert 512 > tokens[4] > tokens[1] >= 256 > tokens[2] > max(tokens[0], tokens[3])
    kept = [i for i, n in enumerate(tokens) if n < 256]  # max_length 256: DPOTrainer keeps a prompt shorter than it
    assert kept == [0, 2, 3]
    args = run_args(SPINConfig, tmp_path, max_length=256, max_new_tokens=512 - tokens[2] + (0 if fits else 1))
    demonstrations = [[{"role": "assistant", "content": "5"}]] * len(prompts)
    if fits:  # far more than the dropped prompts 1 and 4 leave room for
        assert check_lengths_fit_context(str(sft), tokenizer, prompts, demonstrations, args) == kept
        return
    with pytest.raises(ValueError) as error:
        check_lengths_fit_context(str(sft), tokenizer, prompts, demonstrations, args)
    assert str(error.value) == (
        f"the longest prompt {tokens[2]} + max_new_tokens {args.max_new_tokens} is more than {sft}'s context of 512 "
        f"tokens (max_position_embeddings in its config.json): lower max_new_tokens to at most {512 - tokens[2]}."
    )


def test_prompts_that_all_fill_max_length_are_refused_before_any_answer_is_generated(tokenizer, tmp_path):
    """Every pair would be dropped: nothing would be trained after π_t answered every prompt."""
    from trl_dpr.lfd.self_play import check_lengths_fit_context

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    prompts = user_prompts("Add 2 and 3.", "Add 4 and 5.")
    shortest = min(chat_tokens(tokenizer, prompt, True) for prompt in prompts)
    demonstrations = [[{"role": "assistant", "content": "5"}]] * 2
    check_lengths_fit_context(
        str(sft), tokenizer, prompts, demonstrations, run_args(SPINConfig, tmp_path, max_length=shortest + 1)
    )
    with pytest.raises(ValueError) as error:
        check_lengths_fit_context(
            str(sft), tokenizer, prompts, demonstrations, run_args(SPINConfig, tmp_path, max_length=shortest)
        )
    assert str(error.value) == (
        f"Every one of the 2 prompts is max_length ({shortest}) tokens or more: DPOTrainer would drop every pair, and "
        "nothing would be trained. Raise max_length, or use shorter prompts."
    )
    # A model whose context cannot be read (no config.json to read) is refused the same: it needs no context.
    (sft / "config.json").unlink()
    with pytest.raises(ValueError, match="Every one of the 2 prompts"):
        check_lengths_fit_context(
            str(sft), tokenizer, prompts, demonstrations, run_args(SPINConfig, tmp_path, max_length=shortest)
        )


@pytest.mark.parametrize("config_class", [SPINConfig, GSILConfig])
def test_truncation_mode_keep_end_is_refused_as_self_play_drops_pairs_as_keep_start_does(tmp_path, config_class):
    """DPOTrainer keeps a long prompt's pair under keep_end (cutting the prompt's start); self-play's trainer drops it
    under any mode (`trains_on_prompt`): a keep_end run would silently train on fewer pairs than the user expects."""
    with pytest.raises(ValueError) as error:
        run_args(config_class, tmp_path, truncation_mode="keep_end")
    assert str(error.value) == (
        "truncation_mode 'keep_end' is not supported by self-play: its trainer drops a pair whose prompt reaches "
        "max_length, as DPOTrainer does with keep_start. Set truncation_mode: keep_start (the default)."
    )
    assert run_args(config_class, tmp_path).truncation_mode == "keep_start"


def test_the_check_and_the_trainer_drop_the_same_pairs(tmp_path):
    """`SelfPlayTrainer._prepare_dataset` keeps the pairs whose prompt is shorter than max_length, as DPOTrainer does:
    the rule `check_lengths_fit_context` counts by."""
    from trl_dpr.lfd.trainer import SelfPlayTrainer

    pairs = Dataset.from_list(
        [{"prompt_ids": [1] * n, "chosen_ids": [2], "rejected_ids": [3]} for n in (254, 255, 256, 257, 3)]
    )
    args = run_args(SPINConfig, tmp_path, max_length=256)
    kept = SelfPlayTrainer._prepare_dataset(None, pairs, None, args, "train")
    assert [len(ids) for ids in kept["prompt_ids"]] == [254, 255, 3]


@pytest.mark.parametrize("rows", [2, 1000])
def test_prompts_that_alone_fill_the_context_are_counted_and_the_longest_is_named(
    tokenizer, tmp_path, monkeypatch, rows
):
    """Not cut (max_length null), prompts of the context's length or more leave no room for an answer: how many, and
    the longest's row (in another chunk of `rows` than the first), so that they can be found and left out."""
    from trl_dpr.lfd.self_play import check_lengths_fit_context

    from ..conftest import save_sft_output

    monkeypatch.setattr(trl_dpr.lfd.self_play, "_CHECK_ROWS", rows)
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    prompts = user_prompts("Add 2 and 3.", "7 " * 600, "Add 2 and 3.", "7 " * 700, "7 " * 650)
    tokens = [chat_tokens(tokenizer, prompt, True) for prompt in prompts]
    assert sorted(tokens)[-3] >= 512 and tokens[3] == max(tokens)
    args = run_args(SPINConfig, tmp_path, max_length=None, max_new_tokens=8)
    with pytest.raises(ValueError) as error:
        check_lengths_fit_context(str(sft), tokenizer, prompts, [[{"role": "assistant", "content": "5"}]] * 5, args)
    assert str(error.value) == (
        f"the longest prompt {tokens[3]} + max_new_tokens 8 is more than {sft}'s context of 512 tokens "
        "(max_position_embeddings in its config.json): the longest prompt alone fills it: 3 of the 5 prompts are 512 "
        "tokens or more (the longest is prompt 3, counted from 0): leave them out of the dataset, or use a model with "
        "a longer context."
    )


def test_only_the_main_process_measures_the_prompts_and_every_process_stops_on_its_verdict(
    tokenizer, tmp_path, monkeypatch
):
    """Rendering every prompt is the main process's job; another process takes its verdict (broadcast) and raises it,
    rather than measuring again or waiting at the next barrier for a run that stopped."""
    from types import SimpleNamespace

    _, _, run = self_play_until_loading(tokenizer, tmp_path, monkeypatch)
    measured, sent = [], []
    monkeypatch.setattr(trl_dpr.lfd.self_play, "check_lengths_fit_context", lambda *args: measured.append(args))
    monkeypatch.setattr(trl_dpr.lfd.self_play, "PartialState", lambda: SimpleNamespace(is_main_process=False))

    def broadcast_object_list(objects):
        sent.append(list(objects))
        return ["max_new_tokens 9 is more than the context (the main process's verdict)"]

    monkeypatch.setattr(trl_dpr.lfd.self_play, "broadcast_object_list", broadcast_object_list)
    with pytest.raises(
        ValueError, match=r"^max_new_tokens 9 is more than the context \(the main process's verdict\)$"
    ):
        run()
    assert measured == [] and sent == [[None]]
    assert not (tmp_path / "run" / "self_play.json").exists()


@pytest.mark.parametrize("on_messages", [True, False])
def test_string_demonstrations_for_a_pi_0_trained_on_messages_are_said_in_one_line(
    tokenizer, tmp_path, monkeypatch, caplog, on_messages
):
    """Self-play renders a demonstration as its file writes it: raw text here, which a π_0 on messages never read."""
    import logging

    from trl_dpr.lfd.self_play import run_self_play
    from trl_dpr.reference_manifest import mark_sft_complete

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    mark_sft_complete(sft, conversational=on_messages)
    demos = tmp_path / "demos.jsonl"
    demos.write_text(
        "".join(json.dumps({"prompt": f"Add 2 and {n}.", "completion": f"{n + 2}"}) + "\n" for n in (3, 4))
    )

    def load_policy(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.lfd.self_play, "load_policy", load_policy)
    with caplog.at_level(logging.WARNING, logger="trl_dpr.lfd.self_play"), pytest.raises(ModelWouldLoad):
        run_self_play(
            SelfPlayScriptArguments(dataset_name=str(demos), num_train_samples=2),
            run_args(SPINConfig, tmp_path),
            ModelConfig(model_name_or_path=str(sft), dtype="float32"),
        )
    said = [m for m in caplog.messages if "was trained on chat messages" in m]
    assert said == (
        [
            f"SPIN: π_0 ({sft}) was trained on chat messages, but {demos}'s prompts are strings: self-play renders them "
            "as raw text, as the file writes them. Give a `messages` file to train on what π_0 learned to read."
        ]
        if on_messages
        else []
    )
