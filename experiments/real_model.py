"""Does DPR add to a real SFT model that has used its demonstrations, beyond more SFT or plain sharpening?

SmolLM2-135M-Instruct on the embedded task, in the paper's learning-from-demonstrations regime:

    python -m experiments.real_model --config experiments/configs/real_model_lfd.yaml          # CPU, resumable
    python -m experiments.real_model --config ... --stage train --only DPR-seed1 SR            # one worker

Stages (each writes what it produces and is skipped when that is there, so a stopped run resumes):

    data      one fixed demonstration set D (`demonstrations.jsonl`), the preview's and the evaluation's prompts
    sft       SFT over D for several epochs (constant learning rate after warm-up); π_ref at α = 0.25, 0.5, 0.75
              of the samples, the Σ lr reached at each, held-out loss after each epoch
    preview   π_SFT's samples scored by DPR at each α, wo/Baseline (sharpening) and the oracle: λ and α chosen here,
              before any RL, with the KL per response of the chosen π_λ as DPR's target
    train     DPR (seeds) on D's prompts until its KL per response reaches that target (or `max_steps`); SR and
              wo/Baseline for DPR's mean number of steps; SFT continued on D from π_SFT, saved at DPR's mean wall time
              and at DPR's mean FLOPs
    evaluate  every policy on `eval_prompts` held-out prompts at T = 1, T = 0.7 and greedily, one shared sampling seed;
              at T = 1 also its KL to π_SFT per response, on its own samples
    report    `real_model.md` / `.json`: paired gains over π_SFT (bootstrap over prompts), the sharpening controls
              (π_SFT itself at T = 0.7 and greedy), each policy's KL next to the preview's prediction at that KL

FLOPs, N = parameter count: a trained token costs 6N, a forward token 2N. SFT: 6N per token. A DPR step: generation
2N per prompt and completion token, one 2N forward per frozen scorer (π_SFT and π_ref; wo/Baseline has π_SFT only),
and the policy update 6N.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

__all__ = [
    "RealModelArguments",
    "dpr_step_flops",
    "interpolate_at_kl",
    "lr_share",
    "matched_steps",
    "per_response_kl",
    "main",
]

STAGES = ("all", "data", "sft", "preview", "train", "evaluate", "report")
ABLATIONS = {"SR": {"reward_granularity": "sentence"}, "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}}
DECODINGS = {"T=1": 1.0, "T=0.7": 0.7, "greedy": 0.0}


def _reads_reference(changes: dict) -> bool:
    """Whether the reward these recipe changes name reads π_ref (DPR's does; wo/Baseline's does not)."""
    from trl_dpr.rewards import reward_from_settings

    return "ref" in reward_from_settings(changes).model_names


@dataclass
class RealModelArguments:
    """Settings of `experiments/real_model.py` (`experiments/configs/real_model_lfd.yaml`).

    Example:
        >>> RealModelArguments().alphas
        [0.25, 0.5, 0.75]
    """

    output_dir: str = field(
        default="runs/real_model_lfd", metadata={"help": "Every run of the experiment, and the report."}
    )
    sft_config: str = field(
        default="experiments/configs/real_model_lfd/sft.yaml", metadata={"help": "SFT recipe YAML."}
    )
    dpr_config: str = field(
        default="experiments/configs/real_model_lfd/dpr.yaml", metadata={"help": "DPR recipe YAML."}
    )
    num_demonstrations: int = field(default=160, metadata={"help": "|D|: demonstrations every method learns from."})
    sft_epochs: int = field(default=3, metadata={"help": "Passes of SFT over D."})
    alphas: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 0.75], metadata={"help": "π_ref fractions previewed."}
    )
    preview_prompts: int = field(
        default=64, metadata={"help": "Held-out prompts of the preview (not the evaluation's)."}
    )
    preview_samples: int = field(default=8, metadata={"help": "π_SFT samples per preview prompt (T = 1)."})
    lambdas: list[float] = field(
        default_factory=lambda: [math.inf, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.0],
        metadata={"help": "The preview's λ grid."},
    )
    kl_coef: float | None = field(default=None, metadata={"help": "DPR's λ; default: the preview's best trusted λ."})
    alpha: float | None = field(default=None, metadata={"help": "DPR's α; default: the preview's best."})
    dpr_seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "DPR seeds."})
    ablations: list[str] = field(
        default_factory=lambda: list(ABLATIONS), metadata={"help": f"Among {list(ABLATIONS)}."}
    )
    probe_lambdas: list[float] = field(
        default_factory=list,
        metadata={
            "help": "Extra DPR runs (seed 0, α chosen, all max_steps, no KL stop) at these λ: the preview's "
            "prediction tested farther from π_SFT than the chosen point."
        },
    )
    earlier_runs: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Runs kept from an earlier setting of this experiment (their folders and evaluations are "
            "there): reported beside the current ones, never trained or evaluated again."
        },
    )
    kl_window: int = field(
        default=4, metadata={"help": "DPR stops when the mean KL per response of this many steps reaches the target."}
    )
    eval_prompts: int = field(default=400, metadata={"help": "Held-out prompts of the evaluation."})
    max_new_tokens: int = field(default=96, metadata={"help": "Longest answer (evaluation and preview)."})
    eval_batch_size: int = field(default=50, metadata={"help": "Prompts per generate call."})
    decodings: list[str] = field(
        default_factory=lambda: list(DECODINGS),
        metadata={"help": f"evaluate: these decodings only (a worker), among {list(DECODINGS)}."},
    )
    stage: str = field(default="all", metadata={"help": f"One of {STAGES}.", "choices": list(STAGES)})
    only: list[str] = field(default_factory=list, metadata={"help": "train / evaluate: only these runs (a worker)."})

    def __post_init__(self):
        unknown = [a for a in self.ablations if a not in ABLATIONS]
        if unknown:
            raise ValueError(f"Unknown ablations {unknown}; choose among {list(ABLATIONS)}.")
        if unknown := [d for d in self.decodings if d not in DECODINGS]:
            raise ValueError(f"Unknown decodings {unknown}; choose among {list(DECODINGS)}.")
        if 0.5 not in self.alphas or any(not 0 < a < 1 for a in self.alphas):
            raise ValueError(f"alphas must lie in (0, 1) and include the paper's 0.5, got {self.alphas}.")


# ---- pure pieces (tested on hand-computed numbers) ------------------------------------------------------------------


def lr_share(learning_rates: list[float], step: int) -> float:
    """Σ lr of the first `step` optimizer steps over Σ lr of all of them: how much of SFT's learning π_ref has had.

    Example:
        >>> lr_share([1.0, 2.0, 2.0, 2.0, 1.0], 2)
        0.375
    """
    return sum(learning_rates[:step]) / sum(learning_rates)


def matched_steps(budget: float, cost_per_step: float) -> int:
    """Steps of SFT that spend `budget` (seconds or FLOPs) at `cost_per_step` each (at least 1).

    Example:
        >>> matched_steps(1000.0, 30.0), matched_steps(10.0, 30.0)
        (33, 1)
    """
    if cost_per_step <= 0:
        raise ValueError(f"cost_per_step must be positive, got {cost_per_step}.")
    return max(1, round(budget / cost_per_step))


def dpr_step_flops(parameters: int, tokens: float, frozen_scorers: int) -> float:
    """FLOPs of DPR on `tokens` prompt + completion tokens: generation 2N, each frozen scorer 2N, the update 6N.

    Example:
        >>> dpr_step_flops(10, 100, 2)  # (2 + 2·2 + 6) · 10 · 100
        12000.0
    """
    return float((2 + 2 * frozen_scorers + 6) * parameters * tokens)


def per_response_kl(policy_logps: torch.Tensor, sft_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""KL(π_θ ‖ π_SFT) per response, estimated on π_θ's own samples: Σ_t log π_θ(a_t|s_t) − log π_SFT(a_t|s_t).

    Example:
        >>> per_response_kl(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -9.0]]), torch.tensor([[1, 0]]))
        tensor([0.5000], dtype=torch.float64)
    """
    return ((policy_logps.double() - sft_logps.double()) * mask).sum(dim=1)


def interpolate_at_kl(points: list[tuple[float, float]], kl: float) -> float | None:
    """The preview's gain at KL `kl`, linear between its (kl, gain) points; None beyond its largest KL.

    Example:
        >>> round(interpolate_at_kl([(0.0, 0.0), (1.0, 0.1), (3.0, 0.5)], 2.0), 6)
        0.3
        >>> interpolate_at_kl([(0.0, 0.0), (1.0, 0.1)], 5.0) is None
        True
    """
    points = sorted(points)
    kl = max(kl, 0.0)
    for (k0, g0), (k1, g1) in zip(points, points[1:]):
        if k0 <= kl <= k1:
            return g0 if k1 == k0 else g0 + (g1 - g0) * (kl - k0) / (k1 - k0)
    return None


# ---- stages ---------------------------------------------------------------------------------------------------------


def _read(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _write(path: Path, value) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    tmp.replace(path)  # atomic: a stopped stage leaves no half-written record


def _record_timing(output_dir: Path, name: str, record: dict) -> None:
    from filelock import FileLock

    with FileLock(output_dir / "timings.json.lock"):  # parallel workers share the file
        timings = _read(output_dir / "timings.json") or {}
        timings[name] = record
        _write(output_dir / "timings.json", timings)


def _data(args: RealModelArguments, output_dir: Path) -> Path:
    """D: the first `num_demonstrations` rows of the embedded train split (seed 0), as a file every stage reads."""
    from trl_dpr.embedded.task import build_demo_dataset

    path = output_dir / "demonstrations.jsonl"
    if not path.is_file():
        train = build_demo_dataset(num_train=args.num_demonstrations, seed=0)["train"]
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as f:
            for row in train:
                f.write(json.dumps(row) + "\n")
        tmp.replace(path)
    return path


def _held_out(args: RealModelArguments):
    """(evaluation rows, preview rows): disjoint slices of the held-out split, never in D."""
    from trl_dpr.embedded.task import held_out_split

    rows = held_out_split(args.eval_prompts + args.preview_prompts, seed=0)
    return rows.select(range(args.eval_prompts)), rows.select(range(args.eval_prompts, len(rows)))


def _sft_recipe(args: RealModelArguments, data: Path, overrides: dict):
    from trl import ModelConfig, SFTConfig

    from trl_dpr.running.pipeline import SFTScriptArguments
    from trl_dpr.running.recipe_parser import RecipeParser

    from .overrides import to_command_line

    argv = ["--config", args.sft_config, *to_command_line({"dataset_name": str(data), **overrides})]
    return RecipeParser((SFTScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(argv)


def _sft_steps_per_epoch(args: RealModelArguments, batch_size: int) -> int:
    return math.ceil(args.num_demonstrations / batch_size)


def _sft(args: RealModelArguments, output_dir: Path, data: Path) -> str:
    """SFT over D for `sft_epochs`; π_ref at every α; per-step learning rates and per-epoch held-out loss recorded."""
    from transformers import TrainerCallback

    from trl_dpr.running.pipeline import has_sft_output, run_sft

    folder = output_dir / "SFT"
    record_path = output_dir / "sft_record.json"
    if has_sft_output(str(folder)) and record_path.is_file():
        return str(folder)
    script_args, training_args, model_args = _sft_recipe(args, data, {"output_dir": str(folder)})
    steps = args.sft_epochs * _sft_steps_per_epoch(args, training_args.per_device_train_batch_size)
    training_args.max_steps = steps
    eval_rows, _ = _held_out(args)
    held_out = [list(r["prompt"]) + list(r["completion"]) for r in eval_rows.select(range(min(64, len(eval_rows))))]
    record = {"steps": steps, "learning_rates": [], "held_out_loss": {}, "reference_steps": {}, "tokens": None}

    class Recorder(TrainerCallback):
        """Learning rate per step, extra π_ref checkpoints, held-out loss after each epoch, trained tokens."""

        def on_step_begin(self, _args, state, control, lr_scheduler=None, **kw):
            record["learning_rates"].append(float(lr_scheduler.get_last_lr()[0]))  # the rate this step uses

        def on_step_end(self, _args, state, control, model=None, processing_class=None, **kw):
            for alpha in args.alphas:
                if alpha != 0.5 and state.global_step == math.floor(alpha * steps):
                    model.save_pretrained(folder / f"reference_alpha{alpha}")
                    processing_class.save_pretrained(folder / f"reference_alpha{alpha}")
                    record["reference_steps"][str(alpha)] = state.global_step
            if state.global_step % _sft_steps_per_epoch(args, training_args.per_device_train_batch_size) == 0:
                record["held_out_loss"][str(state.global_step)] = _held_out_loss(model, processing_class, held_out)

        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "num_tokens" in logs:
                record["tokens"] = float(logs["num_tokens"])

    start = time.perf_counter()
    run_sft(script_args, training_args, model_args, callbacks=[Recorder()])
    record["wall_s"] = round(time.perf_counter() - start, 1)
    record["reference_steps"]["0.5"] = math.floor(0.5 * steps)
    record["lr_share_at_reference"] = {
        a: lr_share(record["learning_rates"], s) for a, s in record["reference_steps"].items()
    }
    _write(record_path, record)
    _record_timing(output_dir, "SFT", {"wall_s": record["wall_s"], "steps": steps, "tokens": record["tokens"]})
    return str(folder)


@torch.no_grad()
def _held_out_loss(model, tokenizer, conversations: list, batch_size: int = 16) -> float:
    """Mean NLL per response token of held-out demonstrations (the assistant turn only)."""
    from trl_dpr.reward_model import completion_logprobs
    from trl_dpr.token_batches import pad_batch, render_prompts

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(conversations), batch_size):
        batch = conversations[start : start + batch_size]
        prompts = render_prompts(tokenizer, [c[:-1] for c in batch])
        full = [tokenizer.apply_chat_template(c, tokenize=True, return_dict=False) for c in batch]
        completions = [f[len(p) :] for f, p in zip(full, prompts)]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        padded = pad_batch(prompts, completions, pad)
        logps, _, _ = completion_logprobs(
            model, padded.prompt_ids, padded.prompt_mask, padded.completion_ids, padded.completion_mask
        )
        total += float(-(logps * padded.completion_mask).sum())
        count += int(padded.completion_mask.sum())
    model.train(was_training)
    return total / count


def _reference_path(sft_path: str, alpha: float) -> str | None:
    """π_ref at α: the recorded reference for 0.5 (None: the manifest's), else the extra checkpoint."""
    return None if alpha == 0.5 else str(Path(sft_path) / f"reference_alpha{alpha}")


def _preview(args: RealModelArguments, sft_path: str, output_dir: Path):
    from trl_dpr.analysis.preview import PreviewConfig, PreviewReport, run_preview

    folder = output_dir / "preview"
    if (folder / "preview.json").is_file():
        return PreviewReport.read(folder / "preview.json")
    _, preview_rows = _held_out(args)
    prompts_file = output_dir / "preview_prompts.jsonl"
    with prompts_file.open("w") as f:
        for row in preview_rows:
            f.write(json.dumps(row) + "\n")
    variants = {
        f"DPR α={a}": ({} if a == 0.5 else {"ref_model_name_or_path": _reference_path(sft_path, a)})
        for a in args.alphas
    }
    variants.update({"wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}, "oracle": {"oracle": True}})
    config = PreviewConfig(
        output_dir=str(folder),
        dataset_name=str(prompts_file),
        dataset_split="train",
        num_prompts=args.preview_prompts,
        samples_per_prompt=args.preview_samples,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.eval_batch_size,
        kl_coefs=args.lambdas,
        variants=variants,
        quality="exact",
        seed=0,
        plot=False,
    )
    start = time.perf_counter()
    report = run_preview(config, sft_path, {"dtype": "float32"}, show_progress=False)
    _record_timing(output_dir, "preview", {"wall_s": round(time.perf_counter() - start, 1)})
    return report


def choose(args: RealModelArguments, report) -> dict:
    """α, λ and the target KL per response from the preview: the DPR point (over α and finite λ > 0, trusted ESS) with
    the largest gain, unless `alpha` / `kl_coef` are given; `train` is False when that gain is not above 0."""
    candidates = []
    for alpha in args.alphas:
        if args.alpha is not None and alpha != args.alpha:
            continue
        for point in report.variant_points(f"DPR α={alpha}"):
            if math.isfinite(point.lam) and point.lam > 0 and point.trusted:
                if args.kl_coef is None or point.lam == args.kl_coef:
                    candidates.append((point.delta, alpha, point))
    if not candidates:
        raise ValueError("The preview has no trusted finite λ for the asked α / kl_coef: widen the λ grid.")
    _, alpha, point = max(candidates, key=lambda c: c[0])
    # A procedure that picks a setting must be able to answer "none": the least-bad loss is no reason to train.
    return {
        "alpha": alpha,
        "lambda": point.lam,
        "target_kl": point.kl,
        "preview_gain": point.delta,
        "preview_gain_ci": [point.delta_ci_low, point.delta_ci_high],
        "train": point.delta > 0,
        "verdict": "train DPR" if point.delta > 0 else "do not train DPR: no λ is predicted to beat π_SFT",
    }


def _dpr_recipe(args: RealModelArguments, data: Path, overrides: dict):
    from .overrides import DPR_ARGUMENTS, parse_with_overrides

    return parse_with_overrides(DPR_ARGUMENTS, ["--config", args.dpr_config], {"dataset_name": str(data), **overrides})


def _train_dpr(
    args,
    name: str,
    changes: dict,
    sft_path: str,
    choice: dict,
    data: Path,
    output_dir: Path,
    max_steps: int | None = None,
    stop_at_kl: bool = True,
) -> dict:
    """One RL run on D's prompts, stopped when its KL per response (mean of `kl_window` steps) reaches the target."""
    from transformers import TrainerCallback

    from trl_dpr.running.pipeline import run_dpr

    folder = output_dir / name.replace("/", "_")
    record_path = folder / "rl_record.json"
    if (recorded := _read(record_path)) is not None:
        return recorded
    overrides = {
        "kl_coef": choice["lambda"],
        **changes,
        "model_name_or_path": sft_path,
        "output_dir": str(folder),
        "overwrite_output_dir": True,
    }
    if _reads_reference(changes) and (ref := _reference_path(sft_path, choice["alpha"])):
        overrides["ref_model_name_or_path"] = ref
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    script_args, training_args, model_args = _dpr_recipe(args, data, overrides)
    history: list[dict] = []

    class StopAtTargetKL(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kw):
            if not logs or "kl_sft/per_response" not in logs:
                return
            history.append(
                {"step": state.global_step, **{k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}}
            )
            recent = [h["kl_sft/per_response"] for h in history[-args.kl_window :]]
            if stop_at_kl and len(recent) == args.kl_window and sum(recent) / len(recent) >= choice["target_kl"]:
                control.should_training_stop = True

    start = time.perf_counter()
    trainer = run_dpr(script_args, training_args, model_args, callbacks=[StopAtTargetKL()])
    wall = time.perf_counter() - start
    steps = trainer.state.global_step
    train_runtime = next(
        (h["train_runtime"] for h in reversed(trainer.state.log_history) if "train_runtime" in h), wall
    )
    tokens = next((h["num_tokens"] for h in reversed(trainer.state.log_history) if "num_tokens" in h), None)
    recent = [h["kl_sft/per_response"] for h in history[-args.kl_window :]]
    record = {
        "name": name,
        "steps": steps,
        "max_steps": training_args.max_steps,
        "train_runtime_s": round(train_runtime, 1),
        "tokens": tokens,
        "frozen_scorers": 2 if _reads_reference(changes) else 1,
        "stops_at_target": stop_at_kl,
        "reached_target": bool(recent) and sum(recent) / len(recent) >= choice["target_kl"],
        "final_kl_per_response": sum(recent) / len(recent) if recent else None,
        "history": history,
    }
    del trainer
    _write(record_path, record)
    _record_timing(output_dir, name, {"wall_s": record["train_runtime_s"], "steps": steps, "tokens": tokens})
    return record


def _sft_continued(args, output_dir: Path, data: Path, sft_path: str, dpr_records: list[dict]) -> dict:
    """SFT continued on D from π_SFT (fresh AdamW, the SFT's constant learning rate), saved at DPR's mean wall time and
    at DPR's mean FLOPs (whichever comes later ends the run)."""
    from transformers import TrainerCallback

    from trl_dpr.running.pipeline import run_sft

    path = output_dir / "sft_continued_record.json"
    if (recorded := _read(path)) is not None:
        return recorded
    sft = _read(output_dir / "sft_record.json")
    parameters = _parameters(sft_path)
    sft_step_s = sft["wall_s"] / sft["steps"]
    sft_step_flops = 6 * parameters * sft["tokens"] / sft["steps"]
    dpr_wall = sum(r["train_runtime_s"] for r in dpr_records) / len(dpr_records)
    dpr_flops = sum(dpr_step_flops(parameters, r["tokens"], r["frozen_scorers"]) for r in dpr_records) / len(
        dpr_records
    )
    targets = {
        "SFT-continued (wall)": matched_steps(dpr_wall, sft_step_s),
        "SFT-continued (FLOPs)": matched_steps(dpr_flops, sft_step_flops),
    }
    folder = output_dir / "SFT-continued"
    script_args, training_args, model_args = _sft_recipe(
        args,
        data,
        {
            "output_dir": str(folder),
            "model_name_or_path": sft_path,
            "seed": 1,
            "warmup_steps": 0,
            "lr_scheduler_type": "constant",
        },
    )
    if folder.exists():  # a stopped continuation is restarted: its saves are cheap to redo, a mixed one is not
        __import__("shutil").rmtree(folder)
    training_args.max_steps = max(targets.values())

    class SaveAt(TrainerCallback):
        def on_step_end(self, _args, state, control, model=None, processing_class=None, **kw):
            for name, step in targets.items():
                if state.global_step == step:
                    target = output_dir / name.replace(" ", "_").replace("(", "").replace(")", "")
                    model.save_pretrained(target)
                    processing_class.save_pretrained(target)

    start = time.perf_counter()
    run_sft(script_args, training_args, model_args, callbacks=[SaveAt()])
    record = {
        "targets": targets,
        "dpr_mean_wall_s": dpr_wall,
        "dpr_mean_flops": dpr_flops,
        "sft_step_s": sft_step_s,
        "sft_step_flops": sft_step_flops,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    _write(path, record)
    return record


def _policy_folder(output_dir: Path, name: str) -> Path:
    return output_dir / name.replace("/", "_").replace(" ", "_").replace("(", "").replace(")", "")


def _evaluate(args, output_dir: Path, name: str, path: str, sft_path: str, rows=None) -> dict:
    """`name`'s answers at every decoding (one shared seed), their exactness, and at T = 1 its KL per response.
    `rows`: the evaluation's prompts (default: the first `args.eval_prompts` of the held-out split)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_dpr.embedded.task import is_correct
    from trl_dpr.evaluation.sampling import policy_logprobs, sample_completions

    result_path = output_dir / "evaluation" / f"{_policy_folder(output_dir, name).name}.json"
    result = _read(result_path) or {}
    if all(d in result for d in args.decodings):
        return result
    result_path.parent.mkdir(parents=True, exist_ok=True)
    rows = _held_out(args)[0] if rows is None else rows
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["kind"], i))  # like lengths batched together
    prompts = [rows[i]["prompt"] for i in order]
    answers = [rows[i]["answer"] for i in order]
    tokenizer = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    sft = policy if path == sft_path else AutoModelForCausalLM.from_pretrained(sft_path, dtype=torch.float32)
    for decoding, temperature in DECODINGS.items():
        if decoding in result or decoding not in args.decodings:
            continue
        start = time.perf_counter()
        samples = sample_completions(
            policy,
            tokenizer,
            prompts,
            temperature=temperature,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.eval_batch_size,
            seed=0,
        )
        entry = {
            "correct": {str(order[i]): float(is_correct(s.text, answers[i])) for i, s in enumerate(samples)},
            "mean_length": sum(len(s.completion_ids) for s in samples) / len(samples),
            "length": {str(order[i]): len(s.completion_ids) for i, s in enumerate(samples)},
            "examples": [s.text for s in samples[:: max(1, len(samples) // 5)]][:5],
        }
        if temperature == 1.0:
            own = policy_logprobs(policy, tokenizer, samples, batch_size=args.eval_batch_size)
            reference = (
                own if sft is policy else policy_logprobs(sft, tokenizer, samples, batch_size=args.eval_batch_size)
            )
            mask = torch.zeros_like(own)
            for i, s in enumerate(samples):
                mask[i, : len(s.completion_ids)] = 1.0
            kl = per_response_kl(own, reference, mask)
            entry["kl_per_response"] = {str(order[i]): float(v) for i, v in enumerate(kl)}
            entry["kl_per_token"] = float(kl.sum() / mask.sum())
            # -log π(y|x) of a sample drawn from π at T = 1: an unbiased estimate of the response's entropy, free here
            entropy = -(own * mask).sum(-1)
            entry["entropy_per_response"] = {str(order[i]): float(v) for i, v in enumerate(entropy)}
        entry["wall_s"] = round(time.perf_counter() - start, 1)
        result = {**(_read(result_path) or {}), decoding: entry}  # another worker may have added a decoding meanwhile
        _write(result_path, result)
    return result


def _parameters(path: str) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return sum(p.numel() for p in model.parameters())


def _policies(args: RealModelArguments, output_dir: Path, sft_path: str) -> dict[str, str]:
    names = (
        [f"DPR-seed{s}" for s in args.dpr_seeds]
        + [f"DPR-λ{lam:g}" for lam in args.probe_lambdas]
        + list(args.ablations)
    )
    policies = {"SFT": sft_path, **{n: str(_policy_folder(output_dir, n)) for n in names}}
    for name in ("SFT-continued (wall)", "SFT-continued (FLOPs)", *args.earlier_runs):
        policies[name] = str(_policy_folder(output_dir, name))
    return policies


def main(argv=None):
    from trl_dpr.running.pipeline import print_stage
    from trl_dpr.running.recipe_parser import RecipeParser

    argv = list(sys.argv[1:] if argv is None else argv)
    (args,) = RecipeParser((RealModelArguments,)).parse_args_and_config(argv)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    every = args.stage == "all"

    print_stage(1, 6, "D and the held-out prompts")
    data = _data(args, output_dir)
    if args.stage == "data":
        return
    print_stage(2, 6, f"SFT over D ({args.num_demonstrations} demonstrations × {args.sft_epochs} epochs)")
    sft_path = _sft(args, output_dir, data)
    if args.stage == "sft":
        return
    policies = _policies(args, output_dir, sft_path)
    if args.stage == "evaluate":  # needs no preview: π_SFT's evaluation can run beside it
        print_stage(5, 6, f"Evaluation on {args.eval_prompts} held-out prompts: {list(DECODINGS)}")
        for name, path in policies.items():
            if (not args.only or name in args.only) and name not in args.earlier_runs and Path(path).is_dir():
                _evaluate(args, output_dir, name, path, sft_path)
        return
    print_stage(3, 6, "Preview: α, λ and the target KL")
    report = _preview(args, sft_path, output_dir)
    choice = choose(args, report)
    _write(output_dir / "choice.json", choice)
    print(report.markdown(), f"\nChosen: {choice}", flush=True)
    if args.stage == "preview":
        return

    if (every or args.stage == "train") and not choice["train"] and args.kl_coef is None:
        raise SystemExit(
            f"The preview says: {choice['verdict']} (best predicted gain {100 * choice['preview_gain']:+.1f} "
            "points). Pass --kl_coef to train at a λ of your choice anyway."
        )
    if every or args.stage == "train":
        print_stage(
            4,
            6,
            f"RL on D's prompts at α = {choice['alpha']}, λ = {choice['lambda']}, until KL ≥ {choice['target_kl']:.3f}",
        )
        wanted = args.only or [
            *(f"DPR-seed{s}" for s in args.dpr_seeds),
            *(f"DPR-λ{lam:g}" for lam in args.probe_lambdas),
            *args.ablations,
            "SFT-continued",
        ]
        dpr = [
            _train_dpr(args, f"DPR-seed{s}", {"seed": s}, sft_path, choice, data, output_dir)
            for s in args.dpr_seeds
            if f"DPR-seed{s}" in wanted
        ]
        done = [_read(_policy_folder(output_dir, f"DPR-seed{s}") / "rl_record.json") for s in args.dpr_seeds]
        done = [d for d in done if d]
        for name in [a for a in args.ablations if a in wanted]:
            if not done:
                raise ValueError(f"{name} trains for DPR's mean number of steps: train a DPR seed first.")
            steps = round(sum(d["steps"] for d in done) / len(done))
            _train_dpr(
                args,
                name,
                {"seed": args.dpr_seeds[0], **ABLATIONS[name]},
                sft_path,
                choice,
                data,
                output_dir,
                max_steps=steps,
                stop_at_kl=False,
            )
        for lam in args.probe_lambdas:
            if f"DPR-λ{lam:g}" in wanted:
                _train_dpr(
                    args,
                    f"DPR-λ{lam:g}",
                    {"seed": args.dpr_seeds[0], "kl_coef": lam},
                    sft_path,
                    choice,
                    data,
                    output_dir,
                    stop_at_kl=False,
                )
        if "SFT-continued" in wanted:
            if len(done) < len(args.dpr_seeds):
                raise ValueError(
                    "SFT-continued is matched to DPR's mean wall time and FLOPs: train every DPR seed first."
                )
            print(_sft_continued(args, output_dir, data, sft_path, done), flush=True)
        del dpr
        if args.stage == "train":
            return

    if every:
        print_stage(5, 6, f"Evaluation on {args.eval_prompts} held-out prompts: {list(DECODINGS)}")
        for name, path in policies.items():
            if name not in args.earlier_runs and Path(path).is_dir():
                _evaluate(args, output_dir, name, path, sft_path)
    print_stage(6, 6, "Report")
    write_report(args, output_dir, report, choice, policies, sft_path)


# ---- report ---------------------------------------------------------------------------------------------------------


def paired_gain(method: dict[str, float], baseline: dict[str, float], seed: int = 0) -> dict:
    """Mean of `method` and its gain over `baseline`, paired by prompt id, with 95% bootstrap intervals over prompts.

    Example:
        >>> r = paired_gain({"0": 1.0, "1": 1.0, "2": 0.0}, {"0": 1.0, "1": 0.0, "2": 0.0})
        >>> round(r["mean"], 4), round(r["gain"], 4), r["prompts"]
        (0.6667, 0.3333, 3)
    """
    from trl_dpr.evaluation.results import bootstrap_mean_ci

    ids = sorted(set(method) & set(baseline), key=int)
    a = torch.tensor([method[i] for i in ids], dtype=torch.float64)
    b = torch.tensor([baseline[i] for i in ids], dtype=torch.float64)
    low, high = bootstrap_mean_ci(torch.stack([a, a - b]), seed=seed)
    return {
        "mean": float(a.mean()),
        "ci": [float(low[0]), float(high[0])],
        "gain": float((a - b).mean()),
        "gain_ci": [float(low[1]), float(high[1])],
        "prompts": len(ids),
    }


def write_report(args, output_dir: Path, report, choice: dict, policies: dict[str, str], sft_path: str) -> None:
    """`real_model.md` / `.json` from what the stages wrote."""
    results = {n: _read(output_dir / "evaluation" / f"{_policy_folder(output_dir, n).name}.json") for n in policies}
    results = {n: r for n, r in results.items() if r and "T=1" in r}  # T = 1 gives the KL; other decodings optional
    if "SFT" not in results:
        raise ValueError("The report needs π_SFT's evaluation: run --stage evaluate first.")
    sft_record = _read(output_dir / "sft_record.json")
    continued = _read(output_dir / "sft_continued_record.json") or {}
    rl = {n: _read(_policy_folder(output_dir, n) / "rl_record.json") for n in policies}
    timings = _read(output_dir / "timings.json") or {}
    curves = {
        v: [(p.kl, p.delta) for p in report.variant_points(v) if p.lam > 0 or math.isinf(p.lam)]
        for v in {p.variant for p in report.points}
    }
    dpr_curve = curves[f"DPR α={choice['alpha']}"]
    sft_t1 = results["SFT"]["T=1"]["correct"]
    rows = []
    for name, result in results.items():
        row = {"method": name}
        for decoding in DECODINGS:
            if decoding in result and decoding in results["SFT"]:
                row[decoding] = paired_gain(result[decoding]["correct"], results["SFT"][decoding]["correct"])
                row[f"{decoding} vs SFT at T=1"] = paired_gain(result[decoding]["correct"], sft_t1)
        kls = list(result["T=1"]["kl_per_response"].values())
        row["kl_per_response"] = sum(kls) / len(kls)
        row["kl_per_token"] = result["T=1"]["kl_per_token"]
        curve = curves["wo/Baseline"] if name.startswith("wo/Baseline") else dpr_curve
        if name != "SFT":
            row["sharpening_at_kl"] = interpolate_at_kl(curves["wo/Baseline"], row["kl_per_response"])
        if name.startswith(("DPR", "wo/Baseline")):  # the preview predicts these tilts, not SR's or more SFT's
            row["preview_gain_at_kl"] = interpolate_at_kl(curve, row["kl_per_response"])
        if rl.get(name):
            row.update(
                steps=rl[name]["steps"],
                reached_target=rl[name]["reached_target"],
                wall_s=rl[name]["train_runtime_s"],
                stops_at_target=rl[name].get("stops_at_target", False),
            )
        if name.startswith("SFT-continued") and continued:
            row["steps"] = continued["targets"][name]
        rows.append(row)
    summary = {
        "settings": asdict(args),
        "choice": choice,
        "sft": {k: v for k, v in (sft_record or {}).items() if k != "learning_rates"},
        "sft_continued": continued,
        "timings": timings,
        "rows": rows,
        "preview": report.summary_rows(),
        "parameters": _parameters(sft_path),
    }
    _write(output_dir / "real_model.json", summary)
    seeds = [rl[f"DPR-seed{s}"] for s in args.dpr_seeds if rl.get(f"DPR-seed{s}")]
    if seeds and continued:  # the SFT continuation's budget against the DPR runs reported now
        parameters = summary["parameters"]
        continued["dpr_now"] = {
            "wall_s": sum(r["train_runtime_s"] for r in seeds) / len(seeds),
            "flops": sum(dpr_step_flops(parameters, r["tokens"], r["frozen_scorers"]) for r in seeds) / len(seeds),
        }
    text = render_table(rows, choice, sft_record, continued)
    (output_dir / "real_model.md").write_text(text)
    print(text, flush=True)


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}"


def render_table(rows: list[dict], choice: dict, sft_record: dict | None, continued: dict) -> str:
    """The table of docs/real_model.md: accuracy gains over π_SFT at each decoding (paired, 95% CI), KL and the preview at that KL."""
    lines = [
        "| policy | steps | KL to π_SFT, nats per response (per token) | T = 1: accuracy, gain vs π_SFT | "
        "T = 0.7 | greedy | preview's DPR gain at that KL | sharpening (wo/Baseline tilt) at that KL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = []
        for decoding in DECODINGS:
            r = row.get(decoding)
            if r is None:
                cells.append("not run")
            elif row["method"] == "SFT":
                cells.append(f"{100 * r['mean']:.1f}%")
            else:
                cells.append(
                    f"{100 * r['mean']:.1f}%, {_pct(r['gain'])} ({_pct(r['gain_ci'][0])} to {_pct(r['gain_ci'][1])})"
                )
        preview = row.get("preview_gain_at_kl")
        sharpen = row.get("sharpening_at_kl")
        steps = row.get("steps", "—")
        if row.get("stops_at_target") and not row.get("reached_target"):
            steps = f"{steps} (target KL not reached)"
        # "—" where the preview has no curve for this row (π_SFT itself; SR and more SFT for the DPR column)
        at_kl = [
            "—" if key not in row else "— (beyond the preview's KL)" if value is None else _pct(value)
            for key, value in (("preview_gain_at_kl", preview), ("sharpening_at_kl", sharpen))
        ]
        lines.append(
            f"| {row['method']} | {steps} | {row['kl_per_response']:.3f} ({row['kl_per_token']:.4f}) | "
            + " | ".join(cells + at_kl)
            + " |"
        )
    sft = rows[0]
    lines += [
        "",
        "Sharpening controls (no training): π_SFT at T = 0.7 and greedily, paired against π_SFT at T = 1: "
        f"T = 0.7 {_pct(sft['T=0.7 vs SFT at T=1']['gain'])} ({_pct(sft['T=0.7 vs SFT at T=1']['gain_ci'][0])} to "
        f"{_pct(sft['T=0.7 vs SFT at T=1']['gain_ci'][1])}), greedy {_pct(sft['greedy vs SFT at T=1']['gain'])} "
        f"({_pct(sft['greedy vs SFT at T=1']['gain_ci'][0])} to {_pct(sft['greedy vs SFT at T=1']['gain_ci'][1])}) points.",
    ]
    lines.append(
        f"\nPreview's choice: α = {choice['alpha']}, λ = {choice['lambda']}, target KL "
        f"{choice['target_kl']:.3f} nats per response, predicted gain {_pct(choice['preview_gain'])} "
        f"({_pct(choice['preview_gain_ci'][0])} to {_pct(choice['preview_gain_ci'][1])}) points at T = 1."
    )
    if sft_record:
        shares = ", ".join(f"α = {a}: {100 * s:.0f}%" for a, s in sorted(sft_record["lr_share_at_reference"].items()))
        losses = ", ".join(f"step {s}: {v:.3f}" for s, v in sft_record["held_out_loss"].items())
        lines.append(
            f"SFT: {sft_record['steps']} steps; share of its Σ lr reached at each π_ref: {shares}; held-out "
            f"loss per response token after each epoch: {losses}."
        )
    if continued:
        lines.append(
            f"SFT continued on D: {continued['targets']['SFT-continued (wall)']} steps = DPR's mean wall time "
            f"({continued['dpr_mean_wall_s'] / 60:.1f} min), {continued['targets']['SFT-continued (FLOPs)']} "
            f"steps = DPR's mean FLOPs ({continued['dpr_mean_flops']:.2e})."
        )
        if now := continued.get("dpr_now"):
            lines[-1] += (
                f" The DPR seeds reported here: {now['wall_s'] / 60:.1f} min and {now['flops']:.2e} FLOPs on average."
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
