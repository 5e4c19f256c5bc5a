"""KL and dense reward vs response length (paper Fig. 4a): for each policy, responses are sampled, and each one's
KL to π_SFT and dense reward are averaged per length bin.

    python -m experiments.length_analysis --config experiments/configs/length_analysis_demo.yaml      # embedded, CPU

    python -m experiments.length_analysis --config experiments/configs/length_analysis_demo.yaml \\
        --sft_model_name_or_path runs/llama-3.1-8b/sft-qlora --dataset_name Open-Orca/OpenOrca --dataset_split train \\
        --dataset_format openorca --max_new_tokens 1024 --batch_size 16 --dtype bfloat16 \\
        --policies "gamma1=runs/analysis/llama-3.1-8b/gamma_sweep/gamma1" "gamma0.95=runs/analysis/llama-3.1-8b/gamma_sweep/gamma0.95" \\
        --output_dir runs/analysis/llama-3.1-8b/length_analysis

Per response (the sampled token ids themselves are scored, not a re-tokenized text):

    KL(π ‖ π_SFT)  ≈ Σ_t log π(a_t|s_t) − log π_SFT(a_t|s_t)   (an unbiased estimate when sampled at temperature 1)
    dense reward   = Σ_t r̂_t,   r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t)

The paper compares γ = 1 with γ = 0.95 (the γ sweep's outputs); SFT itself is added as the zero-KL reference. Writes
`length_analysis.csv` (per policy and length bin: count, mean ± standard error of KL and reward),
`length_analysis_responses.csv` (every response) and `length_analysis.png`.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from trl_dpr import CheckpointRewardModel
from trl_dpr.data import prompts_for_rl
from trl_dpr.embedded import EMBEDDED_DATASET, load_demonstrations
from trl_dpr.evaluation.sampling import sample_completions
from trl_dpr.running.recipe_parser import RecipeParser

from .figures import plot_series, write_csv
from .lengths import bin_by_length, length_bin_edges, response_stats

COLUMNS = (
    "policy",
    "length_low",
    "length_high",
    "length_mid",
    "count",
    "mean_kl",
    "sem_kl",
    "mean_reward",
    "sem_reward",
)
RESPONSE_COLUMNS = ("policy", "prompt_index", "length", "kl", "reward")


@dataclass
class LengthAnalysisArguments:
    sft_model_name_or_path: str = field(
        default="runs/demo_from_scratch/sft",
        metadata={"help": "The SFT output: π_SFT (the KL reference) and its recorded π_ref."},
    )
    ref_model_name_or_path: str | None = field(
        default=None, metadata={"help": "π_ref of the dense reward; default: the one the SFT run recorded."}
    )
    policies: list[str] = field(
        default_factory=lambda: [
            "gamma1=runs/analysis/gamma_sweep/gamma1",
            "gamma0.95=runs/analysis/gamma_sweep/gamma0.95",
        ],
        metadata={"help": "NAME=PATH of each policy to sample (DPR outputs; the paper: γ = 1 and γ = 0.95)."},
    )
    include_sft: bool = field(default=True, metadata={"help": "Also sample π_SFT itself (KL 0: the reference curve)."})
    dataset_name: str = field(
        default=EMBEDDED_DATASET, metadata={"help": "Prompts: a dataset recipes/dpr.py can load."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset's configuration name."})
    dataset_split: str = field(default="test", metadata={"help": "Split the prompts come from."})
    dataset_format: str = field(
        default="auto",
        metadata={
            "help": "auto | openorca | messages | prompt_completion.",
            "choices": ["auto", "openorca", "messages", "prompt_completion"],
        },
    )
    num_prompts: int = field(default=200, metadata={"help": "Prompts (a random subsample drawn with `seed`)."})
    samples_per_prompt: int = field(default=2, metadata={"help": "Responses sampled per prompt and policy."})
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature; 1 makes Σ log π − log π_SFT an unbiased KL estimate."}
    )
    max_new_tokens: int = field(default=64, metadata={"help": "Maximum response length (tokens)."})
    num_length_bins: int = field(default=6, metadata={"help": "Equal-width length bins, shared by all policies."})
    min_bin_count: int = field(
        default=5, metadata={"help": "Bins with fewer responses are kept in the CSV, not plotted."}
    )
    batch_size: int = field(default=32, metadata={"help": "Responses per generate / scoring call."})
    dtype: str = field(
        default="float32", metadata={"help": "dtype the models are loaded in (float32, bfloat16, auto)."}
    )
    seed: int = field(default=0, metadata={"help": "Prompt subsample and sampling seed."})
    output_dir: str = field(default="runs/analysis/length_analysis", metadata={"help": "Where the CSVs and PNG go."})


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def main(argv=None):
    (args,) = RecipeParser((LengthAnalysisArguments,)).parse_args_and_config(
        list(sys.argv[1:] if argv is None else argv)
    )
    policies = dict(spec.split("=", 1) for spec in args.policies if "=" in spec)
    if len(policies) != len(args.policies):
        raise ValueError(f"policies must be NAME=PATH entries with distinct names, got {args.policies}.")
    rows = prompts_for_rl(
        load_demonstrations(
            args.dataset_name,
            args.dataset_config,
            split=args.dataset_split,
            num_samples=args.num_prompts,
            seed=args.seed,
            dataset_format=args.dataset_format,
        ),
        args.dataset_name,
    )
    prompts = [p for p in rows["prompt"] for _ in range(args.samples_per_prompt)]
    reward_model = CheckpointRewardModel.from_pretrained(
        args.sft_model_name_or_path, args.ref_model_name_or_path, dtype=args.dtype
    )
    for scorer in {id(m): m for m in (reward_model.sft_model, reward_model.ref_model) if m is not None}.values():
        scorer.to(_device())
    tokenizer = reward_model.processing_class

    responses = []
    to_sample = ({"SFT": None} if args.include_sft else {}) | policies
    for name, path in to_sample.items():
        print(f"Sampling {len(prompts)} responses from {name} ({path or args.sft_model_name_or_path})", flush=True)
        policy = (
            reward_model.sft_model
            if path is None
            else AutoModelForCausalLM.from_pretrained(path, dtype=args.dtype).to(_device())
        )
        samples = sample_completions(
            policy,
            tokenizer,
            prompts,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            seed=args.seed,
        )
        for sample, stats in zip(samples, response_stats(policy, reward_model, samples, args.batch_size)):
            responses.append({"policy": name, "prompt_index": sample.prompt_index // args.samples_per_prompt, **stats})
        del policy

    edges = length_bin_edges([r["length"] for r in responses], args.num_length_bins)
    table = []
    for name in to_sample:
        mine = [r for r in responses if r["policy"] == name]
        lengths = [r["length"] for r in mine]
        kl_bins = bin_by_length(lengths, [r["kl"] for r in mine], edges)
        reward_bins = bin_by_length(lengths, [r["reward"] for r in mine], edges)
        for kl, reward in zip(kl_bins, reward_bins):
            table.append(
                {
                    "policy": name,
                    "length_low": kl.low,
                    "length_high": kl.high,
                    "length_mid": (kl.low + kl.high) / 2,
                    "count": kl.count,
                    "mean_kl": kl.mean,
                    "sem_kl": kl.sem,
                    "mean_reward": reward.mean,
                    "sem_reward": reward.sem,
                }
            )

    output_dir = Path(args.output_dir)
    csv_path = write_csv(table, output_dir / "length_analysis.csv", COLUMNS)
    write_csv(responses, output_dir / "length_analysis_responses.csv", RESPONSE_COLUMNS)
    series = {
        name: [r for r in table if r["policy"] == name and r["count"] >= args.min_bin_count] for name in to_sample
    }
    png_path = plot_series(
        series,
        output_dir / "length_analysis.png",
        x="length_mid",
        y=["mean_kl", "mean_reward"],
        error=["sem_kl", "sem_reward"],
        xlabel="response length (tokens)",
        ylabel=["KL(π ‖ π_SFT) per response", "dense reward Σ r̂ per response"],
        title="KL and dense reward vs response length (paper Fig. 4a)",
    )
    for name in to_sample:
        mine = [r for r in responses if r["policy"] == name]
        print(
            f"{name:<12} {len(mine)} responses, mean length {sum(r['length'] for r in mine) / len(mine):.1f}, "
            f"mean KL {sum(r['kl'] for r in mine) / len(mine):.3f}, mean reward {sum(r['reward'] for r in mine) / len(mine):.3f}",
            flush=True,
        )
    print(f"\nWritten to {csv_path} and {png_path}", flush=True)


if __name__ == "__main__":
    main()
