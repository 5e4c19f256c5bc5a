"""`trl-dpr sft` in a clone: `accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml recipes/sft.py --config recipes/demo/sft.yaml`.

The stage is the package's module `trl_dpr.scripts.sft`; this file only runs its `main`."""

from trl_dpr.running.cli import run
from trl_dpr.scripts.sft import main

if __name__ == "__main__":
    run(main)
