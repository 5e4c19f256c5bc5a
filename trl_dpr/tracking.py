"""Experiment tracking of DPR runs: token-reward heatmaps of recent completions, every few steps.

`DensePathTrainer` logs its scalars (`reward` = Σ_t r̂_t, `dense_reward/token_mean|token_std`, `returns/mean`,
`kl_sft`, `advantages/mean|std`) to every `report_to` backend (wandb, trackio, tensorboard) through transformers'
own callbacks. `TokenHeatmapCallback` adds what a scalar cannot show: *where* in a completion the reward is.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from .visualize import heatmap_html

__all__ = ["TokenHeatmapCallback", "recent_token_rewards"]


def _completion_text(completion) -> str:
    """A completion as GRPOTrainer logs it: text, or (conversational) a list of messages."""
    if isinstance(completion, str):
        return completion
    return "".join(message.get("content") or "" for message in completion if isinstance(message, dict))


def recent_token_rewards(trainer, num_samples: int) -> tuple[list, list[dict]]:
    """The last `num_samples` completions the trainer scored, as token strings with their dense rewards r̂_t.

    They come from the trainer's completion log (`trainer._logs`: prompts, decoded completions and the per-token
    `token_rewards` column). The decoded text is tokenized again to name the tokens (a completion shorter than
    `max_completion_length` ended with EOS, which decoding dropped, and gets it back). When those tokens line up with
    the logged rewards, the logged rewards are shown as they are; otherwise (the text re-tokenizes differently from the
    generated ids, as a byte-level split or an untrained model's output can) the text is scored again by
    `trainer.reward_model` (left out when it has no tokenizer), so every reward shown belongs to the token it is drawn
    on. Every process must call it (scoring again is a forward of the possibly sharded reward model); all get the same
    result.

    Returns:
        `(prompts, scored)`, with `scored` in `CheckpointRewardModel.score_text`'s format (`tokens`, `token_ids`,
        `rewards`, `total`), ready for `trl_dpr.visualize.heatmap_html`.

    Example:
        ```python
        trainer.train()
        prompts, scored = recent_token_rewards(trainer, 4)
        IPython.display.HTML(heatmap_html(scored, prompts))
        ```
    """
    logs = trainer._logs
    token_rewards = list(logs["extra"].get("token_rewards", ()))
    count = min(len(logs["prompt"]), len(logs["completion"]), len(token_rewards))
    if count == 0 or num_samples <= 0:
        return [], []
    take = min(num_samples, count)
    samples = zip(list(logs["prompt"])[-take:], list(logs["completion"])[-take:], token_rewards[-take:])
    tokenizer = trainer.processing_class
    eos_id = tokenizer.eos_token_id
    max_length = trainer.args.max_completion_length
    kept_prompts, scored = [], []
    for prompt, completion, rewards in samples:
        text = _completion_text(completion)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        stopped_early = max_length is None or len(rewards) < max_length  # generation stops at EOS or at the limit
        ended_with_eos = eos_id is not None and (len(ids) + 1 == len(rewards) or stopped_early)
        if ended_with_eos and len(ids) + 1 == len(rewards):
            ids = ids + [eos_id]
        if rewards and len(ids) == len(rewards):
            rewards = [float(r) for r in rewards]
            item = {"tokens": [tokenizer.decode([i]) for i in ids], "token_ids": ids, "rewards": rewards}
            item["total"] = float(sum(rewards))
        elif (text or ended_with_eos) and trainer.reward_model.processing_class is not None:
            item = trainer.reward_model.score_text([prompt], [text], append_eos=ended_with_eos)[0]
        else:
            continue  # nothing to show (an empty completion), or no tokenizer on the reward model to score it again
        scored.append(item)
        kept_prompts.append(prompt)
    return kept_prompts, scored


class TokenHeatmapCallback(TrainerCallback):
    r"""Every `every_n_steps` optimizer steps, render the token-reward heatmaps of the trainer's last `num_samples`
    completions: written to `output_dir/heatmaps/step-XXXXX.html`, and logged as HTML to W&B (`wandb.Html`) and
    trackio (`trackio.Html`) when the run reports to them.

    The rewards are those the trainer used for that batch (r̂_t; see `recent_token_rewards` for a completion whose
    text re-tokenizes differently); darker red = higher. Only the main process writes and logs.

    Args:
        trainer: the `DensePathTrainer` whose completions are shown (as TRL's `LogCompletionsCallback` takes it).
        every_n_steps: how often, in optimizer steps.
        num_samples: completions per heatmap page.
        folder: sub-folder of `output_dir` for the pages.
        log_key: the key under which W&B and trackio show the page.

    Example:
        ```python
        from trl_dpr.tracking import TokenHeatmapCallback

        trainer = DensePathTrainer(model=None, reward_model="runs/sft",
                                   args=DensePathConfig(output_dir="runs/dpr", report_to=["wandb"]), train_dataset=prompts)
        trainer.add_callback(TokenHeatmapCallback(trainer, every_n_steps=50, num_samples=4))
        trainer.train()   # runs/dpr/heatmaps/step-00050.html, ... and a "heatmaps/token_rewards" panel in W&B
        ```
    """

    def __init__(
        self,
        trainer,
        every_n_steps: int = 50,
        num_samples: int = 4,
        folder: str = "heatmaps",
        log_key: str = "heatmaps/token_rewards",
    ):
        from .trainer import DensePathTrainer

        if not isinstance(trainer, DensePathTrainer):
            raise TypeError(
                f"TokenHeatmapCallback shows the dense token rewards of a DensePathTrainer, got {type(trainer).__name__}."
            )
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"every_n_steps must be a positive number of optimizer steps, got {every_n_steps!r}.")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be a positive number of completions, got {num_samples!r}.")
        self.trainer = trainer
        self.every_n_steps = every_n_steps
        self.num_samples = num_samples
        self.folder = folder
        self.log_key = log_key
        self.written: list[Path] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every_n_steps != 0:
            return
        prompts, scored = recent_token_rewards(self.trainer, self.num_samples)  # on every process: it may score
        if not scored or not state.is_world_process_zero:
            return
        step = state.global_step
        page = heatmap_html(scored, prompts, title=f"Dense token rewards of recent completions, step {step}")
        path = Path(args.output_dir) / self.folder / f"step-{step:05d}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
        self.written.append(path)
        self._log_to_trackers(args, step, page)

    def _log_to_trackers(self, args, step: int, page: str) -> None:
        report_to = args.report_to or []
        if "wandb" in report_to:
            import wandb

            if wandb.run is not None:
                wandb.log({self.log_key: wandb.Html(page, inject=False), "train/global_step": step})
        if "trackio" in report_to:
            import trackio

            if trackio.context_vars.current_run.get() is not None:
                html_page = trackio.Html(page, inject=False, data_is_not_path=True)
                trackio.log({self.log_key: html_page, "train/global_step": step})  # as transformers logs its scalars
