"""`DensePathTrainer`: Dense-Path REINFORCE (Algorithm 1 with REINFORCE++) as a thin subclass of TRL's GRPOTrainer."""

from __future__ import annotations

import functools
import inspect
import textwrap
import time
from typing import Any

import torch
from accelerate.logging import get_logger
from accelerate.utils import gather_object
from datasets import Dataset, IterableDataset
from peft import PeftConfig
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.generation.configuration_utils import GenerationMode
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from . import algorithm
from .config import DensePathConfig
from .data import check_prompt_dataset, drop_long_prompts, prompts_as_sft_reads_them
from .policy import initial_policy
from .reference_manifest import sft_trained_on_messages
from .reward_model import CheckpointRewardModel, load_reward_model
from .rollout_logprobs import SampledTokenLogprobs
from .token_batches import ends_with_eos

logger = get_logger(__name__)

CITATION = textwrap.dedent("""\
    @article{li2025beyond,
        title        = {{Beyond Imitation: Recovering Dense Rewards from Demonstrations}},
        author       = {Jiangnan Li and Thuy-Trang Vu and Ehsan Abbasnejad and Gholamreza Haffari},
        year         = 2025,
        eprint       = {arXiv:2510.02493},
    }""")


def dense_path(prompts, completions, **kwargs):
    """DPR's reward in TRL's reward list (its name in the logs, its weight `reward_weights[0]`). It is per token, so
    its scalar column is None (NaN: TRL's "no scalar reward"); the trainer adds it token by token."""
    return [None] * len(prompts)


def check_reward_weights(reward_weights, num_outcome_funcs: int) -> None:
    """`reward_weights` are [w_0 for r̂, w_1..w_K for the K `reward_funcs`]; w_0 = 0 with no function trains on nothing."""
    if reward_weights is None:
        return
    if len(reward_weights) != 1 + num_outcome_funcs:
        raise ValueError(
            f"reward_weights has {len(reward_weights)} entries but DensePathTrainer needs {1 + num_outcome_funcs}: the "
            f"dense reward r̂ first, then one per reward function ({num_outcome_funcs} given), e.g. "
            f"{[1.0] * (1 + num_outcome_funcs)}. A weight 0 for r̂ trains on the reward functions alone."
        )
    if reward_weights[0] == 0 and not any(reward_weights[1:]):
        raise ValueError(
            f"reward_weights={list(reward_weights)} switches every reward off (r̂ and all reward_funcs): nothing would "
            "be trained but the KL to π_SFT. Give r̂ (the first weight) or a reward function a non-zero weight."
        )


# What GRPOTrainer's `_calculate_rewards` passes a reward function besides the dataset's other columns (and
# `environments`, with an `environment_factory`).
_REWARD_FUNC_ARGUMENTS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}


def check_reward_func_columns(
    reward_funcs: list, dataset, name: str = "train_dataset", environments: bool = False
) -> None:
    """Each reward function's required arguments are ones GRPOTrainer passes it: `prompts`, `completions`, ... and the
    dataset's columns by name (`environments` with environments). A missing one would fail only after the first
    generation, as a bare TypeError."""
    columns = getattr(dataset, "column_names", None)
    if columns is None:
        return
    passed = _REWARD_FUNC_ARGUMENTS | (set(columns) - {"prompt", "completion", "completion_ids"})
    passed |= {"environments"} if environments else set()
    for func in reward_funcs:
        if isinstance(func, str | nn.Module) or not callable(func):
            continue
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature: TRL calls it as it is
            continue
        required = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        missing = [p.name for p in parameters if p.default is p.empty and p.kind in required and p.name not in passed]
        func_name = getattr(func, "__name__", type(func).__name__)
        if singular := [p for p in missing if p in ("prompt", "completion")]:
            raise ValueError(
                f"Reward function {func_name} takes {', '.join(map(repr, singular))}, but GRPOTrainer passes the "
                "batch's prompts and completions as `prompts` and `completions` (lists): rename the argument."
            )
        if missing:
            raise ValueError(
                f"Reward function {func_name} needs {', '.join(map(repr, missing))}, which {name} has no column for "
                f"(columns: {sorted(columns)}). GRPOTrainer passes a reward function `prompts`, `completions`, "
                "`completion_ids` and each other column by its name: add the column, or give the argument a default."
            )


class DensePathTrainer(GRPOTrainer):
    r"""Trainer for Dense-Path REINFORCE (DPR), from [Beyond Imitation: Recovering Dense Rewards from
    Demonstrations](https://huggingface.co/papers/2510.02493).

    DPR reads r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t) off an SFT run and improves π_SFT with token-level
    REINFORCE++: undiscounted returns of r̂ minus a small KL to π_SFT, whitened over the batch, through GRPO's clipped
    surrogate. The only changes w.r.t. [`~trl.GRPOTrainer`] are these overrides; everything else is inherited:

    - `__init__`: `reward_model` is a `CheckpointRewardModel` or an SFT path; `model=None` starts the policy from π_SFT
      (Algorithm 1, line 2; an adapter SFT output gets a trainable copy of its adapter on the scorer's base). Prompts
      over `max_prompt_length` are dropped and counted; string prompts go to a π_SFT trained on messages as user turns
      (`data.string_prompts_as_chat`; `sft_model_name_or_path` says where its record is when `reward_model` is an
      object without that path). `reward_funcs` are TRL's scalar outcome rewards, checked against the columns.
    - `_generate_and_score_completions`: the whole DPR batch on the ids GRPO generated: dense rewards,
      `algorithm.dense_path_advantages`, per-token `(B, T)` advantages (GRPO's loss broadcasts them), metrics.
    - `_calculate_rewards`: the `reward_funcs` as GRPO calls them; r̂'s scalar column is NaN ("no scalar reward").
    - `_generate_single_turn`: the transformers backend returns the sampled tokens' log-probs (as vLLM does), so the KL
      needs no extra forward; decoding that is not one sampled token per row per forward returns none.
    - `compute_loss`: a batch with non-finite rewards or advantages contributes no graph, on every process.
    - `training_step`: where an optimizer step's time went, `timing/generation`, `timing/scoring` (π_SFT, π_ref and
      log π_old) and `timing/update`, in seconds: with generation in the step, they sum to TRL's `step_time`.

    `args.reward_weights` are [w_0 for r̂, then one per `reward_funcs` entry]; w_0 = 0 trains on the outcome rewards
    alone. The recipes run it as `running.trainers.DPRRunTrainer` (atomic checkpoints, safe Hub push, model card).

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

        Dense + outcome (r̂ plus a verifier): docs/dense_plus_outcome.md.
    """

    _tag_names = ["trl", "dpr", "dense-path-reinforce"]
    _name = "Dense-Path REINFORCE"
    _paper = {
        "title": "Beyond Imitation: Recovering Dense Rewards from Demonstrations",
        "id": "2510.02493",
        "citation": CITATION,
    }
    # Whether `train` claims `args.output_dir` (and honours overwrite_output_dir): the recipes' trainers do
    # (`running.checkpointing.AtomicCheckpointsMixin`).
    _claims_output_dir = False

    def __init__(
        self,
        model: str | PreTrainedModel | nn.Module | None = None,
        reward_model: CheckpointRewardModel | str | None = None,
        args: DensePathConfig | None = None,
        train_dataset: Dataset | IterableDataset | None = None,
        eval_dataset: Dataset | IterableDataset | dict[str, Dataset | IterableDataset] | None = None,
        processing_class: PreTrainedTokenizerBase | None = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[torch.optim.Optimizer | None, torch.optim.lr_scheduler.LambdaLR | None] = (None, None),
        peft_config: PeftConfig | None = None,
        reward_funcs: Any = None,
        sft_model_name_or_path: str | None = None,
        **kwargs: Any,
    ):
        args = DensePathConfig("dpr-output") if args is None else args
        if not isinstance(args, DensePathConfig):
            raise TypeError(f"args must be a DensePathConfig, got {type(args).__name__}.")
        outcome_funcs = (
            [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, list) else [reward_funcs]
        )
        check_reward_weights(args.reward_weights, len(outcome_funcs))
        if kwargs.get("reward_processing_classes") is not None:
            classes = kwargs["reward_processing_classes"]
            kwargs["reward_processing_classes"] = [None, *(classes if isinstance(classes, list) else [classes])]
        # π_SFT's `trl-dpr sft` record says how it reads a string prompt (`data.string_prompts_as_chat`)
        if sft_model_name_or_path is None:
            sft_model_name_or_path = (
                reward_model
                if isinstance(reward_model, str)
                else getattr(reward_model, "sft_model_name_or_path", None)
            )
        hub = {key: (args.model_init_kwargs or {}).get(key) for key in ("revision", "token")}  # as π_SFT loads

        @functools.cache
        def strings_as_chat() -> bool:  # read only for a column mixing strings and messages
            return bool(sft_trained_on_messages(sft_model_name_or_path, **hub))

        eval_datasets = eval_dataset if isinstance(eval_dataset, dict) else {"": eval_dataset}
        for name, dataset in {
            "train_dataset": train_dataset,
            **{f"eval_dataset{k and f'[{k!r}]'}": v for k, v in eval_datasets.items()},
        }.items():
            check_prompt_dataset(dataset, name, strings_as_chat)
            check_reward_func_columns(  # before a model loads, not after a generation
                outcome_funcs, dataset, name, environments=kwargs.get("environment_factory") is not None
            )
        if (
            args.beta != 0.0
            and model is None
            and isinstance(reward_model, CheckpointRewardModel)
            and reward_model.sft_adapter is None
            and reward_model.sft_model_name_or_path is None
        ):
            # GRPOTrainer loads its β reference by the policy's config name, and a copy of an in-memory π_SFT has none
            raise ValueError(
                f"beta={args.beta} needs a reference model that GRPOTrainer loads from π_SFT's path, but π_SFT was given "
                "in memory: give it as a folder (reward_model=path or CheckpointRewardModel.from_pretrained(path)), or "
                "set beta=0 and use kl_coef, DPR's KL to π_SFT."
            )
        reward_model = load_reward_model(reward_model, args)
        args.check_fits_context(reward_model.config, "π_SFT")  # before the policy loads

        # String prompts as π_SFT was trained to read them (the rule the preview and the evaluation share).
        def as_sft_reads(dataset, name):
            reader = processing_class or reward_model.processing_class
            return prompts_as_sft_reads_them(dataset, sft_model_name_or_path, reader, name, **hub)

        train_dataset = as_sft_reads(train_dataset, "train_dataset")
        if isinstance(eval_dataset, dict):
            eval_dataset = {k: as_sft_reads(v, f"eval_dataset[{k!r}]") for k, v in eval_dataset.items()}
        else:
            eval_dataset = as_sft_reads(eval_dataset, "eval_dataset")

        # Algorithm 1, line 2: the actor starts from π_SFT; π_SFT itself stays frozen as the reward and KL reference.
        model = initial_policy(reward_model, model, peft_config, use_vllm=args.use_vllm)
        if processing_class is None and not isinstance(model, str) and not getattr(model.config, "_name_or_path", ""):
            # GRPOTrainer would load the tokenizer by the policy's name, which a model built in memory does not have
            raise ValueError(
                "π_SFT was given in memory, so there is no tokenizer to load with it: pass processing_class=<its "
                "tokenizer>, or give π_SFT as a folder (reward_model=path)."
            )
        super().__init__(
            model=model,
            reward_funcs=[dense_path, *outcome_funcs],  # r̂ first: reward_weights[0] is its weight
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
            **kwargs,
        )
        if self.model.config.get_text_config().vocab_size != reward_model.config.get_text_config().vocab_size:
            raise ValueError(
                f"The policy has a vocabulary of {self.model.config.get_text_config().vocab_size} tokens but π_SFT has "
                f"{reward_model.config.get_text_config().vocab_size}: they must share one tokenizer. Start the policy "
                "from the SFT model (model=None)."
            )
        self.reward_model = reward_model.prepare_for(self.accelerator, self.is_deepspeed_enabled, self.is_fsdp_enabled)
        self.skipped_nonfinite_batches = 0
        self._phase_seconds = 0.0  # generation + scoring within the optimizer step under way (`training_step`)
        self._outcome_rewards = None  # set by _calculate_rewards, taken by _generate_and_score_completions
        if args.max_prompt_length is not None:
            self._drop_long_prompts(args.max_prompt_length)
        if args.overwrite_output_dir and not self._claims_output_dir:  # transformers 5 dropped the field: ours alone
            logger.warning(
                f"overwrite_output_dir=True does nothing for DensePathTrainer from Python: {args.output_dir!r} is neither "
                "checked nor cleared, and checkpoints are written beside what is there. `trl-dpr dpr "
                "--overwrite_output_dir true` (or run_dpr) starts over in it."
            )

    def _drop_long_prompts(self, limit: int) -> None:
        """Prompts longer than `limit` tokens are dropped (not truncated: that would be another prompt) and counted."""

        def drop(dataset, split):
            kept, dropped = drop_long_prompts(
                dataset, self.processing_class, limit, split, **self.chat_template_kwargs
            )
            if dropped:
                logger.warning(
                    f"Dropped {dropped} of {dropped + len(kept)} {split} prompts longer than max_prompt_length={limit}."
                )
            return kept, dropped

        self.num_dropped_prompts = {}
        self.train_dataset, self.num_dropped_prompts["train"] = drop(self.train_dataset, "train")
        self._metrics["train"]["prompts/dropped_too_long"].append(float(self.num_dropped_prompts["train"]))
        if isinstance(self.eval_dataset, dict):
            for key, dataset in self.eval_dataset.items():
                self.eval_dataset[key], self.num_dropped_prompts[f"eval/{key}"] = drop(dataset, f"eval/{key}")
        elif self.eval_dataset is not None:
            self.eval_dataset, self.num_dropped_prompts["eval"] = drop(self.eval_dataset, "eval")

    # ---- the DPR batch -----------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # r̂ is per token and is computed in `_generate_and_score_completions`, on the ids TRL has padded there; its
        # scalar column is NaN, "no scalar reward", which TRL leaves out of its metric averages.
        if len(self.reward_funcs) == 1:  # r̂ alone (TRL would warn that every function returned None)
            rewards_per_func = torch.full(
                (len(prompts) * self.accelerator.num_processes, 1), torch.nan, device=self.accelerator.device
            )
        else:  # TRL calls the outcome functions, with the dataset's columns, and gathers them over processes
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # GRPO's `_generate_and_score_completions`, our caller, keeps the per-function rewards to itself: hand ours
        # the outcome columns directly (taken, and reset, right after GRPO returns the batch).
        self._outcome_rewards = rewards_per_func[:, 1:]
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        # GRPO logs `reward` / `reward_std` of the scalar functions only (it cannot see r̂): DPR's replace them below.
        logged = {name: len(self._metrics[mode][name]) for name in ("reward", "reward_std")}
        started = _synchronized_clock(self.accelerator.device)
        # generation, padding, rewards, log π_old if off-policy
        output = super()._generate_and_score_completions(inputs)
        generated = _synchronized_clock(self.accelerator.device)
        all_outcome_rewards, self._outcome_rewards = self._outcome_rewards, None
        if all_outcome_rewards is None:
            raise RuntimeError(
                "GRPOTrainer._generate_and_score_completions no longer calls _calculate_rewards, where DensePathTrainer "
                "takes the reward_funcs' scores: this TRL version is not supported (see docs/upgrading_trl.md)."
            )
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        completion_ids = output["completion_ids"]
        # A completion is terminal when it ended with EOS; one cut at max_completion_length is not (matters for w/V).
        is_terminal = ends_with_eos(completion_ids, output["completion_mask"], self.eos_token_ids)

        # r̂ at temperature 1 (Eq. 5), and log π_SFT at the rollout temperature for the KL term, from one forward.
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        scored = self.reward_model(
            output["prompt_ids"],
            output["prompt_mask"],
            completion_ids,
            output["completion_mask"],
            is_terminal=is_terminal,
            batch_size=batch_size,
            temperature=self.temperature,
        )
        # log π_old of the sampled tokens, at the rollout temperature: GRPO's forward when the batch is reused
        # (off-policy), else the log-probs the generation itself returned, else (beam search, prompt-lookup or
        # assisted decoding, a `generate` that never calls the model's forward: nothing recorded) one forward here.
        policy_logps = output.get("old_per_token_logps", output.get("sampling_per_token_logps"))
        if policy_logps is None and self.args.kl_coef != 0.0 and not self.use_vllm:
            policy_logps = output["sampling_per_token_logps"] = self._sampled_token_logps(output, batch_size)
        self._metrics[mode]["timing/generation"].append(generated - started)
        self._metrics[mode]["timing/scoring"].append(_synchronized_clock(self.accelerator.device) - generated)
        # This process's rows of the gathered [N, K] outcome rewards (GRPO's process slice), and their weights.
        local = slice(
            self.accelerator.process_index * len(completion_ids),
            (self.accelerator.process_index + 1) * len(completion_ids),
        )
        outcome_rewards = all_outcome_rewards[local] if all_outcome_rewards.size(1) else None
        dpr = algorithm.dense_path_advantages(
            scored.rewards,
            scored.kl_reference_logps,
            policy_logps,
            mask,
            kl_coef=self.args.kl_coef,
            gamma=self.args.gamma,
            reward_granularity=self.args.reward_granularity,
            whiten_advantages=self.args.whiten_advantages,
            dense_weight=self.reward_weights[0].item(),
            outcome_rewards=outcome_rewards,
            outcome_weights=self.reward_weights[1:],
        )

        # A non-finite reward (a NaN/inf log-prob, an fp16 overflow) would poison the weights: the whole generation
        # batch is skipped on every process (the decision is all-reduced, so DDP stays in step), and counted.
        valid = mask.bool()
        finite = torch.isfinite(scored.rewards[valid]).all() & torch.isfinite(dpr["advantages"]).all()
        finite = bool(
            self.accelerator.reduce(finite.float().reshape(1), reduction="sum").item()
            == self.accelerator.num_processes
        )
        output["advantages"] = dpr["advantages"] if finite else torch.zeros_like(dpr["advantages"])
        output["skip_nonfinite"] = torch.tensor(not finite)  # 0-dim: TRL hands it unchanged to every micro-batch
        if not finite and mode == "train":
            self.skipped_nonfinite_batches += 1
            logger.warning(
                f"Non-finite dense rewards or advantages at step {self.state.global_step}: this generation batch is "
                f"skipped (no gradient). Skipped so far: {self.skipped_nonfinite_batches}."
            )

        for name, count in logged.items():
            del self._metrics[mode][name][count:]
        self._log_batch(
            mode,
            scored.rewards,
            all_outcome_rewards,
            dpr,
            output["advantages"],
            mask,
            completion_ids,
            kl_measured=policy_logps is not None,
            finite=finite,
        )
        return output

    def _sampled_token_logps(self, output, batch_size: int) -> torch.Tensor:
        """log π_T(a_t|s_t) of the policy on the padded completions of `output`: GRPO's own no-grad forward."""
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, output["completion_ids"].size(1), batch_size=batch_size
            )
        return logps

    def _log_batch(
        self,
        mode,
        rewards,
        all_outcome_rewards,
        dpr,
        advantages,
        mask,
        completion_ids,
        kl_measured: bool,
        finite: bool,
    ) -> None:
        """DPR's metrics and completion-table columns for this batch (TRL averages the metrics at each log)."""
        metrics = self._metrics[mode]
        # One sample per prompt: GRPO's share of tied groups is always 1 and would read as "no learning signal".
        metrics.pop("frac_reward_zero_std", None)
        metrics["skipped_nonfinite_batches"].append(float(self.skipped_nonfinite_batches))
        valid = mask.bool()
        if finite:
            all_sequence_rewards = self.accelerator.gather(rewards.sum(dim=1))
            # TRL's per-function metrics, unweighted, for r̂: Σ_t r̂_t (the outcome functions' are TRL's own).
            metrics["rewards/dense_path/mean"].append(all_sequence_rewards.mean().item())
            metrics["rewards/dense_path/std"].append(
                all_sequence_rewards.std().item() if all_sequence_rewards.numel() > 1 else 0.0
            )
            # TRL's `reward`: the weighted sum of every reward, w_0 Σ_t r̂_t + Σ_j w_j R_j (nansum, as TRL).
            weights = self.reward_weights.to(all_sequence_rewards.device)
            total = weights[0] * all_sequence_rewards + (all_outcome_rewards * weights[1:]).nansum(dim=1)
            metrics["reward"].append(total.mean().item())
            metrics["reward_std"].append(total.std().item() if total.numel() > 1 else 0.0)
            # Token-level statistics over every process's valid tokens.
            reward_mean, reward_std = algorithm.masked_mean_std(rewards, valid)
            advantage_mean, advantage_std = algorithm.masked_mean_std(dpr["advantages"], valid)
            metrics["dense_reward/token_mean"].append(reward_mean.item())
            metrics["dense_reward/token_std"].append(reward_std.item())
            metrics["advantages/mean"].append(advantage_mean.item())
            metrics["advantages/std"].append(advantage_std.item())
            metrics["returns/mean"].append(algorithm.masked_mean_std(dpr["returns"], valid)[0].item())
            if kl_measured:
                # Both units of log π_old − log π_SFT on the policy's own samples: the mean over tokens, and the sum
                # over each response averaged over responses (an estimate of KL(π_θ ‖ π_SFT), what the preview's π_λ
                # reports).
                metrics["kl_sft/per_token"].append(algorithm.masked_mean_std(dpr["kl"], valid)[0].item())
                per_response = self.accelerator.gather((dpr["kl"] * valid).sum(dim=1))
                metrics["kl_sft/per_response"].append(per_response.mean().item())

        # The completions table: one row per sample, the columns TRL's own rows already hold in the same order.
        def column(values):
            return gather_object([row[m].tolist() for row, m in zip(values, valid)])

        table = self._logs["extra"]
        table["completion_token_ids"].extend(column(completion_ids))
        table["token_rewards"].extend([[round(r, 4) for r in row] for row in column(rewards)])
        table["token_advantages"].extend([[round(a, 4) for a in row] for row in column(advantages)])
        table["sequence_reward"].extend([round(sum(row), 4) for row in column(rewards)])

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        uses_transformers_generate = not (self.use_vllm or self.use_transformers_continuous_batching)
        # Beam search, prompt-lookup / assisted decoding: not one step of the returned rows per forward, nothing to
        # record (their forwards' logits are not the plain forward's either): `_sampled_token_logps` takes them.
        one_row_per_output = self.generation_config.get_generation_mode() in (
            GenerationMode.SAMPLE,
            GenerationMode.GREEDY_SEARCH,
        )
        if not uses_transformers_generate or not one_row_per_output:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        # The transformers path returns no log-probs; record log π_old(a_t|s_t) of each sampled token while it samples
        # (with kl_coef 0 too: the kl_sft/* metrics read them, at the cost of a log-sum-exp per decoding step).
        with SampledTokenLogprobs(self.accelerator.unwrap_model(self.model), temperature=self.temperature) as recorder:
            completion_ids, _ = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        return completion_ids, recorder.logprobs(completion_ids)

    def training_step(self, model, inputs, num_items_in_batch):
        # TRL's `step_time` is an optimizer step's training_step calls (its `_prepare_inputs` generates and scores when
        # its buffer is empty, then the loss and backward): the update is that time less the phases logged within it.
        timing = self._metrics["train"]
        # `.get`: reading a missing key of the defaultdict would log an empty column (None) for steps that reuse a rollout
        counts = {name: len(timing.get(name, ())) for name in ("timing/generation", "timing/scoring", "step_time")}
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._phase_seconds += sum(
            sum(timing.get(name, [])[counts[name] :]) for name in ("timing/generation", "timing/scoring")
        )
        if len(timing.get("step_time", ())) > counts["step_time"]:  # TRL closed an optimizer step
            timing["timing/update"].append(timing["step_time"][-1] - self._phase_seconds)
            self._phase_seconds = 0.0
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.model.training and bool(inputs.get("skip_nonfinite", False)):
            # No forward, no graph: backward leaves every gradient None, so the optimizer (AdamW skips parameters
            # without a gradient, momentum and weight decay included) cannot change the weights.
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        return super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )


def _synchronized_clock(device: torch.device) -> float:
    """`time.perf_counter()` once the device's queued kernels have run (CUDA is asynchronous: a clock read without
    the sync charges a phase's kernels to the next one)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
