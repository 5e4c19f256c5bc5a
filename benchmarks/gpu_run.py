"""The stages of `bash benchmarks/gpu_run.sh` after the install: the GPU tier, then the benchmarks, each a subprocess
with a time limit inside one window, its log and JSON lines under one folder, and a summary table at the end.

    python benchmarks/gpu_run.py --out DIR [--smoke] [--window-seconds 510] [--skip-tier] [--stages a,b,...]

`--smoke` runs every stage on the CPU at toy sizes (a tiny Llama, a few steps), so the script, its parsing and its
table are proven where no GPU is. On the GPU the 8B stages use the Llama-3.1-8B shape with random weights, QLoRA on one
shared base (benchmarks/memory_8b.py), with the recipe's generation settings and the lengths cut to fit the window:
prompt 256 + completion 128 tokens (the recipe: 1024 + 1024), rollout batch 128 (the recipe: 1024).

The stages run in order of what is still owed (the batch-2 baseline, measured on an H200 on 2026-11-28, near the end),
and `--stages` names the ones a later window runs. A stage that would start with less of the window left than it
usually takes says so in its row and leaves its time to a later, shorter one. A stage that runs past its limit gets
SIGINT (pytest then writes its report), SIGKILL 20 s later, and so do the process groups of everything it started.
The tier's tests are reported one by one as they end (tests/report_plugin.py, `TRL_DPR_TEST_REPORT`), so a window
that runs out still says which passed, which failed and why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
RECIPE = "llama-3.1-8b/dpr/config_qlora.yaml"
# About how long each stage takes on an H100/H200 (the H200 window of 2026-11-28, the 8B stages scaled from rollout 32
# to 128): a stage is not started with less of the window left, so a later, shorter one can still run. The order puts
# the DPR/GRPO pairs (owed since the first window, a ratio from one pair, no 8B checkpoint needed) right after the
# tier, then the headline measurement (the recipe's continuous batching at rollout 128); the batch-2 baseline,
# measured on an H100 and an H200, runs last.
NEEDS_SECONDS = {
    "tier": 60,
    "dpr_over_grpo": 65,  # one alternating pair; step_cost.py writes a summary after each
    "prepare_8b": 45 + 110,  # writing the 8B shape is worth it only if an 8B stage can follow
    "recipe_continuous_batching": 165,
    "continuous_batching_cuda_graphs": 165,
    "fit_24_gib": 140,
    "generate_rollout": 110,
    "fast_generation": 110,
    "generate_batch_2": 80,
    "memory_1b": 60,
}


@dataclass
class Stage:
    name: str
    what: str
    gpu: list[str]
    smoke: list[str]
    limit_s: int  # on the GPU; a smoke stage gets at most half
    rows: list[list[str]] = field(default_factory=list)  # [what, result, goal] rows for the table
    seconds: float = 0.0


def memory_8b(name: str, smoke: bool, *flags: str) -> list[str]:
    """benchmarks/memory_8b.py on the 8B shape (GPU) or the tiny one (smoke), shared base only, writing NAME.jsonl."""
    sizes = (
        ["--tiny", "--device", "cpu", "--prompt-length", "32", "--completion-length", "16"]
        if smoke
        else ["--prompt-length", "256", "--completion-length", "128"]
    )
    return [
        sys.executable,
        "benchmarks/memory_8b.py",
        *sizes,
        "--layouts",
        "shared_base",
        "--output",
        f"{{out}}/{name}.jsonl",
        *flags,
    ]


def tier_workers(smoke: bool) -> list[str]:
    """pytest-xdist's flags for the tier: its tests side by side (the six GPU tests, each a new process on a tiny model,
    took ~250 s one after another on the H200, over the 4 minutes the tier gets), or one after another where xdist
    (carried by gpu_run.sh) does not import with this pytest; `-p no:xdist` then keeps a broken plugin from loading."""
    try:
        import pytest
        import xdist.plugin  # noqa: F401

        usable = int(pytest.__version__.split(".")[0]) >= 7  # pytest-xdist 3's own requirement
    except Exception:  # noqa: BLE001 - any failure to import means: run the tier one test at a time
        usable = False
    return ["-n", "2" if smoke else "6", "--dist", "load"] if usable else ["-p", "no:xdist"]


def stages(smoke: bool, fit: dict) -> list[Stage]:
    """The stages in the order they run; `fit` is the `trl-dpr memory --fit --gpu_memory_gib 24` values (or {})."""
    rollout, micro = ("4", "2") if smoke else ("128", "8")
    cb = ["--generation", "continuous_batching", "--max-batch-tokens", "128" if smoke else "4096"]
    blocks = "4" if smoke else "1024"  # the recipe's 1024 blocks of 256 tokens: a 32 GiB cache
    fit_micro = str(fit.get("per_device_train_batch_size", micro))
    fit_blocks = str((fit.get("transformers_continuous_batching_config") or {}).get("num_blocks", blocks))
    steps = ["--steps", "1", "--warmup", "1"]

    def eight_b(name, what, gpu_flags, smoke_flags, limit_s):
        return Stage(name, what, memory_8b(name, False, *gpu_flags), memory_8b(name, True, *smoke_flags), limit_s)

    # The tier on the CPU: the CPU variants of its checks in the same file (the slow one, a demo run, is left out)
    tier = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not gpu and not slow" if smoke else "gpu",
        "tests/end_to_end/test_gpu.py",
        "-rs",
        "--tb=short",
        "--junitxml={out}/tier.xml",
        *tier_workers(smoke),
    ]
    return [
        Stage("tier", "the GPU tier (tests/end_to_end/test_gpu.py)", tier, tier, 240),
        Stage(
            "dpr_over_grpo",
            "DPR / GRPO step time, alternating pairs (benchmarks/step_cost.py)",
            [
                sys.executable,
                "benchmarks/step_cost.py",
                "--device",
                "cuda",
                "--hidden-size",
                "1024",
                "--layers",
                "8",
                "--completion-length",
                "64",  # 4 subprocesses, each paying its imports and CUDA start: two pairs in the stage's limit
                "--batch-size",
                "8",
                "--steps",
                "3",
                "--warmup",
                "1",
                "--repeats",
                "2",
                "--configurations",
                "dpr",
                "grpo",
                "--output",
                "{out}/dpr_over_grpo.jsonl",
            ],
            [
                sys.executable,
                "benchmarks/step_cost.py",
                "--hidden-size",
                "64",
                "--layers",
                "2",
                "--completion-length",
                "16",
                "--batch-size",
                "4",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--repeats",
                "1",
                "--threads",
                "1",
                "--configurations",
                "dpr",
                "grpo",
                "--output",
                "{out}/dpr_over_grpo.jsonl",
            ],
            130,
        ),
        Stage(
            "prepare_8b",
            "the 8B shape's random base and adapters, written once (16 GB)",
            memory_8b("prepare_8b", False, "--prepare-only"),
            memory_8b("prepare_8b", True, "--prepare-only"),
            180,
        ),
        eight_b(
            "recipe_continuous_batching",
            "8B DPR step, the recipe's generation (continuous batching)",
            [*cb, "--batch-size", micro, "--generation-batch-size", rollout, "--num-blocks", blocks, *steps],
            [*cb, "--batch-size", micro, "--generation-batch-size", rollout, "--num-blocks", blocks, *steps],
            220,
        ),
        eight_b(
            "continuous_batching_cuda_graphs",
            "8B DPR step, the recipe's continuous batching with CUDA graphs (`use_cuda_graph: true`)",
            [
                *cb,
                "--batch-size",
                micro,
                "--generation-batch-size",
                rollout,
                "--num-blocks",
                blocks,
                "--cuda-graph",
                *steps,
            ],
            [
                *cb,
                "--batch-size",
                micro,
                "--generation-batch-size",
                rollout,
                "--num-blocks",
                blocks,
                "--cuda-graph",
                *steps,
            ],
            220,
        ),
        eight_b(
            "fit_24_gib",
            "8B DPR step at `--fit --gpu_memory_gib 24`'s values, card capped at 24 GiB",
            [
                *cb,
                "--batch-size",
                fit_micro,
                "--generation-batch-size",
                rollout,
                "--num-blocks",
                fit_blocks,
                "--gpu-memory-gib",
                "24",
                *steps,
            ],
            [*cb, "--batch-size", micro, "--generation-batch-size", rollout, "--num-blocks", blocks, *steps],
            180,
        ),
        eight_b(
            "generate_rollout",
            f"8B DPR step, one generate call at the rollout batch ({rollout})",
            ["--batch-size", micro, "--generation-batch-size", rollout, *steps],
            ["--batch-size", micro, "--generation-batch-size", rollout, *steps],
            170,
        ),
        eight_b(
            "fast_generation",
            f"8B DPR step, `fast_generation` (static cache) at the rollout batch ({rollout})",
            ["--batch-size", micro, "--generation-batch-size", rollout, "--fast-generation", *steps],
            ["--batch-size", micro, "--generation-batch-size", rollout, "--fast-generation", *steps],
            170,
        ),
        eight_b(
            "memory_1b",
            "1B-shape DPR step, one generate call (the tier's old memory-plan check, failed on the H200 unread)",
            ["--shape", "llama-3.2-1b", "--steps", "1"],
            ["--steps", "1"],
            120,
        ),
        eight_b(
            "generate_batch_2",
            "8B DPR step, one generate call at batch 2 (the baseline: 81 tokens/s on an H100, 62 on an H200)",
            ["--batch-size", "2", "--steps", "2", "--warmup", "1"],
            ["--batch-size", "2", *steps],
            120,
        ),
    ]


# ---- reading what a stage left ------------------------------------------------------------------------------------


def tier_rows(out: Path) -> list[list[str]]:
    """One row per test of the tier's report (tests/conftest.py writes it as each test ends): its outcome, time and,
    for a failure, the error's last line; a test that started and never ended was running when the limit struck."""
    path = out / "tier.jsonl"
    if not path.is_file():
        return [["tier", "no test started", ""]]
    tests: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:  # a line cut by SIGKILL mid-write: the others still count
            continue
        for nodeid in event["tests"] if event["event"] == "collected" else [event["test"]]:
            test = tests.setdefault(nodeid.split("::", 1)[-1], {"outcome": None, "seconds": 0.0, "message": ""})
            test["started"] = test.get("started", False) or event["event"] != "collected"
        if event["event"] in ("collected", "start"):
            continue
        test["seconds"] += event["seconds"]
        if test["outcome"] in (None, "passed"):
            test["outcome"] = (
                "error" if event["outcome"] == "failed" and event["event"] != "call" else event["outcome"]
            )
            test["message"] = event.get("message", test["message"])
    rows = []
    for name, test in tests.items():
        if test["outcome"] is None:
            result = "running when the limit struck" if test["started"] else "not started: the limit struck first"
        else:
            result = f"{test['outcome']}, {test['seconds']:.1f} s" + (
                f": {test['message']}" if test["message"] else ""
            )
        rows.append([f"tier: {name}".replace("|", "/"), result.replace("|", "/"), ""])
    return rows or [["tier", "no test collected (tier.log says why)", ""]]


def eight_b_rows(out: Path, stage: Stage, smoke: bool) -> list[list[str]]:
    record = json.loads((out / f"{stage.name}.jsonl").read_text().splitlines()[-1])["results"]["shared_base"]
    profile = record["step_profile_seconds"]
    used = f", card {record['card_memory_used']:.0%} used" if record.get("card_memory_used") else ""
    if smoke:  # resident memory of the whole process against the plan's GPU tensors: no ratio to read
        memory = f"peak resident {record['peak_memory_bytes'] / 2**20:.0f} MiB (CPU: not the plan's GPU tensors)"
    else:
        memory = (
            f"peak {record['peak_memory_bytes'] / GIB:.2f} GiB vs plan {record['planned_peak_bytes'] / GIB:.2f} GiB "
            f"without margin ({record['planned_peak_phase']} peak){used}"
        )
    result = (
        f"{record['tokens_per_second']:.0f} tokens/s; {memory}; "
        f"step {record['mean_step_seconds']:.2f} s = generation {profile['generation']:.2f} + scoring "
        f"{profile['scoring']:.2f} + update {profile['update']:.2f}"
    )
    goals = []
    if not smoke:  # the memory plan against the measured peak (what the tier's 1B check was)
        ratio = record["measured_over_planned"]
        goals.append(f"peak within ±10% of the plan: {ratio:.2f}, {'met' if 0.9 <= ratio <= 1.1 else 'NOT met'}")
    if stage.name in ("recipe_continuous_batching", "continuous_batching_cuda_graphs") and not smoke:
        fast = record["tokens_per_second"] >= 810
        used = record.get("card_memory_used") or 0
        goals.append(
            f"≥ 810 tokens/s: {'met' if fast else 'NOT met'}; ≥ 50% of the card: {'met' if used >= 0.5 else 'NOT met'}"
        )
    goal = "; ".join(goals)
    what = stage.what
    if smoke:
        what = (
            "tiny-shape DPR step (smoke) in the 24 GiB fit's stage: toy values, no cap on the CPU"
            if stage.name == "fit_24_gib"
            else what.replace("8B DPR step", "tiny-shape DPR step (smoke)").replace(
                "1B-shape DPR step", "tiny-shape DPR step (smoke)"
            )
        )
    return [[what, result, goal]]


def ratio_rows(out: Path, smoke: bool) -> list[list[str]]:
    record = json.loads((out / "dpr_over_grpo.jsonl").read_text().splitlines()[-1])
    ratio = record["step_time_ratio_dpr_over_grpo"]
    steps = {name: record["results"][name]["median_step_seconds"] for name in ("dpr", "grpo")}
    bound = 0.9 if smoke else 1.0
    return [
        [
            "DPR / GRPO step time",
            f"{ratio:.3f} (median step DPR {steps['dpr']:.3f} s, GRPO {steps['grpo']:.3f} s, "
            f"{record.get('rounds', len(record['results']['dpr']['repeat_median_step_seconds']))} alternating "
            f"pair(s){'' if record.get('complete', True) else ', stopped before the last'})",
            f"≤ {bound}: {'met' if ratio <= bound else 'NOT met'}" + (" (toy sizes, shared cores)" if smoke else ""),
        ]
    ]


# ---- the run ------------------------------------------------------------------------------------------------------


def hardware() -> str:
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            return "GPU (nvidia-smi did not answer in 30 s)"
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes", "trl_dpr"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found


def fit_values(out: Path) -> tuple[dict, list[list[str]]]:
    """`trl-dpr memory --fit` for 24, 48 and 80 GiB (the 8B QLoRA recipe; in this process: one import of transformers
    instead of three): the 24 GiB values, and one row each."""
    from trl_dpr.running.memory import fit_recipe

    rows, fit24 = [], {}
    for gib in (24, 48, 80):
        fit = fit_recipe(RECIPE, gib)
        (out / f"fit_{gib}.yaml").write_text(fit.yaml_lines() + "\n")
        command = f"`trl-dpr memory --config {RECIPE} --fit --gpu_memory_gib {gib}`"
        if fit.values is None:
            rows.append([command, fit.yaml_lines(), ""])
            continue
        cache = fit.values.get("transformers_continuous_batching_config", {})
        rows.append(
            [
                command,
                f"micro-batch {fit.values['per_device_train_batch_size']} × accumulation "
                f"{fit.values['gradient_accumulation_steps']}, rollout {fit.values['generation_batch_size']}, "
                f"num_blocks {cache.get('num_blocks')}; the plan needs {fit.plan.total_gib:.1f} GiB",
                "",
            ]
        )
        fit24 = fit.values if gib == 24 else fit24
    return fit24, rows


def descendant_groups(pid: int) -> set[int]:
    """The process groups of `pid`'s descendants (from /proc): a test's subprocesses run in sessions of their own,
    out of reach of a kill of the stage's group, and would go on using the GPU through the next stage."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))  # (ppid, pgrp)
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, (parent, _) in parents.items() if parent in frontier} - found
        found |= frontier
    return {parents[child][1] for child in found}


def run_within(command: list[str], log, env: dict, limit: float, grace: float = 20) -> int | None:
    """Run `command` in a process group of its own; its exit code, or None when it ran past `limit` seconds: then
    SIGINT (pytest and Python unwind, writing their reports) and SIGKILL `grace` seconds later. Either way its group and the
    groups of its descendants then get SIGKILL, so nothing it started runs on into the next stage."""
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
    )
    groups: set[int] = set()
    try:
        return process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        groups = descendant_groups(process.pid)
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        return None
    finally:
        for group in {process.pid, *groups} - {os.getpgrp()}:
            try:
                os.killpg(group, signal.SIGKILL)  # workers a launcher or a test left behind
            except (ProcessLookupError, PermissionError):
                pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # stuck in the driver: the next stage may find less memory
            print(f"   process {process.pid} did not end 30 s after SIGKILL", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the folder for the logs, JSON lines and summary")
    parser.add_argument("--smoke", action="store_true", help="every stage on the CPU at toy sizes")
    parser.add_argument("--window-seconds", type=float, default=510, help="the stages' share of the window")
    parser.add_argument("--skip-tier", action="store_true", help="benchmarks only (a second window)")
    parser.add_argument(
        "--stages",
        help="comma-separated stage names to run, in the script's order (a later window: what is still owed); "
        "prepare_8b is added when an 8B stage is named",
    )
    parser.add_argument("--install-row", default="", help="the install's row, from gpu_run.sh")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
        "TRL_DPR_TEST_REPORT": str(out / "tier.jsonl"),  # the tier's tests, one by one as they end
    }
    if args.smoke:
        env["OMP_NUM_THREADS"] = "1"
    rows = [["hardware", hardware(), ""], ["versions", ", ".join(f"{k} {v}" for k, v in versions().items()), ""]]
    if args.install_row:
        rows.append(["install", args.install_row, ""])
    os.environ.update({key: env[key] for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")})
    sys.path.insert(0, str(ROOT))  # this checkout's trl_dpr, as the stages' PYTHONPATH has it
    try:
        fit24, fit_rows = fit_values(out)
    except Exception as error:  # noqa: BLE001 - the window's stages matter more than this row
        fit24, fit_rows = {}, [["`trl-dpr memory --fit`", f"no result ({type(error).__name__}: {error})", ""]]
    rows += fit_rows
    every = stages(args.smoke, fit24)
    asked = {stage.name for stage in every} if not args.stages else set(args.stages.split(","))
    unknown = asked - {stage.name for stage in every}
    if unknown:
        parser.error(f"--stages: no stage {sorted(unknown)}; the stages: {', '.join(stage.name for stage in every)}")
    if args.skip_tier:
        asked.discard("tier")
    if any(name not in ("tier", "dpr_over_grpo", "memory_1b") for name in asked):
        asked.add("prepare_8b")  # the 8B stages load what it writes (seconds when it is already there)
    (out / "tier.jsonl").unlink(missing_ok=True)
    for stage in every:
        if stage.name not in asked:
            rows.append(
                [
                    stage.what,
                    "not asked (--skip-tier)" if stage.name == "tier" and args.skip_tier else "not asked (--stages)",
                    "",
                ]
            )
            continue
        command = [part.replace("{out}", str(out)) for part in (stage.smoke if args.smoke else stage.gpu)]
        left = args.window_seconds - (time.monotonic() - started)
        limit = min(stage.limit_s // (2 if args.smoke else 1), left)
        needs = 20 if args.smoke else NEEDS_SECONDS[stage.name]
        if limit < needs:  # a stage cut short measures nothing: leave its time to a later, shorter one
            rows.append([stage.what, f"not run: needs about {needs} s, {max(left, 0):.0f} s of the window left", ""])
            continue
        (out / f"{stage.name}.jsonl").unlink(missing_ok=True)  # a reused --out: never the last window's numbers
        print(f"== {stage.name} (limit {limit:.0f} s): {' '.join(command)}", flush=True)
        begun = time.monotonic()
        with open(out / f"{stage.name}.log", "w") as log:
            code = run_within(command, log, env, limit)
        stage.seconds = time.monotonic() - begun
        try:
            if stage.name == "tier":
                stage.rows = tier_rows(out)
                for row in stage.rows:
                    print(f"   {row[0]}: {row[1]}", flush=True)  # one line per test with its time
            elif stage.name == "dpr_over_grpo":
                stage.rows = ratio_rows(out, args.smoke)
            elif stage.name == "prepare_8b":
                what = "the tiny shape's random base and adapters (smoke)" if args.smoke else stage.what
                stage.rows = [[what, "ready" if code == 0 else "failed", ""]]
            else:
                stage.rows = eight_b_rows(out, stage, args.smoke)
        except (OSError, ValueError, KeyError, IndexError, ZeroDivisionError) as error:
            stage.rows = [[stage.what, f"no result ({type(error).__name__}: {error})", ""]]
        stage.rows = stage.rows or [[stage.what, "no result", ""]]
        status = "timed out" if code is None else ("ok" if code == 0 else f"exit {code}")
        stage.rows[-1][1] += f" [{status}, {stage.seconds:.0f} s, log {stage.name}.log]"
        rows += stage.rows
    total = time.monotonic() - started
    rows.append(["stages in all", f"{total:.0f} s (window {args.window_seconds:.0f} s)", ""])
    table = "\n".join(["| stage | result | goal |", "|---|---|---|", *(f"| {' | '.join(row)} |" for row in rows)])
    (out / "summary.md").write_text(table + "\n")
    with open(out / "summary.jsonl", "a") as f:
        f.write(json.dumps({"smoke": args.smoke, "hardware": rows[0][1], "versions": versions(), "rows": rows}) + "\n")
    print("\n" + table)
    failed = [row for row in rows if "[" in row[1] and "ok," not in row[1]]
    return (
        1
        if failed or any(not row[1].startswith(("passed", "skipped")) for row in rows if row[0].startswith("tier:"))
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
