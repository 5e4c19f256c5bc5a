"""Run a script with DeepSpeed's CPU shared-memory collectives switched off: `python without_shm_op.py SCRIPT ARGS...`
(also under `accelerate launch`), or `skip_shm_op()` from a script of its own.

On a CPU process group DeepSpeed builds its shared-memory op (`deepspeed_shm_comm`) with g++ on first use: about a
minute of both cores on a fresh machine, and again whenever another Python environment has rebuilt it in the shared
~/.cache/torch_extensions. Without it DeepSpeed's collectives are torch.distributed's (gloo here, NCCL on GPUs), which
is all the ZeRO-3 tests need: they compare the numbers a run computes, not how fast the bytes move.
"""

import os
import runpy
import sys


def skip_shm_op() -> None:
    """Make DeepSpeed's process group start without building or using the shared-memory op (before it starts)."""
    import importlib

    # the module itself: the attribute `deepspeed.comm.torch` is the torch package (deepspeed.comm re-exports it)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


if __name__ == "__main__":
    skip_shm_op()
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python SCRIPT` would have it
    runpy.run_path(sys.argv[0], run_name="__main__")
