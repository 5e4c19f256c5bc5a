"""`trl-dpr spin` in a clone: `accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml recipes/spin.py --config recipes/demo/spin.yaml`.

The stage is the package's module `trl_dpr.scripts.spin`; this file only runs its `main`."""

from trl_dpr.running.cli import run
from trl_dpr.scripts.spin import main

if __name__ == "__main__":
    run(main)
