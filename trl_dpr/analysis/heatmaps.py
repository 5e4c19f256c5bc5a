"""Token-reward heatmaps like the paper's Figure 1: each response token on a background whose red deepens with its
dense reward r̂_t = log π_SFT(a_t|s_t) − log π_ref(a_t|s_t).

Both take what `CheckpointRewardModel.score_text` returns; the HTML is standalone, each token's reward in its tooltip;
the PNG needs matplotlib. From the command line: `trl-dpr heatmap` (trl_dpr/scripts/heatmap.py).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

# Matplotlib's sequential "Reds" colour map (ColorBrewer), light to dark: darker red = higher reward.
REDS = ("#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#a50f15", "#67000d")


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def reward_colour(reward: float, vmin: float, vmax: float) -> str:
    """The `#rrggbb` colour of `reward` on the Reds scale from `vmin` (lightest) to `vmax` (darkest), clipped."""
    span = vmax - vmin
    position = 0.5 if span <= 0 else min(max((reward - vmin) / span, 0.0), 1.0)
    scaled = position * (len(REDS) - 1)
    low = min(int(scaled), len(REDS) - 2)
    weight = scaled - low
    a, b = _rgb(REDS[low]), _rgb(REDS[low + 1])
    return "#" + "".join(f"{round(x + (y - x) * weight):02x}" for x, y in zip(a, b))


def _text_colour(background: str) -> str:
    r, g, b = _rgb(background)
    return "#ffffff" if 0.299 * r + 0.587 * g + 0.114 * b < 140 else "#111111"


def _value_range(scored: Sequence[dict], vmin: float | None, vmax: float | None) -> tuple[float, float]:
    rewards = [r for item in scored for r in item["rewards"]]
    if not rewards:
        raise ValueError("Nothing to draw: every scored response is empty.")
    low = min(rewards) if vmin is None else vmin
    high = max(rewards) if vmax is None else vmax
    if high < low:
        raise ValueError(f"vmax ({high}) must be >= vmin ({low}).")
    return low, high


def _prompt_text(prompt) -> str:
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em; max-width: 60em; color: #111; }
.pair { margin-bottom: 2em; }
.prompt { color: #555; white-space: pre-wrap; margin-bottom: .4em; }
.response { font-family: ui-monospace, Menlo, Consolas, monospace; line-height: 1.9; white-space: pre-wrap;
            word-break: break-word; }
.tok { border-radius: 2px; padding: 1px 0; }
.total { color: #555; font-size: .9em; margin-top: .3em; }
.colourbar { display: flex; align-items: center; gap: .6em; margin: 1em 0 2em; font-size: .9em; }
.colourbar .bar { width: 20em; height: 1em; border: 1px solid #ccc; }
"""


def heatmap_html(
    scored: Sequence[dict],
    prompts: Sequence | None = None,
    title: str = "Dense token rewards",
    vmin: float | None = None,
    vmax: float | None = None,
) -> str:
    """A standalone HTML page: one heatmap per scored response (its prompt above, if given), one colour scale
    (`vmin`, `vmax`: default the range of the rewards shown)."""
    if prompts is not None and len(prompts) != len(scored):
        raise ValueError(f"Got {len(prompts)} prompts for {len(scored)} scored responses.")
    low, high = _value_range(scored, vmin, vmax)
    gradient = ", ".join(REDS)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        '<div class="colourbar">',
        f'<span>{low:.3g}</span><div class="bar" style="background: linear-gradient(to right, {gradient});"></div>',
        f"<span>{high:.3g}</span><span>token reward r̂<sub>t</sub> (darker red = higher)</span></div>",
    ]
    for i, item in enumerate(scored):
        if len(item["tokens"]) != len(item["rewards"]):
            raise ValueError(f"Response {i} has {len(item['tokens'])} tokens but {len(item['rewards'])} rewards.")
        parts.append('<div class="pair">')
        if prompts is not None:
            parts.append(f'<div class="prompt">{html.escape(_prompt_text(prompts[i]))}</div>')
        spans = []
        token_ids = item.get("token_ids") or [None] * len(item["tokens"])
        for token, reward, token_id in zip(item["tokens"], item["rewards"], token_ids):
            background = reward_colour(reward, low, high)
            tooltip = html.escape(f"{token!r}  r̂ = {reward:+.4f}", quote=True)
            id_attribute = f' data-token-id="{token_id}"' if token_id is not None else ""
            spans.append(
                f'<span class="tok" style="background-color:{background};color:{_text_colour(background)}" '
                f'title="{tooltip}" data-reward="{reward!r}"{id_attribute}>{html.escape(token)}</span>'
            )
        parts.append(f'<div class="response">{"".join(spans)}</div>')
        total = item.get("total", sum(item["rewards"]))
        parts.append(f'<div class="total">{len(spans)} tokens, Σ r̂ = {total:+.4f}</div></div>')
    parts.append("</body></html>")
    return "\n".join(parts)


def _wrap_tokens(tokens: Sequence[str], chars_per_line: int) -> list[tuple[int, int, int, str]]:
    """(token index, line, column, shown text) pieces of tokens laid out like monospace text, wrapping at
    `chars_per_line`; a newline inside a token shows as ↵ and starts a new line."""
    pieces, line, column = [], 0, 0
    for index, token in enumerate(tokens):
        for k, segment in enumerate(token.replace("\t", "    ").split("\n")):
            if k > 0:  # the newline itself: a visible mark, then the next line
                pieces.append((index, line, column, "↵"))
                line, column = line + 1, 0
            if not segment:
                continue
            if column > 0 and column + len(segment) > chars_per_line:
                line, column = line + 1, 0
            pieces.append((index, line, column, segment))
            column += len(segment)
    return pieces


def save_heatmap_png(
    scored: Sequence[dict],
    path: str | Path,
    prompts: Sequence | None = None,
    title: str = "Dense token rewards",
    vmin: float | None = None,
    vmax: float | None = None,
    chars_per_line: int = 80,
    dpi: int = 150,
) -> Path:
    """Draw the heatmaps (one block per response, shared scale, colour bar) to a PNG with matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import LinearSegmentedColormap, Normalize
        from matplotlib.patches import Rectangle
    except ImportError as error:
        raise ImportError(
            "The PNG heatmap needs matplotlib: `pip install trl_dpr[plots]`.", name="matplotlib"
        ) from error

    if prompts is not None and len(prompts) != len(scored):
        raise ValueError(f"Got {len(prompts)} prompts for {len(scored)} scored responses.")
    low, high = _value_range(scored, vmin, vmax)
    cmap = LinearSegmentedColormap.from_list("reds", REDS)
    blocks, row = [], 0.0  # (first row, pieces, rewards, header) per response; rows of 1 unit
    for i, item in enumerate(scored):
        shown_prompt = _prompt_text(prompts[i]).replace("\n", " ")[: chars_per_line - 4] if prompts is not None else ""
        header = f"{i + 1}. {shown_prompt}"
        pieces = _wrap_tokens(item["tokens"], chars_per_line)
        blocks.append((row, pieces, item["rewards"], header.strip()))
        row += 1.5 + (max((p[1] for p in pieces), default=0) + 1) * 1.25 + 0.75

    char_width_in, row_height_in = 0.075, 0.22  # DejaVu Sans Mono at 9 pt: ~0.6 em per character
    fig_width = chars_per_line * char_width_in + 0.8
    fig_height = row * row_height_in + 1.2  # + title above, colour bar below
    fig = plt.figure(figsize=(fig_width, fig_height), dpi=dpi)
    text_width_in = chars_per_line * char_width_in
    ax = fig.add_axes((0.4 / fig_width, 0.8 / fig_height, text_width_in / fig_width, row * row_height_in / fig_height))
    ax.set_xlim(0, chars_per_line)
    ax.set_ylim(row, 0)
    ax.axis("off")
    for first_row, pieces, rewards, header in blocks:
        ax.text(0, first_row + 0.6, header, fontsize=8, color="#555555", va="center", parse_math=False)
        for index, line, column, text in pieces:
            top = first_row + 1.5 + line * 1.25
            colour = reward_colour(rewards[index], low, high)
            ax.add_patch(Rectangle((column, top), len(text), 1.1, facecolor=colour, edgecolor="none"))
            text_colour = _text_colour(colour)
            ax.text(
                column,
                top + 0.55,
                text,
                fontsize=9,
                family="monospace",
                va="center",
                color=text_colour,
                parse_math=False,
            )
    bar_ax = fig.add_axes((0.4 / fig_width, 0.35 / fig_height, min(3.0, text_width_in) / fig_width, 0.15 / fig_height))
    norm = Normalize(low, high if high > low else low + 1e-9)
    colour_bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=bar_ax, orientation="horizontal")
    colour_bar.set_label("token reward r̂_t (darker red = higher)", fontsize=8)
    colour_bar.ax.tick_params(labelsize=7)
    fig.suptitle(title, x=0.4 / fig_width, y=1 - 0.15 / fig_height, ha="left", va="top", fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
