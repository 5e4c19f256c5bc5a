"""The documentation's result tables, regenerated from the runs that produced them, and a check that they have not
drifted.

    python -m experiments.readme_tables --write             # rewrite every block whose run is present
    python -m experiments.readme_tables --check demo        # exit 1 (with a diff) if the README's demo table differs
                                                            # from what `make demo` printed (CI runs it after make demo)

Each table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in whichever of README.md, docs/*.md and
experiments/README.md holds it (the demo's in README.md, the others in docs/results.md and docs/real_model.md), copied byte for byte from:

    demo        runs/demo/dpr/eval_results.json  `table_markdown`: what `make demo` prints at its end
    seed_spread runs/seed_spread/seed_spread.md  (python -m experiments.seed_spread)
    real_model  runs/real_model_lfd/real_model.md (python -m experiments.real_model --config experiments/configs/real_model_lfd.yaml)
    regime_map  runs/regime_map/regime_map_readme.md and regime_map_curve.md (experiments/README.md, section 11):
                python -m experiments.regime_map --config experiments/configs/regime_map.yaml

and two drawn here (`decoding_markdown`, `table1_markdown`) from the evaluations' results.json:

    demo_decoding  the demo's SFT and DPR at T = 1 (`make demo`), at the paper's T = 0.7 and greedily:
                   runs/demo/eval/dpr (make demo), runs/demo/eval_t0.7 and runs/demo/eval_greedy, written after make demo by
                   trl-dpr evaluate --config demo.yaml --temperature 0.7 --output_dir runs/demo/eval_t0.7
                   trl-dpr evaluate --config demo.yaml --temperature 0 --samples_per_prompt 1 --output_dir runs/demo/eval_greedy
    table1         runs/table1_demo (python -m experiments.table1 --config experiments/configs/table1_demo.yaml)
    regime_scan    runs/regime_scan/regime_scan.csv (python -m experiments.regime_scan --config
                   experiments/configs/regime_scan_demo.yaml), one row per point: its DPR and wo/Baseline rows

Only the finished-SFT tables are drawn from committed files (`experiments.finished_sft.render_report`, what its
`--stage report` prints), so `--check finished_sft finished_sft_800` works in any clone; the others need their run:

    finished_sft      experiments/results/finished_sft/{per_prompt.jsonl,run.json} (docs/real_model.md)
    finished_sft_800  experiments/results/finished_sft_800/{per_prompt.jsonl,run.json}
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from pathlib import Path

__all__ = [
    "SOURCES",
    "decoding_markdown",
    "documents",
    "exact_paired_gain",
    "find_block",
    "main",
    "regime_markdown",
    "replace_block",
    "table1_markdown",
    "table_text",
]

SOURCES = {
    "demo": "runs/demo/dpr/eval_results.json",
    "seed_spread": "runs/seed_spread/seed_spread.md",
    "real_model": "runs/real_model_lfd/real_model.md",
    "regime_map": "runs/regime_map/regime_map_readme.md",
    "regime_map_curve": "runs/regime_map/regime_map_curve.md",
    "demo_decoding": "runs/demo/eval/dpr/results.json runs/demo/eval_t0.7/results.json runs/demo/eval_greedy/results.json",
    "table1": "runs/table1_demo/evaluation/results.json runs/table1_demo/table1.md",
    "regime_scan": "runs/regime_scan/regime_scan.csv",
    "finished_sft": "experiments/results/finished_sft/per_prompt.jsonl experiments/results/finished_sft/run.json",
    "finished_sft_800": "experiments/results/finished_sft_800/per_prompt.jsonl "
    "experiments/results/finished_sft_800/run.json",
}
REGIME_NOTES = {"scratch_s600_lr2e-3": " (the 0.1 demo)", "pretrained_s50_lr1e-4": " (the demo)"}  # point → its label
DECODINGS = {"T = 1 (`make demo`)": 1.0, "T = 0.7 (the paper's)": 0.7, "greedy": 0.0}  # row → the answers' temperature


def table_text(name: str, root: Path = Path(".")) -> str | None:
    """The text of table `name` from its run, or None when the run (any of its files) is not there.

    Example:
        >>> table_text("demo", Path("/nowhere")) is None
        True
    """
    paths = [root / source for source in SOURCES[name].split()]
    if not all(path.is_file() for path in paths):
        return None
    if name == "demo_decoding":
        return decoding_markdown([json.loads(path.read_text()) for path in paths])
    if name == "table1":
        return table1_markdown(json.loads(paths[0].read_text()), paths[1].read_text())
    if name == "regime_scan":
        import csv

        return regime_markdown(list(csv.DictReader(paths[0].open())))
    if name.startswith("finished_sft"):
        from experiments.finished_sft import render_report

        per_prompt = [json.loads(line) for line in paths[0].read_text().splitlines() if line]
        return render_report(per_prompt, json.loads(paths[1].read_text()))
    (path,) = paths
    if path.suffix == ".json":
        return json.loads(path.read_text())["table_markdown"].strip() + "\n"
    return path.read_text().strip() + "\n"


def _percent(value: float, low: float, high: float) -> str:
    return f"{100 * value:.1f} ({100 * low:.1f}–{100 * high:.1f})"


def exact_paired_gain(pairwise: dict) -> tuple[float, float, float]:
    """The accuracy gain of the method over the baseline, paired over answers, with its interval, from an exact-judge
    win rate: a pair's score is 1 (only the method right), 0 (only the baseline right) or ½ (a tie), so the gain
    (wins − losses) / n is 2·win rate − 1, and the bootstrap interval of the win rate maps to the gain's.

    Example:
        >>> exact_paired_gain({"judge": "exact-answer", "win_rate": {"win_rate": 0.521, "ci_low": 0.51375, "ci_high": 0.52825,
        ...                                                    "wins": 155, "ties": 1774, "losses": 71, "n": 2000}})
        (0.042, 0.0275, 0.0565)
    """
    if pairwise["judge"] != "exact-answer":
        raise ValueError(f"a paired accuracy gain needs the exact-answer judge, not {pairwise['judge']!r}.")
    rate = pairwise["win_rate"]
    return tuple(round(2 * rate[key] - 1, 10) for key in ("win_rate", "ci_low", "ci_high"))


def _signed(value: float, low: float, high: float) -> str:
    return f"{100 * value:+.1f} ({100 * low:+.1f} to {100 * high:+.1f})"


def decoding_markdown(reports: list[dict]) -> str:
    """The demo's SFT and DPR accuracy at each decoding (`DECODINGS`, one results.json each), DPR's paired gain over
    SFT at that decoding, and how much of its T = 1 gain remains."""
    rows, gains = [], []
    for (decoding, temperature), report in zip(DECODINGS.items(), reports, strict=True):
        if report["settings"]["temperature"] != temperature:
            raise ValueError(
                f"the {decoding} row needs answers at temperature {temperature}, not "
                f"{report['settings']['temperature']} ({report['settings']['output_dir']})."
            )
        accuracy = {row["method"]: row for row in report["accuracy"]}
        (pairwise,) = report["pairwise"]
        gain = exact_paired_gain(pairwise)
        gains.append(gain[0])
        settings = report["settings"]
        answers = f"{settings['demo_num_prompts']} × {settings['samples_per_prompt']}"
        cells = [
            _percent(accuracy[m]["accuracy"], accuracy[m]["ci_low"], accuracy[m]["ci_high"]) for m in ("SFT", "DPR")
        ]
        share = f"{100 * gain[0] / gains[0]:.0f}%" if gains[0] else "—"
        rows.append(f"| {decoding} | {answers} | {cells[0]} | {cells[1]} | {_signed(*gain)} | {share} |")
    header = [
        "| decoding | prompts × answers | SFT accuracy % (95% CI) | DPR accuracy % (95% CI) | DPR − SFT, points, "
        "paired (95% CI) | share of DPR's T = 1 gain |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join([*header, *rows]) + "\n"


def table1_markdown(report: dict, table1_md: str) -> str:
    """Table 1 in one table: each method's accuracy (overall, per task kind) and win rate against SFT, the best
    accuracy in bold, then the training times `experiments.table1` recorded."""
    accuracy = {row["method"]: row for row in report["accuracy"]}
    pairwise = {row["method"]: row for row in report["pairwise"]}
    methods = [report["baseline"], *report["methods"]]
    categories = list(dict.fromkeys(c for row in report["accuracy"] for c in row["by_category"]))
    best = max(accuracy[m]["accuracy"] for m in methods)
    lines = [
        f"| Method | accuracy % (95% CI) | {' | '.join(categories)} | win rate vs SFT % (95% CI) |",
        "|---|---|" + "---|" * len(categories) + "---|",
    ]
    for method in methods:
        row = accuracy[method]
        cell = f"{100 * row['accuracy']:.1f}"
        cell = (
            f"**{cell}**" if row["accuracy"] == best else cell
        ) + f" ({100 * row['ci_low']:.1f}–{100 * row['ci_high']:.1f})"
        rate = pairwise[method]["win_rate"] if method in pairwise else None
        win = _percent(rate["win_rate"], rate["ci_low"], rate["ci_high"]) if rate else "—"
        lines.append(
            f"| {method} | {cell} | "
            + " | ".join(f"{100 * row['by_category'][c]:.1f}" for c in categories)
            + f" | {win} |"
        )
    times = [line for line in table1_md.splitlines() if line.startswith("Training time")]
    return "\n".join([*lines, "", *times]) + "\n"


def regime_markdown(rows: list[dict]) -> str:
    """The regime scan in one row per point (`regime_scan.csv` has one per point and reward variant): π_SFT's accuracy,
    the DPR tilt's gain at the scan's λ and at its best λ, the wo/Baseline tilt's best gain, and whether DPR helps
    ("yes, by N points" where its best interval is above 0 by less than one point of accuracy)."""
    by_point = {}
    for row in rows:
        by_point.setdefault(row["point"], {})[row["variant"]] = row
    lam = float(rows[0]["lambda"])
    lines = [
        f"| base | SFT steps × lr, α | π_SFT accuracy | DPR tilt: gain at λ = {lam:g} (95% CI) | DPR tilt: best λ, "
        "gain (95% CI) | wo/Baseline tilt: best gain | DPR helps |",
        "|---|---|---|---|---|---|---|",
    ]
    for point, variants in by_point.items():
        dpr, baseline_free = variants["DPR"], variants["wo/Baseline"]
        base = "random init" if "tiny-llama" in dpr["base"] else "pretrained"
        mantissa, exponent = f"{float(dpr['sft_learning_rate']):.0e}".split("e")
        setting = f"{dpr['sft_steps']} × {mantissa}e{int(exponent)}"
        if point.endswith("_seed1"):
            setting += ", SFT seed 1"
        if float(dpr["reference_fraction"]) != 0.5:
            setting += f", α = {float(dpr['reference_fraction']):g}"
        setting += REGIME_NOTES.get(point, "")
        if point in REGIME_NOTES and base == "pretrained":
            setting = f"**{setting}**"
        best_lambda = float(dpr["best_lambda"])
        best = f"{float(dpr['best_gain']):+.3f} ({float(dpr['best_gain_ci_low']):+.3f} to {float(dpr['best_gain_ci_high']):+.3f})"
        best = "∞ (none)" if math.isinf(best_lambda) else f"{best_lambda:g}: {best}"
        if dpr["helps"] in ("", None):  # the preview's None (π_SFT never right), an empty cell in the CSV
            verdict = "cannot tell"
        elif dpr["helps"] not in ("True", "true", "1", True):
            verdict = "no"
        else:
            verdict = (
                "**yes**" if float(dpr["best_gain"]) >= 0.01 else f"yes, by {100 * float(dpr['best_gain']):.1f} points"
            )
        lines.append(
            f"| {base} | {setting} | {float(dpr['sft_quality']):.3f} | {float(dpr['gain']):+.3f} "
            f"({float(dpr['gain_ci_low']):+.3f} to {float(dpr['gain_ci_high']):+.3f}) | {best} | "
            f"{float(baseline_free['best_gain']):+.3f} | {verdict} |"
        )
    return "\n".join(lines).replace("-0.", "−0.") + "\n"  # the README's minus sign


def documents(readme: Path) -> list[Path]:
    """The files that may hold a table block: `readme` first, then the `docs/*.md` beside it.

    Example:
        >>> documents(Path("/nowhere/README.md"))
        [PosixPath('/nowhere/README.md')]
    """
    return [
        readme,
        *sorted((readme.parent / "docs").glob("*.md")),
        *[p for p in [readme.parent / "experiments" / "README.md"] if p.is_file()],
    ]


def find_block(files: list[Path], name: str) -> Path | None:
    """The first of `files` that holds the block of table `name`, or None."""
    return next((path for path in files if path.is_file() and _block(name).search(path.read_text())), None)


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- table:{name} -->\n)(.*?)(<!-- /table:{name} -->)", re.DOTALL)


def replace_block(readme: str, name: str, text: str) -> str:
    """`readme` with the block of table `name` replaced by `text`.

    Example:
        >>> replace_block("a\\n<!-- table:demo -->\\nold\\n<!-- /table:demo -->\\nb", "demo", "new\\n")
        'a\\n<!-- table:demo -->\\nnew\\n<!-- /table:demo -->\\nb'
    """
    pattern = _block(name)
    if not pattern.search(readme):
        raise ValueError(f"The text has no block <!-- table:{name} --> ... <!-- /table:{name} -->.")
    return pattern.sub(lambda m: m.group(1) + text + m.group(3), readme, count=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="Rewrite the blocks whose runs are present.")
    parser.add_argument("--check", nargs="*", choices=list(SOURCES), help="Tables to compare with their runs.")
    parser.add_argument("--readme", default="README.md", help="The README; docs/*.md beside it are searched too.")
    args = parser.parse_args(argv)
    files = documents(Path(args.readme))
    if args.write:
        for name in SOURCES:
            text = table_text(name)
            if text is None:
                continue
            path = find_block(files, name)
            if path is None:
                raise ValueError(
                    f"No block <!-- table:{name} --> ... <!-- /table:{name} --> in {', '.join(map(str, files))}."
                )
            path.write_text(replace_block(path.read_text(), name, text))
            print(f"{name}: written from {SOURCES[name]} into {path}")
    status = 0
    for name in args.check or []:
        text = table_text(name)
        if text is None:
            hint = "run `make demo` first" if name == "demo" else "run its command first (--help lists each table's)"
            print(f"{name}: {SOURCES[name]} is missing; {hint}.", file=sys.stderr)
            status = 1
            continue
        path = find_block(files, name)
        shown = _block(name).search(path.read_text()) if path else None
        if shown is None or shown.group(2) != text:
            diff = difflib.unified_diff(
                (shown.group(2) if shown else "").splitlines(),
                text.splitlines(),
                str(path or args.readme),
                SOURCES[name],
                lineterm="",
            )
            print(
                f"{name}: the table in {path or args.readme} differs from the run:\n" + "\n".join(diff),
                file=sys.stderr,
            )
            status = 1
        else:
            print(f"{name}: the table in {path} is the run's, byte for byte")
    return status


if __name__ == "__main__":
    sys.exit(main())
