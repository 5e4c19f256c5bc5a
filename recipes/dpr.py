"""`trl-dpr dpr` in a clone: `accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml recipes/dpr.py --config recipes/demo/dpr.yaml`.

The stage is the package's module `trl_dpr.scripts.dpr`; this file only runs its `main`."""

from trl_dpr.running.cli import run
from trl_dpr.scripts.dpr import main

if __name__ == "__main__":
    run(main)
