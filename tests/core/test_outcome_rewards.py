"""Dense + outcome rewards: TRL's `reward_funcs` added at each completion's last token, beside (or instead of) r̂."""

import math

import pytest
import torch
from datasets import Dataset

from trl_dpr import CheckpointRewardModel, DensePathTrainer
from trl_dpr.algorithm import add_outcome_rewards, dense_path_advantages
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

from ..reference import dpr_advantages_by_hand, strip_padding, unpadded_logprobs


def returns_by_hand(dense_rows, outcome_rows, dense_weight, weights):
    """G_t of r_t = w_0 r̂_t + 1[t = last] Σ_j w_j R_j (NaN R_j skipped), by an explicit float64 loop."""
    returns = []
    for rewards, outcomes in zip(dense_rows, outcome_rows):
        outcome = sum(w * r for w, r in zip(weights, outcomes) if not math.isnan(r))
        row = [dense_weight * r + (outcome if t == len(rewards) - 1 else 0.0) for t, r in enumerate(rewards)]
        returns.append([sum(row[t:]) for t in range(len(row))])
    return returns


def test_outcome_rewards_reach_every_return_of_their_completion_and_nan_adds_nothing():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    dense = torch.randn(3, 4) * mask
    outcome = torch.tensor([[1.0, -0.5], [math.nan, 2.0], [0.0, math.nan]])
    weights = torch.tensor([0.5, 3.0])
    out = dense_path_advantages(
        dense,
        torch.zeros(3, 4),
        None,
        mask,
        kl_coef=0.0,
        whiten_advantages=False,
        dense_weight=0.25,
        outcome_rewards=outcome,
        outcome_weights=weights,
    )
    dense_rows = [dense[b, : int(mask[b].sum())].double().tolist() for b in range(3)]
    expected = returns_by_hand(dense_rows, outcome.double().tolist(), 0.25, weights.tolist())
    for b, row in enumerate(expected):
        assert out["returns"][b, : len(row)].tolist() == pytest.approx(row, abs=1e-6)
        assert torch.all(out["returns"][b, len(row) :] == 0)


def test_an_all_padding_row_gets_no_outcome_reward():
    rewards = add_outcome_rewards(torch.zeros(1, 3), torch.tensor([[5.0]]), torch.zeros(1, 3))
    assert torch.equal(rewards, torch.zeros(1, 3))


def length_penalty(prompts, completions, completion_ids, **kwargs):
    return [-0.1 * len(ids) for ids in completion_ids]


def parity_verifier(prompts, completions, completion_ids, answer, **kwargs):
    """Reads the dataset's `answer` column (3i for "What is i+2i?"); None (no verdict) for lengths divisible by 3."""
    for prompt, a in zip(prompts, answer, strict=True):
        assert prompt[-1]["content"] == f"What is {a // 3}+{2 * (a // 3)}?"  # each answer travels with its prompt
    return [None if len(ids) % 3 == 0 else float(len(ids) % 2 == 0) for ids in completion_ids]


def outcome_by_hand(ids):
    return [-0.1 * len(ids), math.nan if len(ids) % 3 == 0 else float(len(ids) % 2 == 0)]


def prompts_with_answers(n=16):
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(n)],
            "answer": [3 * i for i in range(n)],
        }
    )


@pytest.mark.parametrize("reward_weights", [[0.5, 2.0, 1.0], [0.0, 1.0, 1.0]], ids=["dense+outcome", "outcome-alone"])
def test_trainer_advantages_and_logs_are_the_weighted_dense_and_outcome_returns(make_trainer, reward_weights):
    trainer, used, sft, ref = make_trainer(
        kl_coef=0.0,
        max_steps=1,
        reward_weights=reward_weights,
        reward_funcs=[length_penalty, parity_verifier],
        train_dataset=prompts_with_answers(),
        max_completion_length=8,
    )
    trainer.train()
    first = used[0]  # scored by π_SFT / π_ref before any update
    dense_rows, outcome_rows = [], []
    for b in range(first["completion_mask"].size(0)):
        prompt = strip_padding(first["prompt_ids"][b], first["prompt_mask"][b])
        completion = strip_padding(first["completion_ids"][b], first["completion_mask"][b])
        sft_lp, ref_lp = unpadded_logprobs(sft, prompt, completion), unpadded_logprobs(ref, prompt, completion)
        dense_rows.append([s - r for s, r in zip(sft_lp, ref_lp)])
        outcome_rows.append(outcome_by_hand(completion))
    w0, weights = reward_weights[0], reward_weights[1:]
    last_rewards = [
        [0.0] * (len(row) - 1) + [g[-1]]
        for row, g in zip(
            dense_rows, returns_by_hand([[0.0] * len(r) for r in dense_rows], outcome_rows, 0.0, weights)
        )
    ]
    token_rewards = [[w0 * d + o for d, o in zip(dense, last)] for dense, last in zip(dense_rows, last_rewards)]
    for b, row in enumerate(dpr_advantages_by_hand(token_rewards)):
        assert first["advantages"][b, : len(row)].tolist() == pytest.approx(row, abs=1e-4)

    logged = trainer.state.log_history[0]
    sums = [sum(row) for row in dense_rows]
    totals = [w0 * s + sum(w * r for w, r in zip(weights, o) if not math.isnan(r)) for s, o in zip(sums, outcome_rows)]
    verdicts = [o[1] for o in outcome_rows if not math.isnan(o[1])]
    assert logged["rewards/dense_path/mean"] == pytest.approx(sum(sums) / len(sums), abs=1e-4)  # unweighted, as TRL
    assert logged["rewards/length_penalty/mean"] == pytest.approx(
        sum(o[0] for o in outcome_rows) / len(outcome_rows), abs=1e-5
    )
    if verdicts:
        assert logged["rewards/parity_verifier/mean"] == pytest.approx(sum(verdicts) / len(verdicts), abs=1e-5)
    assert {"rewards/length_penalty/std", "rewards/parity_verifier/std", "rewards/dense_path/std"} <= set(logged)
    assert logged["reward"] == pytest.approx(sum(totals) / len(totals), abs=1e-4)  # r̂ included, weighted


@pytest.mark.parametrize(
    "reward_weights, match",
    [
        ([1.0], r"reward_weights has 1 entries but DensePathTrainer needs 2: the dense reward r̂ first"),
        ([0.0, 0.0], r"switches every reward off"),
    ],
)
def test_reward_weights_must_name_dense_then_each_function_and_keep_one_on(
    tokenizer, make_config, reward_weights, match
):
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    )
    with pytest.raises(ValueError, match=match):
        DensePathTrainer(
            reward_model=reward_model,
            args=make_config(reward_weights=reward_weights),
            train_dataset=prompts_with_answers(),
            reward_funcs=[length_penalty],
        )


# ---- a verifier on the SFT file: the demonstration's answer travels as `answer` ------------------------------------

DEMONSTRATIONS = [
    {"messages": [{"role": "user", "content": f"What is {i}+{2 * i}?"}, {"role": "assistant", "content": f"{3 * i}"}]}
    for i in range(8)
]


@pytest.mark.parametrize("form", ["messages", "prompt_completion", "conversational_prompt_completion"])
def test_prompts_for_rl_keeps_each_demonstrations_final_assistant_text_as_answer(form):
    from trl_dpr.data import prompts_for_rl

    if form == "messages":
        rows = DEMONSTRATIONS
    elif form == "prompt_completion":
        rows = [
            {"prompt": d["messages"][0]["content"], "completion": d["messages"][1]["content"]} for d in DEMONSTRATIONS
        ]
    else:
        rows = [{"prompt": d["messages"][:1], "completion": d["messages"][1:]} for d in DEMONSTRATIONS]
    prompts = prompts_for_rl(Dataset.from_list(rows), "demonstrations")
    assert prompts["answer"] == [str(3 * i) for i in range(8)]


def test_prompts_for_rl_keeps_a_files_own_answer_column():
    from trl_dpr.data import prompts_for_rl

    rows = [{**d, "answer": "mine"} for d in DEMONSTRATIONS]
    assert prompts_for_rl(Dataset.from_list(rows), "demonstrations")["answer"] == ["mine"] * 8


def test_a_verifier_reading_answer_trains_on_the_sft_file_with_the_demonstrations_answers(make_trainer):
    from trl_dpr.data import prompts_for_rl

    seen = []

    def exact(prompts, completions, answer, **kwargs):
        seen.extend(zip((p[-1]["content"] for p in prompts), answer))
        return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]

    trainer, _, _, _ = make_trainer(
        max_steps=1,
        reward_weights=[1.0, 1.0],
        reward_funcs=[exact],
        train_dataset=prompts_for_rl(Dataset.from_list(DEMONSTRATIONS), "demonstrations"),
    )
    trainer.train()
    by_hand = {d["messages"][0]["content"]: d["messages"][1]["content"] for d in DEMONSTRATIONS}
    assert seen and all(by_hand[question] == answer for question, answer in seen)


def test_a_reward_function_needing_a_column_the_dataset_lacks_is_refused_before_any_model_loads(make_config):
    def meters(completions, answer, **kwargs):
        return [1.0] * len(completions)

    with pytest.raises(ValueError) as error:
        DensePathTrainer(
            reward_model="runs/not-loaded-yet",  # the check comes first: nothing is loaded
            args=make_config(reward_weights=[1.0, 1.0]),
            train_dataset=Dataset.from_dict({"prompt": ["What is 1+2?"]}),
            reward_funcs=[meters],
        )
    assert str(error.value) == (
        "Reward function meters needs 'answer', which train_dataset has no column for (columns: ['prompt']). "
        "GRPOTrainer passes a reward function `prompts`, `completions`, `completion_ids` and each other column by its "
        "name: add the column, or give the argument a default."
    )


def test_a_reward_function_taking_completion_or_prompt_is_told_trl_passes_them_as_completions_and_prompts(make_config):
    def meters(prompt, completion, **kwargs):
        return [1.0] * len(completion)

    with pytest.raises(ValueError) as error:
        DensePathTrainer(
            reward_model="runs/not-loaded-yet",
            args=make_config(reward_weights=[1.0, 1.0]),
            train_dataset=Dataset.from_dict({"prompt": ["What is 1+2?"], "completion": ["3"]}),
            reward_funcs=[meters],
        )
    assert str(error.value) == (
        "Reward function meters takes 'prompt', 'completion', but GRPOTrainer passes the batch's prompts and "
        "completions as `prompts` and `completions` (lists): rename the argument."
    )


def test_a_reward_function_needing_environments_is_refused_without_an_environment_factory(make_config):
    """GRPOTrainer passes `environments` only when it has an `environment_factory`."""

    def solved(completions, environments, **kwargs):
        return [1.0] * len(completions)

    with pytest.raises(ValueError, match=r"^Reward function solved needs 'environments', which train_dataset has no "):
        DensePathTrainer(
            reward_model="runs/not-loaded-yet",
            args=make_config(reward_weights=[1.0, 1.0]),
            train_dataset=Dataset.from_dict({"prompt": ["What is 1+2?"]}),
            reward_funcs=[solved],
        )
