"""What the stack's processes logged, checked beside every speed figure: Python tracebacks and each
process kind's fatal markers, per process, and whether the lines a recipe expects (``expect_log``,
per role) appeared. A fast stack that logs a traceback on every request is not a result to rank."""

from __future__ import annotations

import re
from pathlib import Path

from ..contract import paths
from ..contract.plan import Plan

TRACEBACK = "Traceback (most recent call last):"
# fatal markers by the role that prints them (its own log format); "*" applies to every process
_ENGINE = (r"EngineDeadError", r"CUDA error", r"\bFATAL\b")
FATAL = {
    "*": (r"Segmentation fault", r"core dumped", r"panicked at"),  # crashes, Rust panics (Dynamo)
    "agg": _ENGINE,
    "prefill": _ENGINE,
    "decode": _ENGINE,
    "frontend": (r"\bFATAL\b",),
    "etcd": (r'"level":"(?:fatal|panic)"',),
    "nats": (r"\[FTL\]",),
    "balancer": (r"\[(?:emerg|alert|crit)\]",),
    "kvstore": (r"\bF\d{4} ",),  # glog's fatal lines (mooncake_master)
}
FIRST_LINES = 6  # of each process's first finding, for the result


def _pattern(role: str) -> re.Pattern:
    return re.compile("|".join((*FATAL["*"], *FATAL.get(role, ()))))


def scan_log(path: Path, role: str, expected: list[str]) -> dict:
    """{tracebacks, fatal, first: the first finding's lines, seen: {expected line: bool}}."""
    fatal_re, out = _pattern(role), {"tracebacks": 0, "fatal": 0, "first": [], "seen": dict.fromkeys(expected, False)}
    grab = 0
    try:
        f = open(path, errors="replace")
    except OSError:
        return out
    with f:
        for line in f:
            hit_tb, hit_fatal = TRACEBACK in line, bool(fatal_re.search(line))
            out["tracebacks"] += hit_tb
            out["fatal"] += hit_fatal and not hit_tb
            if (hit_tb or hit_fatal) and not out["first"]:
                grab = FIRST_LINES
            if grab:
                out["first"].append(line.rstrip()[:300])
                grab -= 1
            for text in expected:
                if not out["seen"][text] and text in line:
                    out["seen"][text] = True
    return out


def scan(plan: Plan, log_dir: Path) -> dict:
    """The result's ``logs``: findings per process (only those with any), every expected line per role
    and whether it appeared in a log of that role, and ``clean`` (no finding, every expected line seen)."""
    expect: dict[str, list[str]] = plan.validity.get("expect_log") or {}
    by_process, seen = {}, {role: dict.fromkeys(lines, False) for role, lines in expect.items()}
    for p in plan.processes:
        found = scan_log(paths.process_log(log_dir, p.name), p.role, expect.get(p.role, []))
        for text, hit in found.pop("seen").items():
            seen[p.role][text] = seen[p.role][text] or hit
        if found["tracebacks"] or found["fatal"]:
            by_process[p.name] = found
    missing = [f"{role}: {text}" for role, lines in seen.items() for text, hit in lines.items() if not hit]
    return {
        "tracebacks": sum(v["tracebacks"] for v in by_process.values()),
        "fatal": sum(v["fatal"] for v in by_process.values()),
        "by_process": by_process,
        "expected": seen,
        "missing": missing,
        "clean": not by_process and not missing,
    }
