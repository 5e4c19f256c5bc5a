"""One module per stage, as TRL keeps `trl/scripts/`: each has `make_parser()` and `main(argv)`.

    sft, dpr, spin, gsil   training stages, run under `accelerate launch` (`trl-dpr <stage>` launches this file)
    evaluate, preview      in-process stages

`trl-dpr <stage> --config RECIPE` runs them from a pip install; a clone also has `recipes/<stage>.py`, which runs the
same `main` (`accelerate launch recipes/dpr.py --config recipes/demo/dpr.yaml`).
"""
