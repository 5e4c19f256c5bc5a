"""The README's result tables, regenerated from the runs that produced them, and a check that they have not drifted.

    python -m experiments.readme_tables --write             # rewrite every README block whose run is present
    python -m experiments.readme_tables --check demo        # exit 1 (with a diff) if the README's demo table differs
                                                            # from what `make demo` printed (CI runs it after make demo)

Each table sits in README.md between `<!-- table:NAME -->` and `<!-- /table:NAME -->`, copied byte for byte from:

    demo        runs/demo/dpr/eval_results.json  `table_markdown`: what `make demo` prints at its end
    seed_spread runs/seed_spread/seed_spread.md  (python -m experiments.seed_spread)
    real_model  runs/real_model_lfd/real_model.md (python -m experiments.real_model --config experiments/configs/real_model_lfd.yaml)
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

__all__ = ["SOURCES", "main", "replace_block", "table_text"]

SOURCES = {
    "demo": "runs/demo/dpr/eval_results.json",
    "seed_spread": "runs/seed_spread/seed_spread.md",
    "real_model": "runs/real_model_lfd/real_model.md",
}


def table_text(name: str, root: Path = Path(".")) -> str | None:
    """The text of table `name` from its run, or None when the run is not there.

    Example:
        >>> table_text("demo", Path("/nowhere")) is None
        True
    """
    path = root / SOURCES[name]
    if not path.is_file():
        return None
    if path.suffix == ".json":
        return json.loads(path.read_text())["table_markdown"].strip() + "\n"
    return path.read_text().strip() + "\n"


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
        raise ValueError(f"README.md has no block <!-- table:{name} --> ... <!-- /table:{name} -->.")
    return pattern.sub(lambda m: m.group(1) + text + m.group(3), readme, count=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="Rewrite the blocks whose runs are present.")
    parser.add_argument("--check", nargs="*", choices=list(SOURCES), help="Tables to compare with their runs.")
    parser.add_argument("--readme", default="README.md")
    args = parser.parse_args(argv)
    readme_path = Path(args.readme)
    readme = readme_path.read_text()
    if args.write:
        for name in SOURCES:
            text = table_text(name)
            if text is not None:
                readme = replace_block(readme, name, text)
                print(f"{name}: written from {SOURCES[name]}")
        readme_path.write_text(readme)
    status = 0
    for name in args.check or []:
        text = table_text(name)
        if text is None:
            print(f"{name}: {SOURCES[name]} is missing; run it first (make demo for the demo table).", file=sys.stderr)
            status = 1
            continue
        shown = _block(name).search(readme)
        if shown is None or shown.group(2) != text:
            diff = difflib.unified_diff((shown.group(2) if shown else "").splitlines(), text.splitlines(),
                                        "README.md", SOURCES[name], lineterm="")
            print(f"{name}: the README's table differs from the run:\n" + "\n".join(diff), file=sys.stderr)
            status = 1
        else:
            print(f"{name}: the README's table is the run's, byte for byte")
    return status


if __name__ == "__main__":
    sys.exit(main())
