"""`WinRateCallback`: the win rate of the policy against the frozen SFT model, measured during training.

TRL removed its judges and `WinRateCallback` in v1.1; this one takes any `PairwiseJudge` of `trl_dpr.evaluation`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from transformers import Trainer, TrainerCallback

from .judges import PairToJudge, PairwiseJudge
from .results import summarize_pairwise
from .sampling import generate_answers

logger = logging.getLogger(__name__)


def _question_text(prompt) -> str:
    """The user text of a prompt given as a string or as a conversation (its last user message)."""
    if isinstance(prompt, str):
        return prompt
    return next(m["content"] for m in reversed(prompt) if m["role"] == "user")


class WinRateCallback(TrainerCallback):
    """Every `eval_steps` optimizer steps, and whenever the trainer evaluates, answer a fixed set of prompts with the
    current policy, judge the answers against the SFT model's, and log the win rate (ties 0.5).

    The SFT answers are generated once and reused; generation is seeded and leaves the training random state alone.
    Logs `eval/win_rate`, its `_ci_low` / `_ci_high` and `_unparseable`. `sft_model` is the baseline for trainers
    without a `reward_model` (a GRPOTrainer); `eval_steps=None` evaluates only when the trainer does.

    Example:
        ```python
        from trl_dpr.evaluation import ExactAnswerJudge, WinRateCallback

        trainer = DensePathTrainer(reward_model=reward_model, args=config, train_dataset=train)
        held_out = build_demo_dataset(num_test=64)["test"]
        trainer.add_callback(WinRateCallback(ExactAnswerJudge(), trainer, held_out["prompt"],
                                             references=held_out["answer"], eval_steps=50))
        trainer.train()   # log history gets eval/win_rate every 50 steps
        ```
    """

    def __init__(
        self,
        judge: PairwiseJudge,
        trainer: Trainer,
        prompts: Sequence,
        references: Sequence[str] | None = None,
        eval_steps: int | None = None,
        sft_model=None,
        temperature: float = 0.7,
        max_new_tokens: int = 256,
        batch_size: int = 16,
        seed: int = 0,
        confidence: float = 0.95,
        num_resamples: int = 1000,
    ):
        if not prompts:
            raise ValueError("WinRateCallback needs at least one evaluation prompt.")
        if references is not None and len(references) != len(prompts):
            raise ValueError(f"Got {len(references)} references for {len(prompts)} prompts; give one per prompt.")
        if eval_steps is not None and eval_steps < 1:
            raise ValueError(f"eval_steps must be a positive number of steps or None, got {eval_steps}.")
        reward_model = getattr(trainer, "reward_model", None)
        if sft_model is None and getattr(reward_model, "sft_model", None) is None:
            raise ValueError(
                f"{type(trainer).__name__} has no `reward_model.sft_model` to compare with: pass the baseline as "
                "sft_model=..."
            )
        self.judge = judge
        self.trainer = trainer
        self.prompts = list(prompts)
        self.references = list(references) if references is not None else None
        self.eval_steps = eval_steps
        self.sft_model = sft_model
        self.generation = dict(
            temperature=temperature, max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed
        )
        self.confidence = confidence
        self.num_resamples = num_resamples
        self.sft_answers: list[str] | None = None
        self._last_step: int | None = None

    @contextlib.contextmanager
    def _sft_model_for_generation(self):
        """The SFT model ready to generate (with a shared PEFT base: its `sft` adapter switched on meanwhile)."""
        from trl.models.utils import unwrap_model_for_generation
        from trl.trainer.utils import use_adapter

        if self.sft_model is not None:
            model, adapter = self.sft_model, None
        else:
            model, adapter = self.trainer.reward_model.sft_model, self.trainer.reward_model.sft_adapter
        with use_adapter(model, adapter_name=adapter) if adapter is not None else contextlib.nullcontext():
            with unwrap_model_for_generation(model, self.trainer.accelerator) as unwrapped:
                yield unwrapped

    def _answers(self, model) -> list[str]:
        return generate_answers(
            model, self.trainer.processing_class, self.prompts, show_progress=False, **self.generation
        )

    def evaluate(self, is_main_process: bool = True) -> dict[str, float] | None:
        """Generate, judge and return the metrics the callback logs (None on processes other than the main one).

        Every process enters the unwrapping (ZeRO-3 gathers collectively); the main process alone generates.
        """
        from trl.models.utils import unwrap_model_for_generation

        if self.sft_answers is None:
            with self._sft_model_for_generation() as sft_model:
                self.sft_answers = self._answers(sft_model) if is_main_process else []
        with unwrap_model_for_generation(self.trainer.model_wrapped, self.trainer.accelerator) as policy:
            policy_answers = self._answers(policy) if is_main_process else None
        if not is_main_process:
            return None
        pairs = [
            PairToJudge(
                _question_text(prompt),
                answer,
                baseline,
                self.references[i] if self.references is not None else None,
                prompt,  # as the dataset wrote it: an answer check gets TRL's format
            )
            for i, (prompt, answer, baseline) in enumerate(zip(self.prompts, policy_answers, self.sft_answers))
        ]
        rate, unparseable, _ = summarize_pairwise(
            self.judge.judge_pairs(pairs), confidence=self.confidence, num_resamples=self.num_resamples
        )
        metrics = {"eval/win_rate_unparseable": float(unparseable)}
        if rate is None:
            logger.warning(f"WinRateCallback: none of the {len(pairs)} verdicts of {self.judge.name} could be parsed.")
        else:
            metrics.update(
                {
                    "eval/win_rate": rate.value,
                    "eval/win_rate_ci_low": rate.ci_low,
                    "eval/win_rate_ci_high": rate.ci_high,
                }
            )
        return metrics

    def _evaluate_and_log(self, state) -> None:
        if self._last_step == state.global_step:  # an evaluation and a scheduled step on the same step: once
            return
        self._last_step = state.global_step
        metrics = self.evaluate(is_main_process=state.is_world_process_zero)
        if metrics is not None:
            # transformers' Trainer.log, not the GRPO override: that one would fold (and clear) the pending training
            # metrics into this entry. Its on_log event also clears `should_log`, which would cancel this step's
            # training log (due right after on_step_end): restore it.
            control = self.trainer.control
            should_log = control.should_log
            Trainer.log(self.trainer, metrics)
            control.should_log = should_log

    def on_step_end(self, args, state, control, **kwargs):
        if self.eval_steps is not None and state.global_step % self.eval_steps == 0:
            self._evaluate_and_log(state)

    def on_evaluate(self, args, state, control, **kwargs):
        self._evaluate_and_log(state)
