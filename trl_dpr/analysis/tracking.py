"""Experiment tracking of DPR runs: token-reward heatmaps of recent completions, every few steps.

The scalars reach every `report_to` backend through transformers' callbacks; `TokenHeatmapCallback` adds what a scalar
cannot show: *where* in a completion the reward is.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from .heatmaps import heatmap_html


def recent_token_rewards(trainer, num_samples: int) -> tuple[list, list[dict]]:
    """The last `num_samples` completions the trainer scored, as token strings with their dense rewards r̂_t.

    Read from the trainer's completion log (the sampled ids and the rewards it used: no text is tokenized again);
    `scored` is in `score_text`'s format, ready for `heatmap_html`.
    """
    logs = trainer._logs
    ids_column = list(logs["extra"].get("completion_token_ids", ()))
    rewards_column = list(logs["extra"].get("token_rewards", ()))
    count = min(len(logs["prompt"]), len(ids_column), len(rewards_column))
    if count == 0 or num_samples <= 0:
        return [], []
    take = min(num_samples, count)
    tokenizer = trainer.processing_class
    kept_prompts, scored = [], []
    for prompt, ids, rewards in zip(list(logs["prompt"])[-take:], ids_column[-take:], rewards_column[-take:]):
        if not ids:
            continue  # an empty completion: nothing to draw
        rewards = [float(r) for r in rewards]
        scored.append(
            {
                "tokens": [tokenizer.decode([i]) for i in ids],
                "token_ids": list(ids),
                "rewards": rewards,
                "total": sum(rewards),
            }
        )
        kept_prompts.append(prompt)
    return kept_prompts, scored


class TokenHeatmapCallback(TrainerCallback):
    r"""Every `every_n_steps` optimizer steps, render the token-reward heatmaps of the trainer's last `num_samples`
    completions: written to `output_dir/heatmaps/step-XXXXX.html`, and logged as HTML to W&B (`wandb.Html`) and
    trackio (`trackio.Html`) when the run reports to them.

    The rewards are those the trainer used for that batch; darker red = higher. Only the main process writes.
    """

    def __init__(
        self,
        trainer,
        every_n_steps: int = 50,
        num_samples: int = 4,
        folder: str = "heatmaps",
        log_key: str = "heatmaps/token_rewards",
    ):
        from ..trainer import DensePathTrainer

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
        if not state.is_world_process_zero:
            return
        prompts, scored = recent_token_rewards(self.trainer, self.num_samples)
        if not scored:
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
