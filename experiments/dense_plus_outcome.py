"""Dense + outcome rewards on the embedded task: DPR's r̂ alone, an exact-answer verifier alone, and both, in one trainer.

    python -m experiments.dense_plus_outcome --config experiments/configs/dense_plus_outcome_demo.yaml   # CPU, resumable

Every arm is `DensePathTrainer` with the demo's recipe (recipes/demo/dpr.yaml: same SFT start, KL to π_SFT, steps,
learning rate), changed only in its rewards (`METHODS`): `reward_weights` [w_r̂, w_verifier] = [1] (DPR), [0, 1]
(verifier alone) and [1, 1] (both), the verifier `exact` = 1 for the exact answer, else 0, at the last token. Each arm
runs for each seed into `<output_dir>/<arm>_s<seed>/` (reused when already trained), all from one SFT model (the
recipe's `model_name_or_path`, built first by its `sft_config` when missing). All of them are then evaluated against
π_SFT with the demo's evaluation (exact judge, shared prompts and sampling seeds) at each `DECODINGS` temperature into
`<output_dir>/evaluation_<decoding>/` (answer caches: a rerun only does what is missing).

Then both against the verifier alone, seed by seed, on the same answers (copied into
`evaluation_<decoding>/both_vs_verifier_s<seed>/`, judged again with the verifier arm as the baseline).

Writes `dense_plus_outcome.md` / `.json`: per arm and decoding, the accuracy gain over π_SFT of each seed, paired over
the same prompts and samples with its 95% bootstrap interval, and the mean over seeds with its 95% t-interval; then
the same for both − verifier.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl_dpr.embedded import EMBEDDED_DATASET
from trl_dpr.embedded.task import is_correct
from trl_dpr.evaluation import run_evaluation
from trl_dpr.running.pipeline import print_stage
from trl_dpr.running.recipe_parser import RecipeParser

from .overrides import DPR_ARGUMENTS, evaluation_config, parse_with_overrides
from .readme_tables import exact_paired_gain
from .seed_spread import mean_t_interval
from .sweeps import ensure_sft_output, train_variant, variant_settings
from .win_rates import forget_cached_answers

__all__ = ["DensePlusOutcomeArguments", "exact", "main", "summary_markdown"]

DECODINGS = {"T=0.7": {"temperature": 0.7}, "greedy": {"temperature": 0.0, "samples_per_prompt": 1}}


def exact(prompts, completions, answer, **kwargs) -> list[float]:
    """The verifier: 1.0 when the completion ends with the exact answer (the dataset's `answer` column), else 0.0.

    Example:
        >>> exact(["q"], [[{"role": "assistant", "content": "3 + 4 = 7. The answer is 7."}]], ["7"])
        [1.0]
    """
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(is_correct(text, a)) for text, a in zip(texts, answer, strict=True)]


# arm → (reward_weights, reward_funcs): r̂ alone, the verifier alone (r̂ weight 0), both.
METHODS = {"DPR": (None, []), "verifier": ([0.0, 1.0], [exact]), "both": ([1.0, 1.0], [exact])}


@dataclass
class DensePlusOutcomeArguments:
    """Settings of `experiments/dense_plus_outcome.py` (the rest of the YAML is a recipes/dpr.py recipe).

    Example:
        >>> DensePlusOutcomeArguments().seeds
        [0, 1, 2]
    """

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "DPR seeds (rollouts), each arm."})
    arms: list[str] = field(default_factory=lambda: list(METHODS), metadata={"help": "Arms to run, from METHODS."})


def _gains(report, arms_by_name: dict) -> dict:
    """{candidate: (gain, low, high)}: each candidate's paired accuracy gain over π_SFT, from the exact judge."""
    return {name: exact_paired_gain(report.pairwise_result("demo", name).as_dict()) for name in arms_by_name}


def _both_vs_verifier(evaluation_yaml: str, runs: dict, seed: int, folder: Path, replaced: dict) -> tuple:
    """Paired gain of `both_s<seed>` over `verifier_s<seed>`: their cached answers, judged with the verifier as baseline."""
    pair_dir = folder / f"both_vs_verifier_s{seed}"
    for name in (
        f"verifier_s{seed}",
        f"both_s{seed}",
    ):  # the answers of the main evaluation (same settings, same seeds)
        source, target = folder / "answers" / "demo" / f"{name}.jsonl", pair_dir / "answers" / "demo" / f"{name}.jsonl"
        if not source.is_file():
            raise FileNotFoundError(f"{source} is missing: the main evaluation in {folder} must run first.")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    config = evaluation_config(
        evaluation_yaml,
        baseline=f"verifier_s{seed}={runs[f'verifier_s{seed}'].output_dir}",
        candidates=[f"both_s{seed}={runs[f'both_s{seed}'].output_dir}"],
        output_dir=str(pair_dir),
        **replaced,
    )
    report = run_evaluation(config, show_progress=False)
    return exact_paired_gain(report.pairwise_result("demo", f"both_s{seed}").as_dict())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    types = (DensePlusOutcomeArguments, *DPR_ARGUMENTS)
    args, script_args, training_args, model_args = RecipeParser(types).parse_args_and_config(argv)
    if script_args.dataset_name != EMBEDDED_DATASET:
        raise ValueError(f"The verifier needs the embedded task's exact answers (dataset_name: {EMBEDDED_DATASET}).")
    unknown = sorted(set(args.arms) - set(METHODS))
    if unknown:
        raise ValueError(f"Unknown arms {unknown}: choose among {list(METHODS)}.")
    if not script_args.evaluation_config:
        raise ValueError(
            "Set evaluation_config: the recipes/evaluate.py YAML (exact judge) every arm is evaluated with."
        )
    evaluation_config(script_args.evaluation_config)  # a bad evaluation YAML fails before any training
    ensure_sft_output(script_args, model_args)

    output_dir = Path(training_args.output_dir)
    runs = {}
    todo = [(seed, arm) for seed in args.seeds for arm in args.arms]
    for index, (seed, arm) in enumerate(todo, start=1):
        weights, funcs = METHODS[arm]
        name = f"{arm}_s{seed}"
        print_stage(index, len(todo), f"{name}: reward_weights={weights}, reward_funcs={[f.__name__ for f in funcs]}")
        overrides = {
            "seed": seed,
            "output_dir": str(output_dir / name),
            **({"reward_weights": weights} if weights else {}),
        }
        v_script, v_training, v_model = parse_with_overrides(types, argv, overrides)[-3:]
        settings = variant_settings(
            v_script, v_training, v_model, reward_weights=weights, reward_funcs=[f.__name__ for f in funcs]
        )
        already_trained = (Path(v_training.output_dir) / "analysis_run.json").is_file()
        runs[name] = train_variant(name, v_script, v_training, v_model, settings, reward_funcs=funcs or None)
        if not already_trained:
            for decoding in DECODINGS:  # answers of an earlier model with this name are stale
                forget_cached_answers(output_dir / f"evaluation_{decoding}", name)

    results = {
        "runs": {n: {"train_runtime_s": r.train_runtime_s, "final_metrics": r.final_metrics} for n, r in runs.items()}
    }
    for index, (decoding, replaced) in enumerate(DECODINGS.items(), start=1):
        print_stage(index, len(DECODINGS), f"evaluation at {decoding}")
        config = evaluation_config(
            script_args.evaluation_config,
            baseline=f"SFT={model_args.model_name_or_path}",
            candidates=[f"{name}={run.output_dir}" for name, run in runs.items()],
            output_dir=str(output_dir / f"evaluation_{decoding}"),
            **replaced,
        )
        report = run_evaluation(config, show_progress=False)
        results[decoding] = {
            "settings": {k: getattr(config, k) for k in ("temperature", "samples_per_prompt", "demo_num_prompts")},
            "accuracy": {r.method: r.accuracy for r in report.accuracy},
            "gain": _gains(report, runs),
        }
        if {"both", "verifier"} <= set(args.arms):
            results[decoding]["both_vs_verifier"] = {
                f"s{seed}": _both_vs_verifier(
                    script_args.evaluation_config, runs, seed, output_dir / f"evaluation_{decoding}", replaced
                )
                for seed in args.seeds
            }
    text = summary_markdown(results, args.seeds, args.arms)
    (output_dir / "dense_plus_outcome.json").write_text(json.dumps(results, indent=2))
    (output_dir / "dense_plus_outcome.md").write_text(text)
    print(text, flush=True)


def summary_markdown(results: dict, seeds: list[int], arms: list[str]) -> str:
    """Per decoding: each arm's accuracy and paired gain over π_SFT per seed, and the mean gain over seeds (t-interval).

    Example:
        >>> acc = {"SFT": 0.5, "DPR_s0": 0.55, "DPR_s1": 0.53}
        >>> gain = {"DPR_s0": (0.05, 0.01, 0.09), "DPR_s1": (0.03, -0.01, 0.07)}
        >>> text = summary_markdown({"greedy": {"accuracy": acc, "gain": gain}}, [0, 1], ["DPR"])
        >>> text.splitlines()[4]
        '| greedy | DPR | 54.0 | +5.0 (+1.0 to +9.0) | +3.0 (-1.0 to +7.0) | +4.0 (-8.7 to +16.7) |'
    """

    def signed(value, low, high):
        return f"{100 * value:+.1f} ({100 * low:+.1f} to {100 * high:+.1f})"

    decodings = [d for d in results if d != "runs"]
    header = [
        "decoding",
        "arm",
        "mean accuracy %",
        *[f"seed {s}: gain vs π_SFT, paired (95% CI)" for s in seeds],
        "mean gain over seeds (95% t-interval)",
    ]
    lines = [
        "π_SFT accuracy: " + ", ".join(f"{d} {100 * results[d]['accuracy']['SFT']:.1f}%" for d in decodings) + ".",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for decoding in decodings:
        accuracy, gain = results[decoding]["accuracy"], results[decoding]["gain"]
        for arm in arms:
            names = [f"{arm}_s{s}" for s in seeds]
            mean_accuracy = sum(accuracy[n] for n in names) / len(names)
            cells = [signed(*gain[n]) for n in names]
            lines.append(
                f"| {decoding} | {arm} | {100 * mean_accuracy:.1f} | {' | '.join(cells)} | "
                f"{signed(*mean_t_interval([gain[n][0] for n in names]))} |"
            )
    if {"both", "verifier"} <= set(arms) and all("both_vs_verifier" in results[d] for d in decodings):
        lines += [
            "",
            "both − verifier, accuracy points, paired over the same answers' prompts (95% bootstrap CI) per "
            "seed; mean over seeds (95% t-interval):",
            "",
        ]
        for decoding in decodings:
            paired = results[decoding]["both_vs_verifier"]
            per_seed = ", ".join(f"seed {s}: {signed(*paired[f's{s}'])}" for s in seeds)
            mean = mean_t_interval([paired[f"s{s}"][0] for s in seeds])
            lines.append(f"- {decoding}: {per_seed}; mean {signed(*mean)}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
