"""run-point: start the stack -> aiperf -> figures -> gate -> result, with teardown always."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..checks import preflight
from ..checks.preflight import PreflightFailed
from ..contract import paths
from ..contract.heartbeat import Watch
from ..contract.plan import PREAMBLE_SCRIPT, Plan, plan_source, stack_reuse_allowed
from . import (
    bench,
    client_cpu,
    credentials,
    hoststall,
    log_health,
    metrics,
    prefix,
    repeats,
    result,
    server_export,
    slots,
    slurm,
    window,
)
from .attempts import keep_earlier_attempt, record_failure
from .driver_io import ORPHANED, Interrupted, Say, now, point_label, private_plan, raise_interrupt
from .engine_load import figures as engine_load_figures
from .preamble import running_versions
from .ready import PointFailed, registration_drift, tls_for
from .spawn import LocalSpawner, MissingSecret, die_with_parent, inherited_env, stop_all
from .stacks.processes import Stack
from .stacks.warm import Invocation, SharedStack, reset_prefix_caches
from .supervise import supervised
from .watch import StackWatch, targets


class ResultNotSaved(Exception):
    """The benchmark ran but its result could not be written; the message says where it was kept."""


class SoloStack:
    """A point on a stack of its own (reuse off, or not run by snakemake)."""

    def __init__(self, plan: Plan, run_dir: Path, result_path: Path, say):
        self.stack = Stack(plan, run_dir, result_path, say)
        self.info, self.position, self.linger_s = None, 1, 0.0

    def attach(self) -> None:
        self.stack.start()
        self.info = self.stack.info(f"solo-{self.stack.ctx.job_id}-{os.getpid()}")

    def check(self, when: str) -> None:
        self.stack.check(when)

    def detach(self, counted: bool = True) -> None:
        self.stack.stop()


def open_stack(plan: Plan, plan_path: Path, result_path: Path, run_dir: Path, say, join: Path | None = None):
    """The stack a job runs on: a held stack's (``join``), the run's warm one, or one of its own."""
    inv = Invocation.current() if plan.stack["reuse"] and stack_reuse_allowed() else None
    if join is not None:
        return SharedStack(plan, plan_path.resolve(), result_path, None, say, join=join)
    if inv:
        return SharedStack(plan, plan_path.resolve(), result_path, inv, say)
    return SoloStack(plan, run_dir, result_path, say)


def default_log_dir(plan: Plan) -> Path:
    return Path.cwd() / paths.run_dir(plan.recipe, plan.point, plan.rehearsal)


def _versions(plan: Plan, run_dir: str) -> dict[str, str]:
    """What the stack's processes said they run (run/preamble), read from their logs."""
    logs = []
    for p in plan.processes:
        if len(p.argv) > 1 and p.argv[1] == PREAMBLE_SCRIPT:
            try:
                logs.append(paths.process_log(run_dir, p.name).read_text(errors="replace"))
            except OSError:
                continue
    return running_versions(logs)


def _inside_workdir(path: Path, what: str) -> Path:
    path = Path(path).resolve()
    if not path.is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"servesweep: {what} {path} is outside the workflow directory {Path.cwd()}; refusing")
    return path


FAILURES = (
    PointFailed, MissingSecret, slots.PortsBusy, slurm.AllocationError, PreflightFailed, ResultNotSaved,
    credentials.ControlPlaneAuthError,
)  # fmt: skip


def run_point(plan_path: Path, result_path: Path, log_dir: Path | None = None, join: Path | None = None) -> int:
    """``join``: a held stack's directory (this point runs as a step of that stack's Slurm job).
    A host that stood still during the benchmark is retried (run/hoststall); each attempt is kept."""
    plan = private_plan(plan_path)
    if plan is None:
        return 2
    result_path = _inside_workdir(result_path, "result path")
    run_dir = _inside_workdir(log_dir or default_log_dir(plan), "log dir")
    die_with_parent(signal.SIGTERM)  # if the job shell dies, tear down rather than run on as an orphan
    # whatever kills the driver, SIGKILL included, its failure record is written (run/supervise)
    return supervised(lambda: _drive(plan, Path(plan_path), result_path, run_dir, join), run_dir)


def _drive(plan: Plan, plan_path: Path, result_path: Path, run_dir: Path, join) -> int:
    """The point, attempt after attempt (the supervised side of run_point)."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, ORPHANED)
    old = {s: signal.getsignal(s) for s in signals}
    try:
        retries = hoststall.RETRIES
        while (rc := _attempt(plan, plan_path, result_path, run_dir, join, old, retries)) is None:
            retries -= 1  # _attempt asks again only while retries are left
        return rc
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _attempt(plan: Plan, plan_path: Path, result_path: Path, run_dir: Path, join, handlers: dict, retries: int):
    """One attempt at the point: its exit code, or None to run it again."""
    for s in handlers:  # each attempt's own: the previous one's teardown put the old handlers back
        signal.signal(s, raise_interrupt)
    keep_earlier_attempt(run_dir)
    run_dir.mkdir(parents=True)
    say = Say(f"{plan.recipe} {point_label(plan)}", run_dir / paths.DRIVER_LOG)
    stack = open_stack(plan, plan_path, result_path, run_dir, say, join)
    cleanup: list = []
    interrupted = False
    try:
        started_at = now()
        _before_attach(plan, result_path, say)
        stack.attach()
        m = _measure(plan, stack, run_dir, say, cleanup)
        source = plan_source(plan_path, plan.fingerprints["curve"])
        _conclude(plan, stack, m, result_path, run_dir, (started_at, source), say)
        return 0
    except FAILURES as e:
        again = isinstance(e, hoststall.HostStalled) and retries > 0
        say(f"FAILED: {e}" + ("; an infrastructure failure: running the point again" if again else ""))
        record_failure(run_dir, str(e))
        return None if again else 1
    except Interrupted as e:
        say(f"interrupted by {e}; tearing down")
        record_failure(run_dir, f"interrupted by {e}")
        interrupted = True
        return 128 + e.signum
    except Exception as e:  # noqa: BLE001 - a bug of ours must still leave a failure record and the artifacts
        say(f"FAILED unexpectedly: {type(e).__name__}: {e}")
        record_failure(run_dir, f"unexpected {type(e).__name__}: {e} (aiperf's artifacts, if any, are in {run_dir})")
        return 1
    finally:
        for s in handlers:
            signal.signal(s, signal.SIG_IGN)
        for fn in cleanup:  # aiperf first (stopped in finally), then the stack or our turn on it
            fn()
        stack.detach(counted=not interrupted)  # a cut turn is the keeper's to expect again (a requeue)
        for s, h in handlers.items():
            signal.signal(s, h)


def _before_attach(plan: Plan, result_path: Path, say) -> None:
    """Fail the point, not the stack it would join: a main process that is gone, or a client side
    (aiperf, dataset, tokenizer cache, result dir) this point cannot use."""
    orphaned = Watch().stale_at_start()
    if orphaned:
        raise PointFailed(orphaned)
    preflight.require(plan, Path.cwd(), result_path, "client", say)


@dataclass
class Measurement:
    export: dict
    scrapes: result.Scrapes
    aiperf_rc: int | None
    aiperf_tail: str
    t_bench: float
    t_end: float
    artifacts: Path
    caches: tuple  # (reset: bool | None, why)
    engine_urls: dict  # metrics URL aiperf scraped -> the serving process behind it
    run_exports: list  # aiperf's export of each run (one without repeats)
    drift: list  # registration changes seen after the benchmark (gate reasons)
    stall_s: float  # how far the wall clock jumped against the monotonic one (run/hoststall)
    stalls: list  # stack processes stopped or silent for a while inside the window (run/watch)
    aiperf_pid: int
    aiperf_phase: str  # where aiperf was when it ended (bench.AiperfPhase)


def _scrape_all(plan: Plan, ctx) -> tuple[dict, dict, dict]:
    """(worker request counters, frontend samples, serving workers' samples) right now."""
    workers = {p.name: ctx.url(p.metrics_url, p.name) for p in _serving(plan)}
    fronts = {f: metrics.scrape(ctx.url(plan.process(f).metrics_url, f)) for f in plan.frontends}
    samples = {n: metrics.scrape(u) for n, u in workers.items()}
    return bench.worker_requests(plan, samples), fronts, samples


def _serving(plan: Plan):
    """Engine processes that serve requests (not headless ranks)."""
    return [p for p in plan.processes if p.is_engine and not p.headless]


def _measure(plan: Plan, stack, run_dir: Path, say, cleanup: list) -> Measurement:
    ctx = stack.info.context(plan)
    caches = reset_prefix_caches(plan, ctx, stack.position)
    workers_before, fe_before, smp_before = _scrape_all(plan, ctx)
    art = run_dir / "aiperf"
    engine_urls = {ctx.url(p.metrics_url, p.name): p.name for p in _serving(plan)}
    argv = bench.aiperf_argv(plan, ctx, art, [*engine_urls, *window.frontend_urls(plan, ctx)])
    short_tmp = Path(tempfile.mkdtemp(prefix="servesweep-"))
    cleanup.append(lambda: shutil.rmtree(short_tmp, ignore_errors=True))
    env = bench.aiperf_env(plan, run_dir, short_tmp, inherited_env(os.environ))  # the allowlist: no credential
    b = plan.benchmark
    say(
        f"bench: aiperf at concurrency {b.concurrency} for "
        + (f"{b.duration_s:g} s" if b.duration_s else f"{b.request_count} requests")
        + f" (warm-up {b.warmup or 'none'}), artifacts {art}"
    )
    sw = _stack_watch(plan, stack, ctx)
    cleanup.append(sw.stop)
    t_bench, clock = time.monotonic(), hoststall.ClockWatch()
    aiperf = LocalSpawner().start("aiperf", argv, env, run_dir / paths.AIPERF_LOG, Path.cwd())
    cleanup.insert(0, lambda: stop_all([aiperf], grace_s=2))  # aiperf and its children, whatever happens
    cpu = client_cpu.Sampler(aiperf.pid)  # the client's CPU time over the run (figures.client.cpu_s)
    next_note, phase = t_bench + 10, bench.AiperfPhase(run_dir / paths.AIPERF_LOG)
    while aiperf.poll() is None:
        cpu.sample()
        _check(stack, clock, sw, phase.now())
        if time.monotonic() >= next_note:
            say(f"bench: {time.monotonic() - t_bench:.0f} s elapsed")
            next_note += 10
        time.sleep(0.1)
    t_end = time.monotonic()
    cpu.save(art)
    _check(stack, clock, sw, phase.now())
    stalls = sw.stop()
    for st in stalls:
        say(f"stall: {st['process']} served nothing for {st['seconds']} s from {st['start_s']} s in ({st['seen']})")
    stop_all([aiperf], grace_s=2)  # aiperf's own children, if any outlived it
    workers_after, fe_after, smp_after = _scrape_all(plan, ctx)
    scrapes = result.Scrapes(workers_before, workers_after, fe_before, fe_after, smp_before, smp_after)
    rc = aiperf.poll()
    runs = repeats.run_exports(art)
    export = repeats.merged_export(runs)
    drift = registration_drift(plan, ctx)
    m = (export, scrapes, rc, aiperf.log_tail(8), t_bench, t_end, art, caches, engine_urls, runs, drift, clock.look())
    return Measurement(*m, stalls, aiperf.pid, phase.now())


def _stack_watch(plan: Plan, stack, ctx) -> StackWatch:
    """Every stack process watched for a stop or a silence through the window (run/watch)."""
    watched = targets(plan, stack.info.local_pids(), ctx.url)
    urls = {w.name: w.health_url for w in watched if w.health_url}
    return StackWatch(watched, tls_for(ctx, urls))


def _check(stack, clock: hoststall.ClockWatch, sw: StackWatch, when: str) -> None:
    """The stack's health while aiperf runs (``when``: its phase); whatever broke while the host stood
    still is the host's doing."""
    try:
        sw.look(when)
        stack.check(when)
    except PointFailed as e:
        e = sw.explain(e)
        raise hoststall.verdict(clock.look(), [str(e)]) or e from None


def _conclude(plan: Plan, stack, m: Measurement, result_path: Path, run_dir: Path, origin: tuple, say) -> None:
    """Gate the run, then write its result; a measured result is never lost. ``origin``: (when the
    point started, the source its plan was rendered from or None)."""
    started_at, source = origin
    stalled = hoststall.verdict(m.stall_s, m.drift)
    if stalled:
        raise stalled
    when = f"{m.aiperf_phase} ({m.t_end - m.t_bench:.0f} s in)"
    died = bench.client_died(m.aiperf_rc, m.aiperf_pid, when, m.aiperf_tail)
    if died:  # before any figure: a dead client's partial export would read as foreign traffic
        raise PointFailed(died)
    records = repeats.request_records(m.artifacts)
    figs, why = result.figures(plan, m.export, m.scrapes, bench.request_outcomes(records))
    exported = server_export.read(m.artifacts)
    urls = {**m.engine_urls, **window.frontend_urls(plan, stack.info.context(plan))}
    counting = window.apply(plan, exported, urls, figs, why, window.warmup_requests(records))  # no warm-up counted
    figs["batch_by_role"], figs["preemptions"] = server_export.batch_figures(plan, exported, m.engine_urls, why)
    figs["spec_decode"] = server_export.spec_decode_figures(plan, exported, m.engine_urls, why)
    figs["engine_load"] = engine_load_figures(plan, exported, m.engine_urls, why)  # energy's hook (diagnosis)
    figs["repeats"] = repeats.figures(m.artifacts, m.run_exports, plan.gpus_total)
    sent = Path(stack.info.run_dir) / "prefix-sent.json"  # blocks the stack's earlier points sent
    warm = set() if m.caches[0] or stack.position == 1 else prefix.load_warm(sent)  # fresh or reset: cold
    counting["theoretical_prefix_hit"] = prefix.cache_note(len(warm))
    figs["theoretical_prefix_hit"] = prefix.theoretical_hit(plan.benchmark.dataset, records, why, warm)
    prefix.save_warm(sent, warm)
    result.traffic(plan, figs, records, why)
    reasons = m.drift + result.gate(plan, m.export, figs, m.aiperf_rc)
    if reasons:
        tail = m.aiperf_tail if m.aiperf_rc or not m.export else ""
        raise PointFailed("invalid run: " + "; ".join(reasons) + (f"\naiperf log tail:\n{tail}" if tail else ""))
    info = stack.info
    timings = {
        "spawn": info.spawn_s,
        "ready": info.startup_s,
        "last_health_to_ready": info.last_health_to_ready_s,
        "bench": round(m.t_end - m.t_bench, 3),
    }
    reset, note = m.caches
    stack_doc = {"id": info.id, "position": stack.position, "startup_s": info.startup_s}
    stack_doc |= {"caches_reset": reset, "caches_reset_note": note, "linger_s": stack.linger_s}
    facts = result.RunFacts(
        info.job_id, sorted(set(info.node_names)), started_at, now(),
        _versions(plan, info.run_dir), timings, os.path.relpath(m.artifacts), stack_doc,
    )  # fmt: skip
    health = log_health.scan(plan, Path(info.run_dir))  # the stack's process logs, beside the figures
    doc = result.document(plan, figs, why, m.export, facts) | {"source": source, "logs": health, "stalls": m.stalls}
    doc["counting"] |= counting
    doc["figures"]["client"] = client_cpu.with_cpu(doc["figures"].get("client"), m.artifacts, records)
    _write_or_keep(doc, result_path, run_dir, m.artifacts)
    try:  # the result is written: nothing after this may fail the point
        (run_dir / paths.FAILURE_FILE).unlink(missing_ok=True)
        say(
            f"result {result_path}: {figs['requests_completed']} requests, "
            f"{_num(figs['request_throughput'], 2)} req/s, TTFT p95 {_num(figs['ttft_s']['p95'], 3)} s, "
            f"cache read {_pct(figs['cache_read_share'])}, per worker {figs['requests_per_worker']}, "
            f"per frontend {figs['requests_per_frontend']} (stack {info.id}, point {stack.position} on it)"
        )
    except Exception as e:  # noqa: BLE001
        print(f"servesweep: result {result_path} written; reporting it failed: {e}", file=sys.stderr)


def _write_or_keep(doc: dict, result_path: Path, run_dir: Path, artifacts: Path) -> None:
    try:
        result.write_result(result_path, doc)
    except Exception as e:  # noqa: BLE001 - whatever broke, the measured result must survive
        kept = run_dir / paths.UNSAVED_RESULT
        kept.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        raise ResultNotSaved(
            f"the benchmark ran but its result could not be written to {result_path} ({type(e).__name__}: {e}); "
            f"the full result is kept in {kept} and aiperf's artifacts in {artifacts}"
        ) from None


def _num(x, digits: int) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"
