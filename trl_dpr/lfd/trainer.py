"""`SPINTrainer` and `GSILTrainer`: one self-play iteration each, as thin subclasses of TRL's DPOTrainer.

    pairs (prompt, demonstration y = "chosen", own answer y' = "rejected")
        ─► DPOTrainer's collator: [y rows; y' rows] ─► log π_θ, log π_t (TRL's fused LM head, summed per completion)
        ─► `pair_loss`: SPIN's or GSIL's loss (`trl_dpr.lfd.losses`) ─► mean ─► DPOTrainer's optimiser step

The reference is DPOTrainer's own: the model as passed in, π_t. The iterations are `lfd.self_play.run_self_play`.
"""

from __future__ import annotations

import textwrap

import torch
from datasets import Dataset
from trl import DPOTrainer

from ..running.checkpointing import AtomicCheckpointsMixin
from ..running.console_log import ConsoleLogMixin
from ..running.model_card import BaseModelCardMixin
from .config import GSILConfig, SPINConfig
from .losses import gsil_discriminator, gsil_loss, spin_loss

PAIR_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")
_NON_MODEL_KEYS = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}


def trains_on_prompt(prompt_length: int, max_length: int | None) -> bool:
    """Whether a pair whose prompt is `prompt_length` tokens is trained on: as DPOTrainer, a prompt that fills
    `max_length` leaves no completion token, and its pair is dropped. `_prepare_dataset` follows it, and so does
    self-play's choice of the prompts π_t answers (`self_play.check_lengths_fit_context`): no answer is wasted."""
    return max_length is None or prompt_length < max_length


class SelfPlayTrainer(AtomicCheckpointsMixin, BaseModelCardMixin, ConsoleLogMixin, DPOTrainer):
    r"""What SPIN and GSIL change in [`~trl.DPOTrainer`]; use `SPINTrainer` or `GSILTrainer`.

    Overrides: `_prepare_dataset` keeps pairs that hold token ids (own answers are scored on the ids π_t sampled, not
    re-tokenized text); `compute_loss` runs DPOTrainer's forwards, then `pair_loss`.

    Example (a new self-play method is its `pair_loss`):
        ```python
        class MarginTrainer(SelfPlayTrainer):
            def pair_loss(self, policy_real, policy_generated, ref_real, ref_generated):
                margin = (policy_real - ref_real) - (policy_generated - ref_generated)
                return torch.relu(1.0 - margin), {"margin": margin}
        ```
    """

    def pair_loss(
        self,
        policy_real: torch.Tensor,
        policy_generated: torch.Tensor,
        ref_real: torch.Tensor,
        ref_generated: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`[B]` losses and the metrics to log (`[B]` tensors), from the four `[B]` sequence log-probabilities."""
        raise NotImplementedError

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        if isinstance(dataset, Dataset) and set(PAIR_COLUMNS) <= set(dataset.column_names):
            if args.max_length is not None:  # as DPOTrainer: a prompt that fills max_length leaves no completion token
                dataset = dataset.filter(lambda row: trains_on_prompt(len(row["prompt_ids"]), args.max_length))
            return dataset
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        completion_mask = inputs["completion_mask"]
        model_kwargs = {k: v for k, v in inputs.items() if k not in _NON_MODEL_KEYS}
        model_kwargs["use_cache"] = False
        labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
        outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        # log π_θ(y|x): the sum of the completion's token log-probs (prompt and padding have label -100, hence 0).
        # The fused head returns T − 1 shifted positions; prompt-learning PEFT prepends virtual ones, dropped here.
        logps = outputs.log_probs[:, -(completion_mask.size(1) - 1) :].sum(dim=1)
        policy_real, policy_generated = logps.chunk(2, dim=0)  # the collator stacks [chosen; rejected]
        if self.precompute_ref_logps:
            ref_real, ref_generated = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:  # π_t: the frozen copy, or the policy with its "ref" adapter / adapters off (PEFT)
            reference = self.ref_model if self.ref_model is not None else self.model
            ref_real, ref_generated = self.compute_ref_log_probs(reference, inputs)
        losses, metrics = self.pair_loss(policy_real, policy_generated, ref_real, ref_generated)
        metrics = {**metrics, "logps/real": policy_real, "logps/generated": policy_generated}
        for name, values in metrics.items():
            self._metrics[mode][name].append(self.accelerator.gather(values.detach().float()).mean().item())
        loss = losses.mean()
        if (
            return_outputs
        ):  # as DPOTrainer: the fused head builds no logits, so `compute_metrics` gets a second forward
            with torch.no_grad():
                outputs = model(**model_kwargs)
            return loss, outputs
        return loss


class SPINTrainer(SelfPlayTrainer):
    r"""Trainer for one iteration of Self-Play Fine-Tuning (SPIN), from [Self-Play Fine-Tuning Converts Weak Language
    Models to Strong Language Models](https://huggingface.co/papers/2401.01335).

    SPIN tells the demonstration y from π_t's answer y' with DPO's loss (`spin_loss`), reference = π_t; one `train` is
    one iteration. The only change w.r.t. [`SelfPlayTrainer`] is `pair_loss`; everything else is DPOTrainer's.

    Example:
        ```python
        from trl_dpr.lfd import SPINConfig, SPINTrainer

        trainer = SPINTrainer(model="runs/demo/sft", args=SPINConfig(output_dir="runs/spin/iteration-0"),
                              train_dataset=pairs)  # prompt / chosen (demonstration) / rejected (π_t's answer)
        trainer.train()
        ```
    """

    _tag_names = ["trl", "spin", "self-play"]
    _name = "SPIN"
    _paper = {
        "title": "Self-Play Fine-Tuning Converts Weak Language Models to Strong Language Models",
        "id": "2401.01335",
        "citation": textwrap.dedent("""\
            @inproceedings{chen2024selfplay,
                title        = {{Self-Play Fine-Tuning Converts Weak Language Models to Strong Language Models}},
                author       = {Zixiang Chen and Yihe Deng and Huizhuo Yuan and Kaixuan Ji and Quanquan Gu},
                year         = 2024,
                booktitle    = {Forty-first International Conference on Machine Learning, {ICML} 2024},
                eprint       = {arXiv:2401.01335},
            }"""),
    }

    def __init__(self, model, ref_model=None, args: SPINConfig | None = None, **kwargs):
        if not isinstance(args, SPINConfig):
            raise TypeError(f"SPINTrainer needs a SPINConfig (its loss and β), got {type(args).__name__}.")
        super().__init__(model, ref_model=ref_model, args=args, **kwargs)

    def pair_loss(self, policy_real, policy_generated, ref_real, ref_generated):
        losses = spin_loss(
            policy_real,
            policy_generated,
            ref_real,
            ref_generated,
            beta=self.args.beta,
            loss_type=self.args.spin_loss_type,
        )
        real = self.args.beta * (policy_real - ref_real)  # SPIN's implicit rewards, as DPO logs them
        generated = self.args.beta * (policy_generated - ref_generated)
        return losses, {
            "rewards/real": real,
            "rewards/generated": generated,
            "rewards/margins": real - generated,
            "rewards/accuracies": (real > generated).float(),
        }


class GSILTrainer(SelfPlayTrainer):
    r"""Trainer for one iteration of Generalized Self-Imitation Learning (GSIL), from [How to Leverage Demonstration
    Data in Alignment for Large Language Model? A Self-Imitation Learning Perspective](https://huggingface.co/papers/2410.10093).

    GSIL fits f = β log π_θ/π_t (+ b), demonstrations vs. own answers, with a density-ratio loss pair (`gsil_loss`).
    The only change w.r.t. [`SelfPlayTrainer`] is `pair_loss`; everything else is DPOTrainer's.

    Example:
        ```python
        from trl_dpr.lfd import GSILConfig, GSILTrainer

        trainer = GSILTrainer(model="runs/demo/sft", args=GSILConfig(output_dir="runs/gsil/iteration-0"),
                              train_dataset=pairs)  # prompt / chosen (demonstration) / rejected (π_t's answer)
        trainer.train()
        ```
    """

    _tag_names = ["trl", "gsil", "self-imitation"]
    _name = "GSIL"
    _paper = {
        "title": "How to Leverage Demonstration Data in Alignment for Large Language Model? A Self-Imitation Learning Perspective",
        "id": "2410.10093",
        "citation": textwrap.dedent("""\
            @inproceedings{xiao2024leverage,
                title        = {{How to Leverage Demonstration Data in Alignment for Large Language Model? A Self-Imitation Learning Perspective}},
                author       = {Teng Xiao and Mingxiao Li and Yige Yuan and Huaisheng Zhu and Chao Cui and Vasant G. Honavar},
                year         = 2024,
                booktitle    = {Proceedings of the 2024 Conference on Empirical Methods in Natural Language Processing, {EMNLP} 2024},
                eprint       = {arXiv:2410.10093},
            }"""),
    }

    def __init__(self, model, ref_model=None, args: GSILConfig | None = None, **kwargs):
        if not isinstance(args, GSILConfig):
            raise TypeError(f"GSILTrainer needs a GSILConfig (its loss, β and shift), got {type(args).__name__}.")
        super().__init__(model, ref_model=ref_model, args=args, **kwargs)

    def pair_loss(self, policy_real, policy_generated, ref_real, ref_generated):
        args = self.args
        losses, real_losses, generated_losses = gsil_loss(
            policy_real,
            policy_generated,
            ref_real,
            ref_generated,
            beta=args.beta,
            loss_type=args.gsil_loss_type,
            shift=args.gsil_shift,
        )
        real = gsil_discriminator(policy_real, ref_real, args.beta, args.gsil_shift)  # f on demonstrations: pushed up
        generated = gsil_discriminator(policy_generated, ref_generated, args.beta, args.gsil_shift)  # own: down
        return losses, {
            "rewards/real": real,
            "rewards/generated": generated,
            "rewards/margins": real - generated,
            "rewards/accuracies": (real > generated).float(),
            "loss/real": real_losses,
            "loss/generated": generated_losses,
        }
