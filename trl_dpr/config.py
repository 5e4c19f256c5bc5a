"""`DensePathConfig`: GRPOConfig with the Dense-Path REINFORCE fields and the paper's defaults (Table 5); and
`SFTRecipeConfig`, TRL's SFTConfig as the recipes parse it."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig, SFTConfig

from .field_checks import _plain, check_fits_context, unused_field_problem
from .range_rules import check_ranges


def unused_parent_fields(parent, reasons: dict[str, str]) -> dict[str, tuple[tuple, str]]:
    """`_UNUSED_FIELDS` for fields of `parent` whose job a subclass does itself: each keeps its default, and `reasons`
    says which field of the subclass does the job (field → why).
    """
    fields = parent.__dataclass_fields__
    default = lambda f: f.default_factory() if callable(f.default_factory) else f.default  # noqa: E731
    return {name: ((_plain(default(fields[name])),), reason) for name, reason in reasons.items()}


def refuse_unused_fields(config) -> None:
    """`__post_init__`'s check of a config's `_UNUSED_FIELDS`: the recipes' rule (`unused_field_problem`) for a config
    built from Python.
    """
    for name, (accepted, reason) in type(config)._UNUSED_FIELDS.items():
        if problem := unused_field_problem(name, getattr(config, name), accepted, reason):
            raise ValueError(f"{problem}.")


class ActivationCheckpointingAlias:
    """Mix into a TRL config: `gradient_checkpointing` moves to transformers ≥ 5.23's `activation_checkpointing` before
    transformers looks, so TRL's default for the old name does not warn at every parse (older transformers: no change).
    """

    def __post_init__(self):
        if getattr(self, "activation_checkpointing", False) is None and self.gradient_checkpointing is not None:
            self.activation_checkpointing = self.gradient_checkpointing
        super().__post_init__()


# transformers 5 dropped TrainingArguments.overwrite_output_dir; the recipes keep it, with their own rule (a run's folder
# is refused unless resumed or overwritten: `checkpointing.claim_output_dir`).
_OVERWRITE_OUTPUT_DIR_HELP = (
    "Start a fresh run in an output_dir that already holds a run (its checkpoints and model are deleted when training "
    "starts). Off: refused, so a rerun never silently destroys a finished run; resume it instead. The recipes' rule "
    "(`trl-dpr sft` / `dpr`, run_sft, run_dpr): DensePathTrainer from Python neither refuses nor clears the folder."
)


@dataclass
class SFTRecipeConfig(ActivationCheckpointingAlias, SFTConfig):
    """TRL's `SFTConfig` as `trl-dpr sft` parses it: same fields and defaults, plus `ActivationCheckpointingAlias` and
    `overwrite_output_dir` (as DPR's)."""

    overwrite_output_dir: bool = field(default=False, metadata={"help": _OVERWRITE_OUTPUT_DIR_HELP})


class _NoGroupBaseline(int):
    """The int 1 that passes GRPOConfig's `num_generations >= 2` check during `__post_init__` only: DPR has no group
    baseline (it whitens over the batch), and every other use (batch divisibility, samplers) must see a plain 1.
    """

    def __lt__(self, other):
        return False if other == 2 else int(self) < other


_AFTER_GRPO_CHECKS = (
    "reward_granularity",
    "temperature",
    "gamma",
    "max_prompt_length",
    "max_completion_length",
    "reward_token_chunk_size",
)


@dataclass
class DensePathConfig(ActivationCheckpointingAlias, GRPOConfig):
    r"""Configuration for [`DensePathTrainer`]: every [`trl.GRPOConfig`] field, plus DPR's.

    Defaults are the paper's (Table 5). Batch sizes depend on the processes, so the recipes set them (global batch 128,
    rollout batch 1024 = `generation_batch_size`). GRPO fields DPR replaces (`scale_rewards`, ...) are refused.

    Parameters:
        learning_rate `5e-7`, num_generations `1` (no group needed), temperature `1.0`, epsilon `0.2`, warmup_steps
            `0.03` (a ratio): Table 5. beta (`float`, defaults to `0.0`): GRPO's KL-in-loss, off.
        kl_coef (`float`, defaults to `1e-5`): λ_KL of r_t = r̂_t − λ_KL (log π_old − log π_SFT). gamma `1.0`.
        reward_granularity (`str`, defaults to `"token"`): or `"sentence"`, the SR baseline.
        dense_reward (`str`, defaults to `None`): `"module:ClassName"` of the `DenseReward` (None: DPR's; the paper's
            ablations are `trl_dpr.rewards:SFTLogProb` (wo/Baseline) and `trl_dpr.rewards:WithSoftValue` (w/V)).
        max_prompt_length (`int`, defaults to `None`): longer prompts are dropped (not truncated) and counted.
        reward_weights: [w_0 for r̂, then one per `reward_funcs` entry]; `[0.0, 1.0]` trains on the outcome alone.

    Example:
        >>> from trl_dpr import DensePathConfig
        >>> args = DensePathConfig(output_dir="runs/dpr", per_device_train_batch_size=2, bf16=False)
        >>> args.num_generations, args.learning_rate, args.kl_coef
        (1, 5e-07, 1e-05)
    """

    learning_rate: float = field(default=5e-7, metadata={"help": "Learning rate (paper Table 5: 5e-7)."})
    num_generations: int | None = field(
        default=1,
        metadata={
            "help": "Completions sampled per prompt (paper Table 5: 1). DPR has no group baseline, so 1 is allowed."
        },
    )
    temperature: float = field(default=1.0, metadata={"help": "Rollout sampling temperature (paper Table 5: 1)."})
    epsilon: float = field(
        default=0.2, metadata={"help": "Clip range of the token importance ratio (paper Table 5, REINFORCE++: 0.2)."}
    )
    beta: float = field(
        default=0.0,
        metadata={
            "help": "GRPO's KL-in-loss coefficient. Keep 0: DPR's KL to π_SFT is inside the reward (`kl_coef`)."
        },
    )
    warmup_steps: float = field(
        default=0.03, metadata={"help": "Warmup: steps, or a ratio of total steps when < 1 (paper Table 5: 0.03)."}
    )
    kl_coef: float = field(
        default=1e-5,
        metadata={
            "help": "λ_KL in r_t = r̂_t − λ_KL·(log π_old − log π_SFT): token KL to the frozen SFT model inside the "
            "reward (paper Table 5, 'KL weight': 1e-5)."
        },
    )
    gamma: float = field(
        default=1.0,
        metadata={"help": "Discount of the token returns G_t (paper Table 5: 1; §4.4 / Fig. 2 sweeps γ < 1)."},
    )
    reward_granularity: str = field(
        default="token",
        metadata={
            "help": "'token' = Dense-Path REINFORCE; 'sentence' = the SR baseline of §4.1 (whole return at EOS)."
        },
    )
    dense_reward: str | None = field(
        default=None,
        metadata={
            "help": "'module:ClassName' of the DenseReward to train on; None = DPR's r̂ (Eq. 5). The paper's ablations: "
            "trl_dpr.rewards:SFTLogProb (wo/Baseline), trl_dpr.rewards:WithSoftValue (w/V); your own: my_rewards:MyReward."
        },
    )
    dense_reward_kwargs: dict = field(
        default_factory=dict, metadata={"help": "Keyword arguments of dense_reward's class (e.g. {clip: 2.0})."}
    )
    dense_reward_models: dict = field(
        default_factory=dict,
        metadata={"help": "Paths (or Hub ids) of the models dense_reward reads besides 'sft' and 'ref', by name."},
    )
    whiten_advantages: bool = field(
        default=True,
        metadata={"help": "Whiten the returns over all valid tokens of the batch, all processes (REINFORCE++)."},
    )
    reward_token_chunk_size: int = field(
        default=1024,
        metadata={"help": "Tokens sent through the LM head at once when scoring (memory ∝ chunk × vocab)."},
    )

    max_prompt_length: int | None = field(
        default=None,
        metadata={
            "help": "Drop (and count) prompts longer than this many tokens before training (paper Table 5: 1024). "
            "None keeps every prompt."
        },
    )

    overwrite_output_dir: bool = field(default=False, metadata={"help": _OVERWRITE_OUTPUT_DIR_HELP})
    allow_kl_in_loss: bool = field(
        default=False,
        metadata={
            "help": "Allow `beta` > 0 (GRPO's KL-in-loss, whose reference is the base model under PEFT, not π_SFT) on "
            "top of DPR's KL to π_SFT in the reward (`kl_coef`). Off: two stacked KL penalties are refused."
        },
    )
    fast_generation: bool = field(
        default=False,
        metadata={
            "help": "Generate with a static KV cache (`generation_kwargs` cache_implementation: static), for which "
            "transformers compiles the decode step on a GPU (`torch.compile`). Off by default: on the CPU it was 4 to "
            "25 percent faster in 4 of 5 pairs, 39 percent slower in one (benchmarks/RESULTS.md), and on a GPU it is "
            "not yet measured (benchmarks/gpu_run.sh). For large rollout batches: use_transformers_continuous_batching."
        },
    )

    # GRPO fields whose job DPR does itself (per-token returns, whitened over the batch): a non-default value would be
    # accepted and ignored, so it is refused with the DPR field that does that job (`refuse_unused_fields`).
    _UNUSED_FIELDS = unused_parent_fields(
        GRPOConfig,
        {
            "scale_rewards": "DPR whitens its per-token returns over the whole batch (`whiten_advantages`)",
            "multi_objective_aggregation": "DPR adds its weighted rewards token by token and whitens the returns (no "
            "per-reward normalisation)",
        },
    )
    # GRPOConfig reads `scale_rewards: true` as its default, "group" (and maps it so): the same setting, accepted.
    _UNUSED_FIELDS["scale_rewards"] = (("group", True), _UNUSED_FIELDS["scale_rewards"][1])
    # The range rules (`range_rules.RANGE_RULES`) of __post_init__, which the recipe parser checks before anything loads.
    _RANGE_RULES = ("num_generations", "kl_in_loss", "generation_batch_size", *_AFTER_GRPO_CHECKS)

    def reward(self):
        """The `DenseReward` this config trains on, built once from `dense_reward` (`rewards.reward_from_settings`).

        Example:
            >>> DensePathConfig("runs/dpr", dense_reward="trl_dpr.rewards:SFTLogProb", bf16=False).reward()
            SFTLogProb()
        """
        settings = {key: getattr(self, key) for key in ("dense_reward", "dense_reward_kwargs", "dense_reward_models")}
        built = getattr(self, "_built_reward", None)
        if built is None or built[0] != settings:  # rebuilt only when a setting was changed after __post_init__
            from .rewards import reward_from_settings

            self._built_reward = (settings, reward_from_settings(settings))
        return self._built_reward[1]

    def check_fits_context(self, model_config, model_name: str) -> None:
        """The longest completion (after the longest prompt, when `max_prompt_length` bounds it) must fit the model's
        context (`field_checks.check_fits_context`). Without a prompt bound only a completion longer than the context
        is refused (TRL's own defaults fill a small model's context exactly). Called once π_SFT's config is known."""
        lengths = {"max_prompt_length": self.max_prompt_length, "max_completion_length": self.max_completion_length}
        check_fits_context(model_config, model_name, lengths, lower="max_completion_length")

    def __post_init__(self):
        # Before GRPOConfig's own checks: it divides by num_generations, so 0 would be a ZeroDivisionError.
        check_ranges(self, ("num_generations",))
        refuse_unused_fields(self)
        check_ranges(self, ("kl_in_loss", "generation_batch_size"))
        if self.num_generations == 1:
            self.num_generations = _NoGroupBaseline(1)
        try:
            super().__post_init__()
        finally:
            if isinstance(self.num_generations, _NoGroupBaseline):
                self.num_generations = 1
        check_ranges(self, _AFTER_GRPO_CHECKS)
        if self.kl_coef < 0.0:
            raise ValueError(f"kl_coef must be >= 0 (the paper uses 1e-5), got {self.kl_coef}.")
        if self.fast_generation:  # a key of generation_kwargs the recipe sets itself wins
            self.generation_kwargs = {"cache_implementation": "static", **(self.generation_kwargs or {})}
        self.reward()  # conflicting keys, an unimportable class or wrong kwargs fail here, before any model loads
        on_policy = self.gradient_accumulation_steps % (self.steps_per_generation * self.num_iterations) == 0
        if self.kl_coef != 0.0 and self.use_transformers_continuous_batching and on_policy and not self.use_vllm:
            raise ValueError(
                "kl_coef > 0 needs log π_old of every sampled token. transformers' continuous batching returns none, "
                "and with on-policy batches GRPO computes none either. Use the default transformers generation "
                "(use_transformers_continuous_batching: false, which records them while sampling), vLLM, or kl_coef: 0."
            )
