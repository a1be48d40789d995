"""Fixtures, the parallel layout and the reliability report (helpers live in helpers.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from servesweep.contract import heartbeat
from servesweep.run.trust import STALL_SHARE_ENV

from helpers import LOCAL_RECIPES, RELIABILITY, copy_workflow

# Every real stack the suite starts runs beside two others on two cores: aiperf's event loop stalls for
# 5-70 % of a short window, and a client-bound mark would blank the very figures a test is about. The
# marks are tested on recorded exports (test_trust) and on a client starved on purpose, each setting
# the bound itself; everywhere else the loaded host's client is not judged (docs/tests.md).
os.environ.setdefault(STALL_SHARE_ENV, "inf")


@pytest.fixture(autouse=True)
def _no_heartbeat_left():
    """A test that starts a main process's heartbeat must not hand its path to later tests' drivers
    (they would take the main process for gone and refuse to start)."""
    yield
    assert not os.environ.get(heartbeat.ENV), f"a test left {heartbeat.ENV} set"


@pytest.fixture
def wf(tmp_path):
    return copy_workflow(tmp_path / "wf", LOCAL_RECIPES)


# -- where tests run in parallel (pytest-xdist) --
# A module whose tests share a module-scoped fixture (a measured sweep, the Slurm test cluster, a
# venv probe) runs whole on one worker, so the fixture is built once; every other test is a unit of
# its own. The Slurm cluster is host-wide (one per host), so its module is one unit by necessity.
# (xdist's own `loadgroup` does not group under pytest 9: it renames `item._nodeid`, which pytest 9
# no longer reads; this scheduler groups by the node id instead.)
SHARED_FIXTURE_MODULES = ("test_slurm", "test_local_sweep", "test_why", "test_engine_args", "test_bad_input")


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        """Units handed out in collection order (the longest first, below): with
        --no-loadscope-reorder a worker starts the Slurm module at once."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if Path(module).stem in SHARED_FIXTURE_MODULES else nodeid

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(items):
    """The shared-fixture modules first, the Slurm module (~20 min of waiting on the cluster) first
    of all."""
    rank = {m: i for i, m in enumerate(SHARED_FIXTURE_MODULES)}
    items.sort(key=lambda it: rank.get(it.module.__name__ if it.module else "", len(rank)))


# -- the suite's timeline (bench/suite_time.py): one JSON line per test, from whichever worker ran it --
TIMELINE_ENV = "SERVESWEEP_TEST_TIMELINE"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = time.time()
    yield
    path = os.environ.get(TIMELINE_ENV)
    if path:
        markers = sorted({m.name for m in item.iter_markers()} & {"integration", "slurm"}) or ["unit"]
        line = {"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "start": start, "end": time.time(), "marker": markers[0]}  # fmt: skip
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


# -- the reliability report: tests record (category, case); a case passed if its test passed --
# Cases travel as the report's user_properties, so the report also adds up across xdist workers.
RELIABILITY_KEY = "servesweep-reliability"


@pytest.fixture
def reliability(request):
    """record(category, case) marks a case tried; it passes if the test passes."""

    def record(category: str, case: str):
        request.node.user_properties.append((RELIABILITY_KEY, (category, case)))

    return record


def pytest_runtest_logreport(report):
    if report.when != "call" or os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's reports reach the controller
        return
    for key, value in report.user_properties:
        if key == RELIABILITY_KEY:
            category, case = value
            RELIABILITY.setdefault(category, []).append((case, report.passed))


def pytest_terminal_summary(terminalreporter):
    if not RELIABILITY:
        return
    tr = terminalreporter
    tr.section("reliability")
    tr.write_line(f"{'category':<28} {'tried':>5} {'passed':>6}")
    for category, cases in sorted(RELIABILITY.items()):
        tr.write_line(f"{category:<28} {len(cases):>5} {sum(ok for _, ok in cases):>6}")
