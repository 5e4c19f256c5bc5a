"""The library suite's setup for the research scripts' tests: importing tests/conftest.py sets the offline environment
and one torch thread; `cli_cache` (autouse) gives the launched `trl-dpr` runs the session's argument cache."""

from tests.conftest import cli_cache

__all__ = ["cli_cache"]
