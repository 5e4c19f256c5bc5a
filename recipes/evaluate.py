"""`trl-dpr evaluate` in a clone: `python recipes/evaluate.py --config recipes/evaluate/demo.yaml`.

The stage is the package's module `trl_dpr.scripts.evaluate`; this file only runs its `main`."""

from trl_dpr.running.cli import run
from trl_dpr.scripts.evaluate import main

if __name__ == "__main__":
    run(main)
