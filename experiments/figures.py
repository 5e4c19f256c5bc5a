"""What every analysis writes: a CSV (one row per measured point) and a PNG drawn from the same rows.

The PNGs need matplotlib (`pip install "trl_dpr[plots]"`); it is imported only when a figure is drawn.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

__all__ = ["write_csv", "plot_series", "plot_grouped_bars", "plot_intervals"]


def write_csv(rows: list[dict], path: str | Path, columns: Sequence[str]) -> Path:
    """Write `rows` with exactly `columns` (in that order; a missing value is an empty cell, an extra key an error).

    Example:
        >>> import tempfile, os
        >>> path = write_csv([{"gamma": 0.95, "win_rate": 0.6}], os.path.join(tempfile.mkdtemp(), "g.csv"), ["gamma", "win_rate"])
        >>> path.read_text().splitlines()
        ['gamma,win_rate', '0.95,0.6']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return path


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError('The analysis figures need matplotlib: `pip install "trl_dpr[plots]"`.') from error
    return plt


def _finite(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _save_figure(plt, figure, path: str | Path) -> Path:
    """Lay out, write the PNG (creating its folder) and free the figure: every plot ends the same way."""
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_series(
    series: dict[str, list[dict]],
    path: str | Path,
    *,
    x: str,
    y: str | Sequence[str],
    low: str | Sequence[str | None] | None = None,
    high: str | Sequence[str | None] | None = None,
    error: str | Sequence[str | None] | None = None,
    xlabel: str,
    ylabel: str | Sequence[str],
    title: str,
    reference_line: float | None = None,
) -> Path:
    """Lines with error bars, one per series, in one panel per `y` column.

    Error bars come from interval columns (`low` / `high`, e.g. a bootstrap CI) or a ± column (`error`, e.g. a
    standard error). Points with a missing or NaN `y` are skipped. `reference_line` draws a dashed horizontal line
    (0.5 = as good as SFT for a win rate).

    Example:
        >>> import tempfile, os
        >>> rows = [{"gamma": 0.95, "win_rate": 0.55, "ci_low": 0.5, "ci_high": 0.6},
        ...         {"gamma": 1.0, "win_rate": 0.6, "ci_low": 0.55, "ci_high": 0.65}]
        >>> png = plot_series({"demo": rows}, os.path.join(tempfile.mkdtemp(), "g.png"), x="gamma", y="win_rate",
        ...                   low="ci_low", high="ci_high", xlabel="γ", ylabel="win rate vs SFT", title="γ sweep")
        >>> png.read_bytes()[:4] == b"\\x89PNG"
        True
    """
    plt = _pyplot()
    ys = [y] if isinstance(y, str) else list(y)
    ylabels = [ylabel] * len(ys) if isinstance(ylabel, str) else list(ylabel)

    def per_panel(value):
        return [value] * len(ys) if value is None or isinstance(value, str) else list(value)

    lows, highs, errors = per_panel(low), per_panel(high), per_panel(error)
    figure, axes = plt.subplots(1, len(ys), figsize=(5.5 * len(ys), 4), squeeze=False)
    for panel, (axis, column) in enumerate(zip(axes[0], ys)):
        for label, rows in series.items():
            points = sorted((r for r in rows if _finite(r.get(column))), key=lambda r: r[x])
            if not points:
                continue
            xs, values = [p[x] for p in points], [p[column] for p in points]
            yerr = None
            if lows[panel] and highs[panel]:
                yerr = [
                    [max(v - p[lows[panel]], 0.0) for v, p in zip(values, points)],
                    [max(p[highs[panel]] - v, 0.0) for v, p in zip(values, points)],
                ]
            elif errors[panel]:
                yerr = [p[errors[panel]] if _finite(p[errors[panel]]) else 0.0 for p in points]
            axis.errorbar(xs, values, yerr=yerr, marker="o", capsize=3, label=label)
        if reference_line is not None:
            axis.axhline(reference_line, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabels[panel])
        axis.grid(alpha=0.3)
        if series:
            axis.legend(fontsize=8)
    figure.suptitle(title)
    return _save_figure(plt, figure, path)


def plot_grouped_bars(
    groups: list[str],
    bars: dict[str, list[float]],
    path: str | Path,
    *,
    ylabel: str,
    title: str,
    low: dict[str, list[float]] | None = None,
    high: dict[str, list[float]] | None = None,
    reference_line: float | None = None,
) -> Path:
    """One cluster of bars per group, one bar per series (`bars[name][i]` is the value of group i); NaN bars are left
    out. Optional intervals `low` / `high` (same shape as `bars`) become error bars.

    Example:
        >>> import tempfile, os
        >>> png = plot_grouped_bars(["add", "all"], {"α=0.5": [0.6, 0.7]}, os.path.join(tempfile.mkdtemp(), "b.png"),
        ...                         ylabel="AUROC", title="reward vs correctness", reference_line=0.5)
        >>> png.stat().st_size > 1000
        True
    """
    plt = _pyplot()
    count = max(len(bars), 1)
    width = 0.8 / count
    figure, axis = plt.subplots(figsize=(max(6.0, 0.45 * len(groups) * count + 3), 4))
    for k, (name, values) in enumerate(bars.items()):
        positions = [i + (k - (count - 1) / 2) * width for i in range(len(groups))]
        keep = [i for i, v in enumerate(values) if _finite(v)]
        err = None
        if low is not None and high is not None and name in low:
            err = [
                [max(values[i] - low[name][i], 0.0) for i in keep],
                [max(high[name][i] - values[i], 0.0) for i in keep],
            ]
        axis.bar([positions[i] for i in keep], [values[i] for i in keep], width=width, yerr=err, capsize=3, label=name)
    axis.set_xticks(range(len(groups)), groups, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    if reference_line is not None:
        axis.axhline(reference_line, color="grey", linestyle="--", linewidth=1)
    axis.grid(alpha=0.3, axis="y")
    if len(bars) > 1:
        axis.legend(fontsize=8)
    axis.set_title(title)
    return _save_figure(plt, figure, path)


def plot_intervals(
    labels: list[str],
    series: dict[str, tuple[list[float], list[float], list[float]]],
    path: str | Path,
    *,
    xlabel: str,
    title: str,
    reference_line: float | None = None,
) -> Path:
    """One row per label, a point with its interval per series (`series[name] = (values, lows, highs)`), on an axis
    zoomed to the data: differences of a few points around 0.5 stay visible. NaN points are left out.

    Example:
        >>> import tempfile, os
        >>> png = plot_intervals(["lr 3e-5", "oracle"], {"T=0.7": ([0.49, 0.52], [0.48, 0.50], [0.50, 0.54])},
        ...                      os.path.join(tempfile.mkdtemp(), "s.png"), xlabel="win rate vs SFT", title="settings",
        ...                      reference_line=0.5)
        >>> png.read_bytes()[:4] == b"\\x89PNG"
        True
    """
    plt = _pyplot()
    count = max(len(series), 1)
    figure, axis = plt.subplots(figsize=(7, max(2.5, 0.3 * len(labels) * count + 1.5)))
    for k, (name, (values, lows, highs)) in enumerate(series.items()):
        offset = (k - (count - 1) / 2) * 0.8 / count
        keep = [i for i, v in enumerate(values) if _finite(v)]
        err = [[max(values[i] - lows[i], 0.0) for i in keep], [max(highs[i] - values[i], 0.0) for i in keep]]
        axis.errorbar([values[i] for i in keep], [i + offset for i in keep], xerr=err, fmt="o", capsize=3, label=name)
    axis.set_yticks(range(len(labels)), labels, fontsize=8)
    axis.set_ylim(len(labels) - 0.5, -0.5)
    if reference_line is not None:
        axis.axvline(reference_line, color="grey", linestyle="--", linewidth=1)
    axis.set_xlabel(xlabel)
    axis.grid(alpha=0.3, axis="x")
    if series:
        axis.legend(fontsize=8)
    axis.set_title(title)
    return _save_figure(plt, figure, path)
