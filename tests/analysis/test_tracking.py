"""Tracking: token-reward heatmaps of recent completions, and the DPR metrics in W&B (offline), TensorBoard and trackio
(local), each read back from what the tracker wrote during the recipes' launched run (tests/conftest.py's
`recipe_run`)."""

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
from datasets import Dataset

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.analysis.heatmaps import heatmap_html
from trl_dpr.analysis.tracking import TokenHeatmapCallback, recent_token_rewards
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

ROOT = Path(__file__).resolve().parents[2]
DPR_METRICS = (
    "reward",
    "dense_reward/token_mean",
    "dense_reward/token_std",
    "returns/mean",
    "kl_sft/per_token",
    "kl_sft/per_response",
    "advantages/mean",
    "advantages/std",
)
PROMPT = [{"role": "user", "content": "What is 12+7?"}]


def make_trainer(tokenizer, tmp_path, **overrides):
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1), processing_class=tokenizer
    )
    values = dict(
        output_dir=str(tmp_path / "dpr"),
        per_device_train_batch_size=4,
        max_steps=4,
        max_completion_length=6,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    values.update(overrides)
    prompts = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(16)]}
    )
    return DensePathTrainer(
        model=None,
        reward_model=reward_model,
        args=DensePathConfig(**values),
        train_dataset=prompts,
        processing_class=tokenizer,
    )


def log_completion(trainer, ids: list[int], rewards: list[float]):
    """What DensePathTrainer logs for one scored completion (as `_generate_and_score_completions` does)."""
    trainer._logs["prompt"].append(PROMPT)
    trainer._logs["completion"].append([{"role": "assistant", "content": "decoded text"}])
    trainer._logs["extra"]["completion_token_ids"].append(ids)
    trainer._logs["extra"]["token_rewards"].append(rewards)


# ---- the heatmap callback -------------------------------------------------------------------------------------------


def test_heatmaps_of_recent_completions_are_written_every_n_steps(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    callback = TokenHeatmapCallback(trainer, every_n_steps=2, num_samples=3)
    trainer.add_callback(callback)
    trainer.train()

    folder = tmp_path / "dpr" / "heatmaps"
    assert sorted(p.name for p in folder.iterdir()) == ["step-00002.html", "step-00004.html"]
    prompts, scored = recent_token_rewards(trainer, 3)  # the logs as they were at the last step
    assert len(scored) == 3
    page = (folder / "step-00004.html").read_text()
    assert page == heatmap_html(scored, prompts, title="Dense token rewards of recent completions, step 4")
    assert page.count('class="tok"') == sum(len(item["tokens"]) for item in scored) > 0
    assert "What is" in page  # the prompts are shown above their completions


def test_heatmaps_show_the_sampled_ids_and_the_rewards_the_trainer_used_without_tokenizing_again(
    tokenizer, tmp_path, monkeypatch
):
    trainer = make_trainer(tokenizer, tmp_path)
    trainer.train()
    logged_ids = list(trainer._logs["extra"]["completion_token_ids"])[-2:]
    logged_rewards = list(trainer._logs["extra"]["token_rewards"])[-2:]
    monkeypatch.setattr(trainer.reward_model, "score_text", lambda *a, **k: pytest.fail("scored again"))
    monkeypatch.setattr(type(tokenizer), "__call__", lambda *a, **k: pytest.fail("tokenized again"))
    prompts, scored = recent_token_rewards(trainer, 2)
    assert [item["token_ids"] for item in scored] == logged_ids
    assert [item["rewards"] for item in scored] == logged_rewards
    assert [item["tokens"] for item in scored] == [[tokenizer.decode([i]) for i in ids] for ids in logged_ids]
    assert [item["total"] for item in scored] == pytest.approx([sum(r) for r in logged_rewards])
    assert prompts == list(trainer._logs["prompt"])[-2:]


def test_an_id_that_decodes_to_merged_text_keeps_its_own_reward(tokenizer, tmp_path):
    """ "4" then "6" sampled as two tokens would tokenize again as one: the logged ids keep one reward each."""
    trainer = make_trainer(tokenizer, tmp_path, max_completion_length=3)
    four, six = tokenizer.convert_tokens_to_ids("4"), tokenizer.convert_tokens_to_ids("6")
    log_completion(trainer, [four, six, tokenizer.eos_token_id], [0.3, -0.2, 0.1])
    log_completion(trainer, [], [])  # an empty completion has nothing to draw
    prompts, scored = recent_token_rewards(trainer, 2)
    assert prompts == [PROMPT]
    assert scored == [
        {
            "tokens": ["4", "6", tokenizer.eos_token],
            "token_ids": [four, six, tokenizer.eos_token_id],
            "rewards": [0.3, -0.2, 0.1],
            "total": pytest.approx(0.2),
        }
    ]


# ---- the trackers, read back from what they wrote ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tracked_run(recipe_run):
    """The DPR of tests/conftest.py's `recipe_run`: recipes/dpr.py through `accelerate launch`, 2 steps reporting to
    W&B (offline), TensorBoard and trackio (local), every tracker writing under the run's folder, with token heatmaps
    of 2 rollouts at each step (`heatmap_steps: 1`). Returns the folder the trackers wrote into and the DPR's log
    history (its last checkpoint's trainer_state.json)."""
    (state,) = (recipe_run.work / "dpr").glob("checkpoint-2/trainer_state.json")
    return recipe_run.work, json.loads(state.read_text())["log_history"]


def wandb_records(path: Path):
    """The records of an offline W&B run file: a LevelDB-style log of 32 KiB blocks, after a 7-byte `:W&B` header."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        length, kind = int.from_bytes(data[position + 4 : position + 6], "little"), data[position + 6]
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # full / first, or middle / last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def wandb_history(run_file: Path) -> list[dict]:
    rows = []
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def dpr_wandb_run(out: Path) -> tuple[Path, list[dict]]:
    """The offline W&B run of the DPR (the SFT wrote one too, beside it): its folder and its history rows."""
    runs = {run_file.parent: wandb_history(run_file) for run_file in out.glob("wandb/offline-run-*/run-*.wandb")}
    (dpr,) = [folder for folder, rows in runs.items() if any("train/reward" in row for row in rows)]
    return dpr, runs[dpr]


@pytest.mark.slow
def test_wandb_offline_run_logs_the_dpr_metrics(tracked_run):
    out, log_history = tracked_run
    rows = [row for row in dpr_wandb_run(out)[1] if "train/reward" in row]
    assert [row["train/global_step"] for row in rows] == [1, 2]
    for row, logged in zip(rows, log_history):
        for name in DPR_METRICS:
            assert row[f"train/{name}"] == pytest.approx(logged[name])


@pytest.mark.slow
def test_wandb_offline_run_holds_the_heatmaps_as_html(tracked_run):
    out, _ = tracked_run
    run_dir, history = dpr_wandb_run(out)
    rows = [row for row in history if "heatmaps/token_rewards/_type" in row]
    assert [row["train/global_step"] for row in rows] == [1, 2]
    assert {row["heatmaps/token_rewards/_type"] for row in rows} == {"html-file"}
    assert sorted(p.name for p in (out / "dpr" / "heatmaps").iterdir()) == ["step-00001.html", "step-00002.html"]
    for row in rows:
        page = (run_dir / "files" / row["heatmaps/token_rewards/path"]).read_text()
        assert page.count('class="pair"') == 2 and "data-reward=" in page


@pytest.mark.slow
def test_tensorboard_logs_the_dpr_metrics(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, log_history = tracked_run
    (log_dir,) = (out / "dpr" / "runs").iterdir()
    events = EventAccumulator(str(log_dir))
    events.Reload()
    for name in DPR_METRICS:
        scalars = events.Scalars(f"train/{name}")
        assert [s.step for s in scalars] == [1, 2]
        assert [s.value for s in scalars] == pytest.approx([row[name] for row in log_history[:2]], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_trackio_local_run_logs_the_dpr_metrics_and_the_heatmaps(tracked_run):
    out, log_history = tracked_run
    # Read as an immutable file: no journal or shared-memory file written into the run's folder (tests/end_to_end/test_secrets.py
    # scans every file there), and the connection closed at once.
    with contextlib.closing(
        sqlite3.connect(f"file:{out / 'trackio' / 'trl-dpr-secrets.db'}?immutable=1", uri=True)
    ) as db:
        rows = [json.loads(metrics) for (metrics,) in db.execute("SELECT metrics FROM metrics ORDER BY id")]
    scalars = [row for row in rows if "train/reward" in row]
    assert [row["train/global_step"] for row in scalars] == [1, 2]
    for row, logged in zip(scalars, log_history):
        assert all(row[f"train/{name}"] == pytest.approx(logged[name]) for name in DPR_METRICS)
    pages = [row["heatmaps/token_rewards"] for row in rows if "heatmaps/token_rewards" in row]
    assert [page["_type"] for page in pages] == ["trackio.html", "trackio.html"]
    for page in pages:
        assert "data-reward=" in (out / "trackio" / "media" / page["file_path"]).read_text()
