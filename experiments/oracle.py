"""A control for the settings sweep: the correctness oracle, +1 at the last token of a response whose final answer is
right, 0 everywhere else.

If DPR with the oracle reward does not improve the policy either, the optimisation budget (steps, batch, learning
rate) is the limit, not the dense reward. The oracle keeps π_SFT for the KL term, like DPR (no π_ref: it scores
`SFTLogProb`, the wo/Baseline reward, underneath), and knows the exact answers of the embedded task's prompts.
"""

from __future__ import annotations

import dataclasses

import torch

from trl_dpr.embedded.task import is_correct
from trl_dpr.reward_model import CheckpointRewardModel
from trl_dpr.rewards import SFTLogProb
from trl_dpr.token_batches import render_prompts

__all__ = ["CorrectnessOracleRewardModel"]


class CorrectnessOracleRewardModel(CheckpointRewardModel):
    """`CheckpointRewardModel` whose reward is 1 at the last completion token when the response's final answer
    (`The answer is X.`) is the prompt's exact answer, else 0. `sft_logps` are π_SFT's, for DPR's KL to π_SFT.

    Prompts are recognised by their token ids, rendered as the trainer renders them (`trl_dpr.token_batches.render_prompts`),
    so call `add_answers` with every prompt the oracle will see (train and held-out); an unknown prompt is an error.

    Example:
        >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
        >>> tok = build_tokenizer(["What is 2+3? The answer is 5."])
        >>> oracle = CorrectnessOracleRewardModel(build_tiny_causal_lm(tok), processing_class=tok)
        >>> oracle.add_answers([[{"role": "user", "content": "What is 2+3?"}]], ["5"])
        >>> [s["total"] for s in oracle.score_text([[{"role": "user", "content": "What is 2+3?"}]] * 2,
        ...                                       ["The answer is 5.", "The answer is 6."])]
        [1.0, 0.0]
    """

    def __init__(self, sft_model, ref_model=None, reward=None, **kwargs):
        super().__init__(sft_model, ref_model, SFTLogProb() if reward is None else reward, **kwargs)
        if "ref" in self.reward.model_names:
            raise ValueError(
                "The correctness oracle uses no π_ref: build it with reward=SFTLogProb() (the default; in the recipes "
                "dense_reward: trl_dpr.rewards:SFTLogProb)."
            )
        if self.processing_class is None:
            raise ValueError("The correctness oracle reads responses as text: pass processing_class= (the tokenizer).")
        self.answers: dict[tuple[int, ...], str] = {}

    def add_answers(self, prompts: list, answers: list[str]) -> None:
        """Register the exact answer of each prompt (strings or conversations)."""
        if len(prompts) != len(answers):
            raise ValueError(f"Got {len(prompts)} prompts and {len(answers)} answers; pass one answer per prompt.")
        for ids, answer in zip(render_prompts(self.processing_class, list(prompts)), answers):
            self.answers[tuple(ids)] = str(answer)

    @torch.no_grad()
    def forward(
        self,
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask,
        is_terminal=None,
        batch_size=None,
        temperature=1.0,
    ):
        scored = super().forward(
            prompt_ids, prompt_mask, completion_ids, completion_mask, is_terminal, batch_size, temperature
        )
        rewards = torch.zeros_like(scored.rewards)
        lengths = completion_mask.long().sum(dim=1).tolist()
        for row, length in enumerate(lengths):
            if length == 0:
                continue
            prompt = tuple(prompt_ids[row][prompt_mask[row].bool()].tolist())
            if prompt not in self.answers:
                text = self.processing_class.decode(list(prompt))
                raise KeyError(
                    f"The correctness oracle has no answer for the prompt {text[:120]!r}. Register every prompt it "
                    "scores with add_answers(prompts, answers) (the train and held-out rows of the embedded task)."
                )
            response = self.processing_class.decode(completion_ids[row][:length].tolist(), skip_special_tokens=True)
            if is_correct(response, self.answers[prompt]):
                rewards[row, length - 1] = 1.0  # the whole reward at the last token: a sparse, outcome-only signal
        return dataclasses.replace(scored, rewards=rewards)
