"""WinRateCallback in a tiny DensePathTrainer run: eval/win_rate lands in the log history, SFT answers are generated
once, and the training logs keep their own metrics."""

import pytest
from datasets import Dataset

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.embedded.task import build_demo_dataset
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.evaluation import ExactAnswerJudge, PairJudgement, PairwiseJudge, WinRateCallback


class RecordingJudge(PairwiseJudge):
    """Deterministic: the candidate wins when its answer is longer, loses when shorter; records every pair."""

    name = "longer-wins"

    def __init__(self):
        self.calls = []

    def judge_pairs(self, pairs):
        self.calls.append(list(pairs))
        return [
            PairJudgement(
                "win"
                if len(p.candidate) > len(p.baseline)
                else "loss"
                if len(p.candidate) < len(p.baseline)
                else "tie"
            )
            for p in pairs
        ]


def make_trainer(tokenizer, tmp_path, max_steps=2):
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    )
    args = DensePathConfig(
        output_dir=str(tmp_path / "dpr"),
        per_device_train_batch_size=4,
        max_steps=max_steps,
        max_completion_length=6,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    prompts = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(8)]})
    return DensePathTrainer(
        model=None, reward_model=reward_model, args=args, train_dataset=prompts, processing_class=tokenizer
    )


def held_out(n=4):
    split = build_demo_dataset(num_train=10, num_test=8)["test"].select(range(n))
    return split["prompt"], split["answer"]


def test_win_rate_is_logged_every_eval_steps_with_the_exact_judge(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    prompts, answers = held_out()
    callback = WinRateCallback(
        ExactAnswerJudge(), trainer, prompts, references=answers, eval_steps=1, max_new_tokens=6
    )
    trainer.add_callback(callback)
    trainer.train()

    logged = [entry for entry in trainer.state.log_history if "eval/win_rate" in entry]
    assert [entry["step"] for entry in logged] == [1, 2]
    for entry in logged:
        assert 0.0 <= entry["eval/win_rate_ci_low"] <= entry["eval/win_rate"] <= entry["eval/win_rate_ci_high"] <= 1.0
        assert entry["eval/win_rate_unparseable"] == 0.0
    # The training logs still carry GRPO's and DPR's own metrics: logging the win rate did not swallow them.
    training = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in training] == [1, 2]
    assert all("reward" in entry and "dense_reward/token_mean" in entry for entry in training)


def test_sft_answers_are_generated_once_and_the_policy_is_judged_against_them(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    prompts, _ = held_out(3)
    judge = RecordingJudge()
    callback = WinRateCallback(judge, trainer, prompts, eval_steps=1, max_new_tokens=6)
    trainer.add_callback(callback)
    sft_model = trainer.reward_model.sft_model
    generate = sft_model.generate
    sft_calls = []
    sft_model.generate = lambda *args, **kwargs: sft_calls.append(1) or generate(*args, **kwargs)
    trainer.train()

    assert len(judge.calls) == 2 and len(sft_calls) == 1  # one SFT batch, at the first evaluation only
    first, second = judge.calls
    assert [p.baseline for p in first] == [p.baseline for p in second] == callback.sft_answers
    assert [p.question for p in first] == [conversation[0]["content"] for conversation in prompts]
    assert all(p.reference is None for p in first)
    expected = [
        "win" if len(p.candidate) > len(p.baseline) else "loss" if len(p.candidate) < len(p.baseline) else "tie"
        for p in second
    ]
    logged = [entry for entry in trainer.state.log_history if "eval/win_rate" in entry][-1]
    assert logged["eval/win_rate"] == pytest.approx((expected.count("win") + 0.5 * expected.count("tie")) / 3)


def test_the_win_rate_is_measured_when_the_trainer_evaluates(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, max_steps=1)
    prompts, answers = held_out(2)
    callback = WinRateCallback(ExactAnswerJudge(), trainer, prompts, references=answers, max_new_tokens=4)
    trainer.add_callback(callback)
    trainer.train()
    assert not any("eval/win_rate" in entry for entry in trainer.state.log_history)  # no eval_steps: not on steps
    trainer.callback_handler.on_evaluate(trainer.args, trainer.state, trainer.control, metrics={})
    trainer.callback_handler.on_evaluate(trainer.args, trainer.state, trainer.control, metrics={})  # same step: once
    logged = [entry for entry in trainer.state.log_history if "eval/win_rate" in entry]
    assert len(logged) == 1 and logged[0]["step"] == 1


def test_with_a_shared_peft_base_the_sft_adapter_answers_for_sft(tokenizer, tmp_path):
    """QLoRA layout: one base with adapters sft / ref, the policy a trainable copy: SFT answers use the sft adapter."""
    from peft import LoraConfig, get_peft_model

    base = build_tiny_causal_lm(tokenizer, seed=0)
    peft_model = get_peft_model(
        base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False), adapter_name="sft"
    )
    peft_model.add_adapter("ref", LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    reward_model = CheckpointRewardModel(
        peft_model, peft_model, processing_class=tokenizer, sft_adapter="sft", ref_adapter="ref"
    )
    args = DensePathConfig(
        output_dir=str(tmp_path / "dpr"),
        per_device_train_batch_size=4,
        max_steps=1,
        max_completion_length=4,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    prompts = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {i}+1?"}] for i in range(4)]})
    trainer = DensePathTrainer(
        model=None, reward_model=reward_model, args=args, train_dataset=prompts, processing_class=tokenizer
    )
    active = []
    generate = peft_model.generate
    peft_model.generate = lambda *a, **k: active.append(peft_model.active_adapter) or generate(*a, **k)
    eval_prompts, _ = held_out(2)
    callback = WinRateCallback(RecordingJudge(), trainer, eval_prompts, max_new_tokens=4)
    metrics = callback.evaluate()
    assert active == ["sft", "default"]  # SFT answers from the sft adapter, then the policy's own
    assert peft_model.active_adapter == "default"  # the policy adapter is active again for training
    assert 0.0 <= metrics["eval/win_rate"] <= 1.0
