"""`DensePathTrainer`: Dense-Path REINFORCE (Algorithm 1 with REINFORCE++) as a thin subclass of TRL's GRPOTrainer."""

from __future__ import annotations

import copy
import functools
import json
import textwrap
from pathlib import Path
from typing import Any

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather, gather_object
from torch import nn
from transformers import PreTrainedModel
from trl import GRPOTrainer
from trl.trainer.utils import pad

from . import algorithm
from .checkpointing import AtomicCheckpointsMixin, check_output_dir
from .config import DensePathConfig
from .reward_model import CheckpointRewardModel

__all__ = ["DensePathTrainer"]

logger = get_logger(__name__)

CITATION = textwrap.dedent("""\
    @article{li2025beyond,
        title        = {{Beyond Imitation: Recovering Dense Rewards from Demonstrations}},
        author       = {Jiangnan Li and Thuy-Trang Vu and Ehsan Abbasnejad and Gholamreza Haffari},
        year         = 2025,
        eprint       = {arXiv:2510.02493},
    }""")


POLICY_ADAPTER = "default"  # PEFT saves the "default" adapter at the root of the output folder


def _add_policy_adapter(peft_model, sft_adapter: str):
    """The policy as a trainable copy of the SFT adapter on the reward model's own base (one base in memory)."""
    if POLICY_ADAPTER in peft_model.peft_config:
        raise ValueError(
            f"The shared PEFT model already has an adapter named {POLICY_ADAPTER!r}; the policy adapter needs that name."
        )
    config = copy.deepcopy(peft_model.peft_config[sft_adapter])
    config.inference_mode = False
    peft_model.add_adapter(POLICY_ADAPTER, config)
    source, target = f".{sft_adapter}.", f".{POLICY_ADAPTER}."
    parameters = dict(peft_model.named_parameters())
    for name, parameter in parameters.items():
        if source in name:
            parameters[name.replace(source, target)].data.copy_(parameter.data)
    peft_model.set_adapter(POLICY_ADAPTER)  # active and trainable; the sft/ref adapters stay frozen
    return peft_model


def _check_has_prompts(dataset, name: str) -> None:
    """DPR samples completions for a `prompt` column; say so before any model is loaded."""
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{name} has no `prompt` column (columns: {sorted(columns)}). DPR samples a completion for each prompt: "
            "map your data to a `prompt` column (a string or a list of chat messages), e.g. with "
            "trl_dpr.data.prompts_for_rl for `messages` or prompt/completion datasets."
        )


def dense_path(prompts, completions, **kwargs):
    """Placeholder reward function: DensePathTrainer scores with its CheckpointRewardModel, never through this."""
    raise RuntimeError("dense_path is scored by DensePathTrainer._calculate_rewards, not called directly.")


class DensePathTrainer(AtomicCheckpointsMixin, GRPOTrainer):
    r"""Trainer for Dense-Path REINFORCE (DPR), from [Beyond Imitation: Recovering Dense Rewards from
    Demonstrations](https://huggingface.co/papers/2510.02493).

    DPR reads a dense token reward off an SFT run, r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t) with π_ref the SFT
    checkpoint at a fraction α of training, and improves the SFT policy with token-level REINFORCE++: undiscounted
    per-token returns of r̂ minus a small KL to π_SFT, whitened over the whole batch, optimised with the clipped
    surrogate.

    The only changes w.r.t. [`~trl.GRPOTrainer`] are the scoring (`_calculate_rewards`: dense rewards from the
    `CheckpointRewardModel` instead of scalar reward functions) and the advantages (`_generate_and_score_completions`:
    per-token `(B, T)` advantages, which GRPO's loss accepts). Everything else (generation with transformers or vLLM,
    PEFT and quantisation, the clipped loss, logging, checkpointing, Hub pushing) is inherited unchanged, with two
    safety nets: a batch whose rewards or advantages are not finite is skipped (no gradient reaches the weights; counted
    as `skipped_nonfinite_batches`), and checkpoints are staged then renamed (`trl_dpr.checkpointing`).

    Args:
        model: the policy, as GRPOTrainer takes it (model id / path, `PreTrainedModel` or `PeftModel`). `None` starts
            from π_SFT (Algorithm 1, line 2): the SFT path of `reward_model`, or a copy of its SFT model.
        reward_model: a [`CheckpointRewardModel`], or the path / Hub id of an SFT output whose reference checkpoint was
            recorded by `ReferenceCheckpointCallback` (loaded with `args.model_init_kwargs`).
        args: a [`DensePathConfig`].
        train_dataset, eval_dataset, processing_class, callbacks, optimizers, quantization_config, peft_config: as in
            GRPOTrainer. The dataset needs a `prompt` column.

    Example:
        ```python
        from trl_dpr import DensePathConfig, DensePathTrainer

        trainer = DensePathTrainer(
            model=None,                    # start from π_SFT
            reward_model="runs/sft",       # SFT output with its reference checkpoint
            args=DensePathConfig(output_dir="runs/dpr", per_device_train_batch_size=8),
            train_dataset=prompts,         # a `prompt` column
        )
        trainer.train()
        ```
    """

    _tag_names = ["trl", "dpr", "dense-path-reinforce"]
    _name = "Dense-Path REINFORCE"
    _paper = {
        "title": "Beyond Imitation: Recovering Dense Rewards from Demonstrations",
        "id": "2510.02493",
        "citation": CITATION,
    }

    def __init__(
        self,
        model: str | PreTrainedModel | nn.Module | None = None,
        reward_model: CheckpointRewardModel | str | None = None,
        args: DensePathConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        **kwargs: Any,
    ):
        if reward_model is None:
            raise ValueError(
                "DensePathTrainer needs `reward_model`: a CheckpointRewardModel, or the path of an SFT output saved "
                "with ReferenceCheckpointCallback (e.g. reward_model='runs/sft')."
            )
        if args is None:
            args = DensePathConfig("dpr-output")
        elif not isinstance(args, DensePathConfig):
            raise TypeError(f"args must be a DensePathConfig, got {type(args).__name__}.")
        if "reward_funcs" in kwargs:
            raise TypeError("DensePathTrainer scores with `reward_model`; it takes no `reward_funcs`.")
        _check_has_prompts(train_dataset, "train_dataset")
        if isinstance(eval_dataset, dict):
            for name, dataset in eval_dataset.items():
                _check_has_prompts(dataset, f"eval_dataset[{name!r}]")
        elif eval_dataset is not None:
            _check_has_prompts(eval_dataset, "eval_dataset")
        check_output_dir(args.output_dir)

        if isinstance(reward_model, str):
            reward_model = CheckpointRewardModel.from_pretrained(
                reward_model,
                use_baseline=args.use_baseline,
                eliminate_value=args.eliminate_value,
                token_chunk_size=args.reward_token_chunk_size,
                **dict(args.model_init_kwargs or {}),
            )
        elif not isinstance(reward_model, CheckpointRewardModel):
            raise TypeError(f"reward_model must be a CheckpointRewardModel or a path, got {type(reward_model).__name__}.")
        for flag in ("use_baseline", "eliminate_value"):
            if getattr(reward_model, flag) != getattr(args, flag):
                raise ValueError(
                    f"DensePathConfig.{flag}={getattr(args, flag)} but the reward model was built with "
                    f"{flag}={getattr(reward_model, flag)}. Build it with the same value, or pass the SFT path as "
                    "`reward_model` and let the trainer load it from the config."
                )

        # Algorithm 1, line 2: the actor starts from π_SFT; π_SFT itself stays frozen as the reward and KL reference.
        self.shares_base_with_reward_model = reward_model.sft_adapter is not None and (
            model is None or model is reward_model.sft_model
        )
        if self.shares_base_with_reward_model:
            if peft_config is not None:
                raise ValueError(
                    "The reward model's π_SFT is a PEFT adapter, so the policy is a trainable copy of it on the same "
                    "base; do not pass a peft_config (the copy keeps the SFT adapter's configuration)."
                )
            if args.beta != 0.0:
                raise ValueError(
                    "beta != 0 (GRPO's KL-in-loss) is not supported when the policy shares its base with the reward "
                    "model; DPR's KL to π_SFT is `kl_coef`, inside the reward."
                )
            model = _add_policy_adapter(reward_model.sft_model, reward_model.sft_adapter)
        elif model is None:
            model = reward_model.sft_model_name_or_path or copy.deepcopy(reward_model.sft_model)
            if isinstance(model, nn.Module):
                model.requires_grad_(True)
        elif isinstance(model, nn.Module) and model is reward_model.sft_model:
            raise ValueError(
                "The policy and π_SFT are the same object: training would change the reward. Pass model=None to start "
                "from a copy of π_SFT, or load the SFT model a second time for the policy."
            )

        super().__init__(
            model=model,
            reward_funcs=dense_path,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
            **kwargs,
        )
        policy_vocab = self.model.config.get_text_config().vocab_size
        sft_vocab = reward_model.config.get_text_config().vocab_size
        if policy_vocab != sft_vocab:
            raise ValueError(
                f"The policy has a vocabulary of {policy_vocab} tokens but π_SFT has {sft_vocab}: they must share one "
                "tokenizer. Start the policy from the SFT model (model=None)."
            )
        self.reward_model = self._prepare_reward_model(reward_model)
        self.skipped_nonfinite_batches = 0
        self._skip_generation_batch = False
        if args.max_prompt_length is not None:
            self.train_dataset = self._drop_long_prompts(self.train_dataset, "train")
            if isinstance(self.eval_dataset, dict):
                self.eval_dataset = {k: self._drop_long_prompts(v, f"eval/{k}") for k, v in self.eval_dataset.items()}
            elif self.eval_dataset is not None:
                self.eval_dataset = self._drop_long_prompts(self.eval_dataset, "eval")

    def _drop_long_prompts(self, dataset, split: str):
        """Drop prompts longer than `max_prompt_length` tokens, as GRPO would tokenize them; log how many."""
        from datasets import Dataset

        if not isinstance(dataset, Dataset) or "prompt" not in dataset.column_names:
            return dataset  # streaming datasets and environment-owned prompts are left as they are
        limit = self.args.max_prompt_length

        def prompt_length(example):
            prompt_ids, _, _ = self._tokenize_prompts([example["prompt"]])
            return {"_dpr_prompt_length": len(prompt_ids[0])}

        lengths = dataset.map(prompt_length, desc=f"Measuring {split} prompts")["_dpr_prompt_length"]
        keep = [i for i, n in enumerate(lengths) if n <= limit]
        dropped = len(lengths) - len(keep)
        self.num_dropped_prompts = getattr(self, "num_dropped_prompts", {}) | {split: dropped}
        if split == "train":
            self._metrics["train"]["prompts/dropped_too_long"].append(float(dropped))  # shows in the first log
        if dropped:
            logger.warning(
                f"Dropped {dropped} of {len(lengths)} {split} prompts longer than max_prompt_length={limit} tokens "
                f"(longest: {max(lengths)})."
            )
        if not keep:
            raise ValueError(
                f"Every {split} prompt is longer than max_prompt_length={limit} tokens (shortest: {min(lengths)}). "
                "Raise max_prompt_length or shorten the prompts."
            )
        return dataset if dropped == 0 else dataset.select(keep)

    # Hyperparameters shown on the model card: DPR's own fields and the parent fields the paper fixes (Table 5).
    CARD_HYPERPARAMETERS = (
        "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size",
        "num_generations", "temperature", "kl_coef", "gamma", "epsilon", "reward_granularity", "use_baseline",
        "eliminate_value", "whiten_advantages", "max_prompt_length", "max_completion_length", "warmup_steps",
        "seed",
    )

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's model card (tags `trl`, `dpr`, `dense-path-reinforce`, the paper's citation), plus the DPR
        hyperparameters, where the reward came from, and the evaluation table when `eval_results.json` exists."""
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        card_path = Path(self.args.output_dir) / "README.md"
        lines = ["", "## Dense-Path REINFORCE", "", "| hyperparameter | value |", "|---|---|"]
        lines += [f"| `{name}` | {getattr(self.args, name)} |" for name in self.CARD_HYPERPARAMETERS]
        length = ("max_steps", self.args.max_steps) if self.args.max_steps > 0 else ("num_train_epochs", self.args.num_train_epochs)
        lines.append(f"| `{length[0]}` | {length[1]} |")
        manifest = self.reward_model.reference_manifest
        source = self.reward_model.sft_model_name_or_path
        if source:
            # A Hub id is useful to readers; a local path is not (and may reveal a home directory): keep its name.
            source = Path(source).name if Path(source).is_dir() else source
            reference = f" (π_ref: step {manifest.step}/{manifest.total_steps}, α = {manifest.fraction})" if manifest else ""
            lines += ["", f"Dense reward r̂ = log π_SFT − log π_ref from the SFT model `{source}`{reference}."]
        results_path = Path(self.args.output_dir) / "eval_results.json"
        if results_path.is_file():
            table = json.loads(results_path.read_text()).get("table_markdown")
            if table:
                lines += ["", "## Evaluation", "", table]
        with open(card_path, "a") as card:
            card.write("\n".join(lines) + "\n")

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if not self.shares_base_with_reward_model:
            return super()._save(output_dir, state_dict)
        # The shared base also carries the frozen sft/ref adapters: the policy output is the policy adapter alone.
        peft_model = self.accelerator.unwrap_model(self.model)
        peft_model.save_pretrained = functools.partial(peft_model.save_pretrained, selected_adapters=[POLICY_ADAPTER])
        try:
            super()._save(output_dir, state_dict)
        finally:
            del peft_model.save_pretrained  # back to the class method

    def _prepare_reward_model(self, reward_model: CheckpointRewardModel) -> CheckpointRewardModel:
        """Put the frozen scorers where the policy runs (ZeRO-3 shards them like GRPO's reference model)."""
        if self.is_deepspeed_enabled:
            from trl.models import prepare_deepspeed

            for name in ("sft_model", "ref_model"):
                scorer = getattr(reward_model, name)
                if scorer is not None and reward_model.sft_adapter is None:
                    setattr(reward_model, name, prepare_deepspeed(scorer, self.accelerator))
            return reward_model
        for scorer in (reward_model.sft_model, reward_model.ref_model):
            # Models dispatched with a device_map (e.g. 4-bit) are already placed; moving them would fail.
            if scorer is not None and getattr(scorer, "hf_device_map", None) is None:
                scorer.to(self.accelerator.device)
        return reward_model

    # ---- scoring -----------------------------------------------------------------------------------------------

    def _generate(self, prompts: list):
        # The parent tokenizes prompts inside `_generate` and hands `_calculate_rewards` only the completion ids; keep
        # the prompt ids of this batch so the dense reward can be computed on exactly the tokens that were generated.
        generated = super()._generate(prompts)
        self._last_prompt_ids = generated[0]
        return generated

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        device = self.accelerator.device
        pad_id = self._tokenizer.pad_token_id
        # The same padding as the parent applies to its tensors, so the dense rewards line up with them.
        prompt_ids = pad([torch.tensor(ids) for ids in self._last_prompt_ids], pad_id, "left", self.pad_to_multiple_of)
        prompt_mask = pad(
            [torch.ones(len(ids), dtype=torch.long) for ids in self._last_prompt_ids], 0, "left", self.pad_to_multiple_of
        )
        completion_ids = pad([torch.tensor(ids) for ids in completion_ids_list], pad_id, "right", self.pad_to_multiple_of)
        completion_mask = pad(
            [torch.ones(len(ids), dtype=torch.long) for ids in completion_ids_list], 0, "right", self.pad_to_multiple_of
        )
        # A completion is terminal when it ended with an EOS token; one cut at max_completion_length is not.
        is_terminal = torch.tensor(
            [len(ids) > 0 and ids[-1] in self.eos_token_ids for ids in completion_ids_list], device=device
        )
        mode = "train" if self.model.training else "eval"
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        scored = self.reward_model(
            prompt_ids.to(device),
            prompt_mask.to(device),
            completion_ids.to(device),
            completion_mask.to(device),
            is_terminal=is_terminal,
            batch_size=batch_size,
        )
        self._dense_scores = scored

        lengths = completion_mask.sum(dim=1).tolist()
        self._log_completion_extra(
            "token_rewards", [[round(r, 4) for r in row[:n]] for row, n in zip(scored.rewards.tolist(), lengths)]
        )
        # TRL's own reward metrics and completion table then show the sequence reward Σ_t r̂_t.
        sequence_rewards = scored.rewards.sum(dim=1, keepdim=True)
        return gather(sequence_rewards)

    # ---- advantages --------------------------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        # GRPO's share of prompt groups whose rewards all tie is always 1 with one sample per prompt: it would read
        # as "no learning signal" in every log, so it is not reported.
        if self.num_generations == 1:
            self._metrics[mode].pop("frac_reward_zero_std", None)
        scored = self._dense_scores
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]

        # log π_old for the KL term: the parent computed it when the generation batch is reused (steps_per_generation >
        # gradient_accumulation_steps, num_iterations > 1, vLLM); otherwise one no-grad forward of the policy.
        policy_logps = output.get("old_per_token_logps")
        if self.args.kl_coef != 0.0 and policy_logps is None:
            policy_logps = self._policy_logps(output)

        dpr = algorithm.dense_path_advantages(
            scored.rewards,
            scored.sft_logps,
            policy_logps,
            mask,
            kl_coef=self.args.kl_coef,
            gamma=self.args.gamma,
            reward_granularity=self.args.reward_granularity,
            whiten_advantages=self.args.whiten_advantages,
        )
        output["advantages"] = dpr["advantages"]  # (B, T): GRPO's loss broadcasts per-token advantages as they are

        # A non-finite reward (a NaN/inf log-prob, an overflow) would poison the weights: skip the whole generation
        # batch on every process (the decision is all-reduced, so DDP stays in step), and count it.
        finite = torch.isfinite(scored.rewards[mask.bool()]).all() & torch.isfinite(dpr["advantages"]).all()
        finite = bool(self.accelerator.reduce(finite.float().reshape(1), reduction="sum").item() == self.accelerator.num_processes)
        if mode == "train":
            self._skip_generation_batch = not finite
            if not finite:
                self.skipped_nonfinite_batches += 1
                logger.warning(
                    f"Non-finite dense rewards or advantages at step {self.state.global_step}: this generation batch is "
                    f"skipped (no gradient). Skipped so far: {self.skipped_nonfinite_batches}."
                )
            self._metrics[mode]["skipped_nonfinite_batches"].append(float(self.skipped_nonfinite_batches))
        if finite:
            self._log_dense_metrics(mode, scored.rewards, dpr, mask, kl_measured=policy_logps is not None)
        else:
            output["advantages"] = torch.zeros_like(dpr["advantages"])
        self._log_used_advantages(output["advantages"], mask)
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.model.training and self._skip_generation_batch:
            # No forward, no graph: backward leaves every gradient None, so the optimizer (AdamW skips parameters
            # without a gradient, momentum and weight decay included) cannot change the weights.
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    @torch.no_grad()
    def _policy_logps(self, output: dict) -> torch.Tensor:
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        mode = "train" if self.model.training else "eval"
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, output["completion_ids"].size(1), batch_size=batch_size
        )
        return logps

    def _log_dense_metrics(self, mode: str, dense_rewards, dpr: dict, mask: torch.Tensor, kl_measured: bool) -> None:
        """Per-token metrics (TRL's own `reward` metric already is the sequence reward Σ_t r̂_t)."""
        valid = mask.bool()

        # Token-level statistics over every process's valid tokens: Σx, Σx², count, reduced together.
        def global_token_stats(x):
            x = x.float()
            local = torch.stack([x[valid].sum(), (x[valid] ** 2).sum(), valid.sum().float()])
            total, total_sq, count = self.accelerator.reduce(local, reduction="sum").tolist()
            mean = total / max(count, 1.0)
            return mean, max(total_sq / max(count, 1.0) - mean**2, 0.0) ** 0.5

        reward_mean, reward_std = global_token_stats(dense_rewards)
        metrics = self._metrics[mode]
        metrics["dense_reward/token_mean"].append(reward_mean)
        metrics["dense_reward/token_std"].append(reward_std)
        metrics["returns/mean"].append(global_token_stats(dpr["returns"])[0])
        if kl_measured:
            metrics["kl_sft"].append(global_token_stats(dpr["kl"])[0])
        advantage_mean, advantage_std = global_token_stats(dpr["advantages"])
        metrics["advantages/mean"].append(advantage_mean)
        metrics["advantages/std"].append(advantage_std)

    def _log_used_advantages(self, advantages: torch.Tensor, mask: torch.Tensor) -> None:
        """Replace the scalar advantages the parent logged with the ones used: their per-sequence mean in TRL's
        column, the per-token values as an extra column of the completions table."""
        per_token = [row[m].tolist() for row, m in zip(advantages, mask.bool())]
        all_per_token = gather_object(per_token)
        for _ in range(len(all_per_token)):
            self._logs["advantages"].pop()
        self._logs["advantages"].extend(sum(row) / max(len(row), 1) for row in all_per_token)
        self._logs["extra"]["token_advantages"].extend([[round(a, 4) for a in row] for row in all_per_token])
