"""Settings sweep on the embedded task: DPR with named variants of its settings, each compared with SFT exactly.

    python recipes/analysis/settings_sweep.py --config recipes/analysis/settings_sweep_demo.yaml          # CPU
    python recipes/analysis/settings_sweep.py --config recipes/analysis/settings_sweep_demo.yaml --only paper_lr3e-5 oracle_lr3e-5

The YAML is a recipes/dpr.py YAML (the settings every variant starts from; `output_dir` is the sweep's folder) plus
`variants:`, a mapping from a name to the keys that variant changes: any key of recipes/dpr.py (learning_rate, kl_coef,
max_steps, gradient_accumulation_steps, gamma, use_baseline, ref_model_name_or_path, ...), and

- `reference_fraction: α`: π_ref is the SFT checkpoint at step ⌊α·N⌋ of `checkpoints_dir` (an SFT run saved with
  `--save_strategy steps`), or the recorded `dpr_reference/` when it was taken at that α;
- `oracle: true`: the correctness-oracle control, reward +1 at the last token of a response with the exact answer,
  0 elsewhere (KL to π_SFT as in DPR; no π_ref).

A variant's keys win over the YAML and the command line. Each variant is trained once into `<output_dir>/<name>/` and
evaluated once (`settings_evaluation.json` there); a rerun only does what is missing. Per variant, on
`num_eval_samples` held-out prompts: greedy accuracy and accuracy at `eval_temperature` (`eval_samples_per_prompt`
answers per prompt) of SFT and DPR, the win rate of DPR vs SFT at both (exact judge, ties 0.5, bootstrap 95% CI), the
mean reward Σ r̂ of the sampled answers of SFT and of DPR under the reward the variant trained with, the final
`kl_sft` and reward of training, and the training time. Writes `settings_sweep.csv` and `settings_sweep.png`.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_dpr import CheckpointRewardModel
from trl_dpr.analysis import (
    DPR_ARGUMENTS,
    CorrectnessOracleRewardModel,
    HeldOutPrompts,
    check_override_keys,
    ensure_sft_output,
    exact_accuracy,
    exact_win_rate,
    free_memory,
    parse_with_overrides,
    plot_intervals,
    reference_at,
    train_variant,
    variant_settings,
    write_csv,
)
from trl_dpr.data import EMBEDDED_DATASET, load_demonstrations
from trl_dpr.evaluation import generate_answers
from trl_dpr.pipeline import model_init_kwargs_from, print_stage
from trl_dpr.recipe_parser import RecipeParser

SETTINGS_COLUMNS = (
    "variant", "oracle", "reference", "use_baseline", "learning_rate", "kl_coef", "gamma", "max_steps",
    "per_device_train_batch_size", "gradient_accumulation_steps",
)
METRIC_COLUMNS = (
    "sft_accuracy_greedy", "dpr_accuracy_greedy", "win_rate_greedy", "ci_low_greedy", "ci_high_greedy",
    "eval_temperature", "sft_accuracy_sampled", "dpr_accuracy_sampled", "win_rate", "ci_low", "ci_high", "wins", "ties",
    "losses", "n", "sft_answers_reward", "dpr_answers_reward", "kl_sft_final", "train_reward_final", "train_runtime_s",
)
EVALUATION_NAME = "settings_evaluation.json"


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
        metadata={"help": "SFT run with checkpoint-N folders, for `reference_fraction` variants; default: model_name_or_path."},
    )
    eval_batch_size: int = field(default=64, metadata={"help": "Prompts per generate call at evaluation."})


def _oracle(script_args, training_args, model_args, held_out: HeldOutPrompts) -> CorrectnessOracleRewardModel:
    init_kwargs = model_init_kwargs_from(model_args, training_args.trust_remote_code)
    oracle = CorrectnessOracleRewardModel.from_pretrained(
        model_args.model_name_or_path, use_baseline=False, eliminate_value=training_args.eliminate_value,
        token_chunk_size=training_args.reward_token_chunk_size, **init_kwargs,
    )
    train = load_demonstrations(script_args.dataset_name, script_args.dataset_config, split=script_args.dataset_train_split,
                                num_samples=script_args.num_train_samples, seed=training_args.seed)
    oracle.add_answers(train["prompt"], train["answer"])
    oracle.add_answers(held_out.prompts, held_out.answers)
    return oracle


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class SFTAnswers:
    """SFT's greedy and sampled answers, generated once per SFT model for the whole sweep."""

    def __init__(self, script_args, batch_size: int):
        self.script_args, self.batch_size, self.cache = script_args, batch_size, {}

    def answers(self, model, tokenizer, held_out: dict) -> dict:
        s = self.script_args
        return {
            "greedy": generate_answers(model, tokenizer, held_out["greedy"].prompts, temperature=0.0,
                                       max_new_tokens=s.eval_max_new_tokens, batch_size=self.batch_size, show_progress=False),
            "sampled": generate_answers(model, tokenizer, held_out["sampled"].prompts, temperature=s.eval_temperature,
                                        max_new_tokens=s.eval_max_new_tokens, batch_size=self.batch_size, show_progress=False),
        }

    def __call__(self, sft_path: str, tokenizer, held_out: dict, init_kwargs: dict) -> dict:
        if sft_path not in self.cache:
            model = AutoModelForCausalLM.from_pretrained(sft_path, **init_kwargs).to(_device())
            self.cache[sft_path] = self.answers(model, tokenizer, held_out)
            del model
        return self.cache[sft_path]


def _evaluate(run, script_args, training_args, model_args, oracle, held_out, sft_answers: SFTAnswers, settings: dict) -> dict:
    """The variant's metrics, from `settings_evaluation.json` when it was evaluated with the same settings."""
    path = Path(run.output_dir) / EVALUATION_NAME
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached["settings"] == settings:
            return cached["results"]
    sft_path = model_args.model_name_or_path
    init_kwargs = {k: v for k, v in model_init_kwargs_from(model_args).items() if k != "quantization_config"}
    tokenizer = AutoTokenizer.from_pretrained(sft_path, padding_side="left")
    sft = sft_answers(sft_path, tokenizer, held_out, init_kwargs)
    policy = AutoModelForCausalLM.from_pretrained(run.output_dir, **init_kwargs).to(_device())
    dpr = sft_answers.answers(policy, tokenizer, held_out)
    del policy
    reward_model = oracle
    if reward_model is None:  # the reward the variant trained with
        reward_model = CheckpointRewardModel.from_pretrained(
            sft_path, script_args.ref_model_name_or_path, use_baseline=training_args.use_baseline,
            eliminate_value=training_args.eliminate_value, **init_kwargs,
        )
    reward_model.sft_model.to(_device())
    if reward_model.ref_model is not None:
        reward_model.ref_model.to(_device())
    sampled = held_out["sampled"]
    mean_reward = {}
    for model_name in ("sft", "dpr"):
        answers = sft["sampled"] if model_name == "sft" else dpr["sampled"]
        scored = reward_model.score_text(sampled.prompts, [a if a else " " for a in answers])
        mean_reward[model_name] = sum(s["total"] for s in scored) / len(scored)
    greedy_rate = exact_win_rate(dpr["greedy"], sft["greedy"], held_out["greedy"])
    sampled_rate = exact_win_rate(dpr["sampled"], sft["sampled"], sampled)
    results = {
        "sft_accuracy_greedy": exact_accuracy(sft["greedy"], held_out["greedy"]),
        "dpr_accuracy_greedy": exact_accuracy(dpr["greedy"], held_out["greedy"]),
        "win_rate_greedy": greedy_rate.value, "ci_low_greedy": greedy_rate.ci_low, "ci_high_greedy": greedy_rate.ci_high,
        "eval_temperature": script_args.eval_temperature,
        "sft_accuracy_sampled": exact_accuracy(sft["sampled"], sampled),
        "dpr_accuracy_sampled": exact_accuracy(dpr["sampled"], sampled),
        "win_rate": sampled_rate.value, "ci_low": sampled_rate.ci_low, "ci_high": sampled_rate.ci_high,
        "wins": sampled_rate.wins, "ties": sampled_rate.ties, "losses": sampled_rate.losses, "n": sampled_rate.n,
        "sft_answers_reward": mean_reward["sft"],
        "dpr_answers_reward": mean_reward["dpr"],
    }
    del reward_model
    free_memory()
    path.write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    return results


def _reference_label(script_args, training_args, oracle: bool) -> str:
    if oracle:
        return "none (oracle)"
    if not training_args.use_baseline:
        return "none (wo/Baseline)"
    return script_args.ref_model_name_or_path or "dpr_reference (recorded)"


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
    if not sweep.variants:
        raise ValueError("No variants: add a `variants:` mapping (name → keys to change) to the YAML.")
    selected = sweep.only or list(sweep.variants)
    unknown = [name for name in selected if name not in sweep.variants]
    if unknown:
        raise ValueError(f"--only names unknown variant(s) {unknown}; the YAML defines {list(sweep.variants)}.")
    for name in selected:
        check_override_keys(sweep.variants[name], DPR_ARGUMENTS, {"oracle"}, f"variant {name!r}")
    if PartialState().num_processes != 1:
        raise ValueError("The settings sweep runs in one process (embedded task, CPU or one GPU): launch it with python.")
    ensure_sft_output(script_args, model_args)

    output_dir = Path(training_args.output_dir)
    held_out = {
        "greedy": HeldOutPrompts.embedded(script_args.num_eval_samples, 1),
        "sampled": HeldOutPrompts.embedded(script_args.num_eval_samples, script_args.eval_samples_per_prompt),
    }
    evaluation_settings = {key: getattr(script_args, key) for key in (
        "num_eval_samples", "eval_samples_per_prompt", "eval_temperature", "eval_max_new_tokens")}
    sft_answers = SFTAnswers(script_args, sweep.eval_batch_size)
    rows = []
    for index, name in enumerate(selected, start=1):
        overrides = dict(sweep.variants[name])
        oracle_wanted = bool(overrides.pop("oracle", False))
        if "reference_fraction" in overrides:
            sft_path = overrides.get("model_name_or_path", model_args.model_name_or_path)
            overrides["ref_model_name_or_path"] = reference_at(overrides.pop("reference_fraction"), sft_path, sweep.checkpoints_dir)
        if oracle_wanted:
            if "ref_model_name_or_path" in overrides or overrides.get("use_baseline"):
                raise ValueError(f"Variant {name!r}: the oracle uses no π_ref; remove its reference settings.")
            overrides["use_baseline"] = False
        print_stage(index, len(selected), f"variant {name}: {sweep.variants[name]}")
        parsed = parse_with_overrides(types, argv, {**overrides, "output_dir": str(output_dir / name)})
        v_script, v_training, v_model = parsed[-3:]
        settings = variant_settings(v_script, v_training, v_model, oracle=oracle_wanted)
        oracle = _oracle(v_script, v_training, v_model, held_out["sampled"]) if oracle_wanted else None
        run = train_variant(name, v_script, v_training, v_model, settings, reward_model=oracle)
        metrics = _evaluate(run, v_script, v_training, v_model, oracle, held_out, sft_answers,
                            {**evaluation_settings, "variant": settings})
        del oracle
        free_memory()
        rows.append({
            "variant": name, "oracle": oracle_wanted, "reference": _reference_label(v_script, v_training, oracle_wanted),
            "use_baseline": v_training.use_baseline, "learning_rate": v_training.learning_rate, "kl_coef": v_training.kl_coef,
            "gamma": v_training.gamma, "max_steps": v_training.max_steps,
            "per_device_train_batch_size": v_training.per_device_train_batch_size,
            "gradient_accumulation_steps": v_training.gradient_accumulation_steps,
            **metrics,
            "kl_sft_final": run.final_metrics.get("kl_sft"), "train_reward_final": run.final_metrics.get("reward"),
            "train_runtime_s": run.train_runtime_s,
        })
        print(f"{name}: greedy accuracy {metrics['sft_accuracy_greedy']:.3f} → {metrics['dpr_accuracy_greedy']:.3f}, "
              f"T={script_args.eval_temperature:g} {metrics['sft_accuracy_sampled']:.3f} → {metrics['dpr_accuracy_sampled']:.3f}, "
              f"win rate {metrics['win_rate']:.3f} [{metrics['ci_low']:.3f}, {metrics['ci_high']:.3f}], "
              f"reward {metrics['sft_answers_reward']:.2f} → {metrics['dpr_answers_reward']:.2f}", flush=True)

    csv_path = write_csv(rows, output_dir / "settings_sweep.csv", (*SETTINGS_COLUMNS, *METRIC_COLUMNS))
    names = [r["variant"] for r in rows]
    sampled_label = f"T={script_args.eval_temperature:g}"
    png_path = plot_intervals(
        names,
        {
            sampled_label: ([r["win_rate"] for r in rows], [r["ci_low"] for r in rows], [r["ci_high"] for r in rows]),
            "greedy": ([r["win_rate_greedy"] for r in rows], [r["ci_low_greedy"] for r in rows],
                       [r["ci_high_greedy"] for r in rows]),
        },
        output_dir / "settings_sweep.png",
        xlabel="win rate of DPR vs SFT (exact judge, 95% CI)", title="DPR settings on the embedded task",
        reference_line=0.5,
    )
    print(f"\nWritten to {csv_path} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
