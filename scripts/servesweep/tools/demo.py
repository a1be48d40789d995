"""`make demo`: the local sweep with one progress line beside Snakemake's own output, then the
HTML report, and where everything is.

Snakemake's output goes to its log (``logs/demo.log``); the terminal shows servesweep's own lines
and errors, and after each point starts or ends one line says
``points done / total · current point · elapsed · estimate``. Totals come from Snakemake's job
table and grow when a capacity search adds a probe.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..contract.paths import DEMO_LOG, FAILURE_FILE, POINT_TARGET, REPORT, SUMMARY_MD, plots_dir

# what the demo runs: the aggregated mocker miniature, real vLLM on the CPU behind Dynamo's frontend +
# KV router, and a capacity search (README, "The two commands"); the whole local sweep is one command more
DEMO_RECIPES = (
    "local-agg-2x-mocker",
    "local-agg-2x-dynamo-vllm-cpu",
    "local-agg-2x-mocker-capacity",
    "local-tune-mocker",  # a sweep of the mocker's server settings: the summary's tuning table
)
# Snakemake's own lines that the terminal shows; every line goes to the demo's log
_SHOWN = re.compile(r"^(servesweep|\[servesweep\]|Error|RuleException|MissingOutputException|WorkflowError|Exiting)")
_OUTPUT = re.compile(r"^\s*output: " + POINT_TARGET.pattern)
_FINISHED = re.compile(r"^Finished jobid: \d+ \(Rule: point\)")
_STATS = re.compile(r"^point\s+(\d+)\s*$")


@dataclass
class Progress:
    """What Snakemake's output said so far about the point jobs."""

    started_at: float
    total: int = 0
    done: int = 0
    running: list[str] = field(default_factory=list)
    seen: set = field(default_factory=set)
    finished_at: list[float] = field(default_factory=list)

    def feed(self, line: str) -> bool:
        """Take one line of Snakemake's output; True when the progress line should be printed."""
        if m := _STATS.match(line):
            self.total = max(self.total, int(m.group(1)) + self.done)
            return False
        if m := _OUTPUT.match(line):
            point = f"{m.group(1)} c{m.group(2)}"
            if point not in self.seen:
                self.seen.add(point)
                self.running.append(point)
                self.total = max(self.total, len(self.seen))
                return True
            return False
        if _FINISHED.match(line):
            self.done += 1
            self.finished_at.append(time.monotonic())
            if self.running:
                self.running.pop(0)
            return True
        return False

    def line(self, now: float) -> str:
        elapsed = now - self.started_at
        left = "estimate after the first point"
        if self.done:  # the median time between points: a stack's startup inflates only one of them
            gaps = [b - a for a, b in zip([self.started_at, *self.finished_at], self.finished_at, strict=False)]
            left = f"~{_clock(statistics.median(gaps) * max(self.total - self.done, 0))} left"
        current = self.running[0] if self.running else "–"
        return f"[servesweep] points {self.done}/{self.total} · now {current} · {_clock(elapsed)} elapsed · {left}"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def _run(argv: list[str], progress: Progress | None, log) -> int:
    """Run a command with all its output in ``log``; the terminal shows servesweep's own lines (a
    problem's lines under it), errors, and a progress line after each point event."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    under = False  # inside a servesweep message's indented lines
    try:
        for line in proc.stdout:
            log.write(line)
            under = bool(_SHOWN.match(line)) or (under and line.startswith("  "))
            if under:
                sys.stdout.write(line)
            if progress is not None and progress.feed(line.rstrip("\n")):
                print(progress.line(time.monotonic()), flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(2)  # snakemake tears its jobs down on SIGINT
        proc.wait()
        return 130


def run_demo(snakemake: str, profile: str = "local") -> int:
    only = ",".join(DEMO_RECIPES)
    target = str(SUMMARY_MD)
    progress = Progress(started_at=time.monotonic())
    root = Path.cwd()
    (root / DEMO_LOG).parent.mkdir(parents=True, exist_ok=True)
    print(f"[servesweep] Snakemake's own output: {root / DEMO_LOG}")
    with open(root / DEMO_LOG, "w") as log:
        rc = _run([snakemake, "--profile", profile, target, "--config", f"recipes={only}"], progress, log)
        if rc != 0:
            print(f"[servesweep] the sweep failed (exit {rc}); failed points keep logs/<recipe>/c<conc>/{FAILURE_FILE}")
            return rc
        print(progress.line(time.monotonic()))
        argv = [snakemake, "--profile", profile, target, "--report", str(REPORT), "--config", f"recipes={only}"]
        rc = _run(argv, None, log)
    print(f"[servesweep] summary: {root / SUMMARY_MD}")
    print(f"[servesweep] plots:   {root / plots_dir()}")
    print(f"[servesweep] report:  {root / REPORT}" + ("" if rc == 0 else f" (not written: snakemake exit {rc})"))
    return rc
