"""SPIN (Chen et al., 2024) from an SFT output, on the same demonstrations: a baseline of Table 1.

    trl-dpr spin --config demo/spin.yaml     # the embedded default, offline on CPU

Each iteration π_{t+1} is trained with SPIN's loss on (demonstration, π_t's own answer) pairs against π_t; see
`trl_dpr.lfd.self_play`. `sft_config:` and `evaluation_config:` work as in `trl-dpr dpr`.
"""

from trl_dpr.lfd import SPINConfig
from trl_dpr.lfd.self_play import recipe_main, recipe_parser
from trl_dpr.running.cli import run


def make_parser():
    return recipe_parser(SPINConfig)


def main(argv=None):
    return recipe_main(SPINConfig, argv)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
