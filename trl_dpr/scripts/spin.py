"""SPIN (self-play fine-tuning, Chen et al., 2024) from an SFT output, on the same demonstrations: a baseline of Table 1.

    accelerate launch --config_file recipes/accelerate_configs/single_gpu.yaml \
        recipes/spin.py --config recipes/llama-3.1-8b/spin/config_qlora.yaml

`model_name_or_path` is the SFT output of `trl-dpr sft` (π_0; its dpr_reference/ is not used). Each iteration t, π_t
answers every demonstration prompt (cached in `<output_dir>/generations/`), then π_{t+1} is trained with SPIN's loss on
(demonstration, own answer) pairs against π_t (`<output_dir>/iteration-<t>/`); the last iterate ends in `output_dir`.
With `sft_config:` set and no SFT output there yet, the SFT stage runs first; with `evaluation_config:` (a
`trl-dpr evaluate` YAML) the last iterate is then evaluated against SFT. The embedded default, offline on CPU:

    trl-dpr spin --config demo/spin.yaml
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
