"""The TRL internals trl_dpr relies on, each pinned with one readable message.

`DensePathTrainer` is a thin subclass of `GRPOTrainer`, and TRL offers no public hook for per-token advantages, for
log-probs of transformers-generated tokens, or for one sample per prompt. So a handful of private names are part of
trl_dpr's contract with TRL. This file names every one of them and what trl_dpr does with it. When TRL is upgraded,
run it first (`pytest tests/core/test_trl_contract.py`, see docs/upgrading_trl.md): a failure says which internal moved
and where trl_dpr uses it, instead of a traceback deep inside a training step.
"""

import inspect
import math
from collections import defaultdict

import pytest
import torch
import trl
from transformers import Trainer
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOConfig, GRPOTrainer

from trl_dpr import DensePathConfig
from trl_dpr.reward_model import completion_logprobs
from trl_dpr.token_batches import render_prompts
from trl_dpr.trainer import dense_path

from ..conftest import dpr_trainer

TESTED_TRL = ("1.16",)  # the minor versions this file was last run green on; pyproject pins the same range


def contract(condition: bool, what: str, used_by: str) -> None:
    """Fail with a message that names the TRL internal, the version found, and the trl_dpr code that depends on it."""
    assert condition, (
        f"TRL contract broken with trl=={trl.__version__} (trl_dpr is tested with {', '.join(TESTED_TRL)}.x): "
        f"{what}. Used by {used_by}. See docs/upgrading_trl.md."
    )


def check_method(owner: type, name: str, parameters: list[str], used_by: str) -> None:
    method = getattr(owner, name, None)
    contract(callable(method), f"{owner.__name__}.{name} no longer exists", used_by)
    found = [p for p in inspect.signature(method).parameters if p != "self"]
    contract(
        found[: len(parameters)] == parameters,
        f"{owner.__name__}.{name} takes ({', '.join(found)}), trl_dpr calls it with ({', '.join(parameters)})",
        used_by,
    )


# ---- methods DensePathTrainer overrides or calls -----------------------------------------------------------------

OVERRIDDEN = [
    (GRPOTrainer, "_generate_and_score_completions", ["inputs"], "DensePathTrainer._generate_and_score_completions"),
    (
        GRPOTrainer,
        "_calculate_rewards",
        ["inputs", "prompts", "completions", "completion_ids_list"],
        "DensePathTrainer._calculate_rewards",
    ),
    (
        GRPOTrainer,
        "_generate_single_turn",
        ["prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"],
        "DensePathTrainer._generate_single_turn",
    ),
    (
        GRPOTrainer,
        "compute_loss",
        ["model", "inputs", "return_outputs", "num_items_in_batch"],
        "DensePathTrainer.compute_loss",
    ),
    (
        GRPOTrainer,
        "create_model_card",
        ["model_name", "dataset_name", "tags"],
        "trl_dpr.running.model_card.BaseModelCardMixin.create_model_card",
    ),
    (
        Trainer,
        "_save_checkpoint",
        ["model", "trial"],
        "trl_dpr.running.checkpointing.AtomicCheckpointsMixin._save_checkpoint",
    ),
    (
        ProgressCallback,
        "on_log",
        ["args", "state", "control", "logs", "kwargs"],
        "trl_dpr.running.console_log.NumericProgressCallback",
    ),
    (
        PrinterCallback,
        "on_log",
        ["args", "state", "control", "logs", "kwargs"],
        "trl_dpr.running.console_log.NumericPrinterCallback",
    ),
    (Trainer, "_get_output_dir", ["trial"], "trl_dpr.running.checkpointing.AtomicCheckpointsMixin._save_checkpoint"),
]


@pytest.mark.parametrize("owner, name, parameters, used_by", OVERRIDDEN, ids=[o[1] for o in OVERRIDDEN])
def test_the_methods_trl_dpr_overrides_keep_their_signature(owner, name, parameters, used_by):
    check_method(owner, name, parameters, used_by)


def test_trl_helpers_trl_dpr_imports_exist():
    from trl.data_utils import is_conversational
    from trl.models import prepare_deepspeed, prepare_fsdp
    from trl.trainer import utils

    for helper, used_by in (
        ("pad", "trl_dpr.token_batches.pad_batch"),
        ("use_adapter", "CheckpointRewardModel (shared-base adapters)"),
        ("maybe_gather_lm_head_ctx", "reward_model._project_to_logits (ZeRO-3)"),
        ("create_model_from_path", "CheckpointRewardModel.from_pretrained"),
        ("split_tensor_dict", "the skip_nonfinite flag travelling to every micro-batch"),
        ("shuffle_sequence_dict", "the skip_nonfinite flag travelling to every micro-batch"),
    ):
        contract(callable(getattr(utils, helper, None)), f"trl.trainer.utils.{helper} is gone", used_by)
    check_method(
        type("M", (), {"pad": staticmethod(utils.pad)}),
        "pad",
        ["tensors", "padding_value", "padding_side", "pad_to_multiple_of"],
        "trl_dpr.token_batches.pad_batch",
    )
    contract(
        callable(prepare_deepspeed) and callable(prepare_fsdp),
        "trl.models.prepare_{deepspeed,fsdp} are gone",
        "CheckpointRewardModel.prepare_for",
    )
    contract(
        is_conversational({"prompt": [{"role": "user", "content": "x"}]}),
        "is_conversational changed",
        "tokens.render_prompts",
    )


def test_the_reward_functions_trl_scripts_name_exist_in_trl_rewards():
    import importlib

    from trl_dpr.rewards import _TRL_REWARD_FACTORIES, _TRL_REWARD_FUNC_NAMES

    rewards, import_utils = (importlib.import_module(f"trl.{name}") for name in ("rewards", "import_utils"))
    for name in (*_TRL_REWARD_FUNC_NAMES, *_TRL_REWARD_FACTORIES):
        contract(callable(getattr(rewards, name, None)), f"trl.rewards.{name} is gone", "rewards.load_reward_func")
    for name, values in _TRL_REWARD_FACTORIES.items():
        contract(
            list(inspect.signature(getattr(rewards, name)).parameters) == list(values),
            f"trl.rewards.{name} takes other arguments than {list(values)}",
            "rewards.load_reward_func (TRL's script's values)",
        )
    contract(
        callable(getattr(import_utils, "is_math_verify_available", None)),
        "trl.import_utils.is_math_verify_available is gone",
        "rewards.load_reward_func (accuracy_reward without math_verify: one line, not an error after generating)",
    )


def test_trl_dprs_checkpoint_prefix_is_transformers_own():
    """checkpointing.py keeps a copy (importing transformers for one string would cost `trl-dpr push` seconds)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from trl_dpr.running import checkpointing

    assert checkpointing.PREFIX_CHECKPOINT_DIR == PREFIX_CHECKPOINT_DIR, (
        f"transformers names checkpoints {PREFIX_CHECKPOINT_DIR!r}-N now: set PREFIX_CHECKPOINT_DIR in "
        "trl_dpr/running/checkpointing.py to it (resuming, rotation and the push's ignore patterns read it)."
    )


# ---- behaviour trl_dpr depends on --------------------------------------------------------------------------------


def test_grpo_config_still_refuses_one_generation_per_prompt():
    # DensePathConfig lets num_generations=1 through this check with `_NoGroupBaseline`. If TRL accepts 1 one day,
    # the workaround can go (and this test with it).
    with pytest.raises(ValueError, match="at least 2 generations"):
        GRPOConfig(output_dir="unused", num_generations=1, per_device_train_batch_size=2, report_to="none", bf16=False)
    args = DensePathConfig(output_dir="unused", report_to="none", bf16=False, per_device_train_batch_size=3)
    contract(
        type(args.num_generations) is int and args.num_generations == 1,
        "num_generations=1 did not come out a plain int",
        "DensePathConfig.__post_init__",
    )


def test_the_micro_batch_split_passes_zero_dim_tensors_through():
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    batch = {"x": torch.arange(4), "skip_nonfinite": torch.tensor(True)}
    chunks = split_tensor_dict(shuffle_sequence_dict(batch), 2)
    contract(
        all(bool(chunk["skip_nonfinite"]) for chunk in chunks),
        "split_tensor_dict / shuffle_sequence_dict no longer hand a 0-dim tensor to every micro-batch",
        "DensePathTrainer (the skip_nonfinite flag read in compute_loss)",
    )


@pytest.fixture(scope="module")
def trainer(tokenizer, tmp_path_factory):
    trainer, _, _, _ = dpr_trainer(tokenizer, tmp_path_factory.mktemp("contract"), kl_coef=0.1, max_steps=1)
    return trainer


def test_grpo_trainer_attributes_trl_dpr_reads(trainer):
    for name, used_by in (
        ("eos_token_ids", "DensePathTrainer (terminal completions)"),
        ("temperature", "DensePathTrainer (KL reference and generation log-probs at the rollout temperature)"),
        ("use_vllm", "DensePathTrainer._generate_single_turn"),
        ("use_transformers_continuous_batching", "DensePathTrainer._generate_single_turn"),
        ("chat_template_kwargs", "DensePathTrainer (prompt-length filter renders like GRPO)"),
        ("reward_func_names", "DPRRunTrainer._card_sections (the outcome rewards on the model card)"),
        ("reward_weights", "DensePathTrainer._log_batch, DPRRunTrainer._card_sections"),
    ):
        contract(hasattr(trainer, name), f"GRPOTrainer has no attribute `{name}`", used_by)
    contract(isinstance(trainer.eos_token_ids, list), "eos_token_ids is not a list of ids", "DensePathTrainer")
    metrics = trainer._metrics
    contract(
        set(metrics) >= {"train", "eval"} and isinstance(metrics["train"], defaultdict),
        "GRPOTrainer._metrics is not {'train'|'eval': defaultdict(list)}",
        "DensePathTrainer._log_batch",
    )
    contract(
        set(trainer._logs) >= {"prompt", "completion", "rewards", "advantages", "extra"},
        f"GRPOTrainer._logs keys changed: {sorted(trainer._logs)}",
        "DensePathTrainer._log_batch (table columns), trl_dpr.analysis.tracking (heatmaps)",
    )


def test_grpo_log_leaves_nan_metric_entries_out_of_its_averages(trainer):
    # DPR hands GRPO's scalar reward channel NaN ("no scalar reward") and appends its own value to the same metric.
    trainer.model.train()  # GRPOTrainer.log reads the train metrics in train mode
    trainer._metrics["train"]["reward"] = [math.nan, 2.0]
    trainer.log({})
    contract(
        trainer.state.log_history[-1]["reward"] == 2.0,
        "GRPOTrainer.log averages NaN entries in",
        "DensePathTrainer._calculate_rewards",
    )


def test_grpo_calculate_rewards_calls_the_reward_funcs_with_the_dataset_columns(trainer, monkeypatch):
    # DensePathTrainer lets GRPO call its reward_funcs (dense_path's column: None → NaN) from inside GRPO's
    # `_generate_and_score_completions`, and adds the [N, 1 + K] scores at each completion's last token.
    def answer_plus_length(prompts, completions, completion_ids, answer, **kwargs):
        return [float(a + len(ids)) for ids, a in zip(completion_ids, answer)]

    monkeypatch.setattr(trainer, "reward_funcs", [dense_path, answer_plus_length])
    monkeypatch.setattr(trainer, "reward_func_names", ["dense_path", "answer_plus_length"])
    monkeypatch.setattr(trainer, "reward_processing_classes", [None, None])
    inputs = [{"prompt": "p", "answer": 1}, {"prompt": "q", "answer": 5}]
    rewards = GRPOTrainer._calculate_rewards(trainer, inputs, ["p", "q"], ["a", "b"], [[7, 8], [9]])
    used_by = "DensePathTrainer._calculate_rewards (outcome rewards)"
    contract(
        tuple(rewards.shape) == (2, 2),
        f"_calculate_rewards returned shape {tuple(rewards.shape)}, not [N, funcs]",
        used_by,
    )
    contract(bool(rewards[:, 0].isnan().all()), "a reward function's None is no longer NaN", used_by)
    contract(
        rewards[:, 1].tolist() == [3.0, 6.0], "the dataset's columns no longer reach the reward functions", used_by
    )
    contract(
        "self._calculate_rewards(" in inspect.getsource(GRPOTrainer._generate_and_score_completions),
        "GRPOTrainer._generate_and_score_completions no longer calls self._calculate_rewards",
        used_by,
    )


def test_grpo_renders_prompts_like_trl_dpr_tokens(trainer, tokenizer):
    prompts = [[{"role": "user", "content": "What is 1+2?"}], [{"role": "user", "content": "Sort 3 1 2"}]]
    contract(
        trainer._tokenize_prompts(prompts)[0] == render_prompts(tokenizer, prompts),
        "GRPOTrainer renders prompts differently from trl_dpr.token_batches.render_prompts",
        "every scorer, the preview and the evaluation (the same prompt must be the same tokens)",
    )


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_grpo_policy_log_probs_equal_trl_dpr_scoring_at_the_rollout_temperature(tokenizer, tmp_path, temperature):
    # log π_old (TRL's fused head, logits / T) and DPR's KL reference (completion_logprobs at T) are subtracted
    # token by token: they must be the same function of the logits.
    trainer, _, sft, _ = dpr_trainer(tokenizer, tmp_path, temperature=temperature, max_steps=1)
    prompt_ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    completion_ids = torch.tensor([[13, 14, 15], [16, 17, 0]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    trl_logps, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1), 3
    )
    ours, _, _ = completion_logprobs(
        sft, prompt_ids, prompt_mask, completion_ids, completion_mask, temperatures=(temperature,)
    )
    contract(
        torch.allclose(trl_logps * completion_mask, ours, atol=1e-5),
        f"GRPO's per-token log-probs at T={temperature} differ from completion_logprobs (max "
        f"{(trl_logps * completion_mask - ours).abs().max():.2e})",
        "the KL term of DensePathTrainer",
    )


def test_a_renamed_internal_fails_with_a_readable_message(monkeypatch):
    # What an upgrade that renames one of these internals looks like: the message names it and the code using it.
    monkeypatch.delattr(GRPOTrainer, "_generate_single_turn")
    with pytest.raises(AssertionError) as failure:
        check_method(GRPOTrainer, "_generate_single_turn", ["prompt_ids"], "DensePathTrainer._generate_single_turn")
    message = str(failure.value)
    assert "GRPOTrainer._generate_single_turn no longer exists" in message
    assert f"trl=={trl.__version__}" in message and "docs/upgrading_trl.md" in message
    assert "Used by DensePathTrainer._generate_single_turn" in message


def test_the_installed_trl_is_a_tested_version():
    contract(
        any(trl.__version__.startswith(v + ".") or trl.__version__ == v for v in TESTED_TRL),
        f"trl {trl.__version__} is not among the tested versions",
        "the whole package (pyproject pins trl to the tested range)",
    )


def _tiny(config_class, model_class, **extra):
    config = config_class(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        **extra,
    )
    torch.manual_seed(0)
    return model_class(config).eval()


@pytest.mark.parametrize("family", ["gemma2-softcap", "cohere-logit-scale", "granite-logits-scaling"])
def test_logit_scale_and_softcap_match_trls_fused_head(family):
    # trl_dpr's chunked head reads the same config fields as TRL's fused head (add_fused_lm_head); TRL exposes no
    # helper for them, so the two are compared on the model families that scale or soft-cap their logits.
    import transformers
    from trl.trainer.utils import add_fused_lm_head

    model = {
        "gemma2-softcap": lambda: _tiny(
            transformers.Gemma2Config, transformers.Gemma2ForCausalLM, final_logit_softcapping=2.0
        ),
        "cohere-logit-scale": lambda: _tiny(
            transformers.CohereConfig, transformers.CohereForCausalLM, logit_scale=0.25
        ),
        "granite-logits-scaling": lambda: _tiny(
            transformers.GraniteConfig, transformers.GraniteForCausalLM, logits_scaling=4.0
        ),
    }[family]()
    prompt_ids, completion_ids = torch.tensor([[3, 4, 5]]), torch.tensor([[6, 7, 8, 9]])
    ours, _, _ = completion_logprobs(
        model, prompt_ids, torch.ones_like(prompt_ids), completion_ids, torch.ones_like(completion_ids)
    )
    with torch.no_grad():  # the model's own forward applies its scale / soft-cap: the ground truth
        logits = model(torch.cat([prompt_ids, completion_ids], 1)).logits[0, 2:-1].double()
    own = logits.log_softmax(-1).gather(1, completion_ids[0, :, None]).squeeze(1)
    assert torch.allclose(ours[0].double(), own, atol=1e-5)
    add_fused_lm_head(model)
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    labels = input_ids.clone()
    labels[:, :3] = -100
    with torch.no_grad():
        fused = model(input_ids=input_ids, labels=labels, fused_lm_head=True).log_probs[:, -4:]
    contract(
        torch.allclose(ours, fused, atol=1e-5),
        f"{family}: completion_logprobs and TRL's fused head disagree (max {(ours - fused).abs().max():.2e})",
        "reward_model._logit_transform",
    )
