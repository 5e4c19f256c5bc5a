"""`trl-dpr preview` in a clone: `python recipes/preview.py --config recipes/preview/demo.yaml`.

The stage is the package's module `trl_dpr.scripts.preview`; this file only runs its `main`."""

from trl_dpr.running.cli import run
from trl_dpr.scripts.preview import main

if __name__ == "__main__":
    run(main)
