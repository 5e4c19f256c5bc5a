"""The paper's own regime on a real LM: DPR after a *finished* SFT, against more epochs of SFT on the same D (issue 44).

SmolLM2-135M-Instruct (dequantized from its Q4_1 GGUF) on the embedded task. SFT runs over D until its held-out loss
stops falling (π_SFT: the snapshot at the minimum, epochs capped at `sft_epochs`) and then on for `control_epochs` more
epochs over the same D with its own optimizer state: those later snapshots are the compute control, taken at DPR's
FLOPs. π_ref is the snapshot at half of π_SFT's Σ lr (α = 0.5). RL samples D's own prompts only.

    python -m experiments.finished_sft --config experiments/configs/finished_sft.yaml             # CPU, resumable
    python -m experiments.finished_sft --config ... --stage train --only "DPR λ=1e-05 seed1"       # a second worker
    python -m experiments.finished_sft --stage report                                             # tables, from git

Stages (each writes what it produces and skips what is there, so a stopped run resumes):

    data      D (`demonstrations.jsonl`); held-out prompts: the evaluation's (a prefix), the preview's and the
              held-out demonstrations SFT's loss is measured on (both past `HELD_OUT_OFFSET` and outside D)
    sft       SFT over D, snapshots every `snapshot_every` steps (every `control_snapshot_every` past the cap) and at
              half of each candidate's Σ lr; held-out loss at each snapshot
    preview   the preview at π_SFT (π_ref at α = 0.5), wo/Baseline and the oracle; its best finite λ is the larger tilt
    train     DPR at the paper's λ (`seeds`), DPR at the preview's λ, wo/Baseline and SR at the paper's λ: `rollouts`
              each, snapshots at `eval_fractions`
    evaluate  π_SFT and every final policy at T = 1 (with KL to π_SFT), 0.7 and greedy on `eval_prompts`; snapshots at
              T = 1 on `snapshot_eval_prompts`; the control: SFT's own later snapshot at DPR's mean FLOPs
    export    per-prompt results (`per_prompt.jsonl`) and the run's summary (`run.json`) into `results_dir` (committed)
    report    every table, recomputed from `results_dir` alone
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .real_model import (
    DECODINGS,
    _evaluate,
    _held_out_loss,
    _parameters,
    _policy_folder,
    _read,
    _reads_reference,
    _write,
    dpr_step_flops,
    interpolate_at_kl,
)

STAGES = ("all", "data", "sft", "preview", "train", "evaluate", "export", "report")
ABLATIONS = {"wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}, "SR": {"reward_granularity": "sentence"}}
SFT_SMALL = "SFT on the snapshots' prompts"
HELD_OUT_OFFSET = 2000  # the evaluation may grow to this many prompts without touching the preview's or the loss's


@dataclass
class FinishedSFTArguments:
    """Settings of `experiments/finished_sft.py` (`experiments/configs/finished_sft.yaml`: the issue's full design)."""

    output_dir: str = field(default="runs/finished_sft", metadata={"help": "Every stage's output (models included)."})
    results_dir: str = field(
        default="experiments/results/finished_sft",
        metadata={"help": "Committed per-prompt results and summary; `report` reads only these."},
    )
    sft_config: str = field(default="experiments/configs/finished_sft/sft.yaml", metadata={"help": "SFT recipe YAML."})
    dpr_config: str = field(default="experiments/configs/finished_sft/dpr.yaml", metadata={"help": "DPR recipe YAML."})
    num_demonstrations: int = field(default=1000, metadata={"help": "|D|."})
    sft_epochs: float = field(default=4.0, metadata={"help": "Cap on SFT's epochs; π_SFT: the held-out loss minimum."})
    control_epochs: float = field(default=1.0, metadata={"help": "SFT's further epochs over D (the compute control)."})
    snapshot_every: int = field(
        default=25, metadata={"help": "SFT snapshot (and held-out loss) every this many steps."}
    )
    control_snapshot_every: int = field(default=4, metadata={"help": "The same past the cap (the control's grain)."})
    loss_demonstrations: int = field(default=64, metadata={"help": "Held-out demonstrations of SFT's loss."})
    preview_prompts: int = field(default=48, metadata={"help": "Held-out prompts of the preview."})
    preview_samples: int = field(default=8, metadata={"help": "π_SFT samples per preview prompt (T = 1)."})
    lambdas: list[float] = field(
        default_factory=lambda: [math.inf, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.0],
        metadata={"help": "The preview's λ grid."},
    )
    paper_lambda: float = field(default=1e-5, metadata={"help": "The paper's KL weight."})
    learning_rate: float = field(default=3e-6, metadata={"help": "RL learning rate (every RL run)."})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "DPR seeds at the paper's λ."})
    ablations: list[str] = field(
        default_factory=lambda: list(ABLATIONS), metadata={"help": f"Among {list(ABLATIONS)}."}
    )
    preview_lambda_run: bool = field(default=True, metadata={"help": "Also train DPR at the preview's λ (seed 0)."})
    rollouts: int = field(default=800, metadata={"help": "Rollouts (prompts sampled) per RL run."})
    rollouts_per_step: int = field(default=16, metadata={"help": "Rollouts per optimizer step."})
    checkpoint_every: int = field(default=5, metadata={"help": "RL checkpoint every this many steps (resumable)."})
    eval_fractions: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 1.0],
        metadata={"help": "Shares of the RL budget at which policies are kept."},
    )
    eval_prompts: int = field(default=1000, metadata={"help": "Held-out prompts of the final evaluation."})
    snapshot_eval_prompts: int = field(default=400, metadata={"help": "Held-out prompts for the 25/50% snapshots."})
    max_new_tokens: int = field(
        default=72, metadata={"help": "Longest answer (the longest demonstration: 67 tokens)."}
    )
    eval_batch_size: int = field(default=100, metadata={"help": "Prompts per generate call."})
    pass_k: int = field(
        default=4,
        metadata={"help": "pass@1 and pass@k at T = 1 from k draws on `snapshot_eval_prompts` prompts (0: none)."},
    )
    decodings: list[str] = field(default_factory=lambda: list(DECODINGS), metadata={"help": "Final decodings."})
    stage: str = field(default="all", metadata={"help": f"One of {STAGES}.", "choices": list(STAGES)})
    only: list[str] = field(default_factory=list, metadata={"help": "train / evaluate: only these runs (a worker)."})

    def __post_init__(self):
        if unknown := [a for a in self.ablations if a not in ABLATIONS]:
            raise ValueError(f"Unknown ablations {unknown}; choose among {list(ABLATIONS)}.")
        if self.rollouts % self.rollouts_per_step:
            raise ValueError(
                f"rollouts ({self.rollouts}) must be a multiple of rollouts_per_step "
                f"({self.rollouts_per_step}): set rollouts to {self.rollouts_per_step} × the steps wanted."
            )
        if self.eval_prompts > HELD_OUT_OFFSET or self.snapshot_eval_prompts > self.eval_prompts:
            raise ValueError(
                f"eval_prompts must be ≤ {HELD_OUT_OFFSET} and snapshot_eval_prompts ≤ eval_prompts, got "
                f"{self.eval_prompts} and {self.snapshot_eval_prompts}."
            )


# ---- pure pieces ----------------------------------------------------------------------------------------------------


def half_lr_step(learning_rates: list[float], step: int) -> int:
    """The first step at which Σ lr reaches half of Σ lr over the first `step` steps: π_ref at α = 0.5 for π_SFT there.

    Example:
        >>> half_lr_step([1.0, 2.0, 2.0, 2.0, 1.0], 5)
        3
    """
    half, running = 0.5 * sum(learning_rates[:step]), 0.0
    for s, lr in enumerate(learning_rates[:step], start=1):
        running += lr
        if running >= half * (1 - 1e-9):
            return s
    raise ValueError(f"step must be ≥ 1, got {step}.")


def finished_step(losses: dict[int, float], cap: int) -> int:
    """π_SFT's step: where the held-out loss is lowest among the snapshots up to the epoch cap (the earliest on a tie).

    Example:
        >>> finished_step({25: 0.9, 50: 0.5, 75: 0.5, 100: 0.6, 125: 0.4}, cap=100)
        50
    """
    return min((s for s in losses if s <= cap), key=lambda s: (losses[s], s))


def control_step(start: int, flops: float, sft_step_flops: float, snapshots: list[int]) -> int | None:
    """The first snapshot past `start` at which SFT's further steps have spent `flops` (the last one if none has);
    None when SFT has no snapshot past `start`.

    Example:
        >>> control_step(100, 10.0, 2.0, [50, 100, 104, 108]), control_step(100, 30.0, 2.0, [100, 104, 108])
        (108, 108)
    """
    later = sorted(s for s in snapshots if s > start)
    return next((s for s in later if (s - start) * sft_step_flops >= flops), later[-1] if later else None)


def run_names(args: FinishedSFTArguments, preview_lambda: float | None) -> dict[str, dict]:
    """Run name → its keys, in the order that answers the issue first: DPR at the paper's λ (seeds), DPR at the
    preview's λ, then the ablations at the paper's λ.

    Example:
        >>> list(run_names(FinishedSFTArguments(seeds=[0], ablations=["SR"]), 2.0))
        ['DPR λ=1e-05 seed0', 'DPR λ=2 seed0', 'SR λ=1e-05']
    """
    lam = args.paper_lambda
    runs = {f"DPR λ={lam:g} seed{s}": {"seed": s, "kl_coef": lam} for s in args.seeds}
    if args.preview_lambda_run and preview_lambda is not None and preview_lambda != lam:
        runs[f"DPR λ={preview_lambda:g} seed{args.seeds[0]}"] = {"seed": args.seeds[0], "kl_coef": preview_lambda}
    runs.update({f"{a} λ={lam:g}": {"seed": args.seeds[0], "kl_coef": lam, **ABLATIONS[a]} for a in args.ablations})
    return runs


def paired(method: dict[str, float], baseline: dict[str, float], resamples: int = 2000, seed: int = 0) -> dict:
    """Mean gain of `method` over `baseline`, paired by prompt id, with a 95% percentile bootstrap over prompts.

    Example:
        >>> r = paired({"0": 1.0, "1": 1.0, "2": 0.0, "3": 1.0}, {"0": 1.0, "1": 0.0, "2": 0.0, "3": 0.0})
        >>> r["gain"], r["prompts"], r["mean"]
        (0.5, 4, 0.75)
    """
    import random

    ids = sorted(set(method) & set(baseline), key=int)
    diffs = [method[i] - baseline[i] for i in ids]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(resamples))
    return {
        "gain": sum(diffs) / len(diffs),
        "ci": [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]],
        "prompts": len(ids),
        "mean": sum(method[i] for i in ids) / len(ids),
    }


# ---- stages ---------------------------------------------------------------------------------------------------------


def _folder(output_dir: Path, name: str) -> Path:
    return output_dir / "rl" / name.replace("/", "_").replace(" ", "_").replace("=", "")


def _prompt_key(prompt) -> str:
    return json.dumps(prompt, sort_keys=True)


def _rows(args, which: str, data: Path):
    """Held-out rows past HELD_OUT_OFFSET whose prompt is not in D (`data`): the first `preview_prompts` of them are
    the preview's, the next `loss_demonstrations` the loss's. Those rows come from the stream D was drawn from (about a
    third repeat D's prompts, as `_evaluation_rows` says): a held-out loss that kept them would pick π_SFT partly on
    memorised demonstrations (the committed runs' loss set had 1 of its 64 in D)."""
    from trl_dpr.embedded.task import held_out_split

    taken = {_prompt_key(json.loads(line)["prompt"]) for line in data.read_text().splitlines() if line}
    wanted = args.preview_prompts + args.loss_demonstrations
    rows = held_out_split(HELD_OUT_OFFSET + 2 * wanted, seed=0)
    keep = [i for i in range(HELD_OUT_OFFSET, len(rows)) if _prompt_key(rows[i]["prompt"]) not in taken][:wanted]
    if len(keep) < wanted:
        raise SystemExit(f"Only {len(keep)} held-out rows past {HELD_OUT_OFFSET} are outside D; {wanted} are needed.")
    return rows.select(keep[: args.preview_prompts] if which == "preview" else keep[args.preview_prompts :])


def _evaluation_rows(args, output_dir: Path, count: int):
    """The first `count` held-out rows (before HELD_OUT_OFFSET) whose prompt is in none of D, the preview's and the
    loss's rows. The held-out split's rows past its first 500 are drawn from the same stream as D's, so about a third
    of them are D's own prompts: an evaluation that kept them would score memorised prompts."""
    from trl_dpr.embedded.task import held_out_split

    data = output_dir / "demonstrations.jsonl"
    seen = [json.loads(line)["prompt"] for line in data.read_text().splitlines()]
    seen += [r["prompt"] for r in _rows(args, "preview", data)] + [r["prompt"] for r in _rows(args, "loss", data)]
    taken = {_prompt_key(p) for p in seen}
    rows = held_out_split(HELD_OUT_OFFSET, seed=0)
    keep = [i for i, r in enumerate(rows) if _prompt_key(r["prompt"]) not in taken][:count]
    if len(keep) < count:
        raise SystemExit(f"Only {len(keep)} held-out prompts are outside D: set eval_prompts ≤ {len(keep)}.")
    return rows.select(keep)


def _data(args, output_dir: Path) -> Path:
    from trl_dpr.embedded.task import build_demo_dataset

    path = output_dir / "demonstrations.jsonl"
    if not path.is_file():
        train = build_demo_dataset(num_train=args.num_demonstrations, seed=0)["train"]
        path.with_suffix(".tmp").write_text("".join(json.dumps(row) + "\n" for row in train))
        path.with_suffix(".tmp").replace(path)
    return path


def _recipe(arguments, config: str, overrides: dict):
    from .overrides import parse_with_overrides

    return parse_with_overrides(arguments, ["--config", config], overrides)


def _sft(args, output_dir: Path, data: Path) -> dict:
    """SFT over D to `sft_epochs` + `control_epochs`; snapshots, half-Σ-lr snapshots and held-out loss recorded."""
    from transformers import TrainerCallback
    from trl import ModelConfig, SFTConfig

    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    record_path = output_dir / "sft_record.json"
    if (record := _read(record_path)) is not None:
        return _finish(record, record["cap"], args.snapshot_every)
    script_args, training_args, model_args = _recipe(
        (SFTScriptArguments, SFTConfig, ModelConfig),
        args.sft_config,
        {"dataset_name": str(data), "output_dir": str(output_dir / "SFT" / "trainer")},
    )
    per_epoch = math.ceil(args.num_demonstrations / training_args.per_device_train_batch_size)
    cap, steps = round(args.sft_epochs * per_epoch), round((args.sft_epochs + args.control_epochs) * per_epoch)
    training_args.max_steps = steps
    held_out = [list(r["prompt"]) + list(r["completion"]) for r in _rows(args, "loss", data)]
    record = {
        "steps": steps,
        "cap": cap,
        "steps_per_epoch": per_epoch,
        "batch_size": training_args.per_device_train_batch_size,
        "learning_rates": [],
        "snapshots": {},
        "held_out_loss": {},
        "tokens": None,
    }
    keep: set[int] = set()

    class Snapshots(TrainerCallback):
        def on_train_begin(self, _args, state, control, lr_scheduler=None, optimizer=None, **kw):
            base = optimizer.param_groups[0].get("initial_lr", _args.learning_rate)
            schedule = [base * lr_scheduler.lr_lambdas[0](t) for t in range(steps)]
            candidates = [*range(args.snapshot_every, cap + 1, args.snapshot_every), cap]
            keep.update(
                candidates,
                (half_lr_step(schedule, c) for c in candidates),
                [steps],
                range(cap + args.control_snapshot_every, steps + 1, args.control_snapshot_every),
            )

        def on_step_begin(self, _args, state, control, lr_scheduler=None, **kw):
            record["learning_rates"].append(float(lr_scheduler.get_last_lr()[0]))

        def on_step_end(self, _args, state, control, model=None, processing_class=None, **kw):
            step = state.global_step
            if step in keep:
                target = output_dir / "SFT" / f"step{step:04d}"
                model.save_pretrained(target)
                processing_class.save_pretrained(target)
                record["snapshots"][str(step)] = str(target)
                record["held_out_loss"][str(step)] = _held_out_loss(model, processing_class, held_out)
                print(f"SFT step {step}: held-out loss {record['held_out_loss'][str(step)]:.4f}", flush=True)
            if step == cap:  # π_SFT and π_ref are known here: another worker may start RL while the control goes on
                _write(output_dir / "sft_cap.json", _finish(dict(record, steps=cap), cap, args.snapshot_every))

        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "num_tokens" in logs:
                record["tokens"] = float(logs["num_tokens"])

    start = time.perf_counter()
    run_sft(script_args, training_args, model_args, callbacks=[Snapshots()])
    record["wall_s"] = round(time.perf_counter() - start, 1)
    _write(record_path, _finish(record, cap, args.snapshot_every))
    return record


def _finish(record: dict, cap: int, snapshot_every: int) -> dict:
    """π_SFT's step (the held-out minimum among the candidates up to the cap), π_ref's (half its Σ lr) and α, into
    `record`. Candidates: every `snapshot_every` steps and the cap, the snapshots whose π_ref was saved; the half-Σ-lr
    snapshots have a loss too but no π_ref of their own."""
    losses = {int(s): v for s, v in record["held_out_loss"].items()}
    candidates = {s: v for s, v in losses.items() if s % snapshot_every == 0 or s == cap}
    record["sft_step"] = finished_step(candidates, cap)
    record["ref_step"] = half_lr_step(record["learning_rates"], record["sft_step"])
    record["alpha"] = sum(record["learning_rates"][: record["ref_step"]]) / sum(
        record["learning_rates"][: record["sft_step"]]
    )
    record["loss_still_falling_at_cap"] = record["sft_step"] == cap and any(
        losses[s] < losses[cap] for s in losses if s > cap
    )
    return record


def _sft_so_far(args, output_dir: Path, data: Path) -> dict:
    """SFT's record for a worker that does not train SFT: the finished one, else the one written at the cap."""
    for name in ("sft_record.json", "sft_cap.json"):
        if (record := _read(output_dir / name)) is not None:  # recomputed: a record may predate `_finish`'s rule
            return _finish(record, record["cap"], args.snapshot_every)
    raise SystemExit(f"SFT has not reached its cap in {output_dir} yet: run `--stage sft` first (or wait for it).")


def _sft_path(sft: dict) -> str:
    return sft["snapshots"][str(sft["sft_step"])]


def _preview(args, output_dir: Path, sft: dict):
    from trl_dpr.analysis.preview import PreviewConfig, PreviewReport, run_preview

    folder = output_dir / "preview"
    if (folder / "preview.json").is_file():
        return PreviewReport.read(folder / "preview.json")
    prompts_file = output_dir / "preview_prompts.jsonl"
    prompts_file.write_text(
        "".join(json.dumps(row) + "\n" for row in _rows(args, "preview", output_dir / "demonstrations.jsonl"))
    )
    config = PreviewConfig(
        output_dir=str(folder),
        dataset_name=str(prompts_file),
        dataset_split="train",
        num_prompts=args.preview_prompts,
        samples_per_prompt=args.preview_samples,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.eval_batch_size,
        kl_coefs=args.lambdas,
        quality="exact",
        seed=0,
        plot=False,
        variants={
            "DPR": {"ref_model_name_or_path": sft["snapshots"][str(sft["ref_step"])]},
            "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"},
            "oracle": {"oracle": True},
        },
    )
    start = time.perf_counter()
    report = run_preview(config, _sft_path(sft), {"dtype": "float32"}, show_progress=False)
    _write(folder / "wall.json", {"wall_s": round(time.perf_counter() - start, 1)})
    return report


def _train(args, output_dir: Path, data: Path, sft: dict, name: str, keys: dict) -> dict:
    """`rollouts` rollouts of RL on D's prompts from π_SFT; snapshots at `eval_fractions` of the budget."""
    from transformers import TrainerCallback

    from trl_dpr.running.pipeline import run_dpr

    from .overrides import DPR_ARGUMENTS

    folder = _folder(output_dir, name)
    if (record := _read(folder / "rl_record.json")) is not None:
        return record
    steps = args.rollouts // args.rollouts_per_step
    overrides = {
        "learning_rate": args.learning_rate,
        "max_steps": steps,
        **keys,
        "model_name_or_path": _sft_path(sft),
        "per_device_train_batch_size": args.rollouts_per_step,
        "output_dir": str(folder / "trainer"),
        "dataset_name": str(data),
    }
    if _reads_reference(keys):
        overrides["ref_model_name_or_path"] = sft["snapshots"][str(sft["ref_step"])]
    # a checkpoint every `checkpoint_every` steps: a run stopped with its session resumes there in the next one
    overrides |= {"save_strategy": "steps", "save_steps": args.checkpoint_every, "save_total_limit": 1}
    if any((folder / "trainer").glob("checkpoint-*")):
        overrides["resume_from_checkpoint"] = "true"
    script_args, training_args, model_args = _recipe(DPR_ARGUMENTS, args.dpr_config, overrides)
    save_at = {max(1, round(f * steps)): f for f in args.eval_fractions}

    class Record(TrainerCallback):
        def on_step_end(self, _args, state, control, model=None, processing_class=None, **kw):
            if state.global_step in save_at:
                target = folder / f"at{round(100 * save_at[state.global_step])}"
                model.save_pretrained(target)
                processing_class.save_pretrained(target)

    start = time.perf_counter()
    trainer = run_dpr(script_args, training_args, model_args, callbacks=[Record()])
    tokens = next((h["num_tokens"] for h in reversed(trainer.state.log_history) if "num_tokens" in h), None)
    history = [  # the whole run's, a resumed one's included (the trainer state keeps the logs before the stop)
        {"step": h["step"], **{k: float(v) for k, v in h.items() if isinstance(v, (int, float))}}
        for h in trainer.state.log_history
        if "kl_sft/per_response" in h
    ]
    record = {
        "name": name,
        "steps": trainer.state.global_step,
        "rollouts": args.rollouts,
        "keys": keys,
        "learning_rate": args.learning_rate,
        "wall_s": round(time.perf_counter() - start, 1),
        "tokens": tokens,
        "frozen_scorers": 2 if _reads_reference(keys) else 1,
        "history": history,
        "snapshots": {str(f): str(folder / f"at{round(100 * f)}") for f in args.eval_fractions},
    }
    del trainer
    _write(folder / "rl_record.json", record)
    return record


def _control(args, output_dir: Path, sft: dict) -> dict | None:
    """SFT's own later snapshot at the mean FLOPs of the DPR runs at the paper's λ trained so far."""
    records = [
        r
        for s in args.seeds
        if (r := _read(_folder(output_dir, f"DPR λ={args.paper_lambda:g} seed{s}") / "rl_record.json"))
    ]
    if not records:
        return None
    if (sft := _read(output_dir / "sft_record.json")) is None:  # SFT's control epochs still running
        return None
    parameters = _parameters(_sft_path(sft))
    dpr_flops = sum(dpr_step_flops(parameters, r["tokens"], r["frozen_scorers"]) for r in records) / len(records)
    sft_step_flops = 6 * parameters * sft["tokens"] / sft["steps"]
    step = control_step(sft["sft_step"], dpr_flops, sft_step_flops, [int(s) for s in sft["snapshots"]])
    if step is None:
        return None
    return {
        "from_step": sft["sft_step"],
        "to_step": step,
        "dpr_mean_flops": dpr_flops,
        "sft_flops": (step - sft["sft_step"]) * sft_step_flops,
        "flops_share": (step - sft["sft_step"]) * sft_step_flops / dpr_flops,
        "path": sft["snapshots"][str(step)],
    }


def _more_draws(args, output_dir: Path, name: str, path: str, rows) -> None:
    """k − 1 more answers at T = 1 (seeds 1 … k − 1) on `rows`, the evaluation's first prompts: with the main
    evaluation's T = 1 answer, k independent draws per prompt, for pass@1 and pass@k (sharpening or skill)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_dpr.embedded.task import is_correct
    from trl_dpr.evaluation.sampling import sample_completions

    result_path = output_dir / "evaluation" / f"{_policy_folder(output_dir, name).name}.json"
    result = _read(result_path) or {}
    if args.pass_k < 2 or "T=1" not in result or "T=1 draws" in result:
        return
    ids = sorted(range(len(rows)), key=lambda i: (rows[i]["kind"], i))
    tokenizer = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    start, draws = time.perf_counter(), {str(i): [] for i in ids}
    for seed in range(1, args.pass_k):
        samples = sample_completions(
            policy,
            tokenizer,
            [rows[i]["prompt"] for i in ids],
            temperature=1.0,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.eval_batch_size,
            seed=seed,
        )
        for i, sample in zip(ids, samples):
            draws[str(i)].append(float(is_correct(sample.text, rows[i]["answer"])))
    entry = {"seeds": list(range(1, args.pass_k)), "correct": draws, "wall_s": round(time.perf_counter() - start, 1)}
    _write(result_path, {**(_read(result_path) or {}), "T=1 draws": entry})


def pass_at(first: float, more: list[float]) -> dict[str, float]:
    """pass@1 (the mean of the k draws) and pass@k (any of them right) of one prompt.

    Example:
        >>> pass_at(0.0, [1.0, 0.0, 0.0])
        {'pass@1': 0.25, 'pass@4': 1.0}
    """
    every = [first, *more]
    return {"pass@1": sum(every) / len(every), f"pass@{len(every)}": max(every)}


def _evaluate_all(args, output_dir: Path, sft: dict, runs: dict) -> None:
    """π_SFT, the control and each final policy at every decoding; the earlier snapshots at T = 1."""
    sft_path = _sft_path(sft)
    wanted = lambda name: not args.only or name in args.only  # noqa: E731
    rows = _evaluation_rows(args, output_dir, args.eval_prompts)
    first = rows.select(range(args.snapshot_eval_prompts))  # the snapshots' and the pass@k draws' prompts
    if wanted("SFT"):
        _evaluate(args, output_dir, "SFT", sft_path, sft_path, rows)
    records = {n: r for n in runs if wanted(n) and (r := _read(_folder(output_dir, n) / "rl_record.json"))}
    for name, record in records.items():  # the final policies first: the question's answer
        _evaluate(args, output_dir, f"{name} at 100%", record["snapshots"]["1.0"], sft_path, rows)
    # matched once, to the DPR runs there when first evaluated: a later seed must not relabel an evaluated snapshot
    control = _read(output_dir / "control.json") or _control(args, output_dir, sft)
    if wanted("SFT-continued") and control:
        _write(output_dir / "control.json", control)
        _evaluate(args, output_dir, "SFT-continued", control["path"], sft_path, rows)
    finals = {f"{n} at 100%": r["snapshots"]["1.0"] for n, r in records.items()}
    finals |= {"SFT": sft_path} if wanted("SFT") else {}
    finals |= {"SFT-continued": control["path"]} if control and wanted("SFT-continued") else {}
    for name, path in finals.items():  # pass@k: is a gain sharpening (pass@1 only) or skill (pass@k too)?
        _more_draws(args, output_dir, name, path, first)
    small = copy.copy(args)
    small.eval_prompts, small.decodings = args.snapshot_eval_prompts, ["T=1"]
    # π_SFT on the snapshots' prompts too: a different prompt count batches differently, so the shared seed pairs a
    # snapshot's samples only with π_SFT's drawn on the same prompts
    if SFT_SMALL in args.only or (
        wanted(SFT_SMALL) and any((_folder(output_dir, n) / "rl_record.json").is_file() for n in runs)
    ):
        _evaluate(small, output_dir, SFT_SMALL, sft_path, sft_path, first)
    for name, record in records.items():
        for fraction in (f for f in args.eval_fractions if f != 1.0 and Path(record["snapshots"][str(f)]).is_dir()):
            snapshot = record["snapshots"][str(fraction)]
            _evaluate(small, output_dir, f"{name} at {round(100 * fraction)}%", snapshot, sft_path, first)


# ---- export and report ----------------------------------------------------------------------------------------------


def _export(args, output_dir: Path, sft: dict, report, choice: dict, runs: dict) -> None:
    """`per_prompt.jsonl` (one line per policy, decoding and prompt) and `run.json`, into `results_dir`."""
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    lines = []
    names = {
        "SFT",
        SFT_SMALL,
        "SFT-continued",
        *(f"{n} at {round(100 * f)}%" for n in runs for f in args.eval_fractions),
    }
    names = {_policy_folder(output_dir, n).name: n for n in names}
    for path in sorted((output_dir / "evaluation").glob("*.json")):
        evaluation = _read(path)
        policy = names.get(path.stem, path.stem)
        if "T=1 draws" in evaluation and "T=1" in evaluation:
            first = evaluation["T=1"]["correct"]
            for i, more in evaluation["T=1 draws"]["correct"].items():
                for decoding, value in pass_at(first[i], more).items():
                    row = {"policy": policy, "decoding": decoding, "prompt": int(i), "correct": value}
                    lines.append(json.dumps(row, separators=(",", ":")))
        for decoding, entry in evaluation.items():
            if decoding not in DECODINGS:
                continue
            for i, correct in entry["correct"].items():
                row = {"policy": policy, "decoding": decoding, "prompt": int(i), "correct": int(correct)}
                if "length" in entry:
                    row["length"] = entry["length"][i]
                if "kl_per_response" in entry:
                    row["kl"] = round(entry["kl_per_response"][i], 4)
                if "entropy_per_response" in entry:
                    row["entropy"] = round(entry["entropy_per_response"][i], 3)
                lines.append(json.dumps(row, separators=(",", ":")))
    (results / "per_prompt.jsonl").write_text("\n".join(lines) + "\n")
    rl = {
        name: {k: v for k, v in r.items() if k != "history"}
        | {"kl_history": [h["kl_sft/per_response"] for h in r["history"]]}
        for name in runs
        if (r := _read(_folder(output_dir, name) / "rl_record.json"))
    }
    parameters = _parameters(_sft_path(sft))
    for r in rl.values():
        r["flops"] = dpr_step_flops(parameters, r["tokens"], r["frozen_scorers"])
    summary = {
        "settings": asdict(args),
        "parameters": parameters,
        "choice": choice,
        "rl": rl,
        "control": _read(output_dir / "control.json"),
        "sft": {k: v for k, v in sft.items() if k not in ("learning_rates", "snapshots")},
        "preview": [asdict(p) for p in report.points] if report else [],
        "preview_wall_s": (_read(output_dir / "preview" / "wall.json") or {}).get("wall_s"),
        "evaluation_wall_s": {
            names.get(p.stem, p.stem): {d: e["wall_s"] for d, e in _read(p).items()}
            for p in (output_dir / "evaluation").glob("*.json")
        },
    }
    _write(results / "run.json", summary)


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _gain(g: dict | None) -> str:
    return "not run" if g is None else f"{100 * g['gain']:+.1f} ({100 * g['ci'][0]:+.1f} to {100 * g['ci'][1]:+.1f})"


def render_report(per_prompt: list[dict], summary: dict) -> str:
    """Every table of docs/real_model.md's finished-SFT section, from the committed per-prompt rows and summary."""
    table: dict[tuple[str, str], dict] = {}
    for row in per_prompt:
        table.setdefault((row["policy"], row["decoding"]), {})[str(row["prompt"])] = row
    correct = {k: {i: float(r["correct"]) for i, r in v.items()} for k, v in table.items()}

    def mean(key, field_name):
        values = [r[field_name] for r in table.get(key, {}).values() if field_name in r]
        return sum(values) / len(values) if values else None

    points = summary["preview"]
    curves = {
        v: [(p["kl"], p["delta"]) for p in points if p["variant"] == v]  # λ = 0 (best-of-N) ends the curve
        for v in ("DPR", "wo/Baseline")
    }
    sft = summary["sft"]
    lines = [
        f"π_SFT: step {sft['sft_step']} of SFT ({sft['sft_step'] / sft['steps_per_epoch']:.2f} epochs over "
        f"|D| = {summary['settings']['num_demonstrations']}), π_ref at step {sft['ref_step']} "
        f"(α = {sft['alpha']:.2f} of π_SFT's Σ lr). Held-out loss per response token at each snapshot: "
        + ", ".join(f"{s}: {v:.3f}" for s, v in sorted(((int(s), v) for s, v in sft["held_out_loss"].items())))
        + "."
    ]
    if sft.get("sft_step") == sft.get("cap"):  # the minimum at the cap: do SFT's further epochs still lower it?
        after = [v for s, v in sft["held_out_loss"].items() if int(s) > sft["cap"]]
        at_cap = sft["held_out_loss"][str(sft["cap"])]
        lines.append(
            f"The minimum within the cap sits at the cap ({sft['cap']} steps, {at_cap:.4f})"
            + (
                f"; SFT's further steps give {min(after):.4f} to {max(after):.4f}."
                if after
                else ": SFT may not have finished."
            )
        )
    lines += [
        "",
        "| policy | rollouts | KL to π_SFT per response | preview's gain at that KL | answer length (T = 1) | "
        "entropy per response (T = 1) | T = 1 | T = 0.7 | greedy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = {d: correct.get(("SFT", d)) for d in DECODINGS}
    sft_cells = [f"{100 * sum(c.values()) / len(c):.1f}% (n = {len(c)})" if c else "not run" for c in base.values()]
    length, entropy = mean(("SFT", "T=1"), "length"), mean(("SFT", "T=1"), "entropy")
    lines.append(
        f"| π_SFT (accuracy) | — | 0 | — | {_number(length)} | {_number(entropy, 2)} | " + " | ".join(sft_cells) + " |"
    )
    policies = [p for p, d in table if d == "T=1" and p not in ("SFT", SFT_SMALL)]
    rl = summary["rl"]
    for policy in sorted(
        set(policies), key=lambda p: (p.startswith("SFT"), " at " in p and not p.endswith("100%"), p)
    ):
        run = next((r for n, r in rl.items() if policy.startswith(n)), None)
        share = policy.rsplit(" at ", 1)[-1] if " at " in policy else "100%"
        rollouts = "—" if run is None else str(round(run["rollouts"] * float(share.rstrip("%")) / 100))
        if policy == "SFT-continued" and summary.get("control"):
            c = summary["control"]
            rollouts = f"— (steps {c['from_step']} → {c['to_step']}, {100 * c['flops_share']:.0f}% of DPR's FLOPs)"
        kl = mean((policy, "T=1"), "kl")
        # SR reads DPR's curve: Σ_t r̂_t paid at the end has the same KL-regularised optimum, π_SFT·exp(Σ r̂ / λ)
        variant = "wo/Baseline" if policy.startswith("wo/") else "DPR" if policy.startswith(("DPR", "SR")) else None
        predicted = interpolate_at_kl(curves[variant], kl) if variant and kl is not None and curves[variant] else None
        length, entropy = mean((policy, "T=1"), "length"), mean((policy, "T=1"), "entropy")
        small = correct.get((SFT_SMALL, "T=1"))
        n = len(correct[(policy, "T=1")])
        if base["T=1"] and n != len(base["T=1"]) and not (small and len(small) == n):
            gains = ["not paired (π_SFT not run on these prompts)"] + ["not run"] * (len(DECODINGS) - 1)
        else:
            own = {d: small if small and n == len(small) and d == "T=1" else base[d] for d in DECODINGS}
            gains = [
                _gain(paired(correct[(policy, d)], own[d])) if (policy, d) in correct and own[d] else "not run"
                for d in DECODINGS
            ]
        label = policy if not base["T=1"] or n == len(base["T=1"]) else f"{policy} (n = {n})"
        lines.append(
            f"| {label} | {rollouts} | {'—' if kl is None else f'{kl:.3f}'} | "
            f"{'—' if predicted is None else f'{100 * predicted:+.1f}'} | "
            f"{_number(length)} | {_number(entropy, 2)} | " + " | ".join(gains) + " |"
        )
    groups: dict[str, list[str]] = {}  # DPR's seeds at one λ, final policies: pooled per prompt, then paired
    for policy in policies:
        if policy.startswith("DPR") and policy.endswith(" at 100%") and " seed" in policy:
            groups.setdefault(policy.split(" seed")[0], []).append(policy)
    for group, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        gains = []
        for d in DECODINGS:
            found = [correct[(m, d)] for m in members if (m, d) in correct]
            if len(found) < len(members) or not base[d]:
                gains.append("not run")
                continue
            ids = set.intersection(*(set(f) for f in found))
            gains.append(_gain(paired({i: sum(f[i] for f in found) / len(found) for i in ids}, base[d])))
        kls = [mean((m, "T=1"), "kl") for m in members]
        lines.append(
            f"| {group}, {len(members)} seeds pooled per prompt, at 100% (the interval resamples prompts, not "
            f"seeds) | {rl[members[0].split(' at ')[0]]['rollouts']} each"
            f" | {sum(kls) / len(kls):.3f} | — | — | — | " + " | ".join(gains) + " |"
        )
    if rl and all("flops" in r for r in rl.values()):  # compute: what each run spent, and the control against it
        control = summary.get("control")
        spent = [
            f"{name} {r['flops']:.3g}"
            + (f" (the control {control['sft_flops'] / r['flops']:.2f}×)" if control else "")
            for name, r in rl.items()
        ]
        lines += ["", "FLOPs of each RL run (its tokens × (2N generation + 2N per frozen scorer + 6N update)): "]
        lines[-1] += "; ".join(spent) + (
            f"; the control {control['sft_flops']:.3g} (6N per SFT token)." if control else "."
        )
    finals = sorted(p for p in set(policies) if p.endswith(" at 100%"))
    if finals and all(("SFT-continued", d) in correct for d in DECODINGS):  # the question: beyond more epochs?
        lines += [
            "",
            "Each RL run against the control (SFT's next epochs over the same D at the same FLOPs), paired per prompt "
            "at the same decoding and sampling seed: below 0, the control did better.",
            "",
            "| policy − control | T = 1 | T = 0.7 | greedy |",
            "|---|" + "---|" * len(DECODINGS),
        ]
        for policy in finals:
            cells = [
                _gain(paired(correct[(policy, d)], correct[("SFT-continued", d)]))
                if (policy, d) in correct
                else "not run"
                for d in DECODINGS
            ]
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    ks = sorted({d for _, d in table if d.startswith("pass@")}, key=lambda d: int(d.removeprefix("pass@")))
    if ks and all(("SFT", k) in correct for k in ks):
        n = len(correct[("SFT", ks[0])])
        lines += [
            "",
            f"Sharpening or skill: pass@1 (the mean of {ks[-1][5:]} draws) and {ks[-1]} at T = 1 on {n} prompts "
            "(shared seeds): π_SFT's rate, then each policy's paired gain over it.",
            "",
            "| policy | " + " | ".join(ks) + " |",
            "|---|" + "---|" * len(ks),
            "| π_SFT | " + " | ".join(f"{100 * sum(correct[('SFT', k)].values()) / n:.1f}%" for k in ks) + " |",
        ]
        for policy in sorted({p for p, d in table if d == ks[0] and p != "SFT"}):
            cells = [_gain(paired(correct[(policy, k)], correct[("SFT", k)])) for k in ks]
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    if base["T=1"] and base["T=0.7"] and base["greedy"]:
        lines += [
            "",
            "Sharpening by decoding alone (π_SFT against itself at T = 1): T = 0.7 "
            f"{_gain(paired(base['T=0.7'], base['T=1']))}, greedy {_gain(paired(base['greedy'], base['T=1']))}.",
        ]
    lines += [
        "",
        "The preview at π_SFT (T = 1, its own held-out prompts): predicted gain over π_SFT, 95% CI, KL per "
        "response, trusted (ESS)",
        "",
        "| variant | λ | gain | KL | trusted |",
        "|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(
            f"| {p['variant']} | {p['lam']:g} | {100 * p['delta']:+.1f} ({100 * p['delta_ci_low']:+.1f} to "
            f"{100 * p['delta_ci_high']:+.1f}) | {p['kl']:.3f} | {p['trusted']} |"
        )
    if (choice := summary.get("choice")) and choice.get("lambda") is not None:
        lines += [
            "",
            f"The preview's choice: {choice['verdict']} (best finite λ = {choice['lambda']:g}, predicted "
            f"{100 * choice['preview_gain']:+.1f} at KL {choice['target_kl']:.3f}).",
        ]
    elif choice:
        lines += ["", f"The preview's choice: {choice['verdict']}"]
    return "\n".join(lines) + "\n"


def _report(args) -> str:
    results = Path(args.results_dir)
    if not (results / "per_prompt.jsonl").is_file() or not (results / "run.json").is_file():
        raise SystemExit(
            f"No results in {results}: run the stages up to `export` first (or check out the committed "
            "per_prompt.jsonl and run.json there)."
        )
    per_prompt = [json.loads(line) for line in (results / "per_prompt.jsonl").read_text().splitlines() if line]
    text = render_report(per_prompt, _read(results / "run.json"))
    (results / "report.md").write_text(text)
    print(text, flush=True)
    return text


def main(argv=None):
    from trl_dpr.running.pipeline import print_stage
    from trl_dpr.running.recipe_parser import RecipeParser

    from .regime_map import choose

    (args,) = RecipeParser((FinishedSFTArguments,)).parse_args_and_config(list(sys.argv[1:] if argv is None else argv))
    if args.stage == "report":
        _report(args)
        return
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    every = args.stage == "all"
    print_stage(1, 7, "D and the held-out prompts")
    data = _data(args, output_dir)
    if args.stage == "data":
        return
    print_stage(
        2, 7, f"SFT over {args.num_demonstrations} demonstrations, ≤ {args.sft_epochs} + {args.control_epochs} epochs"
    )
    sft = _sft(args, output_dir, data) if args.stage in ("all", "sft") else _sft_so_far(args, output_dir, data)
    print(f"π_SFT at step {sft['sft_step']}, π_ref at step {sft['ref_step']} (α = {sft['alpha']:.3f})", flush=True)
    if args.stage == "sft":
        return
    print_stage(3, 7, "The preview at π_SFT")
    report = _preview(args, output_dir, sft)
    try:
        choice = choose({1.0: report.variant_points("DPR")})
    except ValueError as error:  # no trusted finite λ: the paper's λ still trains, the preview's run has no λ
        choice = {"lambda": None, "verdict": str(error), "train": False}
    _write(output_dir / "choice.json", choice)
    print(f"Preview's choice: {choice}", flush=True)
    if args.stage == "preview":
        return
    runs = run_names(args, choice["lambda"])
    if every or args.stage == "train":
        for name, keys in runs.items():
            if not args.only or name in args.only:
                print_stage(4, 7, f"RL: {name}, {args.rollouts} rollouts")
                _train(args, output_dir, data, sft, name, keys)
                if every:  # the first answer before the next run: this run, π_SFT and the control, evaluated
                    print_stage(5, 7, f"Evaluation on {args.eval_prompts} held-out prompts")
                    _evaluate_all(args, output_dir, sft, runs)
                    _export(args, output_dir, sft, report, choice, runs)
    if every or args.stage == "evaluate":
        print_stage(5, 7, f"Evaluation on {args.eval_prompts} held-out prompts")
        _evaluate_all(args, output_dir, sft, runs)
    if every or args.stage == "export":
        print_stage(6, 7, f"Export to {args.results_dir}")
        _export(args, output_dir, sft, report, choice, runs)
    if every:
        print_stage(7, 7, "Report")
        _report(args)


if __name__ == "__main__":
    main()
