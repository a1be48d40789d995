"""Fixtures and the reliability report (helpers live in helpers.py)."""

from __future__ import annotations

import os

import pytest

from servesweep import heartbeat

from helpers import LOCAL_RECIPES, RELIABILITY, copy_workflow


@pytest.fixture(autouse=True)
def _no_heartbeat_left():
    """A test that starts a main process's heartbeat must not hand its path to later tests' drivers
    (they would take the main process for gone and refuse to start)."""
    yield
    assert not os.environ.get(heartbeat.ENV), f"a test left {heartbeat.ENV} set"


@pytest.fixture
def wf(tmp_path):
    return copy_workflow(tmp_path / "wf", LOCAL_RECIPES)


# -- the reliability report: tests record (category, case, passed); printed at the end --


@pytest.fixture
def reliability(request):
    """record(category, case) marks a case tried; it passes if the test passes."""
    entries = []

    def record(category: str, case: str):
        entries.append((category, case))

    yield record
    rep = getattr(request.node, "rep_call", None)
    ok = bool(rep and rep.passed)
    for category, case in entries:
        RELIABILITY.setdefault(category, []).append((case, ok))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep


def pytest_terminal_summary(terminalreporter):
    if not RELIABILITY:
        return
    tr = terminalreporter
    tr.section("reliability")
    tr.write_line(f"{'category':<28} {'tried':>5} {'passed':>6}")
    for category, cases in sorted(RELIABILITY.items()):
        tr.write_line(f"{category:<28} {len(cases):>5} {sum(ok for _, ok in cases):>6}")
