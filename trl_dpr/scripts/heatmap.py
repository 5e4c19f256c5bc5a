"""Token-reward heatmaps of an SFT output's dense reward, as HTML and PNG (the paper's Figure 1).

    trl-dpr heatmap --sft runs/demo/sft --prompt "Mia has 23 apples. ..." --response "23 + 5 = 28. ..."
    trl-dpr heatmap --sft runs/demo/sft --pairs pairs.jsonl --output figures/rewards

`pairs.jsonl`: one `{"prompt", "response"}` per line. The drawing is `trl_dpr.analysis.heatmaps`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from trl_dpr.analysis.heatmaps import heatmap_html, save_heatmap_png
from trl_dpr.running.cli import run
from trl_dpr.running.recipe_checks import CommandParser


def _read_pairs(path: str) -> tuple[list, list[str]]:
    prompts, responses = [], []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        response = row.get("response", row.get("completion"))
        if "prompt" not in row or not isinstance(response, str):
            raise ValueError(
                f"{path}:{number} needs a `prompt` (text or chat messages) and a `response` (text); got {sorted(row)}."
            )
        prompts.append(row["prompt"])
        responses.append(response)
    if not prompts:
        raise ValueError(f"{path} holds no pairs.")
    return prompts, responses


def main(argv: Sequence[str] | None = None, prog: str = "trl-dpr heatmap") -> list[Path]:
    """The command-line interface (see the module docstring); returns the files written."""
    parser = CommandParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sft", required=True, help="SFT output folder (π_SFT, with π_ref recorded by the SFT stage)."
    )
    parser.add_argument("--ref", default=None, help="π_ref folder, if not the one recorded in the SFT output.")
    parser.add_argument(
        "--prompt", action="append", default=[], help="A prompt (repeat with --response for several pairs)."
    )
    parser.add_argument("--response", action="append", default=[], help="The response to score, one per --prompt.")
    parser.add_argument("--pairs", default=None, help='JSONL of {"prompt": ..., "response": ...} objects.')
    parser.add_argument(
        "--output", default="token_rewards", help="Output path without extension (default: token_rewards)."
    )
    parser.add_argument("--formats", nargs="+", default=["html", "png"], choices=["html", "png"])
    parser.add_argument(
        "--raw-prompt",
        action="store_true",
        help="Score string prompts as plain text even for a π_SFT trained on chat messages (its `trl-dpr sft` record "
        "makes them a user turn; otherwise they are plain text, as in DPR).",
    )
    parser.add_argument("--no-eos", action="store_true", help="Do not append the EOS token to each response.")
    parser.add_argument(
        "--vmin", type=float, default=None, help="Reward at the lightest colour (default: the minimum)."
    )
    parser.add_argument(
        "--vmax", type=float, default=None, help="Reward at the darkest colour (default: the maximum)."
    )
    parser.add_argument("--title", default="Dense token rewards")
    args = parser.parse_args(argv)

    if args.pairs:
        prompts, responses = _read_pairs(args.pairs)
    elif args.prompt and len(args.prompt) == len(args.response):
        prompts, responses = list(args.prompt), list(args.response)
    else:
        parser.error(
            f"give --pairs FILE, or as many --prompt as --response (got {len(args.prompt)} and {len(args.response)})."
        )

    import importlib.util

    if "png" in args.formats and importlib.util.find_spec("matplotlib") is None:  # before the models are loaded
        raise ModuleNotFoundError(
            'The PNG heatmap needs matplotlib: pip install "trl_dpr[plots]", or --formats html.', name="matplotlib"
        )
    from trl_dpr import CheckpointRewardModel  # torch: after the checks
    from trl_dpr.data import as_user_turns, string_prompts_as_chat

    reward_model = CheckpointRewardModel.from_pretrained(args.sft, args.ref)
    tokenizer = reward_model.processing_class
    # A string prompt as DPR, the preview and the evaluation give it to π_SFT (one rule): a user turn when its `trl-dpr
    # sft` record says it was trained on messages, else raw text (TRL's reading; without a record, said in one line).
    if not args.raw_prompt and string_prompts_as_chat(args.sft, tokenizer, prompts, "heatmap"):
        prompts = as_user_turns(prompts)
    scored = reward_model.score_text(prompts, responses, append_eos=not args.no_eos)

    written = []
    if "html" in args.formats:
        html_path = Path(f"{args.output}.html")
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(
            heatmap_html(scored, prompts, title=args.title, vmin=args.vmin, vmax=args.vmax), encoding="utf-8"
        )
        written.append(html_path)
    if "png" in args.formats:
        png_path = Path(f"{args.output}.png")
        written.append(save_heatmap_png(scored, png_path, prompts, title=args.title, vmin=args.vmin, vmax=args.vmax))
    for path in written:
        print(f"Wrote {path}")
    return written


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
