"""A pytest plugin: each test's outcome as it ends, to a JSON-lines file named by `TRL_DPR_TEST_REPORT` (the GPU
tier's window, benchmarks/gpu_run.py). Loaded by tests/conftest.py; imports nothing heavy, so a test of the report
itself starts pytest with `-p tests.report_plugin` alone. Under pytest-xdist (`-n`), each worker collects and runs its
tests while the controller receives every worker's reports: the controller writes the starts and outcomes, one
worker the collection, so each event is one line."""

import json
import os

TEST_REPORT = os.environ.get("TRL_DPR_TEST_REPORT")  # a JSON-lines file: each test's start, then its outcome
XDIST_WORKER = None  # "gw0", "gw1"... in an xdist worker (its config's workerinput); None in the controller or alone


def pytest_configure(config):
    # Not PYTEST_XDIST_WORKER: a pytest started from a test of an xdist run (tests/house) inherits that variable.
    global XDIST_WORKER
    XDIST_WORKER = getattr(config, "workerinput", {}).get("workerid")


def _report(record: dict) -> None:
    with open(TEST_REPORT, "a") as f:  # one line per event, flushed on close: a killed run keeps what finished
        f.write(json.dumps(record) + "\n")


def pytest_collection_finish(session):
    # what was meant to run: a test the limit reached first is reported as not started (xdist's controller collects
    # nothing; every worker collects the same tests)
    if TEST_REPORT and XDIST_WORKER in (None, "gw0"):
        _report({"event": "collected", "tests": [item.nodeid for item in session.items]})


def pytest_runtest_logstart(nodeid, location):
    if TEST_REPORT and not XDIST_WORKER:
        _report({"test": nodeid, "event": "start"})


def pytest_runtest_logreport(report):
    """Setup, call and teardown of each test as they end; a failure's message goes with it, so a window that runs out
    still says which tests passed, which failed and why (benchmarks/gpu_run.py reads it)."""
    if TEST_REPORT and not XDIST_WORKER and (report.when == "call" or report.outcome != "passed"):
        message = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            message = report.longrepr[2]  # (path, line, reason)
        elif report.outcome != "passed":  # the error's message (pytest's `E` lines), else the whole report
            crash = getattr(report.longrepr, "reprcrash", None)
            lines = (crash.message if crash else report.longreprtext).strip().splitlines()
            # the end of the message: a test that asserts with a process's output tail has its error there
            message = " / ".join(line.strip() for line in lines if line.strip())[-400:]
        _report(
            {"test": report.nodeid, "event": report.when, "outcome": report.outcome, "seconds": report.duration}
            | ({"message": message} if message else {})
        )
