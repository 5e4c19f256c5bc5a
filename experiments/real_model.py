"""A real pretrained LM through the whole package, and the question users ask first: does DPR beat SFT trained for
longer with the same compute?

    python -m experiments.real_model --config experiments/configs/real_model_smollm2.yaml            # CPU, resumable
    python -m experiments.real_model --config ... --stage train --only DPR-seed1 SR   # one worker of a parallel run

Pipeline (each stage reuses what an earlier run wrote, so an interrupted run continues):

    SFT (sft_config, π_ref at α)  →  preview of that SFT (λ grid)  →  DPR at the preview's λ, several seeds
      →  SR and wo/Baseline at the same λ  →  SFT continued from π_SFT for DPR's RL wall time
      →  evaluation of all against SFT on held-out prompts (exact answers)  →  credit assignment at slips

Reported in `<output_dir>/real_model.md` and `.json`: accuracy with 95% bootstrap CIs over prompts, each method's paired
gain over SFT and over SFT-continued, wall times and estimated FLOPs (N = parameter count: 6N per trained token, 2N per
forward token; a DPR token costs its generation 2N, π_SFT and π_ref scoring 4N, policy update 6N), the preview's
prediction next to each trained policy, and how often r̂ is lowest at the first wrong digit of a slipped computation.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from trl import ModelConfig, SFTConfig

from trl_dpr.evaluation import run_evaluation
from trl_dpr.evaluation.results import bootstrap_mean_ci
from trl_dpr.pipeline import SFTScriptArguments, has_sft_output, print_stage, run_sft
from trl_dpr.preview import PreviewConfig, PreviewReport, run_preview
from trl_dpr.recipe_parser import RecipeParser

from .overrides import DPR_ARGUMENTS, evaluation_config, parse_with_overrides
from .sweeps import train_variant, variant_settings

__all__ = ["RealModelArguments", "credit_at_slips", "main"]

STAGES = ("all", "sft", "preview", "train", "evaluate", "credit", "report")
ABLATIONS = {"SR": {"reward_granularity": "sentence"}, "wo/Baseline": {"use_baseline": False}}


@dataclass
class RealModelArguments:
    """Settings of `experiments/real_model.py`.

    Example:
        >>> RealModelArguments().dpr_seeds
        [0, 1, 2]
    """

    output_dir: str = field(default="runs/real_model", metadata={"help": "Every run of the experiment, and the report."})
    sft_config: str = field(default="recipes/smollm2-135m/sft/config_full.yaml", metadata={"help": "recipes/sft.py YAML."})
    sft_overrides: dict = field(
        default_factory=dict,
        metadata={"help": "Keys of the SFT recipe to change (e.g. {max_steps: 10, output_dir: ...}: a shorter SFT)."},
    )
    dpr_config: str = field(default="recipes/smollm2-135m/dpr/config_full.yaml", metadata={"help": "recipes/dpr.py YAML."})
    preview_config: str = field(default="recipes/preview/smollm2-135m.yaml", metadata={"help": "recipes/preview.py YAML."})
    evaluation_config: str = field(default="recipes/evaluate/smollm2-135m.yaml", metadata={"help": "recipes/evaluate.py YAML."})
    dpr_seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "DPR seeds (policy sampling, order)."})
    ablations: list[str] = field(default_factory=lambda: list(ABLATIONS), metadata={"help": f"Among {list(ABLATIONS)}."})
    kl_coef: float | None = field(default=None, metadata={"help": "DPR's λ; default: the preview's best finite λ."})
    sft_continued: bool = field(default=True, metadata={"help": "Train SFT further from π_SFT for DPR's RL wall time."})
    credit_prompts: int = field(default=64, metadata={"help": "Held-out prompts for the credit-assignment count."})
    credit_samples_per_prompt: int = field(default=4, metadata={"help": "π_SFT samples per prompt for it (T = 1)."})
    stage: str = field(default="all", metadata={"help": f"One of {STAGES}.", "choices": list(STAGES)})
    only: list[str] = field(
        default_factory=list, metadata={"help": "stage train / evaluate: only these runs (a worker of a parallel run)."}
    )

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {self.stage!r}.")
        unknown = [a for a in self.ablations if a not in ABLATIONS]
        if unknown:
            raise ValueError(f"Unknown ablations {unknown}; choose among {list(ABLATIONS)}.")


def _timings(output_dir: Path) -> dict:
    path = output_dir / "timings.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _record_timing(output_dir: Path, name: str, record: dict) -> None:
    from filelock import FileLock

    with FileLock(output_dir / "timings.json.lock"):  # parallel workers (--stage train --only ...) share the file
        timings = _timings(output_dir)
        timings[name] = record
        (output_dir / "timings.json").write_text(json.dumps(timings, indent=1))


def _sft(args: RealModelArguments, output_dir: Path, name: str, **overrides) -> str:
    """The SFT recipe into `<output_dir>/<name>` (skipped when finished), its wall time and tokens recorded."""
    from .overrides import to_command_line

    if name == "SFT":  # the recipe's own output (shared with `trl-dpr dpr --config` of the recipes) unless overridden
        overrides = {**args.sft_overrides, **overrides}
    else:
        overrides = {**overrides, "output_dir": str(output_dir / name)}
    argv = ["--config", args.sft_config, *to_command_line(overrides)]
    script_args, training_args, model_args = RecipeParser((SFTScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(argv)
    folder = training_args.output_dir
    if has_sft_output(str(folder)):
        return str(folder)
    start = time.perf_counter()
    tokens = []
    from transformers import TrainerCallback

    class Tokens(TrainerCallback):  # the trained tokens, for the FLOP estimate
        def on_log(self, _args, state, control, logs=None, **kwargs):
            if logs and "num_tokens" in logs:
                tokens.append(float(logs["num_tokens"]))

    run_sft(script_args, training_args, model_args, callbacks=[Tokens()])
    _record_timing(output_dir, name, {"wall_s": round(time.perf_counter() - start, 1), "steps": training_args.max_steps,
                                      "tokens": tokens[-1] if tokens else None})
    return str(folder)


def _preview(args: RealModelArguments, sft_path: str, output_dir: Path) -> PreviewReport:
    folder = output_dir / "preview"
    if (folder / "preview.json").is_file():
        return PreviewReport.read(folder / "preview.json")
    config, _ = RecipeParser((PreviewConfig, ModelConfig)).parse_args_and_config(["--config", args.preview_config])
    config.output_dir = str(folder)
    start = time.perf_counter()
    report = run_preview(config, sft_path, {"dtype": "float32"}, show_progress=False)
    _record_timing(output_dir, "preview", {"wall_s": round(time.perf_counter() - start, 1)})
    return report


def _chosen_lambda(args: RealModelArguments, report: PreviewReport) -> float:
    """The preview's best finite λ (its recommendation), unless `kl_coef` is given."""
    if args.kl_coef is not None:
        return args.kl_coef
    best = report.best("DPR")
    if math.isfinite(best.lam):
        return best.lam
    # The preview says no λ helps; DPR is still trained, at its least-bad trusted finite λ, to test that verdict.
    finite = [p for p in report.variant_points("DPR") if math.isfinite(p.lam) and p.lam > 0 and p.trusted]
    return max(finite, key=lambda p: p.delta).lam


def _runs(args: RealModelArguments) -> dict[str, dict]:
    runs = {f"DPR-seed{s}": {"seed": s} for s in args.dpr_seeds}
    runs.update({name: {"seed": args.dpr_seeds[0], **ABLATIONS[name]} for name in args.ablations})
    return runs


def _train(args: RealModelArguments, name: str, changes: dict, sft_path: str, lam: float, output_dir: Path):
    folder = output_dir / name.replace("/", "_")
    overrides = {**changes, "kl_coef": lam, "model_name_or_path": sft_path, "output_dir": str(folder)}
    script_args, training_args, model_args = parse_with_overrides(DPR_ARGUMENTS, ["--config", args.dpr_config], overrides)
    run = train_variant(name, script_args, training_args, model_args, variant_settings(script_args, training_args, model_args))
    if name not in _timings(output_dir):
        _record_timing(output_dir, name, {"wall_s": round(run.train_runtime_s, 1), "steps": training_args.max_steps,
                                          "batch": training_args.per_device_train_batch_size, **run.final_metrics})
    return run


def credit_at_slips(tokens: list[str], rewards: list[float]) -> tuple[bool, int] | None:
    """For a response with a slipped computation ("a op b = c", c wrong): is r̂ lowest at the first wrong digit of the
    first slipped c? Returns `(hit, number of response tokens)` (chance = 1 / tokens), or None without a slip.

    Example:
        >>> credit_at_slips(["2", " +", " 3", " =", " ", "6", "."], [0.1, 0.0, 0.2, 0.0, 0.1, -1.5, 0.0])
        (True, 7)
        >>> credit_at_slips(["2", " +", " 3", " =", " ", "5", "."], [0.1, 0.0, 0.2, 0.0, 0.1, -1.5, 0.0]) is None
        True
    """
    from .auroc import find_computed_numbers, token_char_spans

    spans = token_char_spans(tokens)
    for number in find_computed_numbers("".join(tokens)):
        if number.is_correct:
            continue
        truth = str(number.true_value)
        for i, (start, end) in enumerate(spans):
            if start < number.end and end > number.start:
                written_so_far = number.written[: min(end, number.end) - number.start]
                if not truth.startswith(written_so_far):  # the first token that departs from the true result
                    lowest = min(range(len(rewards)), key=lambda j: rewards[j])
                    return lowest == i, len(tokens)
        return None
    return None


def _credit(args: RealModelArguments, sft_path: str, output_dir: Path) -> dict:
    """π_SFT's samples at T = 1, scored three ways: r̂ with the recorded π_ref (α = 0.5), r̂ with the pretrained base
    as π_ref (α = 0), and log π_SFT alone (wo/Baseline). Per reward: how often it is lowest at the first wrong digit of
    a slipped computation, and the AUROC of its sum against the final answer's exactness (why a tilt helps or not)."""
    path = output_dir / "credit_assignment.json"
    if path.is_file():
        return json.loads(path.read_text())
    from trl_dpr import CheckpointRewardModel
    from trl_dpr.embedded.task import held_out_split, is_correct
    from trl_dpr.sampling import sample_completions, score_samples

    from .auroc import auroc

    start = time.perf_counter()
    rows = held_out_split(args.credit_prompts, seed=1)  # other prompts than the evaluation's (seed 0)
    reward_model = CheckpointRewardModel.from_pretrained(sft_path, dtype=torch.float32)
    tokenizer = reward_model.processing_class
    n = args.credit_samples_per_prompt
    prompts = [p for p in rows["prompt"] for _ in range(n)]
    answers = [a for a in rows["answer"] for _ in range(n)]
    samples = sample_completions(reward_model.sft_model, tokenizer, prompts, temperature=1.0, max_new_tokens=112,
                                 batch_size=32, seed=0)
    correct = [is_correct(s.text, a) for s, a in zip(samples, answers)]
    scored, mask = score_samples(reward_model, samples, batch_size=32)
    base = json.loads((Path(sft_path) / "dpr_reference.json").read_text()).get("base_model")  # what SFT started from
    rewards = {"r̂, π_ref at α = 0.5 (DPR)": scored.rewards, "log π_SFT alone (wo/Baseline)": scored.sft_logps}
    if base and Path(base).is_dir():
        from transformers import AutoModelForCausalLM

        base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        with_base = CheckpointRewardModel(reward_model.sft_model, base_model, processing_class=tokenizer)
        rewards["r̂, π_ref = the pretrained base (α = 0)"] = score_samples(with_base, samples, batch_size=32)[0].rewards
    record = {"responses": len(samples), "accuracy": sum(correct) / len(correct), "rewards": {}}
    for name, values in rewards.items():
        hits, chance, examples = [], [], []
        sums_right, sums_wrong = [], []
        for i, sample in enumerate(samples):
            length = int(mask[i].sum())
            tokens = [tokenizer.decode([t]) for t in sample.completion_ids[:length]]
            token_rewards = values[i, :length].tolist()
            (sums_right if correct[i] else sums_wrong).append(sum(token_rewards))
            result = credit_at_slips(tokens, token_rewards)
            if result is not None:
                hits.append(result[0])
                chance.append(1.0 / result[1])
                if len(examples) < 3:
                    lowest = min(range(length), key=lambda j: token_rewards[j])
                    examples.append({"response": sample.text, "lowest_token": tokens[lowest], "hit": result[0]})
        record["rewards"][name] = {
            "with_slip": len(hits), "lowest_at_slip": sum(hits), "rate": sum(hits) / len(hits) if hits else None,
            "chance": sum(chance) / len(chance) if chance else None,
            "sequence_auroc": auroc(sums_right, sums_wrong), "examples": examples,
        }
    record["wall_s"] = round(time.perf_counter() - start, 1)
    path.write_text(json.dumps(record, indent=1))
    return record


def _correct_by_prompt(evaluation_dir: Path, name: str) -> dict[str, list[float]]:
    """Exact-answer correctness of each cached answer of `name`, grouped by held-out prompt."""
    from trl_dpr.embedded.task import held_out_split, is_correct

    answers_file = evaluation_dir / "answers" / "demo" / f"{name.replace('/', '_')}.jsonl"
    records = [json.loads(line) for line in answers_file.read_text().splitlines() if line.strip()]
    split = held_out_split(len({r["prompt_id"].split("#")[0] for r in records}), seed=0)
    answer_of = {str(i): a for i, a in enumerate(split["answer"])}
    grouped: dict[str, list[float]] = {}
    for record in records:
        prompt_id = record["prompt_id"].split("#")[0]
        grouped.setdefault(prompt_id, []).append(float(is_correct(record["answer"], answer_of[prompt_id])))
    return grouped


def _paired(evaluation_dir: Path, method: str, baseline: str) -> dict:
    """Accuracy of `method` and its gain over `baseline`, per-prompt paired, with bootstrap 95% CIs."""
    a, b = _correct_by_prompt(evaluation_dir, method), _correct_by_prompt(evaluation_dir, baseline)
    ids = sorted(set(a) & set(b))
    acc = torch.tensor([sum(a[i]) / len(a[i]) for i in ids], dtype=torch.float64)
    base = torch.tensor([sum(b[i]) / len(b[i]) for i in ids], dtype=torch.float64)
    low, high = bootstrap_mean_ci(torch.stack([acc, acc - base]))
    return {"accuracy": float(acc.mean()), "accuracy_ci": [float(low[0]), float(high[0])],
            "gain": float((acc - base).mean()), "gain_ci": [float(low[1]), float(high[1])], "prompts": len(ids)}


def _parameters(path: str) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return sum(p.numel() for p in model.parameters())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    (args,) = RecipeParser((RealModelArguments,)).parse_args_and_config(argv)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    evaluation_config(args.evaluation_config)  # a bad evaluation YAML fails before any training
    everything = args.stage == "all"

    print_stage(1, 6, "SFT")
    sft_path = _sft(args, output_dir, "SFT")
    if args.stage == "sft":
        return
    print_stage(2, 6, "Preview")
    report = _preview(args, sft_path, output_dir)
    lam = _chosen_lambda(args, report)
    print(report.markdown(), f"\nλ for DPR: {lam}", flush=True)
    if args.stage == "preview":
        return

    runs = _runs(args)
    if everything or args.stage == "train":
        print_stage(3, 6, f"DPR ({len(args.dpr_seeds)} seeds) and {args.ablations} at λ = {lam}")
        wanted = args.only or [*runs, "SFT-continued"]
        for name in [n for n in runs if n in wanted]:
            _train(args, name, runs[name], sft_path, lam, output_dir)
        if args.sft_continued and "SFT-continued" in wanted:
            timings = _timings(output_dir)
            dpr_walls = [timings[n]["wall_s"] for n in runs if n.startswith("DPR") and n in timings]
            if not dpr_walls:
                raise ValueError("SFT-continued is sized by DPR's wall time: train a DPR seed first.")
            sft_step_s = timings["SFT"]["wall_s"] / timings["SFT"]["steps"]
            steps = max(1, round(sum(dpr_walls) / len(dpr_walls) / sft_step_s))
            print_stage(4, 6, f"SFT continued from π_SFT for DPR's wall time: {steps} steps")
            # Another data order (seed 1): the continuation sees demonstrations the first 40 steps did not.
            _sft(args, output_dir, "SFT-continued", model_name_or_path=sft_path, max_steps=steps, seed=1)
        if args.stage == "train":
            return

    names = [*runs, *(["SFT-continued"] if args.sft_continued else [])]
    folders = {n: str(output_dir / n.replace("/", "_")) for n in names}
    evaluation_dir = output_dir / "evaluation"
    if everything or args.stage == "evaluate":
        print_stage(5, 6, "Evaluation against SFT")
        chosen = {n: f for n, f in folders.items() if not args.only or n in args.only}  # a worker answers some models
        config = evaluation_config(args.evaluation_config, baseline=f"SFT={sft_path}",
                                   candidates=[f"{n}={f}" for n, f in chosen.items()], output_dir=str(evaluation_dir))
        run_evaluation(config, show_progress=False)
        if args.stage == "evaluate":
            return
    if everything or args.stage == "credit":
        print_stage(6, 6, "Credit assignment at slips")
        print(_credit(args, sft_path, output_dir), flush=True)
        if args.stage == "credit":
            return
    write_report(args, output_dir, report, lam, names, sft_path)


def write_report(args, output_dir: Path, report: PreviewReport, lam: float, names: list[str], sft_path: str) -> None:
    """`real_model.md` / `.json` from what the stages wrote."""
    evaluation_dir = output_dir / "evaluation"
    timings = _timings(output_dir)
    parameters = _parameters(sft_path)
    preview_gain = {p.lam: p for p in report.variant_points("DPR")}
    preview_wob = {p.lam: p for p in report.variant_points("wo/Baseline")}
    rows = [{"method": "SFT", **_paired(evaluation_dir, "SFT", "SFT")}]
    for name in names:
        row = {"method": name, **_paired(evaluation_dir, name, "SFT")}
        if "SFT-continued" in names and name != "SFT-continued":
            vs = _paired(evaluation_dir, name, "SFT-continued")
            row["gain_vs_sft_continued"], row["gain_vs_sft_continued_ci"] = vs["gain"], vs["gain_ci"]
        if name != "SFT-continued":
            point = (preview_wob if name == "wo/Baseline" and preview_wob else preview_gain).get(lam)
            if point is not None:
                row["preview_gain"], row["preview_gain_ci"] = point.delta, [point.delta_ci_low, point.delta_ci_high]
        row.update({k: v for k, v in timings.get(name, {}).items() if k in ("wall_s", "steps", "kl_sft", "tokens")})
        rows.append(row)
    credit = json.loads((output_dir / "credit_assignment.json").read_text()) if (output_dir / "credit_assignment.json").is_file() else None
    result = {"settings": asdict(args), "lambda": lam, "parameters": parameters, "rows": rows, "timings": timings,
              "credit_assignment": credit, "preview": report.summary_rows()}
    (output_dir / "real_model.json").write_text(json.dumps(result, indent=1, default=str))

    def pct(x):
        return f"{100 * x:.1f}"

    def ci(pair):
        return f"({pct(pair[0])} to {pct(pair[1])})"

    lines = ["| method | accuracy % (95% CI) | gain vs SFT, points (95% CI) | gain vs SFT-continued | preview's predicted gain | "
             "training wall (min) |", "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['method']} | {pct(row['accuracy'])} {ci(row['accuracy_ci'])} | "
            + (f"{pct(row['gain'])} {ci(row['gain_ci'])}" if row["method"] != "SFT" else "—") + " | "
            + (f"{pct(row['gain_vs_sft_continued'])} {ci(row['gain_vs_sft_continued_ci'])}" if "gain_vs_sft_continued" in row else "—") + " | "
            + (f"{pct(row['preview_gain'])} {ci(row['preview_gain_ci'])}" if "preview_gain" in row else "—") + " | "
            + (f"{row['wall_s'] / 60:.1f}" if "wall_s" in row else f"{timings.get('SFT', {}).get('wall_s', math.nan) / 60:.1f}") + " |"
        )
    if credit:
        lines += ["", f"Credit assignment on {credit['responses']} π_SFT samples at T = 1 ({pct(credit['accuracy'])}% correct):", "",
                  "| reward | answers with a slip | r̂ lowest at the slip | chance | AUROC of Σ reward vs exactness |",
                  "|---|---|---|---|---|"]
        for name, r in credit["rewards"].items():
            rate = "—" if r["rate"] is None else f"{pct(r['rate'])}%"
            chance = "—" if r["chance"] is None else f"{pct(r['chance'])}%"
            lines.append(f"| {name} | {r['with_slip']} | {rate} | {chance} | {r['sequence_auroc']:.3f} |")
    lines.append(f"\nλ (kl_coef) = {lam}; N = {parameters / 1e6:.1f}M parameters.")
    text = "\n".join(lines) + "\n"
    (output_dir / "real_model.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
