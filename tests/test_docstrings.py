"""Every example in the package's docstrings runs and prints what it says (examples that need a GPU, the network or
a trained run are marked `+SKIP` where they stand)."""

import doctest
import importlib
import pkgutil
import types
from pathlib import Path

import pytest

import trl_dpr

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(trl_dpr.__path__, "trl_dpr."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # some examples read a shipped recipe
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_every_public_name_has_a_docstring_with_an_example():
    missing = []
    for name in MODULES:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", []):
            obj = getattr(module, public)
            if not callable(obj) or isinstance(obj, types.GenericAlias):  # constants and type aliases
                continue
            if isinstance(obj, type) and issubclass(obj, BaseException):  # errors say what they are in their message
                continue
            doc = obj.__doc__ or ""
            if "Example" not in doc and ">>>" not in doc:
                missing.append(f"{name}.{public}")
    assert missing == []
