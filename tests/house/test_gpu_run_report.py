"""benchmarks/gpu_run.py's reading of the GPU tier, proven here because a GPU window is too scarce to debug it in: a
real pytest run reporting test by test (tests/report_plugin.py, `TRL_DPR_TEST_REPORT`), stopped at its time limit."""

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("gpu_run", ROOT / "benchmarks" / "gpu_run.py")
gpu_run = sys.modules["gpu_run"] = importlib.util.module_from_spec(SPEC)  # its dataclasses look it up
SPEC.loader.exec_module(gpu_run)

TESTS = """
import os
import subprocess
import time
from pathlib import Path


def test_quick():
    pass


def test_wrong():
    assert 1 + 1 == 3, "arithmetic broke"


def test_slow():
    # a subprocess in a session of its own, as the tier's runs are: out of reach of a kill of pytest's group
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    Path(os.environ["CHILD_PID_FILE"]).write_text(str(child.pid))
    time.sleep(120)


def test_after_slow():
    pass
"""


def test_a_tier_stopped_at_its_limit_still_says_which_tests_passed_failed_or_were_running(tmp_path):
    (tmp_path / "test_tier.py").write_text(TESTS)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TRL_DPR_TEST_REPORT": str(tmp_path / "tier.jsonl"),
        "OMP_NUM_THREADS": "1",
        "CHILD_PID_FILE": str(tmp_path / "child.pid"),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.report_plugin"]
    command += ["-p", "no:randomly", str(tmp_path / "test_tier.py"), "--junitxml", str(tmp_path / "tier.xml")]
    started = time.monotonic()
    with open(tmp_path / "tier.log", "w") as log:
        # pytest alone starts in ~1 s, ~5 s under load; on a loaded 2-core CI its unwinding after SIGINT took over 20 s
        code = gpu_run.run_within(command, log, env, limit=20, grace=60)
    assert code is None and time.monotonic() - started < 100  # stopped at the limit, not after test_slow's 120 s
    rows = {row[0]: row[1] for row in gpu_run.tier_rows(tmp_path)}
    assert rows["tier: test_quick"].startswith("passed, ")
    assert rows["tier: test_wrong"].startswith("failed, ") and "arithmetic broke" in rows["tier: test_wrong"]
    assert rows["tier: test_slow"] == "running when the limit struck"
    assert rows["tier: test_after_slow"] == "not started: the limit struck first"
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "a subprocess the stage started in its own session outlived the stage"
    assert (tmp_path / "tier.xml").is_file()  # SIGINT first: pytest wrote its own report on the way out


def test_a_tier_on_xdist_workers_reports_each_test_once_with_its_message(tmp_path):
    """The GPU tier runs its tests side by side (`-n`, gpu_run.py): the controller and every worker load the plugin,
    and each start, outcome and the collection must still be one line, with a failure's message forwarded."""
    (tmp_path / "test_tier.py").write_text(TESTS.replace("time.sleep(120)", "time.sleep(1)"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TRL_DPR_TEST_REPORT": str(tmp_path / "tier.jsonl"),
        "OMP_NUM_THREADS": "1",
        "CHILD_PID_FILE": str(tmp_path / "child.pid"),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.report_plugin"]
    command += ["-p", "no:randomly", "-n", "2", "--dist", "load", str(tmp_path / "test_tier.py")]
    with open(tmp_path / "tier.log", "w") as log:
        code = gpu_run.run_within(command, log, env, limit=120)
    assert code == 1, (tmp_path / "tier.log").read_text()[-2000:]  # test_wrong failed; the rest passed
    events = [json.loads(line) for line in (tmp_path / "tier.jsonl").read_text().splitlines()]
    names = ["test_quick", "test_wrong", "test_slow", "test_after_slow"]
    collected = [event["tests"] for event in events if event["event"] == "collected"]
    # node ids are relative to the rootdir pytest picks (the cwd's or the file's ancestor): compare the test names
    assert [[nodeid.split("::", 1)[1] for nodeid in tests] for tests in collected] == [names]
    for name in names:
        for kind in ("start", "call"):
            mine = [e for e in events if e.get("test", "").endswith(f"::{name}") and e["event"] == kind]
            assert len(mine) == 1, (name, kind, mine)
    rows = {row[0]: row[1] for row in gpu_run.tier_rows(tmp_path)}
    assert rows["tier: test_wrong"].startswith("failed, ") and "arithmetic broke" in rows["tier: test_wrong"]
    assert all(rows[f"tier: {name}"].startswith("passed, ") for name in names if name != "test_wrong"), rows


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its parent's reaping is left


def test_a_tier_that_collected_nothing_or_was_cut_mid_line_still_gives_rows(tmp_path):
    """An import error on the GPU image collects nothing; a SIGKILL can cut the last line: neither may cost the window
    its summary (gpu_run.py appends the stage's status to the last row)."""
    (tmp_path / "tier.jsonl").write_text('{"event": "collected", "tests": []}\n')
    assert gpu_run.tier_rows(tmp_path) == [["tier", "no test collected (tier.log says why)", ""]]
    (tmp_path / "tier.jsonl").write_text(
        '{"event": "collected", "tests": ["t.py::test_a"]}\n{"test": "t.py::test_a", "event": "start"}\n'
        '{"test": "t.py::test_a", "event": "call", "outcome": "passed", "seconds": 1.5}\n{"test": "t.py::te'
    )
    assert gpu_run.tier_rows(tmp_path) == [["tier: test_a", "passed, 1.5 s", ""]]
