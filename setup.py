"""Everything is in pyproject.toml but one rule: recipes/ ships in the wheel as data (trl_dpr/recipes/**/*.yaml, ...),
without its `*.py` files. Those are a clone's entries (`accelerate launch recipes/dpr.py`), each running a module of
`trl_dpr.scripts`; setuptools would otherwise copy every `*.py` of a listed package into the wheel."""

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithoutRecipeEntries(build_py):
    def find_package_modules(self, package, package_dir):
        return [] if package == "trl_dpr.recipes" else super().find_package_modules(package, package_dir)


setup(cmdclass={"build_py": BuildPyWithoutRecipeEntries})
