"""SPIN and GSIL (`trl_dpr.lfd`): the configs, the trainers' losses against an independent forward, the cached answers,
and short self-play runs on tiny models where each iteration answers with, and trains against, the previous iterate."""

import copy
import doctest
import inspect
import json
import math

import pytest
import torch
from datasets import Dataset
from trl import DPOConfig, DPOTrainer, ModelConfig

import trl_dpr.lfd.config
import trl_dpr.lfd.self_play
from trl_dpr.embedded import load_demonstrations
from trl_dpr.embedded.task import demo_corpus
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
from trl_dpr.evaluation.sampling import sample_completions
from trl_dpr.lfd import GSILConfig, GSILTrainer, SelfPlayScriptArguments, SPINConfig, SPINTrainer, run_self_play
from trl_dpr.lfd.losses import GSIL_LOSSES
from trl_dpr.lfd.self_play import answer_prompts, demonstration_pairs, load_policy, prompts_and_demonstrations
from trl_dpr.token_batches import render_prompts

PROMPTS = [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(6)]
DEMOS = [[{"role": "assistant", "content": f"{i}+{2 * i}={3 * i}. The answer is {3 * i}."}] for i in range(6)]


def run_args(config_class, tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=3,
        max_steps=2,
        learning_rate=1e-2,
        warmup_steps=0,
        max_new_tokens=6,
        generation_batch_size=4,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    values.update(overrides)
    return config_class(**values)


def sampled_pairs(tokenizer, model, seed=0):
    """Pairs as self-play builds them: the demonstrations, and `model`'s answers with their sampled ids."""
    samples = sample_completions(model, tokenizer, PROMPTS, max_new_tokens=6, seed=seed)
    answers = [
        {"prompt_index": s.prompt_index, "prompt_ids": s.prompt_ids, "completion_ids": s.completion_ids}
        for s in samples
    ]
    return demonstration_pairs(tokenizer, PROMPTS, DEMOS, answers)


def sequence_logps(model, prompt_ids, completion_ids) -> float:
    """log π(completion | prompt) by a plain forward and a float64 sum over the completion tokens."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0].double()
    logps = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids)
    return sum(logps[t - 1, ids[0, t]].item() for t in range(start, ids.size(1)))


# ---- configs --------------------------------------------------------------------------------------------------------


def test_spin_config_defaults_are_spins():
    args = SPINConfig(output_dir="out", use_cpu=True, bf16=False)
    assert (args.beta, args.spin_loss_type, args.num_iterations, args.previous_iteration_pairs) == (
        0.1,
        "sigmoid",
        4,
        True,
    )
    assert (args.generation_temperature, args.generation_top_p, args.max_new_tokens) == (0.8, 0.95, 256)
    assert (args.learning_rate, args.optim.value, args.lr_scheduler_type.value, args.warmup_steps) == (
        5e-7,
        "rmsprop",
        "linear",
        0.1,
    )
    assert args.num_train_epochs == 3


def test_gsil_config_defaults_are_gsils():
    args = GSILConfig(output_dir="out", use_cpu=True, bf16=False)
    assert (args.beta, args.gsil_loss_type, args.gsil_shift, args.num_iterations) == (0.1, "bernoulli", 0.0, 1)
    assert (args.generation_temperature, args.max_new_tokens, args.previous_iteration_pairs) == (0.0, 256, False)
    assert (args.learning_rate, args.optim.value, args.num_train_epochs) == (5e-7, "rmsprop", 1)


# ---- the trainers' losses -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_class", "loss_type"),
    [(SPINConfig, "sigmoid"), (SPINConfig, "hinge"), *[(GSILConfig, t) for t in GSIL_LOSSES]],
)
def test_the_trainer_loss_is_the_methods_loss_of_independently_computed_log_probs(config_class, loss_type, tmp_path):
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    policy, ref = build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1)  # π_t ≠ π_θ: non-zero ratios
    pairs = sampled_pairs(tok, policy)
    expected = []
    beta, shift = 0.3, 0.5 if config_class is GSILConfig else 0.0
    for row in pairs:
        real = sequence_logps(policy, row["prompt_ids"], row["chosen_ids"]) - sequence_logps(
            ref, row["prompt_ids"], row["chosen_ids"]
        )
        gen = sequence_logps(policy, row["prompt_ids"], row["rejected_ids"]) - sequence_logps(
            ref, row["prompt_ids"], row["rejected_ids"]
        )
        if config_class is SPINConfig:
            t = beta * (real - gen)
            expected.append(math.log1p(math.exp(-t)) if loss_type == "sigmoid" else max(0.0, 1.0 - t))
        else:
            f_real, f_gen = beta * real + shift, beta * gen + shift
            sig = 1 / (1 + math.exp(-f_real)), 1 / (1 + math.exp(-f_gen))
            expected.append(
                {
                    "bernoulli": -math.log(sig[0]) - math.log(1 - sig[1]),
                    "brier": (1 - sig[0]) ** 2 + sig[1] ** 2,
                    "hinge": max(0.0, 1 - f_real) + max(0.0, 1 + f_gen),
                    "kliep": -f_real + math.exp(f_gen),
                    "lsif": -math.exp(f_real) + 0.5 * math.exp(2 * f_gen),
                }[loss_type]
            )
    method = (
        {"spin_loss_type": loss_type}
        if config_class is SPINConfig
        else {"gsil_loss_type": loss_type, "gsil_shift": shift}
    )
    args = run_args(config_class, tmp_path, beta=beta, **method)
    trainer_class = SPINTrainer if config_class is SPINConfig else GSILTrainer
    trainer = trainer_class(model=policy, ref_model=ref, args=args, train_dataset=pairs, processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(pairs))])
    loss = trainer.compute_loss(trainer.model, batch)
    assert loss.item() == pytest.approx(sum(expected) / len(expected), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize(
    ("trainer_class", "config_class", "paper", "tag"),
    [(SPINTrainer, SPINConfig, "2401.01335", "spin"), (GSILTrainer, GSILConfig, "2410.10093", "gsil")],
)
def test_the_model_card_names_the_method_and_cites_its_paper(trainer_class, config_class, paper, tag, tmp_path):
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    model = build_tiny_causal_lm(tok, seed=0)
    trainer = trainer_class(
        model=model,
        ref_model=copy.deepcopy(model),
        args=run_args(config_class, tmp_path),
        train_dataset=sampled_pairs(tok, model),
        processing_class=tok,
    )
    trainer.create_model_card(model_name="tiny", dataset_name="trl_dpr/embedded-demo")
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"huggingface.co/papers/{paper}" in card and f"arXiv:{paper}" in card
    assert f"- {tag}" in card and f"with {trainer_class._name}" in card


def test_spin_is_dpo_against_the_previous_iterate(tmp_path):
    """On text pairs, SPINTrainer's loss equals TRL's DPOTrainer sigmoid loss with the same reference."""
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    text = Dataset.from_list(
        [
            {"prompt": p, "chosen": d, "rejected": [{"role": "assistant", "content": "no idea"}]}
            for p, d in zip(PROMPTS, DEMOS)
        ]
    )
    policy, ref = build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1)
    spin = SPINTrainer(
        model=copy.deepcopy(policy),
        ref_model=copy.deepcopy(ref),
        args=run_args(SPINConfig, tmp_path, beta=0.7),
        train_dataset=text,
        processing_class=tok,
    )
    dpo_args = DPOConfig(output_dir=str(tmp_path / "dpo"), beta=0.7, use_cpu=True, bf16=False, report_to="none")
    dpo = DPOTrainer(
        model=copy.deepcopy(policy),
        ref_model=copy.deepcopy(ref),
        args=dpo_args,
        train_dataset=text,
        processing_class=tok,
    )
    rows = [spin.train_dataset[i] for i in range(len(text))]
    assert rows == [dpo.train_dataset[i] for i in range(len(text))]  # text pairs go through DPOTrainer's tokenization
    batch = spin.data_collator(rows)
    assert spin.compute_loss(spin.model, batch).item() == pytest.approx(
        dpo.compute_loss(dpo.model, batch).item(), rel=1e-6
    )


def test_pairs_are_trained_on_the_ids_that_were_sampled(tmp_path):
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    model = build_tiny_causal_lm(tok, seed=0)
    pairs = sampled_pairs(tok, model)
    trainer = GSILTrainer(
        model=model,
        ref_model=copy.deepcopy(model),
        args=run_args(GSILConfig, tmp_path),
        train_dataset=pairs,
        processing_class=tok,
    )
    assert trainer.train_dataset["rejected_ids"] == pairs["rejected_ids"]  # not decoded and tokenized again
    assert trainer.train_dataset["prompt_ids"] == render_prompts(tok, PROMPTS)
    assert tok.decode(trainer.train_dataset[1]["chosen_ids"]) == DEMOS[1][0]["content"] + tok.eos_token


def test_the_dpo_internals_the_self_play_trainers_rely_on():
    """SelfPlayTrainer overrides DPOTrainer._prepare_dataset and calls compute_ref_log_probs, the fused LM head's
    `log_probs` and the `_metrics` buffers: named here so that a TRL upgrade that moves them fails with a message."""
    from ..core.test_trl_contract import check_method, contract

    used_by = "trl_dpr.lfd.trainer.SelfPlayTrainer"
    check_method(DPOTrainer, "_prepare_dataset", ["dataset", "processing_class", "args", "dataset_name"], used_by)
    check_method(DPOTrainer, "compute_ref_log_probs", ["model", "inputs"], used_by)
    source = inspect.getsource(DPOTrainer)
    for name in (
        "fused_lm_head=True",
        ".log_probs",
        "self._metrics[mode]",
        "self.precompute_ref_logps",
        '"completion_mask"',
    ):
        contract(name in source, f"DPOTrainer no longer uses {name}", used_by)


# ---- π_t's answers, cached -------------------------------------------------------------------------------------------


def test_nucleus_sampling_with_a_tiny_top_p_is_greedy_decoding():
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    model = build_tiny_causal_lm(tok, seed=0)
    nucleus = sample_completions(model, tok, PROMPTS, temperature=0.8, top_p=1e-6, max_new_tokens=6, seed=5)
    greedy = sample_completions(model, tok, PROMPTS, temperature=0.0, max_new_tokens=6)
    assert [s.completion_ids for s in nucleus] == [s.completion_ids for s in greedy]
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        sample_completions(model, tok, PROMPTS, top_p=0.0)


def test_an_interrupted_generation_answers_only_the_missing_prompts(tmp_path, monkeypatch):
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    model = build_tiny_causal_lm(tok, seed=0)
    path = tmp_path / "answers.jsonl"
    kwargs = dict(
        temperature=1.0, max_new_tokens=5, batch_size=2, seed=3, settings={"model": "m"}, show_progress=False
    )
    full = answer_prompts(model, tok, PROMPTS, path, **kwargs)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:10])  # killed while writing the third answer
    asked = []
    original = trl_dpr.lfd.self_play.sample_completions
    monkeypatch.setattr(
        trl_dpr.lfd.self_play,
        "sample_completions",
        lambda m, t, prompts, **kw: asked.append(len(prompts)) or original(m, t, prompts, **kw),
    )
    resumed = answer_prompts(model, tok, PROMPTS, path, **kwargs)
    assert asked == [2, 2]  # prompts 2-3 and 4-5; 0-1 come from the file
    assert resumed == full  # same batches, same seeds: the same answers
    with pytest.raises(ValueError, match="other settings.*temperature"):
        answer_prompts(model, tok, PROMPTS, path, **{**kwargs, "temperature": 0.5})


def test_answers_of_some_rows_are_keyed_by_row_and_a_later_call_answers_only_the_rows_missing(tmp_path, monkeypatch):
    """`indices` answers those rows of the prompts, returned in their order and cached under their row; asking for
    every row then generates only the others, and the rows answered first come back unchanged."""
    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    model = build_tiny_causal_lm(tok, seed=0)
    path = tmp_path / "answers.jsonl"
    kwargs = dict(temperature=1.0, max_new_tokens=5, batch_size=2, seed=3, show_progress=False)
    asked = []
    original = trl_dpr.lfd.self_play.sample_completions
    monkeypatch.setattr(
        trl_dpr.lfd.self_play,
        "sample_completions",
        lambda m, t, prompts, **kw: asked.extend(PROMPTS.index(p) for p in prompts) or original(m, t, prompts, **kw),
    )
    some = answer_prompts(model, tok, PROMPTS, path, indices=[4, 0, 2], **kwargs)
    assert [a["prompt_index"] for a in some] == [4, 0, 2] and sorted(asked) == [0, 2, 4]
    assert [a["prompt_ids"] for a in some] == render_prompts(tok, [PROMPTS[i] for i in (4, 0, 2)])
    asked.clear()
    every = answer_prompts(model, tok, PROMPTS, path, **kwargs)
    assert sorted(asked) == [1, 3, 5] and [a["prompt_index"] for a in every] == list(range(6))
    assert [every[i] for i in (4, 0, 2)] == some


# ---- self-play runs -------------------------------------------------------------------------------------------------


def tiny_sft(tmp_path):
    tok = build_tokenizer(demo_corpus(size=300), vocab_size=600)
    sft = tmp_path / "sft"
    build_tiny_causal_lm(tok, seed=0).save_pretrained(sft)
    tok.save_pretrained(sft)
    return tok, sft


def parameters(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def same_parameters(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def record_training(monkeypatch, trainer_class):
    """Wrap `trainer_class.train`: per iteration, the reference's parameters and the training pairs it was given."""
    seen = []
    original = trainer_class.train

    def recording_train(self, *args, **kwargs):
        data = self.train_dataset
        seen.append(
            {
                "ref": parameters(self.ref_model),
                "policy": parameters(self.model),
                "rejected": data["rejected_ids"],
                "iteration": data["iteration"],
                "prompt_index": data["prompt_index"],
                "pairs": data.select_columns(["prompt_ids", "chosen_ids"]).to_list(),
            }
        )
        return original(self, *args, **kwargs)

    monkeypatch.setattr(trainer_class, "train", recording_train)
    return seen


def cached_answers(path) -> dict[int, list[int]]:
    return {r["prompt_index"]: r["completion_ids"] for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow
def test_spin_iterations_answer_with_and_train_against_the_previous_iterate(tmp_path, monkeypatch):
    tok, sft = tiny_sft(tmp_path)
    seen = record_training(monkeypatch, SPINTrainer)
    script = SelfPlayScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=8)
    args = run_args(SPINConfig, tmp_path, num_iterations=2)
    model_args = ModelConfig(model_name_or_path=str(sft), dtype="float32")
    run = run_self_play(script, args, model_args)

    root = tmp_path / "run"
    sft_model = load_policy(str(sft), {"dtype": "float32"})
    after = [load_policy(str(root / f"iteration-{t}"), {"dtype": "float32"}) for t in range(2)]
    # The weights change at every iteration, and the run's folder holds the last iterate.
    assert not same_parameters(parameters(sft_model), parameters(after[0]))
    assert not same_parameters(parameters(after[0]), parameters(after[1]))
    assert same_parameters(parameters(after[1]), parameters(load_policy(str(root), {"dtype": "float32"})))
    # Iteration t starts from and is referenced to the model after iteration t−1 (π_0 = π_SFT).
    for t, before in enumerate([sft_model, after[0]]):
        assert same_parameters(seen[t]["policy"], parameters(before)) and same_parameters(
            seen[t]["ref"], parameters(before)
        )
    # Iteration t's own answers are the ones that model samples: regenerated with the same seed, they are identical.
    prompts = prompts_and_demonstrations(load_demonstrations("trl_dpr/embedded-demo", num_samples=8, seed=0), "demo")[
        0
    ]
    for t, before in enumerate([sft_model, after[0]]):
        regenerated = answer_prompts(
            before,
            tok,
            prompts,
            tmp_path / f"again-{t}.jsonl",
            temperature=args.generation_temperature,
            top_p=args.generation_top_p,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.generation_batch_size,
            seed=args.seed + 100_003 * t,
            show_progress=False,
        )
        cached = cached_answers(root / "generations" / f"iteration-{t}.jsonl")
        assert {a["prompt_index"]: a["completion_ids"] for a in regenerated} == cached
        trained = {
            i: ids for i, ids, it in zip(seen[t]["prompt_index"], seen[t]["rejected"], seen[t]["iteration"]) if it == t
        }
        assert trained == cached  # the rejected answers iteration t trained on
    # SPIN's previous-iteration pairs: iteration 1 trains on iteration 0's answers too.
    assert sorted(set(seen[1]["iteration"])) == [0, 1] and len(seen[1]["rejected"]) == 16
    assert [it["iteration"] for it in run.iterations] == [0, 1] and run.method == "SPIN"

    # A rerun with the same settings trains nothing; raising num_iterations trains only the new iteration.
    seen.clear()
    run_self_play(script, run_args(SPINConfig, tmp_path, num_iterations=2), model_args)
    assert seen == []
    run = run_self_play(script, run_args(SPINConfig, tmp_path, num_iterations=3), model_args)
    assert len(seen) == 1 and sorted(set(seen[0]["iteration"])) == [
        1,
        2,
    ]  # iteration 1's pairs read back from its cache
    assert same_parameters(seen[0]["ref"], parameters(after[1])) and [it["iteration"] for it in run.iterations] == [
        0,
        1,
        2,
    ]
    # Other settings are refused, naming them.
    with pytest.raises(ValueError, match=r"other settings \(learning_rate: 0.01 → 0.02\)"):
        run_self_play(script, run_args(SPINConfig, tmp_path, num_iterations=2, learning_rate=2e-2), model_args)


@pytest.mark.slow
def test_gsil_trains_on_the_current_iterates_greedy_answers(tmp_path, monkeypatch):
    tok, sft = tiny_sft(tmp_path)
    seen = record_training(monkeypatch, GSILTrainer)
    script = SelfPlayScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=8)
    args = run_args(GSILConfig, tmp_path, num_iterations=2, gsil_loss_type="brier")
    run_self_play(script, args, ModelConfig(model_name_or_path=str(sft), dtype="float32"))

    root = tmp_path / "run"
    sft_model = load_policy(str(sft), {"dtype": "float32"})
    after0 = load_policy(str(root / "iteration-0"), {"dtype": "float32"})
    assert not same_parameters(parameters(sft_model), parameters(after0))
    assert same_parameters(seen[1]["ref"], parameters(after0))
    assert set(seen[1]["iteration"]) == {1}  # GSIL keeps no earlier pairs
    prompts = prompts_and_demonstrations(load_demonstrations("trl_dpr/embedded-demo", num_samples=8, seed=0), "demo")[
        0
    ]
    for t, model in enumerate([sft_model, after0]):  # the iterate's greedy answers, generated again here
        greedy = sample_completions(model, tok, prompts, temperature=0.0, max_new_tokens=6)
        assert cached_answers(root / "generations" / f"iteration-{t}.jsonl") == {
            s.prompt_index: s.completion_ids for s in greedy
        }


def varied_demonstrations(path, words=(0, 30, 2, 40, 1, 25)) -> None:
    """prompt/completion rows whose prompts grow with `words` (so that some reach a max_length), one per entry."""
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i}+{2 * i}?" + " seven" * n}],
            "completion": [{"role": "assistant", "content": f"{i}+{2 * i}={3 * i}. The answer is {3 * i}."}],
        }
        for i, n in enumerate(words)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["none", "every prompt answered"])
def test_pi_t_answers_only_the_prompts_whose_pairs_train_and_each_pair_is_its_prompts(
    tmp_path, monkeypatch, capsys, cache
):
    """A prompt of max_length tokens or more would have its pair dropped by DPOTrainer: π_t does not answer it. Each
    pair trained on holds its row's prompt, demonstration and cached answer. A cache of an earlier run that answered
    every prompt (keyed by row) serves the run as it is: nothing is generated again."""
    tok, sft = tiny_sft(tmp_path)
    varied_demonstrations(tmp_path / "demos.jsonl")
    script = SelfPlayScriptArguments(dataset_name=str(tmp_path / "demos.jsonl"))
    prompts, completions = prompts_and_demonstrations(load_demonstrations(str(tmp_path / "demos.jsonl")), "demos")
    lengths = [len(ids) for ids in render_prompts(tok, prompts)]  # the prompt as π_t reads it
    max_length = sorted(lengths)[3]
    kept = [i for i, n in enumerate(lengths) if n < max_length]  # DPOTrainer keeps a prompt shorter than max_length
    assert 1 < len(kept) < len(prompts) - 1
    args = run_args(SPINConfig, tmp_path, num_iterations=1, max_length=max_length, per_device_train_batch_size=1)
    answers_file = tmp_path / "run" / "generations" / "iteration-0.jsonl"
    if cache != "none":  # as the run before this change cached them: every row, with the run's settings
        answer_prompts(
            load_policy(str(sft), {"dtype": "float32"}),
            tok,
            prompts,
            answers_file,
            temperature=args.generation_temperature,
            top_p=args.generation_top_p,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.generation_batch_size,
            seed=args.seed,
            settings={"model": str(sft), "iteration": 0},
            show_progress=False,
        )
    asked = []
    original = trl_dpr.lfd.self_play.sample_completions
    monkeypatch.setattr(
        trl_dpr.lfd.self_play,
        "sample_completions",
        lambda m, t, batch, **kw: asked.extend(map(json.dumps, batch)) or original(m, t, batch, **kw),
    )
    seen = record_training(monkeypatch, SPINTrainer)
    run_self_play(script, args, ModelConfig(model_name_or_path=str(sft), dtype="float32"))

    left_out = len(prompts) - len(kept)
    assert (
        f"{left_out} of the {len(prompts)} prompts are max_length ({max_length}) tokens or more: DPOTrainer would "
        "drop their pairs, so π_t does not answer them." in capsys.readouterr().out
    )
    expected_asked = [] if cache != "none" else sorted(json.dumps(prompts[i]) for i in kept)
    assert sorted(asked) == expected_asked
    cached = cached_answers(answers_file)
    assert sorted(cached) == (kept if cache == "none" else list(range(len(prompts))))
    (trained,) = seen
    assert trained["prompt_index"] == kept and trained["rejected"] == [cached[i] for i in kept]
    pairs = trained["pairs"]
    for row, i in enumerate(kept):
        prompt_ids = render_prompts(tok, [prompts[i]])[0]
        full = tok.apply_chat_template(prompts[i] + completions[i], tokenize=True, return_dict=True)["input_ids"]
        assert pairs[row]["prompt_ids"] == prompt_ids and pairs[row]["chosen_ids"] == list(full[len(prompt_ids) :])


def test_docstring_examples_run(monkeypatch):
    # self_play's helpers are internal: their examples run in tests/lfd/test_helper_examples.py, in the module's namespace
    from .test_helper_examples import CASES

    for module in (trl_dpr.lfd.config, trl_dpr.lfd.self_play):
        result = doctest.testmod(module)
        examples = result.attempted + sum(key.startswith(f"{module.__name__}:") for key in CASES)
        assert result.failed == 0 and examples > 0, module.__name__


def test_a_conversation_that_does_not_end_with_an_answer_gets_the_one_line_every_stage_gives():
    from trl_dpr.data import prompt_and_demonstration, prompts_for_rl

    unanswered = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    rows = Dataset.from_dict({"messages": [unanswered]})
    with pytest.raises(ValueError) as self_play:
        prompts_and_demonstrations(rows, "my-data")
    with pytest.raises(ValueError) as preview_and_evaluation:
        prompt_and_demonstration({"messages": unanswered}, "my-data")
    with pytest.raises(ValueError) as dpr:
        prompts_for_rl(rows, "my-data")
    assert str(self_play.value) == str(preview_and_evaluation.value) == str(dpr.value)
    assert str(self_play.value).startswith("A `messages` row of 'my-data' does not end with an assistant turn after a")
    assert str(self_play.value).endswith("give each conversation its assistant answer last.")
