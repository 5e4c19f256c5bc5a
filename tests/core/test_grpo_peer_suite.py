"""The GRPO behaviours DPR keeps: TRL's own GRPOTrainer tests, ported to DensePathTrainer.

Each test is a port of one test of `TestGRPOTrainer` in huggingface/trl `tests/test_grpo_trainer.py` (named in the
test's first comment line: `upstream: <test name>`), read at commit f2cd577 of TRL's main branch (version
1.10.0.dev0, the newest copy of that file available offline when this suite was written) and run against the TRL
this package pins (1.16). The upstream assertions are kept (a finite training loss, every trainable parameter changed,
the logged keys present, the refusals with their message); what changes is the setup:

- the Hub models are tiny Llama / Qwen2 models built in-process (`trl_dpr.embedded.tiny_lm`, π_SFT seed 0, π_ref
  seed 1), and the reward is DPR's `CheckpointRewardModel` on them (no `reward_funcs`: DPR's reward is the dense r̂);
- the `trl-internal-testing/zen` dataset is `zen()`, a local dataset with the same configs and columns
  (`standard_prompt_only`, `conversational_prompt_only`: one `prompt` column; `train` and `test` splits);
- batches are 2-3 prompts with one completion each (DPR's `num_generations: 1`), 1-4 steps, completions of 4-8 tokens.

GRPO settings DPR refuses by design (`scale_rewards` other than "group", `beta` next to `kl_coef`) are asserted as
refusals. A failure here after a TRL upgrade names the GRPO behaviour that DPR no longer keeps.
"""

import math
from unittest.mock import patch

import pytest
import torch
from datasets import Dataset, DatasetDict
from peft import LoraConfig, get_peft_model

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

from ..conftest import dpr_config, save_sft_output

# The first lines of the Zen of Python, as trl-internal-testing/zen holds them (prompts cut mid-sentence).
ZEN_TRAIN = [
    "Beautiful is better than",
    "Explicit is",
    "Simple is better",
    "Complex",
    "Flat is better than",
    "Sparse is better",
    "Readability",
    "Special cases aren't special",
]
ZEN_TEST = ["Although practicality beats", "Errors should never", "Unless explicitly"]


def zen(config_name: str = "standard_prompt_only", split: str | None = "train", streaming: bool = False):
    """Offline stand-in for `load_dataset("trl-internal-testing/zen", config_name, split=split, streaming=...)`."""

    def build(prompts):
        if config_name == "conversational_prompt_only":
            prompts = [[{"role": "user", "content": prompt}] for prompt in prompts]
        dataset = Dataset.from_dict({"prompt": prompts})
        return dataset.to_iterable_dataset() if streaming else dataset

    splits = {"train": build(ZEN_TRAIN), "test": build(ZEN_TEST)}
    return splits[split] if split is not None else DatasetDict(splits)


@pytest.fixture
def make_trainer(tokenizer, tmp_path):
    """`make_trainer(model=None, peft_config=None, architecture="qwen2", train_dataset=zen(), eval_dataset=None,
    **config)`: a DensePathTrainer on tiny models (upstream's tiny-Qwen2ForCausalLM-2.5 → a tiny Qwen2 π_SFT),
    for one step of 2 prompts with 4-token completions unless `config` says otherwise."""

    def make(model=None, peft_config=None, architecture="qwen2", train_dataset=None, eval_dataset=None, **config):
        sft = build_tiny_causal_lm(tokenizer, architecture, seed=0)
        ref = build_tiny_causal_lm(tokenizer, architecture, seed=1)
        # warmup 0: DPR's default warmup (a ratio, 0.03) makes the first step's learning rate 0
        config = {
            "per_device_train_batch_size": 2,
            "max_steps": 1,
            "max_completion_length": 4,
            "warmup_steps": 0,
            **config,
        }
        return DensePathTrainer(
            model=model,
            reward_model=CheckpointRewardModel(sft, ref),
            args=dpr_config(tmp_path, **config),
            processing_class=tokenizer,
            train_dataset=zen() if train_dataset is None else train_dataset,
            eval_dataset=eval_dataset,
            peft_config=peft_config,
        )

    return make


def snapshot(trainer):
    return {name: parameter.detach().clone() for name, parameter in trainer.model.named_parameters()}


def assert_trained(trainer, previous, frozen=lambda name: False):
    """Upstream's checks after `trainer.train()`: the training loss is logged (and finite), and every trainable
    parameter has changed; parameters `frozen(name)` must be exactly unchanged instead."""
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])
    for name, before in previous.items():
        after = trainer.model.get_parameter(name)
        if frozen(name):
            torch.testing.assert_close(before, after, msg=f"Parameter {name} has changed.")
        else:
            assert not torch.equal(before, after), f"Parameter {name} has not changed."


def assert_lora_trained(trainer, previous):
    """Upstream's PEFT checks: the LoRA adapters have changed, the base model's parameters have not."""
    assert any("lora_" in name for name in previous)
    assert_trained(trainer, previous, frozen=lambda name: "lora_" not in name)


def logged_keys(trainer):
    return {key for entry in trainer.state.log_history for key in entry}


# ---- training -----------------------------------------------------------------------------------------------------


def test_init_minimal(tokenizer, tmp_path):
    # upstream: test_init_minimal (the reward and train_dataset; args for this CPU machine, the tokenizer because
    # π_SFT is in memory, with no path to load one from)
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, "qwen2"), build_tiny_causal_lm(tokenizer, "qwen2", seed=1)
    )
    args = DensePathConfig(str(tmp_path / "dpr"), use_cpu=True, bf16=False, report_to="none")
    DensePathTrainer(reward_model=reward_model, args=args, processing_class=tokenizer, train_dataset=zen())


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_train(make_trainer, architecture):
    # upstream: test_train (parametrized over tiny Hub architectures)
    trainer = make_trainer(architecture=architecture)
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


@pytest.mark.parametrize("config_name", ["standard_prompt_only", "conversational_prompt_only"])
def test_train_dataset_format(make_trainer, config_name):
    # upstream: test_train_dataset_format
    trainer = make_trainer(train_dataset=zen(config_name))
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"])
def test_train_loss_types(make_trainer, loss_type):
    # upstream: test_train_loss_types (plus "grpo"; gradient_accumulation_steps=2 checks DAPO's accumulated batch)
    trainer = make_trainer(
        loss_type=loss_type,
        gradient_accumulation_steps=2,
        importance_sampling_level="sequence" if loss_type == "luspo" else "token",
    )
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


def test_train_multiple_iterations(make_trainer):
    # upstream: test_train_multiple_iterations
    trainer = make_trainer(num_iterations=2, max_steps=2)
    scored = []
    score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: scored.append(score(inputs)) or scored[-1]
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)
    # DPR: the second iteration reuses the first one's batch, dense advantages and log π_old, scored once
    assert len(scored) == 1 and "old_per_token_logps" in scored[0]


def test_steps_per_generation_feeds_every_step_from_one_scored_generation_batch(make_trainer):
    # upstream: test_prepare_input_called_with_correct_data (steps_per_generation, num_iterations, no shuffling)
    trainer = make_trainer(
        steps_per_generation=2, num_iterations=2, gradient_accumulation_steps=1, max_steps=4, shuffle_dataset=False
    )
    expected_generation_batch = [{"prompt": prompt} for prompt in ZEN_TRAIN[:4]]  # 2 steps x 2 prompts
    with (
        patch.object(trainer, "training_step", wraps=trainer.training_step) as step,
        patch.object(
            trainer, "_generate_and_score_completions", wraps=trainer._generate_and_score_completions
        ) as score,
    ):
        trainer.train()
    assert step.call_count == 4  # steps_per_generation * num_iterations steps on one generation batch
    for call in step.call_args_list:
        assert call.args[1] == expected_generation_batch
    assert score.call_count == 1  # DPR scores the 4 completions once, then each step takes its slice


def test_train_peft_config(make_trainer):
    # upstream: test_train_peft_config (LoRA from peft_config: the adapters train, the base stays frozen)
    trainer = make_trainer(peft_config=LoraConfig(), max_steps=2)  # LoRA's B starts at 0: A moves from step 2
    previous = snapshot(trainer)
    trainer.train()
    assert_lora_trained(trainer, previous)


def test_train_peft_model(make_trainer, tokenizer):
    # upstream: test_train_peft_model (a PeftModel given as the policy: a LoRA on a copy of π_SFT)
    trainer = make_trainer(
        model=get_peft_model(build_tiny_causal_lm(tokenizer, "qwen2", seed=0), LoraConfig()), max_steps=2
    )
    previous = snapshot(trainer)
    trainer.train()
    assert_lora_trained(trainer, previous)


def test_train_with_gradient_checkpointing(make_trainer):
    # upstream: test_train (GRPOConfig's default gradient_checkpointing=True), made explicit
    trainer = make_trainer(gradient_checkpointing=True)
    previous = snapshot(trainer)
    trainer.train()
    assert trainer.model.is_gradient_checkpointing
    assert_trained(trainer, previous)


def test_train_peft_with_gradient_checkpointing(make_trainer):
    # upstream: test_train_peft_with_gradient_checkpointing
    trainer = make_trainer(peft_config=LoraConfig(), gradient_checkpointing=True, max_steps=2)
    previous = snapshot(trainer)
    trainer.train()
    assert trainer.model.get_base_model().is_gradient_checkpointing
    assert_lora_trained(trainer, previous)


def test_train_with_pad_to_multiple_of(make_trainer):
    # upstream: test_train_with_pad_to_multiple_of (DPR scores the padded ids GRPO built)
    trainer = make_trainer(pad_to_multiple_of=8)
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


def test_train_with_additional_generation_kwargs(make_trainer):
    # upstream: test_train_with_additional_generation_kwargs
    trainer = make_trainer(top_p=0.9, top_k=10, min_p=0.01, repetition_penalty=1.1)
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


def test_train_with_generation_kwargs(make_trainer):
    # upstream: test_train_with_generation_kwargs (beam search: DPR takes log π_old from a forward)
    trainer = make_trainer(generation_kwargs={"do_sample": True, "top_k": 50, "num_beams": 2, "length_penalty": -0.1})
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


# ---- truncated completions ----------------------------------------------------------------------------------------


def canned_generate(tokenizer, rows):
    """A `generate` that returns `rows` (token ids; "eos" → the EOS token) after the prompts: upstream mocks
    generation because a random model almost never samples EOS within a few tokens."""
    completion = torch.tensor([[tokenizer.eos_token_id if t == "eos" else t for t in row] for row in rows])

    def generate(self, input_ids, **kwargs):
        return torch.cat([input_ids, completion[: input_ids.size(0)].to(input_ids.device)], dim=1)

    return generate


def test_train_with_mask_truncated_completions(make_trainer, tokenizer):
    # upstream: test_train_with_mask_truncated_completions
    pad = tokenizer.pad_token_id
    rows = [
        [10, 11, 12, 13, 14, 15, 16, 17],  # truncated
        [18, 19, 20, "eos", pad, pad, pad, pad],  # ends with EOS
        [21, 22, 23, 24, 25, 26, 27, "eos"],
    ]  # EOS as the last allowed token
    trainer = make_trainer(
        per_device_train_batch_size=3, max_completion_length=8, mask_truncated_completions=True, loss_type="dapo"
    )  # dapo normalises by num_items_in_batch
    previous = snapshot(trainer)
    with (
        patch("transformers.generation.utils.GenerationMixin.generate", canned_generate(tokenizer, rows)),
        patch.object(trainer, "_compute_loss", wraps=trainer._compute_loss) as compute_loss,
    ):
        trainer.train()
    assert_trained(trainer, previous)
    # DPR: the truncated completion is out of the loss (mask 0, so advantage 0); the other two are in it
    batch = compute_loss.call_args.args[1]
    truncated = (batch["completion_ids"] != tokenizer.eos_token_id).all(dim=1)
    assert truncated.sum() == 1
    assert batch["completion_mask"][truncated].sum() == 0 and batch["completion_mask"][~truncated].sum() == 4 + 8
    assert (batch["advantages"][truncated] == 0).all()


def test_train_with_mask_truncated_completions_all_masked(make_trainer, tokenizer):
    # upstream: test_train_with_mask_truncated_completions_all_masked (no learning signal: loss 0, no update)
    trainer = make_trainer(max_completion_length=4, mask_truncated_completions=True, loss_type="dapo")
    previous = snapshot(trainer)
    with patch(
        "transformers.generation.utils.GenerationMixin.generate", canned_generate(tokenizer, [[10, 11, 12, 13]] * 2)
    ):
        trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] == pytest.approx(0.0)
    for name, before in previous.items():
        assert torch.equal(before, trainer.model.get_parameter(name)), f"Parameter {name} has changed."
    # DPR: an all-masked batch has nothing to score; it is not a non-finite batch to skip
    assert trainer.skipped_nonfinite_batches == 0


# ---- evaluation ---------------------------------------------------------------------------------------------------


def test_train_with_eval(make_trainer):
    # upstream: test_train_with_eval (eval_strategy "steps" with an eval dataset)
    dataset = zen(split=None)
    trainer = make_trainer(
        train_dataset=dataset["train"],
        eval_dataset=dataset["test"],
        per_device_eval_batch_size=3,
        eval_strategy="steps",
        eval_steps=1,
        max_steps=2,
    )
    trainer.train()
    evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert [entry["step"] for entry in evaluations] == [1, 2]
    assert all(math.isfinite(entry["eval_loss"]) and math.isfinite(entry["eval_reward"]) for entry in evaluations)


def test_train_with_num_generations_eval(make_trainer):
    # upstream: test_train_with_num_generations_eval (a group of 2 per prompt in training, 1 in evaluation)
    dataset = zen(split=None)
    trainer = make_trainer(
        train_dataset=dataset["train"],
        eval_dataset=dataset["test"],
        num_generations=2,
        num_generations_eval=1,
        per_device_eval_batch_size=3,
        eval_strategy="steps",
        eval_steps=1,
    )
    trainer.train()
    assert "eval_loss" in logged_keys(trainer)


def test_train_eval_on_start(make_trainer):
    # upstream: test_train_eval_on_start (loss_type "grpo" reads the accumulation steps, unset before step 1)
    dataset = zen(split=None)
    trainer = make_trainer(
        train_dataset=dataset["train"],
        eval_dataset=dataset["test"],
        per_device_eval_batch_size=3,
        loss_type="grpo",
        eval_strategy="steps",
        eval_steps=2,
        eval_on_start=True,
    )
    trainer.train()
    assert trainer.state.log_history[0]["step"] == 0 and "eval_loss" in trainer.state.log_history[0]


@pytest.mark.parametrize(
    "eval_dataset_type", ["dataset", "iterable_dataset", "dataset_dict", "dict_of_dataset", "none"]
)
def test_init_with_eval_dataset(make_trainer, eval_dataset_type):
    # upstream: test_init_with_eval_dataset
    split = zen(split="test", streaming=eval_dataset_type == "iterable_dataset")
    eval_dataset = {
        "none": None,
        "dataset": split,
        "iterable_dataset": split,
        "dataset_dict": DatasetDict({"data1": split, "data2": split}),
        "dict_of_dataset": {"data1": split, "data2": split},
    }[eval_dataset_type]
    trainer = make_trainer(eval_dataset=eval_dataset)
    if eval_dataset is None:
        assert trainer.eval_dataset is None
    elif isinstance(trainer.eval_dataset, dict):
        assert set(trainer.eval_dataset) == {"data1", "data2"}
    else:
        assert trainer.eval_dataset is eval_dataset


@pytest.mark.parametrize("eval_dataset_type", ["dataset", "dict_of_iterable_dataset"])
def test_evaluate_with_eval_dataset(make_trainer, eval_dataset_type):
    # upstream: test_evaluate_with_eval_dataset (a dataset passed to evaluate(), not to the trainer)
    split = zen(split="test", streaming="iterable" in eval_dataset_type)
    eval_dataset = split if eval_dataset_type == "dataset" else {"data1": split, "data2": split}
    trainer = make_trainer(per_device_eval_batch_size=3)
    metrics = trainer.evaluate(eval_dataset=eval_dataset)
    names = ["eval_loss"] if eval_dataset_type == "dataset" else ["eval_data1_loss", "eval_data2_loss"]
    assert all(metrics[name] is not None and math.isfinite(metrics[name]) for name in names)


# ---- iterable datasets --------------------------------------------------------------------------------------------


def test_train_with_iterable_dataset(make_trainer):
    # upstream: test_train_with_iterable_dataset (a stream has no length: max_steps)
    trainer = make_trainer(train_dataset=zen(streaming=True), max_steps=2)
    assert trainer.args.accelerator_config.dispatch_batches is False  # the stream is sharded per process
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)


def test_iterable_dataset_requires_dispatch_batches_false(make_trainer):
    # upstream: test_iterable_dataset_requires_dispatch_batches_false
    with pytest.raises(ValueError, match="Iterable datasets require `dispatch_batches=False`"):
        make_trainer(train_dataset=zen(streaming=True), accelerator_config={"dispatch_batches": True})


def test_iterable_dataset_forces_num_workers_zero(make_trainer):
    # upstream: test_iterable_dataset_forces_num_workers_zero
    trainer = make_trainer(train_dataset=zen(streaming=True), dataloader_num_workers=4)
    assert trainer.args.dataloader_num_workers == 0


# ---- KL in the loss and reward scaling: refused where DPR does the job itself -------------------------------------


def test_beta_non_zero_next_to_kl_coef_is_refused():
    # upstream: test_train_beta_non_zero (GRPO's KL in the loss would stack on DPR's KL to π_SFT in the reward)
    with pytest.raises(ValueError, match=r"beta=0.1 .* and kl_coef=1e-05 .* would stack two KL penalties"):
        DensePathConfig("unused", beta=0.1, use_cpu=True, bf16=False, report_to="none")


@pytest.mark.parametrize("kl_coef,allow_kl_in_loss", [(0.0, False), (1e-5, True)], ids=["beta_alone", "both_allowed"])
def test_train_beta_non_zero(tokenizer, tmp_path, kl_coef, allow_kl_in_loss):
    # upstream: test_train_beta_non_zero (GRPO's reference model and KL in the loss). GRPO loads its reference model
    # from the policy's path, so π_SFT comes from an SFT output folder here, not from memory.
    args = dpr_config(
        tmp_path,
        beta=0.1,
        kl_coef=kl_coef,
        allow_kl_in_loss=allow_kl_in_loss,
        per_device_train_batch_size=2,
        max_steps=1,
        max_completion_length=4,
        warmup_steps=0,
    )
    trainer = DensePathTrainer(
        reward_model=str(save_sft_output(tmp_path / "sft", tokenizer)), args=args, train_dataset=zen()
    )
    previous = snapshot(trainer)
    trainer.train()
    assert_trained(trainer, previous)
    assert "kl" in logged_keys(trainer)


def test_train_beta_non_zero_with_pi_sft_in_memory_is_refused(make_trainer):
    # upstream: test_train_beta_non_zero, with DPR's other documented input: a CheckpointRewardModel built in memory.
    # GRPOTrainer loads its β reference by the policy's config name, which a copy of an in-memory π_SFT lacks (it
    # failed with a Hub id error, '' is not a repo id): DPR refuses it before building anything and says what to do.
    with pytest.raises(
        ValueError,
        match=r"beta=0.1 needs a reference model .* π_SFT was given in memory: give it as a "
        r"folder \(reward_model=path or CheckpointRewardModel.from_pretrained\(path\)\), "
        r"or set beta=0 and use kl_coef",
    ):
        make_trainer(beta=0.1, kl_coef=0.0)


@pytest.mark.parametrize("scale_rewards", [False, "batch", "none"])
def test_train_scale_rewards_other_than_group_is_refused(scale_rewards):
    # upstream: test_train_scale_rewards (DPR whitens its per-token returns over the batch instead)
    with pytest.raises(
        ValueError,
        match=rf"scale_rewards: {scale_rewards!r} is not used: DPR whitens its per-token "
        r"returns .* set it to 'group'",
    ):
        DensePathConfig("unused", scale_rewards=scale_rewards, use_cpu=True, bf16=False, report_to="none")


@pytest.mark.parametrize("scale_rewards", ["group", True])
def test_train_scale_rewards_group_is_accepted(scale_rewards):
    # upstream: test_train_scale_rewards (GRPO's default, "group" / True, is DPR's whitening's place holder)
    assert DensePathConfig("unused", scale_rewards=scale_rewards, use_cpu=True, bf16=False).scale_rewards == "group"


# ---- logging ------------------------------------------------------------------------------------------------------


def test_train_log_completions(make_trainer):
    # upstream: test_train_reward_func_with_log_extra / _with_log_metric (the table's extra columns, the logged keys)
    trainer = make_trainer(log_completions=True)
    trainer.train()
    table = trainer._logs
    for column in ("completion_token_ids", "token_rewards", "token_advantages", "sequence_reward"):
        assert len(table["extra"][column]) == len(table["prompt"]) == len(table["completion"]) == 2
    assert {
        "reward",
        "rewards/dense_path/mean",
        "dense_reward/token_mean",
        "advantages/std",
        "kl_sft/per_token",
        "completions/mean_length",
    } <= logged_keys(trainer)
