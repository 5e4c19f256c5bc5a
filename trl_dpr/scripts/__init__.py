"""One module per stage, as TRL keeps `trl/scripts/`: each has `make_parser()` and `main(argv)`.

    sft, dpr, spin, gsil   training stages, run under `accelerate launch` (`trl-dpr <stage>` launches this file)
    evaluate, preview      in-process stages

A clone's `recipes/<stage>.py` runs the same `main`.
"""
