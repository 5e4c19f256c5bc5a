"""The experiments (experiments/, outside the wheel): the pure pieces on hand-computed numbers, and every script end to
end on a tiny SFT run (4 steps, a checkpoint per step), 1–2 DPR steps and a few held-out prompts."""

import csv
import doctest
import importlib
import json
import math
import random
from pathlib import Path

import pytest
import torch
import yaml
from trl import ModelConfig, SFTConfig

import experiments.auroc
import experiments.dense_plus_outcome
import experiments.figures
import experiments.lengths
import experiments.oracle
import experiments.overrides
import experiments.real_model
import experiments.regime_map
import experiments.sweeps
import experiments.win_rates
from experiments.auroc import auroc, computed_number_rewards, find_computed_numbers
from experiments.lengths import bin_by_length, length_bin_edges
from experiments.oracle import CorrectnessOracleRewardModel
from experiments.overrides import DPR_ARGUMENTS, check_override_keys, parse_with_overrides, to_command_line
from experiments.sweeps import reference_checkpoint
from trl_dpr import CheckpointRewardModel
from trl_dpr.embedded import EMBEDDED_DATASET, EMBEDDED_MODEL
from trl_dpr.embedded.task import demo_corpus
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
from trl_dpr.evaluation.sampling import Sample
from trl_dpr.reference_callback import check_reference_fraction
from trl_dpr.rewards import CheckpointDifference, SFTLogProb
from trl_dpr.running.pipeline import SFTScriptArguments, run_sft
from trl_dpr.running.recipe_parser import RecipeParser
from trl_dpr.token_batches import pad_batch

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def load_script(name):
    return importlib.import_module(f"experiments.{name}")


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def assert_valid_png(path):
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height > 100 and width > 100


def write_yaml(path, values):
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return str(path)


# ---- AUROC ------------------------------------------------------------------------------------------------------


def test_auroc_counts_ties_as_half_a_pair():
    # pairs (p, n): (3,2) 1, (3,1) 1, (2,2) ½, (2,1) 1, (2,2) ½, (2,1) 1 → 5 of 6
    assert auroc([3, 2, 2], [2, 1]) == pytest.approx(5 / 6)


def test_auroc_is_one_for_a_perfect_ranking_zero_for_a_reversed_one_and_half_for_constant_scores():
    assert auroc([5, 6], [1, 2, 3]) == 1.0
    assert auroc([1, 2], [5, 6]) == 0.0
    assert auroc([4, 4], [4, 4, 4]) == 0.5


def test_auroc_agrees_with_counting_every_pair_on_heavily_tied_scores():
    rng = random.Random(0)
    positive = [rng.randint(0, 5) for _ in range(40)]
    negative = [rng.randint(0, 5) for _ in range(30)]
    by_pairs = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative) / (len(positive) * len(negative))
    assert auroc(positive, negative) == pytest.approx(by_pairs)


def test_auroc_is_nan_when_a_class_is_empty():
    assert math.isnan(auroc([], [1.0])) and math.isnan(auroc([1.0], []))


# ---- computed numbers ("a op b = c") ----------------------------------------------------------------------------


def test_the_equation_parser_finds_every_computed_number_and_checks_it_locally():
    text = (
        "For the first 4 hours: 4 * 7 = 28. Overtime hours: 6 - 4 = 2. Overtime pay: 2 * 9 = 19. "
        "Total: 28 + 19 = 47. The answer is 47."
    )
    numbers = find_computed_numbers(text)
    assert [(n.left, n.op, n.right, n.written) for n in numbers] == [
        (4, "*", 7, "28"),
        (6, "-", 4, "2"),
        (2, "*", 9, "19"),
        (28, "+", 19, "47"),
    ]
    assert [n.is_correct for n in numbers] == [True, True, False, True]  # 28 + 19 = 47 is right, given 19
    assert [text[n.start : n.end] for n in numbers] == ["28", "2", "19", "47"]


def test_the_equation_parser_ignores_text_without_a_complete_equation():
    assert find_computed_numbers("The answer is 12. 3 + = 4. 5 * 6 =") == []


def test_number_rewards_sum_the_tokens_of_the_number_and_digits_stop_at_the_first_wrong_one():
    # "17 + 25 = 43": the true value is 42; "4" agrees, "3" is the slip
    tokens = ["1", "7", " +", " ", "2", "5", " =", " ", "4", "3", "."]
    rewards = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.75, -2.5, 9.0]
    numbers, digits = computed_number_rewards(tokens, rewards)
    assert numbers == [(-1.75, False)]
    assert digits == [(0.75, True), (-2.5, False)]


def test_a_correct_number_gives_correct_digits_and_a_token_straddling_the_number_counts_once():
    tokens = ["9", " *", " 8", " = 7", "2", ". The answer is 72."]  # " = 7" holds the first digit
    numbers, digits = computed_number_rewards(tokens, [0, 0, 0, 1.0, 2.0, 5.0])
    assert numbers == [(3.0, True)]
    assert digits == [(1.0, True), (2.0, True)]


def test_digits_after_the_first_wrong_one_are_left_out():
    tokens = ["5", " +", " ", "5", " =", " ", "2", "0", "0"]  # 10 written as 200: "2" is already wrong
    _, digits = computed_number_rewards(tokens, [0, 0, 0, 0, 0, 0, -1.0, -2.0, -3.0])
    assert digits == [(-1.0, False)]


# ---- length bins ------------------------------------------------------------------------------------------------


def test_length_bins_have_equal_width_and_the_longest_response_falls_in_the_last_bin():
    edges = length_bin_edges([10, 14, 30], num_bins=4)
    assert edges == [10.0, 15.0, 20.0, 25.0, 30.0]
    bins = bin_by_length([10, 14, 30], [1.0, 2.0, 3.0], edges)
    assert [b.count for b in bins] == [2, 0, 0, 1]
    assert math.isnan(bins[1].mean)


def test_bin_means_and_standard_errors_match_a_hand_computation():
    bins = bin_by_length([1, 2, 3, 9], [1.0, 2.0, 6.0, 4.0], [0, 5, 10])
    assert (bins[0].count, bins[0].mean) == (3, 3.0)
    # sample variance of (1, 2, 6) = (4 + 1 + 9) / 2 = 7; standard error = √(7 / 3)
    assert bins[0].sem == pytest.approx(math.sqrt(7 / 3))
    assert (bins[1].count, bins[1].mean, bins[1].sem) == (1, 4.0, 0.0)


def test_a_length_outside_the_bins_is_an_error():
    with pytest.raises(ValueError, match="outside the bins"):
        bin_by_length([3, 40], [0.0, 0.0], [0, 10, 20])


# ---- the correctness oracle -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_tokenizer():
    return build_tokenizer(demo_corpus(size=100), vocab_size=400)


def tokenize_pair(tokenizer, prompt, completion):
    prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    return prompt_ids, tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_the_oracle_rewards_the_last_token_of_an_exact_answer_and_nothing_else(demo_tokenizer):
    model = build_tiny_causal_lm(demo_tokenizer, seed=0)
    oracle = CorrectnessOracleRewardModel(model, processing_class=demo_tokenizer)
    add = [{"role": "user", "content": "Mia has 23 apples. She gets 5 more. How many apples does Mia have now?"}]
    sort = [{"role": "user", "content": "Sort these numbers from smallest to largest: 3 1 2."}]
    oracle.add_answers([add, sort], ["28", "1 2 3"])
    pairs = [
        (add, "23 + 5 = 28. The answer is 28."),
        (add, "23 + 5 = 27. The answer is 27."),
        (sort, "The answer is 1 2 3."),
    ]
    samples = [Sample(i, p, *tokenize_pair(demo_tokenizer, p, c), c) for i, (p, c) in enumerate(pairs)]
    prompt_ids, prompt_mask, completion_ids, completion_mask = pad_batch(
        [s.prompt_ids for s in samples], [s.completion_ids for s in samples], demo_tokenizer.pad_token_id
    ).as_tuple()

    scored = oracle(prompt_ids, prompt_mask, completion_ids, completion_mask)

    lengths = completion_mask.sum(dim=1).tolist()
    expected = torch.zeros_like(scored.rewards)
    expected[0, lengths[0] - 1] = 1.0
    expected[2, lengths[2] - 1] = 1.0
    assert torch.equal(scored.rewards, expected)
    plain = CheckpointRewardModel(model, reward=SFTLogProb(), processing_class=demo_tokenizer)
    reference = plain(prompt_ids, prompt_mask, completion_ids, completion_mask).sft_logps
    torch.testing.assert_close(scored.sft_logps, reference)  # π_SFT's log-probs, for DPR's KL term
    assert scored.ref_logps is None


def test_the_oracle_refuses_a_prompt_it_has_no_answer_for(demo_tokenizer):
    oracle = CorrectnessOracleRewardModel(build_tiny_causal_lm(demo_tokenizer), processing_class=demo_tokenizer)
    with pytest.raises(KeyError, match="add_answers"):
        oracle.score_text([[{"role": "user", "content": "What is 2 + 2?"}]], ["The answer is 4."])


def test_the_oracle_takes_no_reference_model(demo_tokenizer):
    model = build_tiny_causal_lm(demo_tokenizer)
    with pytest.raises(ValueError, match="dense_reward: trl_dpr.rewards:SFTLogProb"):
        CorrectnessOracleRewardModel(model, model, CheckpointDifference(), processing_class=demo_tokenizer)


# ---- configs and reference checkpoints --------------------------------------------------------------------------


def test_a_variant_overrides_both_the_yaml_and_the_command_line(tmp_path):
    config = write_yaml(
        tmp_path / "dpr.yaml", {"output_dir": str(tmp_path / "sweep"), "kl_coef": 0.1, "gamma": 0.9, "use_cpu": True}
    )
    argv = ["--config", config, "--kl_coef", "0.3"]
    _, args, _ = parse_with_overrides(
        DPR_ARGUMENTS, argv, {"gamma": 0.95, "whiten_advantages": False, "output_dir": str(tmp_path / "sweep" / "g")}
    )
    assert (args.gamma, args.kl_coef, args.whiten_advantages) == (0.95, 0.3, False)
    assert args.output_dir == str(tmp_path / "sweep" / "g")
    _, again, _ = parse_with_overrides(DPR_ARGUMENTS, argv, {})
    assert (again.gamma, again.whiten_advantages) == (0.9, True)  # nothing leaks from one variant into the next


def test_unknown_variant_keys_are_an_error_that_names_them():
    with pytest.raises(ValueError, match="variant 'x': unknown key\\(s\\) learnin_rate"):
        check_override_keys(
            {"learnin_rate": 1e-4, "oracle": True, "kl_coef": 0.2}, DPR_ARGUMENTS, {"oracle"}, "variant 'x'"
        )


def test_values_become_command_line_words():
    assert to_command_line({"learning_rate": 3e-05, "oracle": True, "gammas": [0.9, 1.0]}) == [
        "--learning_rate",
        "3e-05",
        "--oracle",
        "true",
        "--gammas",
        "0.9",
        "1.0",
    ]
    with pytest.raises(ValueError, match="null"):
        to_command_line({"ref_model_name_or_path": None})


@pytest.mark.parametrize(
    "script, arguments, yaml_name",
    [
        ("gamma_sweep", ("GammaSweepArguments", *DPR_ARGUMENTS), "gamma_sweep_demo.yaml"),
        ("reference_sweep", ("ReferenceSweepArguments", *DPR_ARGUMENTS), "reference_sweep_demo.yaml"),
        ("settings_sweep", ("SettingsSweepArguments", *DPR_ARGUMENTS), "settings_sweep_demo.yaml"),
        ("dense_plus_outcome", ("DensePlusOutcomeArguments", *DPR_ARGUMENTS), "dense_plus_outcome_demo.yaml"),
        ("length_analysis", ("LengthAnalysisArguments",), "length_analysis_demo.yaml"),
        ("reward_diagnostics", ("RewardDiagnosticsArguments",), "reward_diagnostics_demo.yaml"),
        ("regime_scan", ("RegimeScanArguments",), "regime_scan_demo.yaml"),
    ],
)
def test_every_shipped_analysis_yaml_parses_with_its_script(script, arguments, yaml_name):
    """A stale or misspelled key in a shipped YAML would only fail when a user runs the (long) analysis."""
    module = load_script(script)
    types = tuple(getattr(module, t) if isinstance(t, str) else t for t in arguments)
    parsed = RecipeParser(types).parse_args_and_config(["--config", str(EXPERIMENTS / "configs" / yaml_name)])
    if script == "settings_sweep":
        variants = parsed[0].variants
        assert len(variants) == 19  # one per row of experiments/README.md's settings table
        for name, overrides in variants.items():
            keys = {k: v for k, v in overrides.items() if k != "reference_fraction"}
            check_override_keys(keys, DPR_ARGUMENTS, {"oracle"}, f"variant {name!r}")
    if script == "regime_scan":
        assert len(parsed[0].grid) == 11  # one per row of the README's regime table
        for name, overrides in parsed[0].grid.items():
            check_override_keys(overrides, module.SFT_ARGUMENTS, (), f"point {name!r}")


def fake_checkpoints(root, steps, total):
    for step in steps:
        folder = root / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": total}))


def test_the_reference_at_alpha_is_the_checkpoint_at_step_floor_alpha_n(tmp_path):
    fake_checkpoints(tmp_path, [60, 120, 180, 600], total=600)
    assert reference_checkpoint(tmp_path, 0.1).endswith("checkpoint-60")
    assert reference_checkpoint(tmp_path, 0.3).endswith("checkpoint-180")  # ⌊0.3·600⌋ = 180


def test_a_reference_step_that_was_not_saved_is_an_error_naming_the_saved_steps(tmp_path):
    fake_checkpoints(tmp_path, [60, 120], total=600)
    with pytest.raises(FileNotFoundError, match=r"step ⌊0.25·600⌋ = 150 .* saved steps \[60, 120\]"):
        reference_checkpoint(tmp_path, 0.25)
    with pytest.raises(ValueError, match="strictly between 0 and 1") as refused:
        reference_checkpoint(tmp_path, 1.0)
    with pytest.raises(ValueError) as library:  # α's one check, whose message tests/house/test_each_rule_once.py pins
        check_reference_fraction(1.0)
    assert str(refused.value) == str(library.value)


def test_docstring_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)  # examples read recipes/evaluate/demo.yaml
    for module in (
        experiments.overrides,
        experiments.figures,
        experiments.oracle,
        experiments.auroc,
        experiments.lengths,
        experiments.sweeps,
        experiments.win_rates,
        experiments.dense_plus_outcome,
        experiments.real_model,
        experiments.regime_map,
    ):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, module.__name__


# ---- the scripts, end to end ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_sft(tmp_path_factory):
    """An SFT output of the embedded tiny Llama after 4 steps, with π_ref at step 2 and a checkpoint at every step."""
    output_dir = tmp_path_factory.mktemp("analysis") / "sft"
    run_sft(
        SFTScriptArguments(dataset_name=EMBEDDED_DATASET, num_train_samples=64),
        SFTConfig(
            output_dir=str(output_dir),
            max_steps=4,
            per_device_train_batch_size=8,
            learning_rate=1e-3,
            max_length=128,
            save_strategy="steps",
            save_steps=1,
            save_only_model=True,
            use_cpu=True,
            bf16=False,
            report_to="none",
            gradient_checkpointing=False,
            seed=0,
            disable_tqdm=True,
        ),
        ModelConfig(model_name_or_path=EMBEDDED_MODEL, dtype="float32"),
    )
    return output_dir


def dpr_settings(sft_dir, output_dir):
    return {
        "model_name_or_path": str(sft_dir),
        "dtype": "float32",
        "dataset_name": EMBEDDED_DATASET,
        "num_train_samples": 64,
        "output_dir": str(output_dir),
        "max_steps": 2,
        "warmup_steps": 0,
        "per_device_train_batch_size": 4,
        "learning_rate": 1e-3,
        "max_completion_length": 8,
        "bf16": False,
        "use_cpu": True,
        "save_strategy": "no",
        "report_to": "none",
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "logging_steps": 1,
        "seed": 0,
    }


def evaluation_yaml(path):
    return write_yaml(
        path,
        {
            "output_dir": "unused",
            "baseline": "SFT=unused",
            "candidates": ["DPR=unused"],
            "benchmarks": ["demo"],
            "demo_num_prompts": 5,
            "max_new_tokens": 8,
            "generation_batch_size": 8,
            "generation_backend": "transformers",
            "dtype": "float32",
            "judge": "exact",
            "bootstrap_resamples": 200,
        },
    )


@pytest.fixture(scope="module")
def gamma_sweep(tiny_sft):
    root = tiny_sft.parent
    config = write_yaml(
        root / "gamma.yaml",
        {
            "gammas": [0.9, 1.0],
            "evaluation_config": evaluation_yaml(root / "eval.yaml"),
            **dpr_settings(tiny_sft, root / "gamma_sweep"),
        },
    )
    load_script("gamma_sweep").main(["--config", config])
    return root / "gamma_sweep", config


@pytest.mark.slow
def test_the_gamma_sweep_writes_one_win_rate_per_gamma_and_a_plot(gamma_sweep):
    output_dir, _ = gamma_sweep
    columns, rows = read_csv(output_dir / "gamma_sweep.csv")
    assert tuple(columns) == load_script("gamma_sweep").COLUMNS
    assert [(float(r["gamma"]), r["method"], r["benchmark"], int(r["n"])) for r in rows] == [
        (0.9, "gamma0.9", "demo", 5),
        (1.0, "gamma1", "demo", 5),
    ]
    for row in rows:
        assert float(row["ci_low"]) <= float(row["win_rate"]) <= float(row["ci_high"])
        assert float(row["train_runtime_s"]) > 0 and row["kl_sft_final"] != ""
    assert json.loads((output_dir / "gamma0.9" / "analysis_run.json").read_text())["settings"]["gamma"] == 0.9
    assert_valid_png(output_dir / "gamma_sweep.png")


@pytest.mark.slow
def test_a_rerun_reuses_trained_variants_and_refuses_one_trained_with_other_settings(gamma_sweep):
    output_dir, config = gamma_sweep
    weights = (output_dir / "gamma1" / "model.safetensors").stat().st_mtime_ns
    load_script("gamma_sweep").main(["--config", config, "--gammas", "1.0", "--stage", "evaluate"])
    assert (output_dir / "gamma1" / "model.safetensors").stat().st_mtime_ns == weights
    with pytest.raises(ValueError, match=r"other settings \(learning_rate: 0.001 → 0.01\)"):
        load_script("gamma_sweep").main(["--config", config, "--gammas", "1.0", "--learning_rate", "0.01"])


@pytest.mark.slow
def test_the_reference_sweep_takes_pi_ref_at_each_alpha_from_the_sft_checkpoints(tiny_sft):
    root = tiny_sft.parent
    config = write_yaml(
        root / "reference.yaml",
        {
            "reference_fractions": [0.25, 0.5],
            "evaluation_config": evaluation_yaml(root / "eval_ref.yaml"),
            **dpr_settings(tiny_sft, root / "reference_sweep"),
        },
    )
    load_script("reference_sweep").main(["--config", config])
    columns, rows = read_csv(root / "reference_sweep" / "reference_sweep.csv")
    assert tuple(columns) == load_script("reference_sweep").COLUMNS
    assert [float(r["alpha"]) for r in rows] == [0.25, 0.5]
    assert rows[0]["reference"].endswith("checkpoint-1")  # ⌊0.25·4⌋ = 1
    assert rows[1]["reference"].endswith("dpr_reference")  # the recorded π_ref is the one at α = 0.5
    assert_valid_png(root / "reference_sweep" / "reference_sweep.png")


@pytest.mark.slow
def test_the_temperature_sweep_evaluates_each_method_at_each_temperature(tiny_sft, gamma_sweep):
    root, (policies, _) = tiny_sft.parent, gamma_sweep
    config = write_yaml(
        root / "temperature.yaml",
        {
            "temperatures": [0.0, 1.0],
            "output_dir": str(root / "temperature_sweep"),
            "baseline": f"SFT={tiny_sft}",
            "candidates": [f"G1={policies / 'gamma1'}", f"G09={policies / 'gamma0.9'}"],
            "benchmarks": ["demo"],
            "demo_num_prompts": 4,
            "max_new_tokens": 8,
            "generation_batch_size": 8,
            "generation_backend": "transformers",
            "dtype": "float32",
            "judge": "exact",
            "bootstrap_resamples": 200,
        },
    )
    load_script("temperature_sweep").main(["--config", config])
    columns, rows = read_csv(root / "temperature_sweep" / "temperature_sweep.csv")
    assert tuple(columns) == load_script("temperature_sweep").COLUMNS
    assert sorted((float(r["temperature"]), r["method"]) for r in rows) == [
        (0.0, "G09"),
        (0.0, "G1"),
        (1.0, "G09"),
        (1.0, "G1"),
    ]
    assert (root / "temperature_sweep" / "temperature1" / "results.json").is_file()
    assert_valid_png(root / "temperature_sweep" / "temperature_sweep.png")


@pytest.mark.slow
def test_the_length_analysis_bins_kl_and_reward_by_length_for_each_policy(tiny_sft, gamma_sweep):
    root, (policies, _) = tiny_sft.parent, gamma_sweep
    config = write_yaml(
        root / "length.yaml",
        {
            "sft_model_name_or_path": str(tiny_sft),
            "policies": [f"gamma1={policies / 'gamma1'}", f"gamma0.9={policies / 'gamma0.9'}"],
            "num_prompts": 4,
            "samples_per_prompt": 2,
            "max_new_tokens": 10,
            "num_length_bins": 3,
            "min_bin_count": 1,
            "batch_size": 8,
            "output_dir": str(root / "length_analysis"),
        },
    )
    load_script("length_analysis").main(["--config", config])
    columns, rows = read_csv(root / "length_analysis" / "length_analysis.csv")
    assert tuple(columns) == load_script("length_analysis").COLUMNS
    assert {r["policy"] for r in rows} == {"SFT", "gamma1", "gamma0.9"}
    _, responses = read_csv(root / "length_analysis" / "length_analysis_responses.csv")
    assert len(responses) == 3 * 8 and all(1 <= int(r["length"]) <= 10 for r in responses)
    assert sum(int(r["count"]) for r in rows) == len(responses)
    sft_kl = [abs(float(r["kl"])) for r in responses if r["policy"] == "SFT"]
    assert max(sft_kl) < 1e-4  # π_SFT against itself
    assert any(abs(float(r["kl"])) > 1e-4 for r in responses if r["policy"] == "gamma1")  # 2 DPR steps at lr 1e-3
    assert_valid_png(root / "length_analysis" / "length_analysis.png")


@pytest.mark.slow
def test_the_reward_diagnostics_report_auroc_per_kind_and_at_computed_numbers(tiny_sft):
    root = tiny_sft.parent
    config = write_yaml(
        root / "diagnostics.yaml",
        {
            "model_name_or_path": str(tiny_sft),
            "references": ["0.25", str(tiny_sft / "checkpoint-3")],
            "num_prompts": 5,
            "samples_per_prompt": 2,
            "max_new_tokens": 10,
            "batch_size": 10,
            "top_k": 3,
            "output_dir": str(root / "reward_diagnostics"),
        },
    )
    load_script("reward_diagnostics").main(["--config", config])
    columns, rows = read_csv(root / "reward_diagnostics" / "reward_diagnostics.csv")
    assert tuple(columns) == load_script("reward_diagnostics").COLUMNS
    rewards = ["r̂, π_ref at α=0.25", "r̂, π_ref=checkpoint-3", "log π_SFT (no baseline)"]
    assert sorted({r["reward"] for r in rows}) == sorted(rewards)
    groups = [(r["level"], r["group"]) for r in rows if r["reward"] == rewards[0]]
    assert groups == [("sequence", k) for k in ("add", "subtract", "multiply", "wages", "sort", "all")] + [
        ("token", "computed_number"),
        ("token", "computed_digit"),
    ]
    everything = [r for r in rows if r["group"] == "all"][0]
    assert int(everything["n_correct"]) + int(everything["n_wrong"]) == 10
    top = (root / "reward_diagnostics" / "reward_diagnostics_top_tokens.txt").read_text()
    assert top.count("-- 3 largest token rewards --") == 3 and "π_ref" in top
    assert_valid_png(root / "reward_diagnostics" / "reward_diagnostics.png")


@pytest.mark.slow
def test_the_settings_sweep_trains_and_compares_each_variant_including_the_oracle(tiny_sft):
    root = tiny_sft.parent
    config = write_yaml(
        root / "settings.yaml",
        {
            "variants": {
                "plain": {"learning_rate": 1e-3},
                "early_ref": {"reference_fraction": 0.25, "max_steps": 1},
                "oracle": {"oracle": True},
            },
            "evaluation_config": write_yaml(
                root / "eval_settings.yaml",
                {
                    "output_dir": "unused",
                    "baseline": "SFT=unused",
                    "candidates": ["DPR=unused"],
                    "benchmarks": ["demo"],
                    "demo_num_prompts": 4,
                    "samples_per_prompt": 2,
                    "max_new_tokens": 8,
                    "generation_batch_size": 8,
                    "generation_backend": "transformers",
                    "dtype": "float32",
                    "judge": "exact",
                    "bootstrap_resamples": 200,
                },
            ),
            **dpr_settings(tiny_sft, root / "settings_sweep"),
        },
    )
    settings_sweep = load_script("settings_sweep")
    settings_sweep.main(["--config", config])
    columns, rows = read_csv(root / "settings_sweep" / "settings_sweep.csv")
    assert tuple(columns) == (*settings_sweep.SETTINGS_COLUMNS, *settings_sweep.METRIC_COLUMNS)
    by_name = {r["variant"]: r for r in rows}
    assert list(by_name) == ["plain", "early_ref", "oracle"]
    assert by_name["early_ref"]["reference"].endswith("checkpoint-1") and by_name["early_ref"]["max_steps"] == "1"
    assert (by_name["oracle"]["oracle"], by_name["oracle"]["dense_reward"]) == ("True", "trl_dpr.rewards:SFTLogProb")
    for row in rows:
        assert int(row["n"]) == 8 and float(row["ci_low"]) <= float(row["win_rate"]) <= float(row["ci_high"])
        assert 0.0 <= float(row["sft_accuracy_greedy"]) <= 1.0 and row["kl_sft_final"] != ""
    # every variant is compared with the same SFT answers (one evaluation, one cache)
    assert len({(r["sft_accuracy_sampled"], r["sft_accuracy_greedy"]) for r in rows}) == 1
    assert_valid_png(root / "settings_sweep" / "settings_sweep.png")


@pytest.mark.slow
def test_dense_plus_outcome_trains_each_arm_per_seed_with_its_rewards_and_reports_paired_gains(tiny_sft):
    root = tiny_sft.parent
    config = write_yaml(
        root / "dense_plus_outcome.yaml",
        {
            "seeds": [0],
            "evaluation_config": evaluation_yaml(root / "eval_dpo.yaml"),
            **dpr_settings(tiny_sft, root / "dense_plus_outcome"),
            "max_steps": 1,
        },
    )
    load_script("dense_plus_outcome").main(["--config", config])
    output_dir = root / "dense_plus_outcome"
    results = json.loads((output_dir / "dense_plus_outcome.json").read_text())
    for arm, weights in (("DPR", None), ("verifier", [0.0, 1.0]), ("both", [1.0, 1.0])):
        settings = json.loads((output_dir / f"{arm}_s0" / "analysis_run.json").read_text())["settings"]
        assert settings["reward_weights"] == (
            weights if weights is None else str(weights)
        )  # settings keep plain values
        assert settings["reward_funcs"] == ("[]" if arm == "DPR" else "['exact']")
        for decoding in ("T=0.7", "greedy"):
            gain, low, high = results[decoding]["gain"][f"{arm}_s0"]
            accuracy = results[decoding]["accuracy"]
            assert gain == pytest.approx(accuracy[f"{arm}_s0"] - accuracy["SFT"], abs=1e-9) and low <= gain <= high
    assert results["greedy"]["settings"]["temperature"] == 0.0 and results["T=0.7"]["settings"]["temperature"] == 0.7
    for decoding in ("T=0.7", "greedy"):
        accuracy = results[decoding]["accuracy"]
        gain, low, high = results[decoding]["both_vs_verifier"]["s0"]  # the same answers, judged against each other
        assert gain == pytest.approx(accuracy["both_s0"] - accuracy["verifier_s0"], abs=1e-9) and low <= gain <= high
    assert "both − verifier" in (output_dir / "dense_plus_outcome.md").read_text()


@pytest.mark.slow
def test_the_regime_scan_runs_sft_and_the_preview_per_point_and_tabulates_the_chosen_lambda(tmp_path):
    common = {
        "model_name_or_path": EMBEDDED_MODEL,
        "dtype": "float32",
        "dataset_name": EMBEDDED_DATASET,
        "num_train_samples": 64,
        "output_dir": "unused",
        "per_device_train_batch_size": 8,
        "learning_rate": 1e-3,
        "max_length": 128,
        "save_strategy": "no",
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "gradient_checkpointing": False,
        "seed": 0,
        "disable_tqdm": True,
    }
    preview = {
        "output_dir": "unused",
        "model_name_or_path": "unused",
        "dtype": "float32",
        "num_prompts": 4,
        "samples_per_prompt": 3,
        "min_ess": 2.0,  # three samples: the preview refuses samples_per_prompt <= min_ess (default 4)
        "max_new_tokens": 8,
        "batch_size": 12,
        "kl_coefs": [math.inf, 1.0, 0.0],
        "variants": {"DPR": {}, "oracle": {"oracle": True}},
        "bootstrap_resamples": 100,
        "plot": False,
    }
    config = write_yaml(
        tmp_path / "scan.yaml",
        {
            "output_dir": str(tmp_path / "scan"),
            "sft_config": write_yaml(tmp_path / "sft.yaml", {**common, "max_steps": 4}),
            "preview_config": write_yaml(tmp_path / "preview.yaml", preview),
            "lambda_of_interest": 1.0,
            "grid": {"short": {"max_steps": 2}, "long": {"reference_fraction": 0.75}},
        },
    )
    regime_scan = load_script("regime_scan")
    regime_scan.main(["--config", config])
    scan = tmp_path / "scan"
    for point, steps, ref_step in (("short", 2, 1), ("long", 4, 3)):  # each point's SFT ran with its own keys
        manifest = json.loads((scan / point / "sft" / "dpr_reference.json").read_text())
        assert (manifest["total_steps"], manifest["step"]) == (steps, ref_step), manifest
    columns, rows = read_csv(scan / "regime_scan.csv")
    assert tuple(columns) == regime_scan.COLUMNS and [(r["point"], r["variant"]) for r in rows] == [
        ("short", "DPR"),
        ("short", "oracle"),
        ("long", "DPR"),
        ("long", "oracle"),
    ]
    for row in rows:  # the row holds its own point's preview at λ = 1
        points = json.loads((scan / row["point"] / "preview" / "preview.json").read_text())["points"]
        (at,) = [p for p in points if p["variant"] == row["variant"] and p["lam"] == 1.0]
        assert float(row["gain"]) == pytest.approx(at["delta"]) and float(row["kl"]) == pytest.approx(at["kl"])
        assert row["sft_steps"] == ("2" if row["point"] == "short" else "4")
        assert float(row["reference_fraction"]) == (0.5 if row["point"] == "short" else 0.75)
    assert (scan / "regime_scan.md").read_text().count("\n") == 2 + len(rows)
    # a rerun reads every point back instead of training or sampling again
    stamp = (scan / "short" / "preview" / "preview.json").stat().st_mtime_ns
    regime_scan.main(["--config", config])
    assert (scan / "short" / "preview" / "preview.json").stat().st_mtime_ns == stamp
    bad = write_yaml(tmp_path / "bad.yaml", {**yaml.safe_load(open(config)), "grid": {"x": {"max_stepz": 1}}})
    with pytest.raises(ValueError, match="point 'x': unknown key"):
        regime_scan.main(["--config", bad])
