"""A fast wrong answer is not a result: the stack's logs are scanned beside every speed figure."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from servesweep.contract.plan import Plan
from servesweep.report import summary
from servesweep.run import log_health
from servesweep.tools.samples import result_doc

from helpers import plan_of

TB = """INFO started
Traceback (most recent call last):
  File "x.py", line 1, in <module>
ValueError: boom
INFO serving
"""


def _plan(expect: dict) -> Plan:
    doc = plan_of("local-agg-2x-mocker")
    doc["validity"]["expect_log"] = expect
    return Plan.from_json(doc)


def test_a_traceback_and_a_fatal_marker_are_counted_per_process_with_their_first_lines(tmp_path):
    plan = _plan({"frontend": ["parser_version=V2"], "agg": ["ready"]})
    (tmp_path / "agg-0.log").write_text(TB + "INFO ready\n")
    (tmp_path / "agg-1.log").write_text("INFO ready\nthread 'main' panicked at src/lib.rs:1\n")
    (tmp_path / "frontend.log").write_text("INFO parser_version=V2 route\n")
    logs = log_health.scan(plan, tmp_path)
    assert logs["tracebacks"] == 1 and logs["fatal"] == 1 and not logs["clean"]
    assert set(logs["by_process"]) == {"agg-0", "agg-1"}
    assert logs["by_process"]["agg-0"]["first"][:2] == [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
    ]
    assert logs["expected"] == {"frontend": {"parser_version=V2": True}, "agg": {"ready": True}}
    assert logs["missing"] == []


def test_an_expected_line_that_never_appears_is_missing_and_a_quiet_stack_is_clean(tmp_path):
    for name in ("agg-0", "agg-1", "frontend", "sysguard-n0"):
        (tmp_path / f"{name}.log").write_text("INFO all good\n")
    assert log_health.scan(_plan({}), tmp_path)["clean"] is True
    logs = log_health.scan(_plan({"frontend": ["parser_version=V2"]}), tmp_path)
    assert logs["missing"] == ["frontend: parser_version=V2"] and not logs["clean"]


def test_each_kind_has_its_own_fatal_markers(tmp_path):
    (tmp_path / "x.log").write_text('{"level":"fatal","msg":"no space"}\n[FTL] nats down\n')
    assert log_health.scan_log(tmp_path / "x.log", "etcd", [])["fatal"] == 1  # etcd's JSON, not NATS' tag
    assert log_health.scan_log(tmp_path / "x.log", "nats", [])["fatal"] == 1
    assert log_health.scan_log(tmp_path / "x.log", "frontend", [])["fatal"] == 0


def test_the_summary_marks_a_point_with_unclean_logs_and_never_names_it_best(tmp_path):
    fast, slow = result_doc("fast", 4, 0.1, 20000.0), result_doc("slow", 4, 0.1, 10000.0)
    fast["logs"] = {"tracebacks": 3, "fatal": 0, "by_process": {}, "expected": {}, "missing": ["frontend: V2"],
                    "clean": False}  # fmt: skip
    paths = []
    for doc in (fast, slow):
        p = tmp_path / f"{doc['identity']['recipe']}.json"
        p.write_text(json.dumps(doc))
        paths.append(p)
    df = summary.load_results(paths, {})
    row = df[df["recipe"] == "fast"].iloc[0]
    assert row["logs_note"] == "⚠ logs: 3 traceback(s), missing 'frontend: V2'"
    best = summary.best_per_concurrency(df)
    assert list(best["recipe"]) == ["slow"]
    table = summary.scenario_table(df, Path(tmp_path))
    assert "⚠ logs: 3 traceback(s)" in table
    assert isinstance(df, pd.DataFrame)
