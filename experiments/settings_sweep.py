"""Settings sweep on the embedded task: DPR with named variants of its settings, each compared with SFT exactly.

    python -m experiments.settings_sweep --config experiments/configs/settings_sweep_demo.yaml          # CPU
    python -m experiments.settings_sweep --config experiments/configs/settings_sweep_demo.yaml --only paper_lr3e-5 oracle_lr3e-5

The YAML is a recipes/dpr.py YAML (the settings every variant starts from; `output_dir` is the sweep's folder) plus
`variants:`, a mapping from a name to the keys that variant changes: any key of recipes/dpr.py (learning_rate, kl_coef,
max_steps, gradient_accumulation_steps, gamma, dense_reward, ref_model_name_or_path, ...), and

- `reference_fraction: α`: π_ref is the SFT checkpoint at step ⌊α·N⌋ of `checkpoints_dir` (an SFT run saved with
  `--save_strategy steps`), or the recorded `dpr_reference/` when it was taken at that α;
- `oracle: true`: the correctness-oracle control, reward +1 at the last token of a response with the exact answer,
  0 elsewhere (KL to π_SFT as in DPR; no π_ref).

A variant's keys win over the YAML and the command line. Each variant is trained once into `<output_dir>/<name>/`.
All of them are then evaluated against SFT with recipes/evaluate.py's evaluation (`evaluation_config`, exact judge:
accuracy and win rate with bootstrap 95% CIs) into `<output_dir>/evaluation/`, and again with greedy answers into
`<output_dir>/evaluation_greedy/`; the answer caches make a rerun only do what is missing. Writes
`settings_sweep.csv` (one row per variant: its settings, accuracy of SFT and DPR and the win rate, sampled and
greedy, the final `kl_sft` and reward of training, the training time) and `settings_sweep.png`.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState

from trl_dpr.embedded import EMBEDDED_DATASET, held_out_split, load_demonstrations
from trl_dpr.evaluation import run_evaluation
from trl_dpr.rewards import reward_from_settings
from trl_dpr.running.pipeline import model_init_kwargs_from, print_stage
from trl_dpr.running.recipe_parser import RecipeParser

from .figures import plot_intervals, write_csv
from .oracle import CorrectnessOracleRewardModel
from .overrides import DPR_ARGUMENTS, evaluation_config, parse_with_overrides, select_overrides
from .sweeps import ensure_sft_output, free_memory, reference_at, train_variant, variant_settings
from .win_rates import forget_cached_answers, win_rate_rows

SETTINGS_COLUMNS = (
    "variant",
    "oracle",
    "reference",
    "dense_reward",
    "learning_rate",
    "kl_coef",
    "gamma",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
)
METRIC_COLUMNS = (
    "sft_accuracy_greedy",
    "dpr_accuracy_greedy",
    "win_rate_greedy",
    "ci_low_greedy",
    "ci_high_greedy",
    "sft_accuracy_sampled",
    "dpr_accuracy_sampled",
    "win_rate",
    "ci_low",
    "ci_high",
    "wins",
    "ties",
    "losses",
    "n",
    "kl_sft_final",
    "train_reward_final",
    "train_runtime_s",
)


@dataclass
class SettingsSweepArguments:
    variants: dict = field(
        default_factory=dict,
        metadata={
            "help": "YAML mapping: variant name → the recipes/dpr.py keys it changes, plus `reference_fraction: α` "
            "(π_ref from checkpoints_dir) and `oracle: true` (the correctness-oracle reward)."
        },
    )
    only: list[str] | None = field(default=None, metadata={"help": "Run only these variants (names from `variants`)."})
    checkpoints_dir: str | None = field(
        default=None,
        metadata={
            "help": "SFT run with checkpoint-N folders, for `reference_fraction` variants; default: model_name_or_path."
        },
    )


def _oracle(script_args, training_args, model_args) -> CorrectnessOracleRewardModel:
    """The correctness oracle, knowing the exact answer of every train prompt the variant samples from."""
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    oracle = CorrectnessOracleRewardModel.from_pretrained(
        model_args.model_name_or_path,
        reward=reward_from_settings({"dense_reward": "trl_dpr.rewards:SFTLogProb"}),
        token_chunk_size=training_args.reward_token_chunk_size,
        **init_kwargs,
    )
    train = load_demonstrations(
        script_args.dataset_name,
        script_args.dataset_config,
        split=script_args.dataset_train_split,
        num_samples=script_args.num_train_samples,
        seed=training_args.seed,
    )
    oracle.add_answers(train["prompt"], train["answer"])
    held_out = held_out_split()
    oracle.add_answers(held_out["prompt"], held_out["answer"])
    return oracle


def _reference_label(script_args, training_args, oracle: bool) -> str:
    if oracle:
        return "none (oracle)"
    if "ref" not in training_args.reward().model_names:
        return "none (wo/Baseline)"
    return script_args.ref_model_name_or_path or "dpr_reference (recorded)"


def _evaluate(evaluation_yaml: str, sft_path: str, runs: dict, output_dir: Path) -> dict[str, dict]:
    """Sampled and greedy win rates and accuracies of every variant against SFT: `{variant: metrics}`."""
    metrics: dict[str, dict] = {name: {} for name in runs}
    for suffix, replaced in (("", {}), ("_greedy", {"temperature": 0.0, "samples_per_prompt": 1})):
        config = evaluation_config(
            evaluation_yaml,
            baseline=f"SFT={sft_path}",
            candidates=[f"{name}={run.output_dir}" for name, run in runs.items()],
            output_dir=str(output_dir / f"evaluation{suffix}"),
            **replaced,
        )
        for row in win_rate_rows(run_evaluation(config, show_progress=False)):
            label = "_greedy" if suffix else "_sampled"
            values = metrics[row["method"]]
            values[f"sft_accuracy{label}"], values[f"dpr_accuracy{label}"] = row["sft_accuracy"], row["accuracy"]
            values[f"win_rate{suffix}"], values[f"ci_low{suffix}"], values[f"ci_high{suffix}"] = (
                row["win_rate"],
                row["ci_low"],
                row["ci_high"],
            )
            if not suffix:
                values.update({k: row[k] for k in ("wins", "ties", "losses", "n")})
    return metrics


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    types = (SettingsSweepArguments, *DPR_ARGUMENTS)
    sweep, script_args, training_args, model_args = RecipeParser(types).parse_args_and_config(argv)
    _ = training_args.distributed_state  # first: the process group follows use_cpu / the launcher
    if script_args.dataset_name != EMBEDDED_DATASET:
        raise ValueError(
            "The settings sweep measures exact accuracy, which only the embedded task has (dataset_name: "
            f"{EMBEDDED_DATASET}). For other datasets, use gamma_sweep.py / reference_sweep.py with an LLM judge."
        )
    selected = select_overrides(
        sweep.variants, sweep.only, DPR_ARGUMENTS, {"oracle"}, kind="variant", yaml_key="variants"
    )
    if PartialState().num_processes != 1:
        raise ValueError(
            "The settings sweep runs in one process (embedded task, CPU or one GPU): launch it with python."
        )
    if not script_args.evaluation_config:
        raise ValueError(
            "Set evaluation_config: the recipes/evaluate.py YAML of the sampled evaluation (exact judge)."
        )
    evaluation_config(script_args.evaluation_config)  # a bad evaluation YAML fails before any training
    ensure_sft_output(script_args, model_args)

    output_dir = Path(training_args.output_dir)
    runs, rows = {}, []
    for index, name in enumerate(selected, start=1):
        overrides = dict(sweep.variants[name])
        oracle_wanted = bool(overrides.pop("oracle", False))
        if "reference_fraction" in overrides:
            sft_path = overrides.get("model_name_or_path", model_args.model_name_or_path)
            overrides["ref_model_name_or_path"] = reference_at(
                overrides.pop("reference_fraction"), sft_path, sweep.checkpoints_dir
            )
        if oracle_wanted:
            if "ref_model_name_or_path" in overrides or overrides.get("dense_reward"):
                raise ValueError(f"Variant {name!r}: the oracle uses no π_ref; remove its reference settings.")
            overrides["dense_reward"] = "trl_dpr.rewards:SFTLogProb"
        print_stage(index, len(selected), f"variant {name}: {sweep.variants[name]}")
        v_script, v_training, v_model = parse_with_overrides(
            types, argv, {**overrides, "output_dir": str(output_dir / name)}
        )[-3:]
        if v_model.model_name_or_path != model_args.model_name_or_path:
            raise ValueError(
                f"Variant {name!r} starts from another SFT model; every variant is compared with one SFT."
            )
        settings = variant_settings(v_script, v_training, v_model, oracle=oracle_wanted)
        already_trained = (Path(v_training.output_dir) / "analysis_run.json").is_file()
        oracle = _oracle(v_script, v_training, v_model) if oracle_wanted and not already_trained else None
        runs[name] = train_variant(name, v_script, v_training, v_model, settings, reward_model=oracle)
        if not already_trained:
            for folder in ("evaluation", "evaluation_greedy"):  # answers of an earlier model with this name are stale
                forget_cached_answers(output_dir / folder, name)
        del oracle
        free_memory()
        rows.append(
            {
                "variant": name,
                "oracle": oracle_wanted,
                "reference": _reference_label(v_script, v_training, oracle_wanted),
                "dense_reward": v_training.dense_reward,
                "learning_rate": v_training.learning_rate,
                "kl_coef": v_training.kl_coef,
                "gamma": v_training.gamma,
                "max_steps": v_training.max_steps,
                "per_device_train_batch_size": v_training.per_device_train_batch_size,
                "gradient_accumulation_steps": v_training.gradient_accumulation_steps,
                "kl_sft_final": runs[name].final_metrics.get("kl_sft/per_token"),
                "train_reward_final": runs[name].final_metrics.get("reward"),
                "train_runtime_s": runs[name].train_runtime_s,
            }
        )

    metrics = _evaluate(script_args.evaluation_config, model_args.model_name_or_path, runs, output_dir)
    for row in rows:
        row.update(metrics[row["variant"]])
        print(
            f"{row['variant']}: greedy accuracy {row['sft_accuracy_greedy']:.3f} → {row['dpr_accuracy_greedy']:.3f}, "
            f"sampled {row['sft_accuracy_sampled']:.3f} → {row['dpr_accuracy_sampled']:.3f}, win rate "
            f"{row['win_rate']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]",
            flush=True,
        )
    csv_path = write_csv(rows, output_dir / "settings_sweep.csv", (*SETTINGS_COLUMNS, *METRIC_COLUMNS))
    names = [r["variant"] for r in rows]
    png_path = plot_intervals(
        names,
        {
            "sampled": ([r["win_rate"] for r in rows], [r["ci_low"] for r in rows], [r["ci_high"] for r in rows]),
            "greedy": (
                [r["win_rate_greedy"] for r in rows],
                [r["ci_low_greedy"] for r in rows],
                [r["ci_high_greedy"] for r in rows],
            ),
        },
        output_dir / "settings_sweep.png",
        xlabel="win rate of DPR vs SFT (exact judge, 95% CI)",
        title="DPR settings on the embedded task",
        reference_line=0.5,
    )
    print(f"\nWritten to {csv_path} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
