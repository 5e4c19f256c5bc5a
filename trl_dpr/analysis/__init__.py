"""The pieces behind `recipes/analysis/`: the paper's analysis plots (Fig. 2, 3, 4a, 4b) and the reward diagnostics.

    configs             a recipe's YAML + command line with a few keys replaced per run (sweep variants, evaluations)
    sweeps              DPR variants trained once into <output_dir>/<name>; π_ref at any α from SFT step checkpoints
    win_rates           win rates vs SFT: recipes/evaluate.py's evaluation as CSV rows; the embedded task in process
    samples             responses with their exact token ids, scored per token (r̂, KL to π_SFT), binned by length
    reward_diagnostics  AUROC of the dense reward against correctness, per response and at the computed numbers
    oracle              the correctness-oracle reward (a control for the settings sweep)
    figures             the CSV and the PNG every analysis writes

See recipes/analysis/README.md for the commands.
"""

from .configs import DPR_ARGUMENTS, check_override_keys, evaluation_config, parse_with_overrides, to_command_line
from .figures import plot_grouped_bars, plot_intervals, plot_series, write_csv
from .oracle import CorrectnessOracleRewardModel
from .reward_diagnostics import (
    ComputedNumber,
    auroc,
    computed_number_rewards,
    find_computed_numbers,
    token_char_spans,
    top_token_rewards,
)
from .samples import (
    LengthBin,
    Sample,
    bin_by_length,
    length_bin_edges,
    padded_batch,
    policy_logprobs,
    response_stats,
    sample_completions,
    score_samples,
)
from .sweeps import (
    RUN_SUMMARY_NAME,
    VariantRun,
    WinRateSweepArguments,
    ensure_sft_output,
    free_memory,
    reference_at,
    reference_checkpoint,
    sft_checkpoints,
    sweep_win_rates,
    train_variant,
    variant_settings,
)
from .win_rates import (
    WIN_RATE_COLUMNS,
    HeldOutPrompts,
    exact_accuracy,
    exact_win_rate,
    forget_cached_answers,
    win_rate_rows,
)

__all__ = [
    "DPR_ARGUMENTS",
    "RUN_SUMMARY_NAME",
    "WIN_RATE_COLUMNS",
    "ComputedNumber",
    "CorrectnessOracleRewardModel",
    "HeldOutPrompts",
    "LengthBin",
    "Sample",
    "VariantRun",
    "WinRateSweepArguments",
    "auroc",
    "bin_by_length",
    "check_override_keys",
    "computed_number_rewards",
    "ensure_sft_output",
    "evaluation_config",
    "exact_accuracy",
    "exact_win_rate",
    "find_computed_numbers",
    "forget_cached_answers",
    "free_memory",
    "length_bin_edges",
    "padded_batch",
    "parse_with_overrides",
    "plot_grouped_bars",
    "plot_intervals",
    "plot_series",
    "policy_logprobs",
    "reference_at",
    "reference_checkpoint",
    "response_stats",
    "sample_completions",
    "score_samples",
    "sft_checkpoints",
    "sweep_win_rates",
    "to_command_line",
    "token_char_spans",
    "top_token_rewards",
    "train_variant",
    "variant_settings",
    "win_rate_rows",
    "write_csv",
]
