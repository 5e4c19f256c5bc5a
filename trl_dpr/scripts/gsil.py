"""GSIL (generalized self-imitation learning, Xiao et al., 2024) from an SFT output, on the same demonstrations: a
baseline of Table 1.

    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml \
        recipes/gsil.py --config recipes/llama-3.1-8b/gsil/config_qlora.yaml

`model_name_or_path` is the SFT output of `trl-dpr sft` (π_0; its dpr_reference/ is not used). Each iteration t, π_t
answers every demonstration prompt (greedily by default, cached in `<output_dir>/generations/`), then π_{t+1} fits
GSIL's density-ratio classifier f = β log π/π_t of demonstrations vs. own answers (`gsil_loss_type`: bernoulli,
brier, hinge, kliep or lsif) in `<output_dir>/iteration-<t>/`; the last iterate ends in `output_dir`. `sft_config:`
and `evaluation_config:` work as in `trl-dpr dpr`. The embedded default, offline on CPU:

    trl-dpr gsil --config demo/gsil.yaml
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
