"""What the internal helpers do, shown on small inputs: these were the helpers' docstring examples, moved here when
their docstrings were trimmed to what and why (STYLE.md: internal helpers carry a line or two, not a tutorial). Each
layer's `<layer>/test_helper_examples.py` holds the cases of its own helpers, each `module:qualname` and its doctest
session, run here in the helper's module namespace as `doctest.testmod` ran it: no assertion was dropped on the way."""

import doctest
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_helper_example(cases: dict[str, str], where: str, monkeypatch) -> None:
    """The example `cases[where]` run as a doctest in the namespace of the module `where` names; fails on any failure."""
    monkeypatch.chdir(ROOT)  # some examples read a shipped recipe
    module_name, qualname = where.split(":")
    module = importlib.import_module(module_name)
    text = "\n".join(line.removeprefix("    ") for line in cases[where].strip("\n").split("\n"))
    test = doctest.DocTestParser().get_doctest(text, dict(vars(module)), where, module.__file__, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"the example of {where} failed (see the output above)"
