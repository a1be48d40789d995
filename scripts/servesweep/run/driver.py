"""run-point: start the stack -> aiperf -> figures -> gate -> result, with teardown always."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..contract import Plan, PlanError, load_plan
from ..preflight import PreflightFailed
from . import bench, metrics, result, slots, slurm
from .ready import PointFailed, check_alive
from .spawn import LocalSpawner, MissingSecret, die_with_parent, stop_all
from .stack import Stack


class Interrupted(BaseException):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class ResultNotSaved(Exception):
    """The benchmark ran but its result could not be written; the message says where it was kept."""


def _raise_interrupt(signum, _frame):
    raise Interrupted(signum)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Say:
    """Progress lines to stderr and the point's driver.log. Never prints env values."""

    def __init__(self, prefix: str, log_path: Path):
        self.prefix, self.log = prefix, open(log_path, "a", buffering=1)

    def __call__(self, msg: str) -> None:
        line = f"[{self.prefix}] {msg}"
        print(line, file=sys.stderr, flush=True)
        self.log.write(f"{_now()} {line}\n")


def default_log_dir(plan: Plan) -> Path:
    base = Path.cwd() / "logs" / ("rehearsal" if plan.rehearsal else "")
    return base / plan.recipe / f"c{plan.point}"


def _engine_version(plan: Plan, local: bool) -> str | None:
    if plan.image:
        return plan.image.rsplit(":", 1)[-1]
    engines = [p for p in plan.processes if p.is_engine]
    if not local or not engines:
        return None
    dist = "ai-dynamo" if plan.engine.startswith("dynamo") else "vllm"
    try:
        out = subprocess.run(
            [engines[0].argv[0], "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
            capture_output=True, text=True, timeout=20, cwd=Path.cwd(),
        )  # fmt: skip
        return f"{dist} {out.stdout.strip()}" if out.returncode == 0 else None
    except OSError:
        return None


def _inside_workdir(path: Path, what: str) -> Path:
    path = Path(path).resolve()
    if not path.is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"servesweep: {what} {path} is outside the workflow directory {Path.cwd()}; refusing")
    return path


FAILURES = (PointFailed, MissingSecret, slots.PortsBusy, slurm.AllocationError, PreflightFailed, ResultNotSaved)


def run_point(plan_path: Path, result_path: Path, log_dir: Path | None = None) -> int:
    try:
        plan = load_plan(plan_path)
    except PlanError as e:
        print(f"servesweep: {e}", file=sys.stderr)
        return 2
    result_path = _inside_workdir(result_path, "result path")
    run_dir = _inside_workdir(log_dir or default_log_dir(plan), "log dir")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    say = Say(f"{plan.recipe} c{plan.concurrency}", run_dir / "driver.log")
    die_with_parent(signal.SIGTERM)  # if the job shell dies, tear down rather than run on as an orphan
    old = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stack = Stack(plan, run_dir, result_path, say)
    cleanup: list = []
    try:
        started_at = _now()
        stack.start()
        m = _measure(plan, stack, run_dir, say, cleanup)
        _conclude(plan, stack, m, result_path, run_dir, started_at, say)
        return 0
    except FAILURES as e:
        say(f"FAILED: {e}")
        _record_failure(run_dir, str(e))
        return 1
    except Interrupted as e:
        say(f"interrupted by {e}; tearing down")
        _record_failure(run_dir, f"interrupted by {e}")
        return 128 + e.signum
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        stack.stop()
        for fn in cleanup:
            fn()
        for s, h in old.items():
            signal.signal(s, h)


def _record_failure(run_dir: Path, reason: str) -> None:
    doc = {"time": _now(), "reason": reason, "logs": str(run_dir)}
    (run_dir / "failure.json").write_text(json.dumps(doc, indent=1) + "\n")


@dataclass
class Measurement:
    export: dict
    scrapes: result.Scrapes
    aiperf_rc: int | None
    aiperf_tail: str
    t_bench: float
    t_end: float
    artifacts: Path


def _scrape_all(plan: Plan, stack: Stack) -> tuple[dict, dict]:
    """(worker request counters, frontend samples) right now."""
    workers = {p.name: stack.url(p.metrics_url, p.name) for p in plan.processes if p.is_engine and p.registers}
    fronts = {f: metrics.scrape(stack.url(plan.process(f).metrics_url, f)) for f in plan.frontends}
    return bench.worker_requests({n: metrics.scrape(u) for n, u in workers.items()}), fronts


def _measure(plan: Plan, stack: Stack, run_dir: Path, say, cleanup: list) -> Measurement:
    workers_before, fe_before = _scrape_all(plan, stack)
    art = run_dir / "aiperf"
    server_metrics = [stack.url(p.metrics_url, p.name) for p in plan.processes if p.is_engine and p.registers]
    argv = bench.aiperf_argv(plan, stack.ctx, art, server_metrics)
    short_tmp = Path(tempfile.mkdtemp(prefix="servesweep-"))
    cleanup.append(lambda: shutil.rmtree(short_tmp, ignore_errors=True))
    env = bench.aiperf_env(plan, run_dir, short_tmp, os.environ)
    b = plan.benchmark
    say(
        f"bench: aiperf at concurrency {b.concurrency} for "
        + (f"{b.duration_s:g} s" if b.duration_s else f"{b.request_count} requests")
        + f" (warm-up {b.warmup or 'none'}), artifacts {art}"
    )
    t_bench = time.monotonic()
    aiperf = LocalSpawner().start("aiperf", argv, env, run_dir / "aiperf.log", Path.cwd())
    engines = list(stack.handles)
    stack.handles.append(aiperf)
    next_note = t_bench + 10
    while aiperf.poll() is None:
        check_alive(engines, "mid-benchmark")
        if time.monotonic() >= next_note:
            say(f"bench: {time.monotonic() - t_bench:.0f} s elapsed")
            next_note += 10
        time.sleep(0.1)
    t_end = time.monotonic()
    check_alive(engines, "mid-benchmark")
    stop_all([aiperf], grace_s=2)  # aiperf's own children, if any outlived it
    stack.handles.remove(aiperf)
    workers_after, fe_after = _scrape_all(plan, stack)
    scrapes = result.Scrapes(workers_before, workers_after, fe_before, fe_after)
    rc = aiperf.poll()
    return Measurement(bench.read_export(art), scrapes, rc, aiperf.log_tail(8), t_bench, t_end, art)


def _conclude(plan: Plan, stack: Stack, m: Measurement, result_path: Path, run_dir: Path, started_at, say) -> None:
    """Gate the run, then write its result; a measured result is never lost."""
    figs, why = result.figures(plan, m.export, m.scrapes)
    reasons = result.gate(plan, m.export, figs, m.aiperf_rc)
    if reasons:
        tail = m.aiperf_tail if m.aiperf_rc or not m.export else ""
        raise PointFailed("invalid run: " + "; ".join(reasons) + (f"\naiperf log tail:\n{tail}" if tail else ""))
    r = stack.readiness
    timings = {
        "spawn": round(stack.timings["spawn"], 3),
        "ready": round(r.smoke_at - r.started, 3),
        "last_health_to_ready": round(r.smoke_at - max(r.healthy_at.values()), 3),
        "ready_to_bench": round(m.t_bench - r.smoke_at, 3),
        "bench": round(m.t_end - m.t_bench, 3),
    }
    facts = result.RunFacts(
        stack.ctx.job_id, sorted(set(stack.names)), started_at, _now(),
        _engine_version(plan, plan.launcher == "local"), timings, os.path.relpath(m.artifacts),
    )  # fmt: skip
    doc = result.document(plan, figs, why, m.export, facts)
    t_w = time.monotonic()
    try:
        result.write_result(result_path, doc)
    except Exception as e:  # noqa: BLE001 - whatever broke, the measured result must survive
        kept = run_dir / "result.unsaved.json"
        kept.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        raise ResultNotSaved(
            f"the benchmark ran but its result could not be written to {result_path} ({type(e).__name__}: {e}); "
            f"the full result is kept in {kept} and aiperf's artifacts in {m.artifacts}"
        ) from None
    (run_dir / "failure.json").unlink(missing_ok=True)
    say(
        f"result {result_path}: {figs['requests_completed']} requests, "
        f"{figs['request_throughput']:.2f} req/s, TTFT p95 {figs['ttft_s']['p95']:.3f} s, "
        f"cache read {_pct(figs['cache_read_share'])}, per worker {figs['requests_per_worker']}, "
        f"per frontend {figs['requests_per_frontend']} (written in {time.monotonic() - t_w:.3f} s)"
    )


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"
