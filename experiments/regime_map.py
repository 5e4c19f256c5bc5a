"""Where does DPR help a real LM? SFT progress → the preview's predicted DPR gain, and DPR trained where it predicts most.

SmolLM2-135M-Instruct on the embedded task, one pass of SFT over a demonstration set D too large to memorise in that
pass, snapshots of π_SFT along the way (shares of SFT's Σ lr), each with its own π_ref at half of its own Σ lr:

    python -m experiments.regime_map --config experiments/configs/regime_map.yaml            # CPU, resumable
    python -m experiments.regime_map --config ... --stage curve                              # a second worker

Stages (each writes what it produces and skips what is there, so a stopped run resumes):

    data      D (`demonstrations.jsonl`), the evaluation's and the preview's held-out prompts (disjoint)
    sft       one pass over D, warm-up then a constant rate; model snapshots at the shares `progress` and half of each
              (π_ref), every `snapshot_every` steps (SFT's own continuation: the control), Σ lr recorded per step
    curve     each `progress` snapshot on `eval_prompts` held-out prompts at T = 1, T = 0.7, greedy, and held-out loss
    map       the preview at each `map_progress` snapshot: DPR (π_ref at half its Σ lr), wo/Baseline, the oracle
    train     DPR (seeds) at the mapped snapshot with the largest predicted gain (and the earliest one when no gain is
              positive), `rollouts` per run, snapshots at `eval_fractions` of the budget; wo/Baseline and SR alike
    evaluate  every trained snapshot (T = 1 with its KL to π_SFT; the final ones at all decodings); SFT's own
              continuation at DPR's FLOPs
    report    `regime_map.md` / `.json` and `regime_map.png`
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .real_model import (
    DECODINGS,
    _evaluate,
    _held_out,
    _held_out_loss,
    _parameters,
    _read,
    _write,
    dpr_step_flops,
    interpolate_at_kl,
    paired_gain,
)

STAGES = ("all", "data", "sft", "curve", "map", "train", "evaluate", "report")


def _reads_reference(keys: dict) -> bool:
    """Whether the reward these recipe keys name reads π_ref (DPR's does; wo/Baseline's does not)."""
    from trl_dpr.rewards import reward_from_settings

    return "ref" in reward_from_settings(keys).model_names


ABLATIONS = {"wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}, "SR": {"reward_granularity": "sentence"}}


@dataclass
class RegimeMapArguments:
    """Settings of `experiments/regime_map.py` (`experiments/configs/regime_map.yaml`)."""

    output_dir: str = field(default="runs/regime_map", metadata={"help": "Every stage's output, and the report."})
    sft_config: str = field(default="experiments/configs/regime_map/sft.yaml", metadata={"help": "SFT recipe YAML."})
    dpr_config: str = field(default="experiments/configs/regime_map/dpr.yaml", metadata={"help": "DPR recipe YAML."})
    num_demonstrations: int = field(default=480, metadata={"help": "|D|, seen once by SFT."})
    progress: list[float] = field(
        default_factory=lambda: [0.1, 0.25, 0.5, 0.75, 1.0],
        metadata={"help": "Shares of SFT's Σ lr at which π_SFT snapshots are kept."},
    )
    map_progress: list[float] = field(
        default_factory=lambda: [0.1, 0.25, 1.0],
        metadata={"help": "Snapshots the preview maps (a subset of progress)."},
    )
    snapshot_every: int = field(default=10, metadata={"help": "Also keep a snapshot every this many SFT steps."})
    preview_prompts: int = field(
        default=32, metadata={"help": "Held-out prompts of the preview (not the evaluation's)."}
    )
    preview_samples: int = field(default=8, metadata={"help": "π_SFT samples per preview prompt (T = 1)."})
    lambdas: list[float] = field(
        default_factory=lambda: [math.inf, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.0],
        metadata={"help": "The preview's λ grid."},
    )
    eval_prompts: int = field(default=400, metadata={"help": "Held-out prompts of the evaluation."})
    max_new_tokens: int = field(
        default=72, metadata={"help": "Longest answer (the longest demonstration is 67 tokens)."}
    )
    eval_batch_size: int = field(default=200, metadata={"help": "Prompts per generate call."})
    decodings: list[str] = field(default_factory=lambda: list(DECODINGS), metadata={"help": "Decodings evaluated."})
    rollouts: int = field(default=400, metadata={"help": "Rollouts (prompts sampled) per RL run."})
    rollouts_per_step: int = field(default=16, metadata={"help": "Rollouts per optimizer step."})
    learning_rate: float = field(default=3e-6, metadata={"help": "RL learning rate (DPR and its ablations)."})
    dpr_seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "DPR seeds."})
    ablations: list[str] = field(
        default_factory=lambda: list(ABLATIONS), metadata={"help": f"Among {list(ABLATIONS)}."}
    )
    eval_fractions: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 1.0],
        metadata={"help": "Shares of the RL budget at which policies are evaluated."},
    )
    stage: str = field(default="all", metadata={"help": f"One of {STAGES}.", "choices": list(STAGES)})
    only: list[str] = field(default_factory=list, metadata={"help": "train / evaluate: only these runs (a worker)."})

    def __post_init__(self):
        if unknown := [a for a in self.ablations if a not in ABLATIONS]:
            raise ValueError(f"Unknown ablations {unknown}; choose among {list(ABLATIONS)}.")
        if missing := [p for p in self.map_progress if p not in self.progress]:
            raise ValueError(
                f"map_progress {missing} are not in progress {self.progress}: the map needs their snapshots."
            )
        if self.rollouts % self.rollouts_per_step:
            raise ValueError(
                f"rollouts ({self.rollouts}) must be a multiple of rollouts_per_step ({self.rollouts_per_step})."
            )


# ---- pure pieces ----------------------------------------------------------------------------------------------------


def steps_at_shares(learning_rates: list[float], shares: list[float]) -> dict[float, int]:
    """The first step after which Σ lr has reached each share of the whole schedule's Σ lr.

    Example:
        >>> steps_at_shares([1.0, 2.0, 2.0, 2.0, 1.0], [0.25, 0.5, 1.0])
        {0.25: 2, 0.5: 3, 1.0: 5}
    """
    total, running, steps = sum(learning_rates), 0.0, {}
    for step, lr in enumerate(learning_rates, start=1):
        running += lr
        for share in shares:
            if share not in steps and running >= share * total * (1 - 1e-9):
                steps[share] = step
    return {s: steps[s] for s in shares}


def choose(map_points: dict[float, list]) -> dict:
    """The mapped snapshot and λ where DPR's predicted gain is largest, and whether to train at all.

    `map_points`: progress → the preview's DPR points. Only finite λ > 0 with a trusted ESS count. `train` is True only
    when the best point's 95% interval lies above 0. Otherwise the answer is "none": "do not train DPR" when no point
    estimate is above 0, "cannot tell" when the best one is but its interval includes 0. `lambda` still names the
    best point, so an experiment can check the verdict against a policy trained there.

    Example:
        >>> from types import SimpleNamespace as P
        >>> pts = {0.1: [P(lam=2.0, trusted=True, delta=0.04, kl=0.3, delta_ci_low=0.0, delta_ci_high=0.08)],
        ...        1.0: [P(lam=2.0, trusted=True, delta=-0.02, kl=0.2, delta_ci_low=-0.05, delta_ci_high=0.01)]}
        >>> c = choose(pts); c["progress"], c["train"], c["verdict"][:11]
        (0.1, False, 'cannot tell')
        >>> pts[0.1][0].delta_ci_low = 0.01
        >>> choose(pts)["train"], choose({1.0: pts[1.0]})["verdict"][:16]
        (True, 'do not train DPR')
    """
    candidates = [
        (p.delta, progress, p)
        for progress, points in map_points.items()
        for p in points
        if math.isfinite(p.lam) and p.lam > 0 and p.trusted
    ]
    if not candidates:
        raise ValueError("The preview has no trusted finite λ > 0: widen the λ grid or sample more per prompt.")
    gain, progress, point = max(candidates, key=lambda c: (c[0], -c[1]))
    return {
        "progress": progress,
        "lambda": point.lam,
        "target_kl": point.kl,
        "preview_gain": gain,
        "preview_gain_ci": [point.delta_ci_low, point.delta_ci_high],
        "train": point.delta_ci_low > 0,
        "verdict": "train DPR"
        if point.delta_ci_low > 0
        else "cannot tell: the best λ's predicted gain has a 95% interval that includes 0, so no λ is chosen"
        if gain > 0
        else "do not train DPR: no λ is predicted to beat π_SFT",
    }


# ---- stages ---------------------------------------------------------------------------------------------------------


def _snapshot(output_dir: Path, step: int) -> Path:
    return output_dir / "SFT" / f"step{step:04d}"


def _data(args, output_dir: Path) -> Path:
    from trl_dpr.embedded.task import build_demo_dataset

    path = output_dir / "demonstrations.jsonl"
    if not path.is_file():
        train = build_demo_dataset(num_train=args.num_demonstrations, seed=0)["train"]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in train))
        tmp.replace(path)
    return path


def _recipe(arguments, config: str, overrides: dict):
    from .overrides import parse_with_overrides

    return parse_with_overrides(arguments, ["--config", config], overrides)


def _sft(args, output_dir: Path, data: Path) -> dict:
    """One pass over D; snapshots at every share of Σ lr the map and the curve need, and every `snapshot_every` steps."""
    from transformers import TrainerCallback
    from trl import ModelConfig, SFTConfig

    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    record_path = output_dir / "sft_record.json"
    if (record := _read(record_path)) is not None:
        return record
    script_args, training_args, model_args = _recipe(
        (SFTScriptArguments, SFTConfig, ModelConfig),
        args.sft_config,
        {"dataset_name": str(data), "output_dir": str(output_dir / "SFT" / "trainer")},
    )
    steps = math.ceil(args.num_demonstrations / training_args.per_device_train_batch_size)
    training_args.max_steps = steps
    shares = sorted({*args.progress, *(p / 2 for p in args.progress)})
    record = {
        "steps": steps,
        "batch_size": training_args.per_device_train_batch_size,
        "learning_rates": [],
        "snapshots": {},
        "tokens": None,
    }

    class Snapshots(TrainerCallback):
        def on_train_begin(self, _args, state, control, lr_scheduler=None, optimizer=None, **kw):
            base = optimizer.param_groups[0].get("initial_lr", _args.learning_rate)
            record["schedule"] = [base * lr_scheduler.lr_lambdas[0](t) for t in range(steps)]  # the rate of each step
            record["share_steps"] = {str(s): n for s, n in steps_at_shares(record["schedule"], shares).items()}

        def on_step_begin(self, _args, state, control, lr_scheduler=None, **kw):
            record["learning_rates"].append(float(lr_scheduler.get_last_lr()[0]))

        def on_step_end(self, _args, state, control, model=None, processing_class=None, **kw):
            step = state.global_step
            if step in record["share_steps"].values() or step % args.snapshot_every == 0 or step == steps:
                model.save_pretrained(_snapshot(output_dir, step))
                processing_class.save_pretrained(_snapshot(output_dir, step))
                record["snapshots"][str(step)] = str(_snapshot(output_dir, step))
            if step == steps:  # the trainer's own checkpoint, optimizer and schedule included: SFT can go on from it
                control.should_save = True

        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "num_tokens" in logs:
                record["tokens"] = float(logs["num_tokens"])

    start = time.perf_counter()
    run_sft(script_args, training_args, model_args, callbacks=[Snapshots()])
    record["wall_s"] = round(time.perf_counter() - start, 1)
    assert record["learning_rates"] == record["schedule"] or all(
        math.isclose(a, b, rel_tol=1e-6) for a, b in zip(record["learning_rates"], record["schedule"])
    ), "the recorded learning rates differ from the schedule the snapshots were placed by"
    _write(record_path, record)
    return record


def _sft_path(sft: dict, progress: float) -> str:
    return str(Path(sft["snapshots"][str(sft["share_steps"][str(progress)])]))


def _ref_path(sft: dict, progress: float) -> str:
    return str(Path(sft["snapshots"][str(sft["share_steps"][str(progress / 2)])]))


def _sft_name(progress: float) -> str:
    return f"SFT@{round(100 * progress)}%"


def _curve(args, output_dir: Path, sft: dict) -> None:
    """Every `progress` snapshot at every decoding (one shared sampling seed), and its held-out loss."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    eval_rows, _ = _held_out(args)
    losses = _read(output_dir / "held_out_loss.json") or {}
    for progress in args.progress:
        name, path = _sft_name(progress), _sft_path(sft, progress)
        if args.only and name not in args.only:
            continue
        _evaluate(args, output_dir, name, path, path)
        if name not in losses:
            held_out = [
                list(r["prompt"]) + list(r["completion"]) for r in eval_rows.select(range(min(64, len(eval_rows))))
            ]
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            losses[name] = _held_out_loss(model, AutoTokenizer.from_pretrained(path), held_out)
            _write(output_dir / "held_out_loss.json", {**(_read(output_dir / "held_out_loss.json") or {}), **losses})


def _map(args, output_dir: Path, sft: dict) -> dict:
    """The preview at each mapped snapshot, π_ref at half of its own Σ lr; returns progress → report."""
    from trl_dpr.analysis.preview import PreviewConfig, PreviewReport, run_preview

    _, preview_rows = _held_out(args)
    prompts_file = output_dir / "preview_prompts.jsonl"
    if not prompts_file.is_file():
        prompts_file.write_text("".join(json.dumps(row) + "\n" for row in preview_rows))
    reports = {}
    for progress in args.map_progress:
        folder = output_dir / "map" / _sft_name(progress).replace("%", "pct")
        if (folder / "preview.json").is_file():
            reports[progress] = PreviewReport.read(folder / "preview.json")
            continue
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
                "DPR": {"ref_model_name_or_path": _ref_path(sft, progress)},
                "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"},
                "oracle": {"oracle": True},
            },
        )
        start = time.perf_counter()
        reports[progress] = run_preview(config, _sft_path(sft, progress), {"dtype": "float32"}, show_progress=False)
        _write(folder / "wall.json", {"wall_s": round(time.perf_counter() - start, 1)})
    return reports


def _runs(args, choice: dict) -> dict[str, tuple[float, dict]]:
    """Run name → (π_SFT's progress, the run's own keys)."""
    runs = {}
    where = [choice["progress"]] + (
        [] if choice["train"] or min(args.map_progress) == choice["progress"] else [min(args.map_progress)]
    )
    for progress in where:
        suffix = "" if progress == choice["progress"] else f" @{round(100 * progress)}%"
        runs.update({f"DPR-seed{s}{suffix}": (progress, {"seed": s}) for s in args.dpr_seeds})
        runs.update({f"{a}{suffix}": (progress, {"seed": args.dpr_seeds[0], **ABLATIONS[a]}) for a in args.ablations})
    return runs


def _folder(output_dir: Path, name: str) -> Path:
    return output_dir / "rl" / name.replace("/", "_").replace(" ", "_").replace("@", "").replace("%", "pct")


def _train(args, output_dir: Path, data: Path, sft: dict, name: str, progress: float, keys: dict, lam: float) -> dict:
    """`rollouts` rollouts of DPR (or an ablation) from the snapshot at `progress`; snapshots at `eval_fractions`."""
    from transformers import TrainerCallback

    from trl_dpr.running.pipeline import run_dpr

    from .overrides import DPR_ARGUMENTS

    folder = _folder(output_dir, name)
    if (record := _read(folder / "rl_record.json")) is not None:
        return record
    steps = args.rollouts // args.rollouts_per_step
    overrides = {
        "kl_coef": lam,
        "learning_rate": args.learning_rate,
        "max_steps": steps,
        **keys,
        "per_device_train_batch_size": args.rollouts_per_step,
        "model_name_or_path": _sft_path(sft, progress),
        "output_dir": str(folder / "trainer"),
        "dataset_name": str(data),
    }
    if _reads_reference(keys):
        overrides["ref_model_name_or_path"] = _ref_path(sft, progress)
    script_args, training_args, model_args = _recipe(DPR_ARGUMENTS, args.dpr_config, overrides)
    save_at = {max(1, round(f * steps)): f for f in args.eval_fractions}
    history: list[dict] = []

    class Record(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "kl_sft/per_response" in logs:
                history.append(
                    {
                        "step": state.global_step,
                        **{k: float(v) for k, v in logs.items() if isinstance(v, (int, float))},
                    }
                )

        def on_step_end(self, _args, state, control, model=None, processing_class=None, **kw):
            if state.global_step in save_at:
                target = folder / f"at{round(100 * save_at[state.global_step])}"
                model.save_pretrained(target)
                processing_class.save_pretrained(target)

    start = time.perf_counter()
    trainer = run_dpr(script_args, training_args, model_args, callbacks=[Record()])
    tokens = next((h["num_tokens"] for h in reversed(trainer.state.log_history) if "num_tokens" in h), None)
    record = {
        "name": name,
        "progress": progress,
        "steps": trainer.state.global_step,
        "rollouts": args.rollouts,
        "lambda": lam,
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


def _continued(args, output_dir: Path, sft: dict, records: list[dict], progress: float) -> tuple[str, dict] | None:
    """SFT's own continuation from π_SFT (its optimizer and schedule, the same run) for DPR's mean FLOPs: the snapshot
    of the SFT run nearest past that budget; when the pass ends first, its last snapshot, with the share of DPR's
    FLOPs it spent (`flops_share` < 1). None when π_SFT is the pass's last snapshot."""
    parameters = _parameters(_sft_path(sft, progress))
    dpr_flops = sum(dpr_step_flops(parameters, r["tokens"], r["frozen_scorers"]) for r in records) / len(records)
    sft_step_flops = 6 * parameters * sft["tokens"] / sft["steps"]
    start = sft["share_steps"][str(progress)]
    wanted = start + math.ceil(dpr_flops / sft_step_flops)
    later = sorted(int(s) for s in sft["snapshots"] if int(s) >= wanted) or [sft["steps"]]
    if later[0] <= start:
        return None
    info = {
        "from_step": start,
        "to_step": later[0],
        "dpr_mean_flops": dpr_flops,
        "sft_flops": (later[0] - start) * sft_step_flops,
        "flops_share": (later[0] - start) * sft_step_flops / dpr_flops,
    }
    return sft["snapshots"][str(later[0])], info


def main(argv=None):
    from trl_dpr.running.pipeline import print_stage
    from trl_dpr.running.recipe_parser import RecipeParser

    (args,) = RecipeParser((RegimeMapArguments,)).parse_args_and_config(list(sys.argv[1:] if argv is None else argv))
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    every = args.stage == "all"
    print_stage(1, 7, "D and the held-out prompts")
    data = _data(args, output_dir)
    print_stage(2, 7, f"SFT: one pass over {args.num_demonstrations} demonstrations")
    sft = _sft(args, output_dir, data)
    if every or args.stage == "curve":
        print_stage(3, 7, f"SFT's learning curve on {args.eval_prompts} held-out prompts")
        _curve(args, output_dir, sft)
    if args.stage in ("data", "sft", "curve"):
        return
    print_stage(4, 7, f"The preview at SFT progress {args.map_progress}")
    reports = _map(args, output_dir, sft)
    choice = choose({p: r.variant_points("DPR") for p, r in reports.items()})
    _write(output_dir / "choice.json", choice)
    print(f"Choice: {choice}", flush=True)
    if args.stage == "map":
        return
    runs = _runs(args, choice)
    if every or args.stage == "train":
        print_stage(5, 7, f"RL: {args.rollouts} rollouts per run")
        for name, (progress, keys) in runs.items():
            if not args.only or name in args.only:
                _train(args, output_dir, data, sft, name, progress, keys, choice["lambda"])
    if every or args.stage == "evaluate":
        print_stage(6, 7, "Evaluation of the trained policies and SFT's own continuation")
        _evaluate_trained(args, output_dir, sft, runs)
    if every or args.stage == "report":
        print_stage(7, 7, "Report")
        write_report(args, output_dir, sft, reports, choice, runs)


def _evaluate_trained(args, output_dir: Path, sft: dict, runs: dict) -> None:
    full = list(args.decodings)
    for name, (progress, _) in runs.items():
        record = _read(_folder(output_dir, name) / "rl_record.json")
        if record is None or (args.only and name not in args.only):
            continue
        for fraction, path in record["snapshots"].items():
            if not Path(path).is_dir():
                continue
            args.decodings = full if float(fraction) == 1.0 else ["T=1"]
            _evaluate(args, output_dir, f"{name} at {round(100 * float(fraction))}%", path, _sft_path(sft, progress))
    args.decodings = full
    for progress in {p for p, _ in runs.values()}:
        records = [
            r
            for n, (p, _) in runs.items()
            if p == progress and n.startswith("DPR-seed") and (r := _read(_folder(output_dir, n) / "rl_record.json"))
        ]
        if records and (continued := _continued(args, output_dir, sft, records, progress)):
            path, info = continued
            _write(output_dir / f"continued_{round(100 * progress)}.json", info)
            _evaluate(args, output_dir, f"SFT-continued @{round(100 * progress)}%", path, _sft_path(sft, progress))


# ---- report ---------------------------------------------------------------------------------------------------------


def _gain_text(gain: dict) -> str:
    return f"{100 * gain['gain']:+.1f} ({100 * gain['gain_ci'][0]:+.1f} to {100 * gain['gain_ci'][1]:+.1f})"


def pooled_over_seeds(correct: list[dict[str, float]]) -> dict[str, float]:
    """Per prompt id, the mean correctness over the seeds' runs (the prompts every run answered): the seeds pooled
    before pairing with π_SFT, so the interval is over prompts with the seeds' sampling averaged in.

    Example:
        >>> pooled_over_seeds([{"0": 1.0, "1": 0.0, "2": 1.0}, {"0": 0.0, "1": 0.0}, {"0": 1.0, "1": 1.0}])
        {'0': 0.6666666666666666, '1': 0.3333333333333333}
    """
    ids = sorted(set.intersection(*(set(c) for c in correct)), key=int)
    return {i: sum(c[i] for c in correct) / len(correct) for i in ids}


def write_report(args, output_dir: Path, sft: dict, reports: dict, choice: dict, runs: dict) -> None:
    """`regime_map.md` / `.json` (the curve, the map, the trained runs) and `regime_map.png`."""
    evaluation = {p.stem: _read(p) for p in (output_dir / "evaluation").glob("*.json")}

    def result(name):
        return evaluation.get(name.replace("/", "_").replace(" ", "_").replace("(", "").replace(")", ""))

    losses = _read(output_dir / "held_out_loss.json") or {}
    lines = [
        "### SFT's learning curve",
        "",
        "| π_SFT (share of SFT's Σ lr) | step | demonstrations seen | held-out loss per token | T = 1 | T = 0.7 | greedy |",
        "|---|---|---|---|---|---|---|",
    ]
    first = result(_sft_name(args.progress[0]))
    curve_rows = []
    for progress in args.progress:
        name = _sft_name(progress)
        r = result(name)
        step = sft["share_steps"][str(progress)]
        cells = []
        for decoding in DECODINGS:
            if r and decoding in r:
                g = paired_gain(r[decoding]["correct"], r[decoding]["correct"])
                low, high = g["ci"]
                cells.append(f"{100 * g['mean']:.1f}% ({100 * low:.1f}–{100 * high:.1f})")
            else:
                cells.append("not run")
        loss = losses.get(name)
        seen = min(args.num_demonstrations, step * sft["batch_size"])
        lines.append(
            f"| {name} | {step} | {seen} | {'—' if loss is None else f'{loss:.3f}'} | " + " | ".join(cells) + " |"
        )
        curve_rows.append(
            {
                "progress": progress,
                "step": step,
                "loss": loss,
                **{
                    d: r[d] and paired_gain(r[d]["correct"], r[d]["correct"])["mean"]
                    for d in DECODINGS
                    if r and d in r
                },
            }
        )
    del first
    lines += [
        "",
        "### The regime map: the preview at each π_SFT (π_ref at half of its own Σ lr), gains at T = 1",
        "",
        "| π_SFT | π_SFT's accuracy (preview prompts) | DPR: best finite λ, predicted gain (95% CI), KL | "
        "wo/Baseline (sharpening): best λ, gain | oracle: best λ, gain | verdict |",
        "|---|---|---|---|---|---|",
    ]
    map_rows = []
    for progress, report in sorted(reports.items()):
        cells, row = [], {"progress": progress}
        for variant in ("DPR", "wo/Baseline", "oracle"):
            points = [p for p in report.variant_points(variant) if math.isfinite(p.lam) and p.lam > 0 and p.trusted]
            best = max(points, key=lambda p: p.delta) if points else None
            row[variant] = best and {
                "lam": best.lam,
                "gain": best.delta,
                "ci": [best.delta_ci_low, best.delta_ci_high],
                "kl": best.kl,
            }
            cells.append(
                "—"
                if best is None
                else f"λ = {best.lam:g}: {100 * best.delta:+.1f} ({100 * best.delta_ci_low:+.1f} to "
                f"{100 * best.delta_ci_high:+.1f})" + (f", KL {best.kl:.2f}" if variant == "DPR" else "")
            )
        sft_quality = next(p.quality for p in report.variant_points("DPR") if math.isinf(p.lam))
        verdict = (
            "do not train"
            if not row["DPR"] or row["DPR"]["gain"] <= 0
            else "cannot tell (interval includes 0)"
            if row["DPR"]["ci"][0] <= 0
            else "train"
        )
        lines.append(f"| {_sft_name(progress)} | {100 * sft_quality:.1f}% | " + " | ".join(cells) + f" | {verdict} |")
        map_rows.append(row)
    lines += [
        "",
        f"Choice: {choice['verdict']} — π_SFT at {round(100 * choice['progress'])}% of SFT's Σ lr, "
        f"λ = {choice['lambda']:g}, predicted gain {100 * choice['preview_gain']:+.1f} "
        f"({100 * choice['preview_gain_ci'][0]:+.1f} to {100 * choice['preview_gain_ci'][1]:+.1f}) at a KL of "
        f"{choice['target_kl']:.3f} nats per response.",
    ]
    lines += [
        "",
        "### Trained: gains over π_SFT at the same decoding (paired over prompts, shared sampling seed)",
        "",
        "| policy | rollouts (steps) | KL to π_SFT per response | preview's gain at that KL (its own tilt) | T = 1 | T = 0.7 | greedy |",
        "|---|---|---|---|---|---|---|",
    ]
    trained_rows, per_run_lines, readme_lines = [], [], []  # the README: seeds pooled, ablations at the full budget
    for progress in sorted({p for p, _ in runs.values()}):  # sharpening by decoding alone, the control DPR must beat
        base = result(_sft_name(progress))
        if base and all(d in base for d in DECODINGS):
            gains = {d: paired_gain(base[d]["correct"], base["T=1"]["correct"]) for d in ("T=0.7", "greedy")}
            readme_lines.append(
                f"| {_sft_name(progress)} decoded at T = 0.7 / greedily, vs itself at T = 1 (no training) | "
                f"0 | — | — | — | {_gain_text(gains['T=0.7'])} | {_gain_text(gains['greedy'])} |"
            )
    for name, (progress, _) in runs.items():
        base = result(_sft_name(progress))
        record = _read(_folder(output_dir, name) / "rl_record.json")
        if not base or not record:
            continue
        curve = [
            (p.kl, p.delta)
            for p in reports[progress].variant_points("wo/Baseline" if name.startswith("wo/") else "DPR")
            if p.lam > 0
        ]
        for fraction in args.eval_fractions:
            r = result(f"{name} at {round(100 * fraction)}%")
            if not r or "T=1" not in r:
                continue
            kl = sum(r["T=1"]["kl_per_response"].values()) / len(r["T=1"]["kl_per_response"])
            predicted = interpolate_at_kl(curve, kl) if not name.startswith("SR") else None
            gains = {d: paired_gain(r[d]["correct"], base[d]["correct"]) for d in DECODINGS if d in r and d in base}
            rollouts = round(fraction * record["rollouts"])
            row = (
                f"| {name} at {round(100 * fraction)}% | {rollouts} ({round(fraction * record['steps'])}) | "
                f"{kl:.3f} | {'—' if predicted is None else f'{100 * predicted:+.1f}'} | "
                + " | ".join(_gain_text(gains[d]) if d in gains else "not run" for d in DECODINGS)
                + " |"
            )
            per_run_lines.append(row)
            if fraction == 1.0 and not name.startswith("DPR-seed"):
                readme_lines.append(row)
            trained_rows.append(
                {
                    "name": name,
                    "fraction": fraction,
                    "kl": kl,
                    "predicted": predicted,
                    **{d: g for d, g in gains.items()},
                }
            )
    for progress in sorted({p for p, _ in runs.values()}):  # DPR's seeds pooled: per prompt, the mean over the seeds
        seeds = [n for n, (p, _) in runs.items() if p == progress and n.startswith("DPR-seed")]
        for position, fraction in enumerate(args.eval_fractions):
            found = [r for n in seeds if (r := result(f"{n} at {round(100 * fraction)}%")) and "T=1" in r]
            if len(found) < 2 or not (base := result(_sft_name(progress))):
                continue
            kl = sum(
                sum(r["T=1"]["kl_per_response"].values()) / len(r["T=1"]["kl_per_response"]) for r in found
            ) / len(found)
            curve = [(p.kl, p.delta) for p in reports[progress].variant_points("DPR") if p.lam > 0]
            gains = {}
            for d in DECODINGS:
                if d in base and all(d in r for r in found):
                    gains[d] = paired_gain(pooled_over_seeds([r[d]["correct"] for r in found]), base[d]["correct"])
            record = _read(_folder(output_dir, seeds[0]) / "rl_record.json")
            rollouts = round(fraction * record["rollouts"])
            readme_lines.insert(
                1 + position,
                f"| DPR, {len(found)} seeds pooled, at {round(100 * fraction)}% | {rollouts} "
                f"({round(fraction * record['steps'])}) | {kl:.3f} | {100 * interpolate_at_kl(curve, kl):+.1f} | "
                + " | ".join(_gain_text(gains[d]) if d in gains else "not run" for d in DECODINGS)
                + " |",
            )
            trained_rows.append({"name": f"DPR, {len(found)} seeds pooled", "fraction": fraction, "kl": kl, **gains})
    for progress in sorted({p for p, _ in runs.values()}):
        base = result(_sft_name(progress))
        r = result(f"SFT-continued @{round(100 * progress)}%")
        info = _read(output_dir / f"continued_{round(100 * progress)}.json")
        if base and r and info:
            gains = {d: paired_gain(r[d]["correct"], base[d]["correct"]) for d in DECODINGS if d in r and d in base}
            kl = sum(r["T=1"]["kl_per_response"].values()) / len(r["T=1"]["kl_per_response"])
            new = (
                min(args.num_demonstrations, info["to_step"] * sft["batch_size"])
                - info["from_step"] * sft["batch_size"]
            )
            # the rest of one pass: a data control (demonstrations π_SFT never saw), not a compute control
            readme_lines.append(
                f"| SFT finished on the rest of the pass ({new} demonstrations new to π_SFT; its own "
                f"optimizer, steps {info['from_step']} → {info['to_step']}: "
                f"{100 * info['flops_share']:.0f}% of DPR's FLOPs) | — | {kl:.3f} | — | "
                + " | ".join(_gain_text(gains[d]) if d in gains else "not run" for d in DECODINGS)
                + " |"
            )
            trained_rows.append({"name": "SFT-continued", "kl": kl, **gains})
    header = lines[-2:]
    per_run = [
        "",
        "### Each trained run (DPR per seed; every run at 25, 50 and 100% of its rollouts)",
        "",
        *header,
        *per_run_lines,
    ]
    text = "\n".join(lines + readme_lines + per_run) + "\n"
    (output_dir / "regime_map.md").write_text(text)
    # the README shows the map and the trained policies (seeds pooled); the learning curve and each run's rows sit in
    # experiments/README.md, section 11
    curve_end = lines.index(
        "### The regime map: the preview at each π_SFT (π_ref at half of its own Σ lr), gains at T = 1"
    )
    (output_dir / "regime_map_curve.md").write_text("\n".join(lines[2:curve_end] + per_run).strip() + "\n")
    (output_dir / "regime_map_readme.md").write_text("\n".join(lines[curve_end:] + readme_lines).strip() + "\n")
    _write(
        output_dir / "regime_map.json",
        {
            "settings": asdict(args),
            "choice": choice,
            "curve": curve_rows,
            "map": map_rows,
            "trained": trained_rows,
            "sft": {k: v for k, v in sft.items() if k not in ("learning_rates", "schedule")},
        },
    )
    _plot(output_dir, map_rows, runs)
    print(text, flush=True)


def _plot(output_dir: Path, map_rows: list[dict], runs: dict) -> None:
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for variant, style in (("DPR", "o-"), ("wo/Baseline", "s--"), ("oracle", "^:")):
        rows = [r for r in map_rows if r.get(variant)]
        x = [100 * r["progress"] for r in rows]
        y = [100 * r[variant]["gain"] for r in rows]
        err = [
            [100 * (r[variant]["gain"] - r[variant]["ci"][0]) for r in rows],
            [100 * (r[variant]["ci"][1] - r[variant]["gain"]) for r in rows],
        ]
        left.errorbar(x, y, yerr=err, fmt=style, capsize=3, label=f"{variant} (best λ)")
    left.axhline(0, color="grey", lw=0.8)
    left.set(
        xlabel="π_SFT: share of SFT's Σ lr (%)",
        ylabel="predicted accuracy gain at T = 1 (points)",
        title="The preview along SFT",
    )
    left.legend()
    for (
        name
    ) in runs:  # one step's KL is an estimate from its 16 samples (it can be < 0): shown faint, 5-step mean bold
        record = _read(_folder(output_dir, name) / "rl_record.json")
        if record:
            steps = [h["step"] for h in record["history"]]
            kl = [h["kl_sft/per_response"] for h in record["history"]]
            mean = [sum(kl[max(0, i - 4) : i + 1]) / len(kl[max(0, i - 4) : i + 1]) for i in range(len(kl))]
            (line,) = right.plot(steps, mean, label=f"{name} (5-step mean)")
            right.plot(steps, kl, color=line.get_color(), alpha=0.25, lw=0.8)
    choice = _read(output_dir / "choice.json")
    if choice:
        right.axhline(choice["target_kl"], color="grey", ls="--", lw=0.8, label="preview's target KL")
    right.set(xlabel="RL step", ylabel="KL to π_SFT per response (nats)", title="KL during RL")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(output_dir / "regime_map.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
