"""A DPR step on a real pretrained LM (SmolLM2-135M-Instruct by default): against the equivalent GRPO step, and split
into its parts against each part's floor.

    python benchmarks/real_model_step.py                                  # both measurements, ~20 min on 1 CPU thread
    python benchmarks/real_model_step.py --part pairs --pairs 3 --warmup 1
    python benchmarks/real_model_step.py --part split --repeats 3 --profile
    python benchmarks/real_model_step.py --model runs/smollm2-135m/SmolLM2-135M-Instruct.Q4_1-hf --sft runs/smollm2-135m/sft

`--part pairs`: a DPR step against a TRL GRPO step doing equivalent work (as `step_cost.py`: GRPO scores with a
sequence classifier built from the same weights and keeps a beta > 0 reference model, i.e. two frozen forwards per
batch like DPR's π_SFT and π_ref; both sample `--batch-size` completions per step, DPR as B prompts x 1, GRPO as B/2 x
2, of exactly `--completion-length` tokens (EOS suppressed until then) after the same prompt, so generation work is
identical). The two trainers live in two processes started together, and take turns step by step: DPR step, GRPO
step, DPR step, ... (each waits for the parent's signal before a step), so a drift in the machine's speed (other jobs
on a shared machine) hits both alike. The reading is the median over pairs of DPR / GRPO.

`--part split`: one DPR process. Each step is timed by part (generation: `_generate_single_turn`, with DPR's
sampled-token log-prob recorder; reward scoring: `CheckpointRewardModel.forward`, π_SFT and π_ref; batch: the rest of
`_prepare_inputs`, i.e. padding, advantages, metrics; policy update: the rest of the step, loss forward, backward,
gradient clipping, optimizer), and after each step each part's floor is measured on the ids that step produced:
`model.generate` of the same prompts with the trainer's generation config; one plain no-grad forward of π_SFT and one of
π_ref on prompt ‖ completion (logits of the completion positions only, as the scorer needs); one plain forward
(completion logits, log-softmax of the sampled tokens) + backward + AdamW step of a copy of the policy. `--profile`
adds one step, and the floors once more, under `torch.profiler`, and prints the ops whose self time exceeds their
floor's most.

The SFT output both trainers need (`--sft`) defaults to one built from `--model` under `--workdir`: π_SFT is the
model (its files linked), π_ref a copy with every weight perturbed by 1 % of its tensor's standard deviation (so the
rewards are not all 0; a step's cost does not depend on the values). Results are printed and appended to `--output` as
JSON lines, with the load average and the other processes using the CPU at the start and at the end.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

DEFAULT_MODEL = "runs/smollm2-135m/SmolLM2-135M-Instruct.Q4_1-hf"
# The embedded demo's median prompt (51 tokens with SmolLM2's chat template and system prompt).
PROMPT = [{"role": "user", "content": "Sam has 40 apples. He gets 2 more. How many apples does Sam have now?"}]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="a causal LM folder: the policy, and GRPO's reward model"
    )
    parser.add_argument("--sft", help="an SFT output folder (π_SFT + dpr_reference/); default: built from --model")
    parser.add_argument("--part", default="both", choices=["pairs", "split", "both"])
    parser.add_argument("--batch-size", type=int, default=8, help="completions per step")
    parser.add_argument("--completion-length", type=int, default=112)
    parser.add_argument("--kl-coef", type=float, default=1.0, help="DPR's KL to π_SFT (the recipe's λ)")
    parser.add_argument("--pairs", type=int, default=3, help="measured (DPR step, GRPO step) pairs")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured pairs (split: steps) first")
    parser.add_argument("--repeats", type=int, default=3, help="measured DPR steps of the split, each with its floors")
    parser.add_argument("--profile", action="store_true", help="split: profile one more step and the floors")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--only", choices=["dpr", "grpo", "split"], help=argparse.SUPPRESS)  # internal: one process
    parser.add_argument("--workdir", default="runs/bench_real")
    parser.add_argument("--output", default="benchmarks/results/real_model_step.jsonl")
    return parser.parse_args(argv)


# ---- the machine --------------------------------------------------------------------------------------------------


def machine_load() -> dict:
    """The load average and the processes using the CPU (other than this benchmark's), to record beside a timing."""
    listing = subprocess.run(
        ["ps", "-eo", "pid,pcpu,rss,args", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    others = []
    for line in listing:
        pid, cpu, rss, command = line.split(None, 3)
        if float(cpu) >= 5.0 and "real_model_step.py" not in command:
            others.append(
                {"pid": int(pid), "cpu_percent": float(cpu), "rss_mib": int(rss) // 1024, "command": command[:160]}
            )
    return {"loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()], "other_processes": others}


def hardware() -> str:
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), ""
    )
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return f"{os.cpu_count()} CPU cores, {model or platform.machine()}, {memory / 2**20:.0f} GiB RAM, no GPU"


def peak_rss_reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets the peak resident set size (VmHWM)
        f.write("5")


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def emit(record: dict) -> None:
    """One JSON line to the parent (stdout may also carry library messages: the parent keeps the JSON lines)."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# ---- one trainer in this process --------------------------------------------------------------------------------


def sft_output(args) -> str:
    """The SFT output folder: `--sft`, or π_SFT = `--model` (files linked) with a perturbed copy as π_ref."""
    if args.sft:
        return args.sft
    import torch
    from transformers import AutoModelForCausalLM

    from trl_dpr.reference_manifest import ReferenceManifest, write_manifest

    folder = Path(args.workdir) / "sft"
    if (folder / "dpr_reference.json").is_file():
        return str(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for source in Path(args.model).iterdir():
        if source.is_file() and not (folder / source.name).exists():
            (folder / source.name).symlink_to(source.resolve())
    reference = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * parameter.float().std() * 0.01)
    reference.save_pretrained(folder / "dpr_reference")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(args.model) / name).is_file():
            (folder / "dpr_reference" / name).write_bytes((Path(args.model) / name).read_bytes())
    write_manifest(folder, ReferenceManifest("dpr_reference", fraction=0.5, step=5, total_steps=10))
    return str(folder)


def build_trainer(args, kind: str):
    """A DensePathTrainer (`dpr`) or the equivalent GRPOTrainer (`grpo`) on the same model, batch and lengths."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trl_dpr import DensePathConfig, DensePathTrainer

    torch.set_num_threads(args.threads)
    sft = sft_output(args)  # before the trainer: both processes of a pair may build it, the first one wins
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    dataset = Dataset.from_dict({"prompt": [PROMPT] * 4096})  # one prompt: every batch is the same work
    common = dict(
        output_dir=str(Path(args.workdir) / f"{kind}-{os.getpid()}"),
        per_device_train_batch_size=args.batch_size,
        max_steps=1000,
        max_completion_length=args.completion_length,
        learning_rate=1e-5,
        warmup_steps=0,
        logging_steps=1000,
        save_strategy="no",
        report_to="none",
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
        temperature=1.0,
        generation_kwargs={"min_new_tokens": args.completion_length},  # every completion has the same length
    )
    if kind == "grpo":
        reward = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1, dtype=torch.float32)
        reward.config.pad_token_id = tokenizer.pad_token_id
        return GRPOTrainer(
            model=args.model,
            reward_funcs=reward,
            reward_processing_classes=tokenizer,
            processing_class=tokenizer,
            train_dataset=dataset,
            args=GRPOConfig(num_generations=2, beta=0.04, model_init_kwargs={"dtype": torch.float32}, **common),
        )
    return DensePathTrainer(
        model=None,
        reward_model=sft,
        processing_class=tokenizer,
        train_dataset=dataset,
        args=DensePathConfig(
            kl_coef=args.kl_coef, overwrite_output_dir=True, model_init_kwargs={"dtype": torch.float32}, **common
        ),
    )


class PartClock:
    """Seconds spent in named methods of a trainer during the current step (nested parts are subtracted later)."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def wrap(self, owner, attribute: str, part: str) -> None:
        import torch

        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            with torch.profiler.record_function(f"part/{part}"):  # names the part in a torch.profiler trace
                try:
                    return original(*args, **kwargs)
                finally:
                    self.seconds[part] += time.perf_counter() - start

        setattr(owner, attribute, timed)

    def instrument(self, trainer) -> None:
        self.wrap(trainer, "_generate_single_turn", "generation")
        self.wrap(trainer, "_prepare_inputs", "prepare")  # generation + scoring + the batch (padding, advantages)
        self.wrap(trainer, "compute_loss", "loss_forward")
        self.wrap(trainer.accelerator, "backward", "backward")
        if hasattr(trainer, "reward_model"):  # DPR: π_SFT and π_ref (GRPO's reference forward is not separable)
            self.wrap(trainer.reward_model, "forward", "scoring")

    def step_parts(self, step_seconds: float) -> dict:
        s = self.seconds
        parts = {"step": step_seconds, "generation": s["generation"], "scoring": s["scoring"]}
        parts["batch_other"] = s["prepare"] - s["generation"] - s["scoring"]
        parts["update"] = step_seconds - s["prepare"]  # loss forward, backward, clipping, optimizer, zero_grad
        parts["loss_forward"], parts["backward"], parts["optimizer"] = s["loss_forward"], s["backward"], s["optimizer"]
        return parts


def step_callback(clock: PartClock, before_step=None, after_step=None):
    """Times each optimizer step (and its optimizer.step) into `clock`; `before_step()` / `after_step(parts)` hooks."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *unused, **kwargs):
            if before_step is not None:
                before_step()
            clock.seconds.clear()
            self.start = time.perf_counter()

        def on_pre_optimizer_step(self, *unused, **kwargs):
            self.optimizer_start = time.perf_counter()

        def on_optimizer_step(self, *unused, **kwargs):
            clock.seconds["optimizer"] += time.perf_counter() - self.optimizer_start

        def on_step_end(self, *unused, **kwargs):
            parts = clock.step_parts(time.perf_counter() - self.start)
            if after_step is not None:
                after_step(parts)

    return StepTimer()


class Stop(Exception):
    """Raised from a callback to end `trainer.train()` once the measurement is done."""


def run_turns(args) -> None:
    """A pair's member (`--only dpr|grpo`): before each step wait for "go" on stdin; after it, emit its parts."""
    trainer = build_trainer(args, args.only)
    clock = PartClock()
    clock.instrument(trainer)
    steps = []

    def before_step():
        if sys.stdin.readline().strip() != "go":
            raise Stop
        if len(steps) == args.warmup:
            peak_rss_reset()

    def after_step(parts):
        steps.append(parts)
        emit({"index": len(steps), **parts, "peak_rss_bytes": peak_rss_bytes()})

    trainer.add_callback(step_callback(clock, before_step, after_step))
    try:
        trainer.train()
    except Stop:
        pass


# ---- the split: a DPR step against its floors ---------------------------------------------------------------------


class Floors:
    """Each part of a DPR step done plainly, on the ids a DPR step produced."""

    def __init__(self, trainer):
        import copy

        import torch

        self.trainer = trainer
        self.policy = trainer.accelerator.unwrap_model(trainer.model)
        self.scorers = [trainer.reward_model.sft_model, trainer.reward_model.ref_model]
        self.policy_copy = copy.deepcopy(self.policy).train()  # its own weights and AdamW: the run is left as it is
        self.optimizer = torch.optim.AdamW(self.policy_copy.parameters(), lr=trainer.args.learning_rate)

    def generation(self, batch):
        import torch

        with torch.no_grad():
            self.policy.generate(
                input_ids=batch["prompt_ids"],
                attention_mask=batch["prompt_mask"],
                generation_config=self.trainer.generation_config,
            )

    def scoring(self, batch):
        import torch

        input_ids, attention_mask, keep = self._sequence(batch)
        with torch.no_grad():
            for scorer in self.scorers:
                scorer(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep, use_cache=False)

    def update(self, batch):
        input_ids, attention_mask, keep = self._sequence(batch)
        logits = self.policy_copy(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits[
            :, :-1
        ]
        logps = logits.log_softmax(dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
        mask = batch["completion_mask"]
        (-(logps * mask).sum() / mask.sum()).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    @staticmethod
    def _sequence(batch):
        import torch

        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        return input_ids, attention_mask, batch["completion_ids"].size(1) + 1

    def measure(self, batch) -> dict:
        seconds = {}
        for part in ("generation", "scoring", "update"):
            start = time.perf_counter()
            getattr(self, part)(batch)
            seconds[part] = time.perf_counter() - start
        return seconds


def self_cpu_by_op(profiler) -> dict:
    """Self CPU seconds per op name (user-annotated ranges excluded) from a finished torch.profiler run."""
    return {e.key: e.self_cpu_time_total / 1e6 for e in profiler.key_averages() if not e.key.startswith("part/")}


def run_split(args) -> None:
    """`--only split`: `--warmup` + `--repeats` DPR steps, each followed by its floors (+ one profiled step)."""
    from torch.profiler import ProfilerActivity, profile

    trainer = build_trainer(args, "dpr")
    clock = PartClock()
    clock.instrument(trainer)
    floors = Floors(trainer)
    batch = {}
    original = trainer._generate_and_score_completions

    def keep_batch(inputs):  # the ids of this step's batch, for its floors
        output = original(inputs)
        batch.update({k: output[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")})
        return output

    trainer._generate_and_score_completions = keep_batch
    steps = []
    profiler = None

    def before_step():
        nonlocal profiler
        if len(steps) == args.warmup + args.repeats:  # the profiled step
            profiler = profile(activities=[ProfilerActivity.CPU])
            profiler.__enter__()

    def after_step(parts):
        nonlocal profiler
        if profiler is not None:
            profiler.__exit__(None, None, None)
            step_ops, step_profiler = self_cpu_by_op(profiler), profiler
            with profile(activities=[ProfilerActivity.CPU]) as floor_profiler:
                floors.measure(batch)
            floor_ops = self_cpu_by_op(floor_profiler)
            excess = sorted(
                ((op, seconds, floor_ops.get(op, 0.0)) for op, seconds in step_ops.items()),
                key=lambda row: row[2] - row[1],
            )
            parts_total = {
                e.key[len("part/") :]: e.cpu_time_total / 1e6
                for e in step_profiler.key_averages()
                if e.key.startswith("part/")
            }
            emit(
                {
                    "profile": True,
                    **parts,
                    "profiled_step_seconds": parts["step"],
                    "profiled_floors_seconds": sum(floor_ops.values()),
                    "part_cpu_seconds": parts_total,
                    "top_excess_ops": [
                        {
                            "op": op,
                            "step_self_cpu_s": round(s, 4),
                            "floors_self_cpu_s": round(f, 4),
                            "excess_s": round(s - f, 4),
                        }
                        for op, s, f in excess[:15]
                    ],
                    "top_step_ops": [
                        {"op": op, "self_cpu_s": round(s, 4)}
                        for op, s in sorted(step_ops.items(), key=lambda kv: -kv[1])[:15]
                    ],
                }
            )
            raise Stop
        floor = floors.measure(batch)
        steps.append(parts)
        if len(steps) > args.warmup:
            emit({"index": len(steps), **parts, "floors": floor})
            print(
                f"split step {len(steps)}: {parts['step']:.2f} s, floors {sum(floor.values()):.2f} s",
                file=sys.stderr,
                flush=True,
            )
        if len(steps) == args.warmup + args.repeats and not args.profile:
            raise Stop

    trainer.add_callback(step_callback(clock, after_step=after_step, before_step=before_step))
    try:
        trainer.train()
    except Stop:
        pass


# ---- the parent: runs the processes, writes the results -----------------------------------------------------------


def child(args_list, kind, log_path):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    return subprocess.Popen(
        [sys.executable, __file__, *args_list, "--only", kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(log_path, "w"),
        text=True,
        env=env,
    )


def read_record(process, log_path) -> dict:
    for line in process.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(
        f"a benchmark process ended early (exit {process.wait()}); its log {log_path}:\n"
        + Path(log_path).read_text()[-3000:]
    )


def measure_pairs(args, args_list) -> dict:
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    sft_output(args)  # built once, before the two processes start
    logs = {kind: Path(args.workdir) / f"pairs-{kind}.log" for kind in ("dpr", "grpo")}
    processes = {kind: child(args_list, kind, logs[kind]) for kind in ("dpr", "grpo")}
    steps = {"dpr": [], "grpo": []}
    try:
        for _ in range(args.warmup + args.pairs):
            for kind in ("dpr", "grpo"):  # DPR step, GRPO step, DPR step, ...
                processes[kind].stdin.write("go\n")
                processes[kind].stdin.flush()
                steps[kind].append(read_record(processes[kind], logs[kind]))
                row = steps[kind][-1]
                print(f"{kind:4s} step {row['index']}: {row['step']:.2f} s", file=sys.stderr, flush=True)
    finally:
        for process in processes.values():
            process.stdin.close()  # "no more steps": the process stops its run
            process.wait()
    measured = {kind: rows[args.warmup :] for kind, rows in steps.items()}
    ratios = [d["step"] / g["step"] for d, g in zip(measured["dpr"], measured["grpo"])]
    return {
        "part": "pairs",
        "steps": measured,
        "median_step_seconds": {kind: statistics.median(r["step"] for r in rows) for kind, rows in measured.items()},
        "median_parts_seconds": {
            kind: {
                p: statistics.median(r[p] for r in rows) for p in ("generation", "scoring", "batch_other", "update")
            }
            for kind, rows in measured.items()
        },
        "pair_ratios_dpr_over_grpo": ratios,
        "median_pair_ratio_dpr_over_grpo": statistics.median(ratios),
        "peak_rss_bytes": {kind: rows[-1]["peak_rss_bytes"] for kind, rows in measured.items()},
    }


def measure_split(args, args_list) -> dict:
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    log = Path(args.workdir) / "split.log"
    process = child(args_list, "split", log)
    process.stdin.close()
    records = []
    for _ in range(args.repeats + int(args.profile)):
        records.append(read_record(process, log))
    process.wait()
    steps = [r for r in records if not r.get("profile")]
    parts = ("generation", "scoring", "update")
    median = {p: statistics.median(r[p] for r in steps) for p in (*parts, "batch_other", "step")}
    floor = {p: statistics.median(r["floors"][p] for r in steps) for p in parts}
    # Per repeat: the step over the sum of its own floors (measured right after it), then the median.
    ratios = [r["step"] / sum(r["floors"].values()) for r in steps]
    result = {
        "part": "split",
        "steps": steps,
        "median_seconds": median,
        "median_floor_seconds": floor,
        "step_over_floors_per_repeat": ratios,
        "median_step_over_floors": statistics.median(ratios),
        "part_over_floor": {p: median[p] / floor[p] for p in parts},
    }
    if args.profile:
        result["profile"] = next(r for r in records if r.get("profile"))
    return result


def print_pairs(result):
    print("\npairs (DPR step, GRPO step) in turn; medians over pairs, seconds")
    print(f"{'':6s} {'step':>7s} {'generation':>11s} {'scoring+batch':>14s} {'update':>7s} {'peak RSS':>9s}")
    for kind in ("dpr", "grpo"):
        m = result["median_parts_seconds"][kind]
        print(
            f"{kind:6s} {result['median_step_seconds'][kind]:7.2f} {m['generation']:11.2f} "
            f"{m['scoring'] + m['batch_other']:14.2f} {m['update']:7.2f} {result['peak_rss_bytes'][kind] / 2**30:8.2f}G"
        )
    ratios = ", ".join(f"{r:.3f}" for r in result["pair_ratios_dpr_over_grpo"])
    print(f"DPR / GRPO per pair: {ratios}; median {result['median_pair_ratio_dpr_over_grpo']:.3f}")


def print_split(result):
    m, f = result["median_seconds"], result["median_floor_seconds"]
    print("\nsplit: DPR step parts against their floors; medians over repeats, seconds")
    for part in ("generation", "scoring", "update"):
        print(f"{part:12s} {m[part]:7.2f}  floor {f[part]:7.2f}  x{m[part] / f[part]:.2f}")
    print(f"{'batch_other':12s} {m['batch_other']:7.2f}  floor    0.00")
    print(
        f"{'step':12s} {m['step']:7.2f}  floors {sum(f.values()):6.2f}  x{result['median_step_over_floors']:.2f} "
        f"(per repeat: {', '.join(f'{r:.3f}' for r in result['step_over_floors_per_repeat'])})"
    )
    if "profile" in result:
        print("ops with the largest self CPU time over the floors' (profiled step):")
        for row in result["profile"]["top_excess_ops"][:10]:
            print(f"  {row['op']:40s} step {row['step_self_cpu_s']:7.3f} s  floors {row['floors_self_cpu_s']:7.3f} s")


def main(argv=None):
    args = parse_args(argv)
    args_list = argv if argv is not None else sys.argv[1:]
    if args.only == "split":
        return run_split(args)
    if args.only:
        return run_turns(args)
    import torch
    import transformers
    import trl

    record = {
        "date": date.today().isoformat(),
        "hardware": hardware(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
            "python": platform.python_version(),
        },
        "command": "python benchmarks/real_model_step.py " + " ".join(args_list),
        "model": args.model,
        "sft": args.sft or "built from --model (π_ref perturbed by 1 %)",
        "batch": args.batch_size,
        "completion_length": args.completion_length,
        "kl_coef": args.kl_coef,
        "threads": args.threads,
        "load_at_start": machine_load(),
    }
    start = time.time()
    results = []
    if args.part in ("pairs", "both"):
        results.append(measure_pairs(args, args_list))
        print_pairs(results[-1])
    if args.part in ("split", "both"):
        results.append(measure_split(args, args_list))
        print_split(results[-1])
    record.update(results=results, load_at_end=machine_load(), wall_seconds=round(time.time() - start))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
