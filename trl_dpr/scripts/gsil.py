"""GSIL (Xiao et al., 2024) from an SFT output, on the same demonstrations: a baseline of Table 1.

    trl-dpr gsil --config demo/gsil.yaml     # the embedded default, offline on CPU

Each iteration π_{t+1} fits GSIL's density-ratio classifier f = β log π/π_t of demonstrations vs. π_t's own (greedy,
cached) answers (`gsil_loss_type`: bernoulli, brier, hinge, kliep or lsif); see `trl_dpr.lfd.self_play`.
"""

from trl_dpr.lfd import GSILConfig
from trl_dpr.lfd.self_play import recipe_main, recipe_parser
from trl_dpr.running.cli import run


def make_parser():
    return recipe_parser(GSILConfig)


def main(argv=None):
    return recipe_main(GSILConfig, argv)


if __name__ == "__main__":
    run(main)  # a mistake in the input: its message, no traceback (--debug shows it)
