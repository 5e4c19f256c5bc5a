"""The package's file list is its architecture: the algorithm at the top of `trl_dpr/`, `running/` and `analysis/`
around it, one module per stage in `scripts/`; no research code in the wheel, no import cycle between modules."""

import ast
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]


def module_imports() -> dict[str, set[str]]:
    """`{module: modules of trl_dpr it imports}` from the source (module level and inside functions alike), without
    importing anything."""
    modules = {}
    for path in (ROOT / "trl_dpr").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = (
                    ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""]) if node.level else node.module
                )
                base = base.rstrip(".")
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    if target in modules:
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in modules}
        # Importing a.b.c runs a/b/__init__ first (unless it is one of this module's own packages, already running).
        for target in list(edges):
            parts = target.split(".")
            parents = (".".join(parts[:i]) for i in range(2, len(parts)))
            edges |= {p for p in parents if p != name and not name.startswith(p + ".")}
        graph[name] = edges
    return graph


def test_no_import_cycle_between_the_packages_modules():
    graph = module_imports()
    assert "trl_dpr.evaluation.results" in graph["trl_dpr.evaluation.runner"]  # the parser sees relative imports

    def is_package_and_its_module(a, b):
        return b.startswith(a + ".")  # a package importing its own submodule

    cycles = []

    def visit(node, path):
        for target in graph[node]:
            if target in path:
                cycle = path[path.index(target) :] + [target]
                if not all(is_package_and_its_module(a, b) for a, b in zip(cycle, cycle[1:])):
                    cycles.append(" → ".join(cycle))
            elif target not in finished:
                visit(target, path + [target])
        finished.add(node)

    finished = set()
    for module in graph:
        if module not in finished:
            visit(module, [module])
    assert cycles == []


CORE = {  # the algorithm, readable in one sitting: what `from trl_dpr import ...` loads
    "trl_dpr",
    "trl_dpr.algorithm",
    "trl_dpr.rewards",
    "trl_dpr.reward_model",
    "trl_dpr.policy",
    "trl_dpr.config",
    "trl_dpr.trainer",
    "trl_dpr.reference_callback",
    "trl_dpr.reference_manifest",
    "trl_dpr.field_checks",
    "trl_dpr.range_rules",
    "trl_dpr.rollout_logprobs",
    "trl_dpr.token_batches",
    "trl_dpr.data",
    "trl_dpr.scoring",
    "trl_dpr.reward_loading",
}


def test_the_top_of_the_package_is_the_algorithm_core():
    top = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "trl_dpr").glob("*.py")
    }
    assert top == CORE
    packages = {p.parent.name for p in (ROOT / "trl_dpr").glob("*/__init__.py")}
    assert packages == {"running", "analysis", "scripts", "embedded", "evaluation", "lfd", "resources"}


def test_the_core_reaches_only_the_core():
    """No exception: the run's services (checkpoints, Hub, model card, console log) mix into the core's trainer in
    `running/trainers.py`, the embedded task calls into `data`, and the config's field checks are the core's own."""
    graph = module_imports()
    reached, todo = set(), list(CORE)
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph[module]
    assert "trl_dpr.field_checks" in reached and "trl_dpr.scoring" in reached  # the walk follows imports
    assert reached - CORE == set()


def test_the_trainer_imports_only_the_core_and_its_libraries():
    import sys

    graph = module_imports()
    assert graph["trl_dpr.trainer"] <= CORE and graph["trl_dpr.trainer"]
    tree = ast.parse((ROOT / "trl_dpr" / "trainer.py").read_text())
    roots = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    roots |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level
    }
    libraries = {"__future__", "torch", "transformers", "trl", "accelerate", "datasets", "peft"}
    assert {r for r in roots if r not in sys.stdlib_module_names} - libraries == set()


def test_the_run_services_compose_in_running():
    from trl import GRPOTrainer

    from trl_dpr import DensePathTrainer
    from trl_dpr.running.trainers import DPRRunTrainer

    assert DensePathTrainer.__bases__ == (GRPOTrainer,)  # its overrides, and TRL's own save, push and card
    assert issubclass(DPRRunTrainer, DensePathTrainer)


def test_no_module_imports_a_stage_script():
    graph = module_imports()  # the CLI loads a stage's script by name (importlib), or launches its file
    assert {m for m, targets in graph.items() for t in targets if t.startswith("trl_dpr.scripts.")} == set()


def test_the_wheel_holds_every_subpackage_and_no_experiments_code():
    import tomllib

    packages = find_packages(str(ROOT), include=["trl_dpr*"])
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert set(listed) == {*packages, "trl_dpr.recipes"}  # the recipes' YAMLs as data; a new subpackage is listed
    assert not any("experiments" in p for p in packages)


def test_the_package_never_imports_experiment_code():
    offenders = []
    for path in (ROOT / "trl_dpr").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in getattr(node, "names", [])]
            )
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(n.split(".")[0] == "experiments" for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def imports_of_experiments(folder: Path) -> list[str]:
    """The files under `folder` with an `import experiments...` or `from experiments... import`."""
    offenders = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            if any(name.split(".")[0] == "experiments" for name in names):
                offenders.append(str(path.relative_to(folder)))
    return offenders


def test_no_library_test_imports_experiment_code(tmp_path):
    """The research scripts' tests live in experiments/tests/; the library's tests stand without experiments/."""
    assert imports_of_experiments(ROOT / "tests") == []
    (tmp_path / "layer").mkdir()  # the check itself finds both forms of the import
    (tmp_path / "layer" / "test_a.py").write_text("import experiments.sweeps\n")
    (tmp_path / "test_b.py").write_text("def f():\n    from experiments import sweeps\n")
    assert imports_of_experiments(tmp_path) == ["layer/test_a.py", "test_b.py"]


def test_the_files_marked_slow_start_first_and_keep_their_order():
    """tests/conftest.py's order: every file with a test marked `slow` before the others (under `--dist loadfile
    --no-loadscope-reorder` a long file started last ends the run alone), each file's tests together, in order."""
    from types import SimpleNamespace

    from ..conftest import pytest_collection_modifyitems

    def item(path, name, slow=False):
        marker = SimpleNamespace(name="slow") if slow else None
        return SimpleNamespace(
            path=Path(path), name=name, keywords={}, get_closest_marker=lambda mark: marker if mark == "slow" else None
        )

    items = [
        item("a.py", "a1"),
        item("a.py", "a2"),
        item("b.py", "b1"),
        item("b.py", "b2", slow=True),
        item("c.py", "c1", slow=True),
        item("d.py", "d1"),
    ]
    pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == ["b1", "b2", "c1", "a1", "a2", "d1"]


# Top to bottom: a floor imports only the floors below it. The stage scripts; SPIN/GSIL's self-play runs (on the run
# services); the run services (stages, CLI, checkpoints, push, memory plan); the preview and heatmaps (on evaluation's
# sampling and judges); evaluation (prompts, generation, judges); the embedded task; a run's folders and memory; the core.
FLOORS_IN_README = ("scripts", "lfd", "running", "analysis", "evaluation", "embedded", "resources", "core")


def readme_map() -> list[list[str]]:
    """The README's map of the package ("How it is built"): its floors, top first, each the names it lists."""
    section = (ROOT / "README.md").read_text().split("## How it is built", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    floors, names = [], []
    for line in block.splitlines():
        if line.startswith("─"):
            floors.append(names)
            names = []
        elif line.startswith("trl_dpr/*.py"):
            names.append("core")
        elif line.strip() and not line.startswith(" "):
            names.append(line.split("/")[0])
    floors.append(names)
    core_text = block.split("trl_dpr/*.py", 1)[1]
    return floors, {word.strip("(),") for word in core_text.split()}


def test_the_readme_map_lists_every_floor_and_module_and_its_floors_hold():
    floors, core_words = readme_map()
    assert [" ".join(names) for names in floors] == list(FLOORS_IN_README)
    subpackages = {p.parent.name for p in (ROOT / "trl_dpr").glob("*/__init__.py")}
    assert {name for names in floors for name in names} - {"core"} == subpackages
    assert {module.removeprefix("trl_dpr.") for module in CORE - {"trl_dpr"}} <= core_words  # every core module named

    def floor_of(module: str) -> int:
        name = "core" if module in CORE else module.split(".")[1]
        return next(i for i, names in enumerate(floors) if name in names)

    upward = sorted(
        f"{module} → {target}"
        for module, targets in module_imports().items()
        for target in targets
        if floor_of(target) < floor_of(module)
    )  # a lower index is a higher floor
    assert upward == []


def test_the_floor_check_sees_an_import_that_runs_back_up(tmp_path, monkeypatch):
    """The check above, on a planted arrow: evaluation (a lower floor) importing the run services is found."""
    graph = module_imports()
    graph["trl_dpr.evaluation.runner"] = graph["trl_dpr.evaluation.runner"] | {"trl_dpr.running.checkpointing"}
    monkeypatch.setattr(__import__(__name__, fromlist=["module_imports"]), "module_imports", lambda: graph)
    try:
        test_the_readme_map_lists_every_floor_and_module_and_its_floors_hold()
    except AssertionError as error:
        assert "trl_dpr.evaluation.runner → trl_dpr.running.checkpointing" in str(error)
    else:
        raise AssertionError("the floor check let an upward import through")
