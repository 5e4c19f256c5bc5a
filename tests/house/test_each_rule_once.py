"""Each rule on the input is checked once, in the place that owns it, and its one message says what was wrong, what
was expected and how to fix it. The recipes reach the same messages (tests/running/test_bad_input.py)."""

import ast
import collections
import re
from pathlib import Path

import pytest
import torch
import yaml
from trl import ModelConfig

from trl_dpr import CheckpointRewardModel, DensePathConfig, ReferenceCheckpointCallback
from trl_dpr.algorithm import kl_penalized_rewards
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.lfd import SPINConfig
from trl_dpr.reference_callback import check_reference_fraction
from trl_dpr.reference_manifest import mark_sft_complete
from trl_dpr.rewards import CheckpointDifference, SFTLogProb, WithSoftValue
from trl_dpr.running.pipeline import DPRScriptArguments, SFTScriptArguments
from trl_dpr.running.recipe_parser import RecipeParser
from trl_dpr.token_batches import ends_with_eos

from ..conftest import save_sft_output


def config(**overrides):
    return DensePathConfig(output_dir="unused", report_to="none", bf16=False, **overrides)


def message(build) -> str:
    with pytest.raises(ValueError) as error:
        build()
    return str(error.value)


# ---- settings: DensePathConfig owns them ------------------------------------------------------------------------


def test_gamma_outside_the_unit_interval_says_the_range_the_papers_value_and_what_to_set():
    assert message(lambda: config(gamma=1.5)) == (
        "gamma must be in (0, 1], got 1.5: it discounts the token returns, and the paper uses 1.0 (§4.4 sweeps values "
        "below 1). Set e.g. gamma: 1.0, or remove the key."
    )


def test_an_unknown_reward_granularity_names_both_granularities_and_what_each_is():
    assert message(lambda: config(reward_granularity="episode")) == (
        "reward_granularity must be 'token' or 'sentence', got 'episode': 'token' is Dense-Path REINFORCE (the "
        "default), 'sentence' the SR baseline of §4.1 (the whole return at the last token). Set one of them, or remove "
        "the key."
    )


def test_a_kl_term_without_log_pi_old_is_refused_by_the_config_before_any_model_loads():
    # transformers' continuous batching returns no log-probs, and on-policy batches get no GRPO forward either.
    text = message(lambda: config(kl_coef=0.1, use_transformers_continuous_batching=True))
    assert text.startswith("kl_coef > 0 needs log π_old of every sampled token.")
    assert "use_transformers_continuous_batching: false" in text and text.endswith("vLLM, or kl_coef: 0.")
    assert config(kl_coef=0.0, use_transformers_continuous_batching=True).kl_coef == 0.0


def test_the_kl_term_of_the_pure_function_says_what_to_pass():
    # A direct call (or a rollout_func returning no logprobs) reaches it without a config.
    rewards, sft = torch.zeros(1, 2), torch.zeros(1, 2)
    assert message(lambda: kl_penalized_rewards(rewards, None, sft, torch.ones(1, 2), kl_coef=0.1)) == (
        "kl_coef=0.1 needs `policy_logps`, the log π_old of the sampled tokens, and got None. Pass them (a trainer's "
        "`rollout_func` must return its `logprobs`), or set kl_coef=0."
    )


# ---- α: one check, beside the callback that takes π_ref at ⌊α·N⌋ ------------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        lambda: ReferenceCheckpointCallback(fraction=1.0),
        lambda: SFTScriptArguments(dataset_name="trl_dpr/embedded-demo", reference_fraction=1.0),
        lambda: check_reference_fraction(1.0),  # the check experiments/sweeps.py's π_ref at α makes first
    ],
    ids=["callback", "recipe key", "sweeps"],
)
def test_alpha_outside_the_open_unit_interval_gets_one_message_wherever_it_is_given(where):
    assert message(where) == (
        "reference_fraction α must be strictly between 0 and 1, got 1.0: π_ref is the SFT model after ⌊α·N⌋ of its N "
        "optimizer steps (0 would be the base model, 1 π_SFT itself). The paper uses 0.5, the checkpoint after half of "
        "the steps: set reference_fraction: 0.5 (ReferenceCheckpointCallback(fraction=0.5) in Python)."
    )


# ---- fields a config has no use for: one mechanism, one message -----------------------------------------------------


def test_a_refused_field_gets_the_same_message_from_python_and_from_a_recipe(tmp_path):
    recipe = tmp_path / "dpr.yaml"
    recipe.write_text(
        yaml.safe_dump({"dataset_name": "trl_dpr/embedded-demo", "output_dir": "unused", "scale_rewards": "batch"})
    )
    parser = RecipeParser((DPRScriptArguments, DensePathConfig, ModelConfig), prog="trl-dpr dpr")
    from_recipe = message(lambda: parser.parse_args_and_config(["--config", str(recipe)]))
    from_python = message(lambda: config(scale_rewards="batch"))
    expected = (
        "scale_rewards: 'batch' is not used: DPR whitens its per-token returns over the whole batch "
        "(`whiten_advantages`). Remove it or set it to 'group'"
    )
    assert from_python == expected + "." and f"{expected} (in {recipe})" in from_recipe


def test_the_self_play_configs_refuse_dpo_fields_with_the_same_message():
    assert message(lambda: SPINConfig(output_dir="out", use_cpu=True, bf16=False, loss_type=["ipo"])) == (
        "loss_type: ['ipo'] is not used: the loss is the method's own (`spin_loss_type` / `gsil_loss_type`). Remove "
        "it or set it to ['sigmoid']."
    )


# ---- which completions ended: one helper -----------------------------------------------------------------------


def test_a_completion_is_terminal_when_its_last_real_token_is_an_eos_id():
    ids = torch.tensor([[5, 2, 9, 9], [5, 6, 7, 8], [2, 9, 9, 9], [9, 9, 9, 9]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    # ended with EOS; cut at the length limit; EOS alone; empty (its padding is an EOS id: still not terminal)
    assert ends_with_eos(ids, mask, eos_ids=[2, 9]).tolist() == [True, False, True, False]


def test_the_scorer_decides_terminal_completions_as_the_trainer_does(tokenizer):
    # The w/V reward reads is_terminal: the scorer's own default must be the helper's answer, which the trainer passes.
    scorer = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0),
        build_tiny_causal_lm(tokenizer, seed=1),
        WithSoftValue(CheckpointDifference()),
        processing_class=tokenizer,
    )
    eos = tokenizer.eos_token_id
    prompt_ids, prompt_mask = torch.tensor([[5, 6], [5, 6]]), torch.ones(2, 2, dtype=torch.long)
    completion_ids, completion_mask = torch.tensor([[7, eos], [7, 8]]), torch.ones(2, 2, dtype=torch.long)
    by_default = scorer(prompt_ids, prompt_mask, completion_ids, completion_mask).rewards
    terminal = ends_with_eos(completion_ids, completion_mask, scorer.eos_token_ids)
    assert terminal.tolist() == [True, False]
    given = scorer(prompt_ids, prompt_mask, completion_ids, completion_mask, is_terminal=terminal).rewards
    assert torch.equal(by_default, given)


# ---- the DPR recipe: its folder, its push and its prompts, each once ------------------------------------------------


def test_the_dpr_recipe_claims_its_folder_checks_its_push_and_loads_its_prompts_once(tmp_path, tokenizer, monkeypatch):
    """check_dpr_inputs does them before the SFT stage could spend anything; run_dpr and the trainer take its result."""
    from trl_dpr.running import pipeline, push
    from trl_dpr.running import trainers as trainer_module
    from trl_dpr.scripts import dpr as recipe

    calls = collections.Counter()

    def count(module, name):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    for module, name in (
        (pipeline, "claim_output_dir"),
        (pipeline, "dpr_prompts"),
        (trainer_module, "check_output_dir"),
    ):
        count(module, name)
    pushes_checked = []  # push_to_hub of each check_hub_push call (offline, the real check would refuse the push)
    for module in (pipeline, push):
        monkeypatch.setattr(module, "check_hub_push", lambda args: pushes_checked.append(bool(args.push_to_hub)))
    monkeypatch.setattr(recipe, "push_trainer_output", lambda *args, **kwargs: None)
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    mark_sft_complete(sft)
    path = tmp_path / "dpr.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model_name_or_path": str(sft),
                "dtype": "float32",
                "dataset_name": "trl_dpr/embedded-demo",
                "num_train_samples": 8,
                "output_dir": str(tmp_path / "dpr"),
                "max_steps": 1,
                "per_device_train_batch_size": 4,
                "max_completion_length": 4,
                "use_cpu": True,
                "bf16": False,
                "save_strategy": "no",
                "report_to": "none",
                "push_to_hub": True,
                "hub_model_id": "me/dpr",
            }
        )
    )
    recipe.main(["--config", str(path)])
    assert calls == {"claim_output_dir": 1, "dpr_prompts": 1}  # and the trainer did not check the folder again
    assert pushes_checked.count(True) == 1
    assert (tmp_path / "dpr" / "model.safetensors").is_file()


# ---- one site per rule: a message raised from two places fails ---------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "trl_dpr"

# rule → the patterns of its check's message, the current one and the ones it replaced (any of them, anywhere, is a
# site). Each rule must have exactly one site in the package's source.
RULE_MESSAGES = {
    "every model the reward reads was given": [
        r"every other one must be given \(missing",
        r"no path was given",
        r"give their paths",
        r"every other name must be in `models`",
    ],
    "temperature > 0": [r"temperatures? must be (> 0|positive)"],
    "the LM head's chunk is a positive number of tokens": [
        r"must be a positive number of tokens \(memory",
        r"token_chunk_size must be",
    ],
    # DensePathConfig's range rules: checked by its __post_init__ and by the recipe parser, written once
    "gamma is in (0, 1]": [r"gamma must be in \(0, 1\]"],
    "two KL penalties need allow_kl_in_loss": [r"would stack two KL penalties"],
    "the generation batch is a multiple of the training batch": [r"is not a multiple of per_device_train_batch_size"],
    "max_completion_length is a positive number of tokens": [r"max_completion_length must be a positive"],
    "max_prompt_length is a positive number of tokens": [r"max_prompt_length must be a positive"],
    "num_generations is at least 1": [r"num_generations must be >= 1"],
    "α is in (0, 1)": [r"reference_fraction α must be strictly between 0 and 1"],
    "num_train_samples is a positive number of rows": [r"num_train_samples must be a positive number of rows"],
    "self-play's num_iterations is at least 1": [r"num_iterations must be >= 1"],
    "self-play's generation_temperature is not negative": [r"generation_temperature must be >= 0"],
    "self-play's generation_top_p is in (0, 1]": [r"generation_top_p must be in"],
    "self-play generates at least one token, one prompt at a time": [r"max_new_tokens and generation_batch_size must"],
    "self-play's beta is positive": [r"it scales the log-ratio to π_t"],
    "the legacy reward keys are refused with the dense_reward line to write": [
        r"the reward is chosen by dense_reward alone"
    ],
}


def raise_sites(pattern: str) -> list[str]:
    """`path:line` of every `raise` in the package whose message (its string pieces, f-strings included) matches, and
    of every `return` of one (a rule of `range_rules.RANGE_RULES` returns its message; the config and the recipe
    parser raise it)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            written = node.exc if isinstance(node, ast.Raise) else node.value if isinstance(node, ast.Return) else None
            if written is not None:
                text = "".join(
                    c.value for c in ast.walk(written) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
                if re.search(pattern, text):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def sites(pattern: str) -> list[str]:
    """`path:line` of every source line of the package that matches."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}")
    return found


@pytest.mark.parametrize("rule", list(RULE_MESSAGES))
def test_each_rule_has_one_message_in_one_place(rule):
    found = sorted({site for pattern in RULE_MESSAGES[rule] for site in raise_sites(pattern)})
    assert len(found) == 1, f"{rule!r} is checked at {found}: check it once, where its data first exists"


def test_the_range_rules_of_a_config_are_its_recipe_parsers_too():
    """Each rule a config's __post_init__ checks (`_RANGE_RULES`) is one of range_rules.RANGE_RULES, and the recipe
    parser built from the config (and the one rebuilt from its description, before torch) checks it too."""
    from trl_dpr.lfd import GSILConfig
    from trl_dpr.range_rules import RANGE_RULES

    configs = (DensePathConfig, DPRScriptArguments, SFTScriptArguments, SPINConfig, GSILConfig)
    declared = {name for config in configs for name in config._RANGE_RULES}
    assert declared == set(RANGE_RULES)  # a rule no config declares is checked nowhere
    for dataclasses in ((DPRScriptArguments, DensePathConfig, ModelConfig), (SFTScriptArguments,), (SPINConfig,)):
        parser = RecipeParser(dataclasses, prog="trl-dpr x")
        expected = {name for config in dataclasses for name in getattr(config, "_RANGE_RULES", ())}
        assert set(RecipeParser.from_description(parser.describe())._range_rules) == expected


def test_settings_become_a_reward_in_one_place():
    """Only `rewards.reward_from_settings` turns settings into a reward: the config, the preview and the loader call it."""
    outside = [
        site
        for pattern in (r"build_dense_reward\(", r"PAPER_REWARDS\[", r"paper_reward\(")
        for site in sites(pattern)
        if not site.startswith("trl_dpr/rewards.py")
    ]
    assert outside == []
    assert sites(r"reward_from_settings\(") and any(
        s.startswith("trl_dpr/analysis/preview.py") for s in sites(r"reward_from_settings\(")
    )


def test_the_causal_lm_is_unwrapped_by_one_helper():
    assert [site.split(":")[0] for site in sites(r"def _(unwrap_)?causal_lm\(")] == ["trl_dpr/scoring.py"]
    assert [site.split(":")[0] for site in sites(r"\.get_base_model\(\)")] == ["trl_dpr/scoring.py"]


def test_a_temperature_at_or_below_zero_gets_one_message_wherever_it_is_given(tokenizer):
    from trl_dpr.rollout_logprobs import SampledTokenLogprobs
    from trl_dpr.scoring import completion_logprobs

    model = build_tiny_causal_lm(tokenizer)
    ones = torch.ones(1, 1, dtype=torch.long)
    messages = {
        message(lambda: config(temperature=0.0)),
        message(lambda: SampledTokenLogprobs(model, temperature=0.0)),
        message(lambda: completion_logprobs(model, ones * 5, ones, ones * 6, ones, temperatures=(1.0, 0.0))),
    }
    assert messages == {
        "temperature must be > 0 (the paper samples at 1.0), got 0.0: DPR's reward and its KL term are for sampled "
        "completions, scored at log softmax(logits / T)."
    }


def test_a_chunk_of_no_tokens_gets_one_message_from_the_config_and_the_scorer(tokenizer):
    from_config = message(lambda: config(reward_token_chunk_size=0))
    from_scorer = message(
        lambda: CheckpointRewardModel(build_tiny_causal_lm(tokenizer), None, SFTLogProb(), token_chunk_size=0)
    )
    expected = "must be a positive number of tokens (memory ∝ chunk × vocab × 4 bytes), got 0."
    assert from_config == "reward_token_chunk_size " + expected and from_scorer == "token_chunk_size " + expected


def test_a_reward_model_not_given_gets_one_message_from_python_the_loader_and_the_preview(tmp_path, tokenizer):
    from tests.user_rewards.my_rewards import ThirdCheckpointReward
    from trl_dpr.analysis.preview import PreviewConfig, run_preview

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    reward = ThirdCheckpointReward()
    from_python = message(
        lambda: CheckpointRewardModel(build_tiny_causal_lm(tokenizer), build_tiny_causal_lm(tokenizer), reward)
    )
    from_loader = message(lambda: CheckpointRewardModel.from_pretrained(str(sft), reward=reward))
    variant = {"dense_reward": "tests.user_rewards.my_rewards:ThirdCheckpointReward"}
    preview = PreviewConfig(output_dir=str(tmp_path / "preview"), variants={"third": variant}, plot=False)
    from_preview = message(lambda: run_preview(preview, str(sft)))
    assert from_python == from_loader == from_preview
    assert "missing: ['teacher']" in from_python and "dense_reward_models" in from_python
