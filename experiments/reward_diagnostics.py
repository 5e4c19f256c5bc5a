"""Reward diagnostics on the embedded task: does the dense reward rank correct responses above wrong ones?

    python -m experiments.reward_diagnostics --config experiments/configs/reward_diagnostics_demo.yaml    # CPU

K responses per held-out prompt are sampled from π_SFT (temperature 1, as DPR's rollouts), their sampled token ids
scored with r̂_t = log π_SFT − log π_ref for each π_ref given (α of the SFT run, or a folder), and with log π_SFT alone
(`use_baseline=False`, the "wo/Baseline" reward). Reported, per reward:

- sequence level: AUROC of Σ_t r̂_t against the exactness of the final answer, per task kind and over all;
- token level, at the numbers computed as "a op b = c": AUROC of Σ r̂ over c's tokens (c right vs wrong), and of the
  digit tokens that still agree with a op b against the first one that does not (the decision point of a slip);
- the largest and smallest token rewards with their context, π_SFT and π_ref probabilities.

Writes `reward_diagnostics.csv`, `reward_diagnostics.png` (AUROC per group and reward) and
`reward_diagnostics_top_tokens.txt`. Needs exact answers: embedded task only.
"""

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_dpr import CheckpointRewardModel
from trl_dpr.embedded.task import KINDS, held_out_split, is_correct
from trl_dpr.evaluation.sampling import sample_completions, score_samples
from trl_dpr.rewards import CheckpointDifference, SFTLogProb
from trl_dpr.running.recipe_parser import RecipeParser

from .auroc import auroc, computed_number_rewards, top_token_rewards
from .figures import plot_grouped_bars, write_csv
from .sweeps import reference_at

COLUMNS = ("reward", "level", "group", "auroc", "n_correct", "n_wrong", "mean_correct", "mean_wrong")
SFT_ALONE = "log π_SFT (no baseline)"


@dataclass
class RewardDiagnosticsArguments:
    model_name_or_path: str = field(
        default="runs/demo_from_scratch/sft", metadata={"help": "The SFT output (π_SFT) to sample and score with."}
    )
    references: list[str] = field(
        default_factory=lambda: ["0.1", "0.5", "0.8"],
        metadata={
            "help": "Each π_ref: a fraction α of SFT training (the recorded dpr_reference/ when it was taken at that α, "
            "else checkpoint ⌊α·N⌋ of checkpoints_dir) or a model folder."
        },
    )
    checkpoints_dir: str | None = field(
        default=None,
        metadata={"help": "SFT run with checkpoint-N folders for the α references; default: model_name_or_path."},
    )
    include_sft_alone: bool = field(
        default=True, metadata={"help": "Also score with log π_SFT alone (use_baseline=False)."}
    )
    num_prompts: int = field(default=300, metadata={"help": "Held-out prompts of the embedded task."})
    samples_per_prompt: int = field(default=4, metadata={"help": "Responses sampled from π_SFT per prompt (K)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (DPR's rollouts: 1)."})
    max_new_tokens: int = field(default=64, metadata={"help": "Maximum response length (tokens)."})
    batch_size: int = field(default=64, metadata={"help": "Responses per generate / scoring call."})
    top_k: int = field(default=15, metadata={"help": "Largest and smallest token rewards listed per reward."})
    dtype: str = field(default="float32", metadata={"help": "dtype the models are loaded in."})
    seed: int = field(default=0, metadata={"help": "Prompt subsample and sampling seed."})
    output_dir: str = field(default="runs/analysis/reward_diagnostics", metadata={"help": "Where the outputs go."})


def _label(spec: str) -> str:
    try:
        return f"r̂, π_ref at α={float(spec):g}"
    except ValueError:
        return f"r̂, π_ref={Path(spec).name}"


def _reference_path(spec: str, args) -> str:
    try:
        fraction = float(spec)
    except ValueError:
        return spec
    return reference_at(fraction, args.model_name_or_path, args.checkpoints_dir)


def _stats(label: str, level: str, group: str, correct: list[float], wrong: list[float]) -> dict:
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    return {
        "reward": label,
        "level": level,
        "group": group,
        "auroc": auroc(correct, wrong),
        "n_correct": len(correct),
        "n_wrong": len(wrong),
        "mean_correct": mean(correct),
        "mean_wrong": mean(wrong),
    }


def diagnose(label, reward_model, samples, correct, kinds, token_strings, batch_size):
    """The CSV rows of one reward, and its per-response token view (for the top-token listing)."""
    scored, mask = score_samples(reward_model, samples, batch_size)
    lengths = mask.sum(dim=1).tolist()
    totals = (scored.rewards * mask).sum(dim=1).tolist()
    rows = []
    for group in [*KINDS, "all"]:
        chosen = [i for i in range(len(samples)) if group == "all" or kinds[i] == group]
        rows.append(
            _stats(
                label,
                "sequence",
                group,
                [totals[i] for i in chosen if correct[i]],
                [totals[i] for i in chosen if not correct[i]],
            )
        )
    numbers, digits = [], []
    per_response = []
    for i, n in enumerate(lengths):
        rewards = scored.rewards[i, :n].tolist()
        found_numbers, found_digits = computed_number_rewards(token_strings[i], rewards)
        numbers += found_numbers
        digits += found_digits
        view = {
            "tokens": token_strings[i],
            "rewards": rewards,
            "correct": correct[i],
            "sft_prob": scored.sft_logps[i, :n].exp().tolist(),
        }
        if scored.ref_logps is not None:
            view["ref_prob"] = scored.ref_logps[i, :n].exp().tolist()
        per_response.append(view)
    for group, items in (("computed_number", numbers), ("computed_digit", digits)):
        rows.append(_stats(label, "token", group, [r for r, ok in items if ok], [r for r, ok in items if not ok]))
    return rows, per_response


def _top_token_lines(label: str, per_response: list[dict], k: int) -> list[str]:
    lines = [f"== {label} =="]
    for title, largest in (("largest", True), ("smallest", False)):
        lines.append(f"-- {k} {title} token rewards --")
        for row in top_token_rewards(per_response, k, largest=largest):
            probs = f"π_SFT {row['sft_prob']:.3g}" + (f", π_ref {row['ref_prob']:.3g}" if "ref_prob" in row else "")
            context = (row["before"] + "[" + row["token"] + "]" + row["after"]).replace("\n", " ")
            lines.append(
                f"{row['reward']:+8.3f}  {row['token']!r:<8} {probs:<28} correct={row['correct']!s:<5}  {context}"
            )
    return lines + [""]


def main(argv=None):
    (args,) = RecipeParser((RewardDiagnosticsArguments,)).parse_args_and_config(
        list(sys.argv[1:] if argv is None else argv)
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    references = {_label(spec): _reference_path(spec, args) for spec in args.references}  # fails early on a missing α
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    sft_model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=args.dtype).to(device)

    held_out = held_out_split(args.num_prompts, seed=args.seed)
    k = args.samples_per_prompt
    prompts, answers = (
        [p for p in held_out["prompt"] for _ in range(k)],
        [a for a in held_out["answer"] for _ in range(k)],
    )
    kinds = [c for c in held_out["kind"] for _ in range(k)]
    print(f"Sampling {len(prompts)} responses from π_SFT at temperature {args.temperature:g}", flush=True)
    samples = sample_completions(
        sft_model,
        tokenizer,
        prompts,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    correct = [is_correct(s.text, a) for s, a in zip(samples, answers)]
    token_strings = [[tokenizer.decode([t]) for t in s.completion_ids] for s in samples]

    rewards = {label: (path, True) for label, path in references.items()}
    if args.include_sft_alone:
        rewards[SFT_ALONE] = (None, False)
    rows, lines = [], []
    for label, (path, use_baseline) in rewards.items():
        print(f"Scoring with {label}", flush=True)
        ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=args.dtype).to(device) if use_baseline else None
        reward_model = CheckpointRewardModel(
            sft_model,
            ref_model,
            CheckpointDifference() if use_baseline else SFTLogProb(),
            processing_class=tokenizer,
            ref_processing_class=AutoTokenizer.from_pretrained(path) if use_baseline else None,
        )
        reward_rows, per_response = diagnose(
            label, reward_model, samples, correct, kinds, token_strings, args.batch_size
        )
        rows += reward_rows
        lines += _top_token_lines(label, per_response, args.top_k)
        del reward_model, ref_model

    output_dir = Path(args.output_dir)
    csv_path = write_csv(rows, output_dir / "reward_diagnostics.csv", COLUMNS)
    accuracy = sum(correct) / len(correct)
    header = [
        f"{len(samples)} responses from {args.model_name_or_path} at temperature {args.temperature:g}: "
        f"{accuracy:.3f} have the exact answer.",
        "",
    ]
    (output_dir / "reward_diagnostics_top_tokens.txt").write_text("\n".join(header + lines))
    groups = [f"{r['level']}: {r['group']}" for r in rows if r["reward"] == rows[0]["reward"]]
    bars = {label: [r["auroc"] for r in rows if r["reward"] == label] for label in rewards}
    png_path = plot_grouped_bars(
        groups,
        bars,
        output_dir / "reward_diagnostics.png",
        ylabel="AUROC (correct vs wrong)",
        title=f"Does the reward rank correct above wrong? (π_SFT samples, accuracy {accuracy:.2f})",
        reference_line=0.5,
    )
    print(f"π_SFT sample accuracy {accuracy:.3f}")
    print(f"{'reward':<32} " + " ".join(f"{g.split(': ')[1][:15]:>15}" for g in groups))
    for label, values in bars.items():
        print(f"{label:<32} " + " ".join(f"{v:>15.3f}" for v in values))
    print(f"\nWritten to {csv_path}, {png_path} and {output_dir / 'reward_diagnostics_top_tokens.txt'}", flush=True)


if __name__ == "__main__":
    main()
