"""`trl-dpr gsil` in a clone: `accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml recipes/gsil.py --config recipes/demo/gsil.yaml`.

The stage is the package's module `trl_dpr.scripts.gsil`; this file only runs its `main`."""

from trl_dpr.running.cli import run
from trl_dpr.scripts.gsil import main

if __name__ == "__main__":
    run(main)
