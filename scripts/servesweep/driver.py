"""run-point: spawn all -> ready -> bench -> collect -> gate -> write, with teardown always."""

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
from pathlib import Path

from . import bench, metrics, ports, result, slurm
from .ready import PointFailed, check_alive, wait_ready
from .spawn import Context, Handle, LocalSpawner, MissingSecret, SrunSpawner, die_with_parent, stop_all


class Interrupted(BaseException):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


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


def default_log_dir(plan: dict) -> Path:
    base = Path.cwd() / "logs" / ("rehearsal" if plan["rehearsal"] else "")
    return base / plan["recipe"] / f"c{plan['point']}"


def _all_ports(plan: dict) -> list[int]:
    out = []
    for p in plan["processes"]:
        for port in p["ports"].values():
            out += range(port["port"], port["port"] + port["count"])
    return out


def _engine_version(plan: dict, spawner_kind: str) -> str | None:
    if plan["image"]:
        return plan["image"].rsplit(":", 1)[-1]
    if spawner_kind != "local":
        return None
    py = plan["processes"][0]["argv"][0]
    dist = "ai-dynamo" if plan["engine"].startswith("dynamo") else "vllm"
    try:
        out = subprocess.run(
            [py, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
            capture_output=True,
            text=True,
            timeout=20,
            cwd=Path.cwd(),
        )
        return f"{dist} {out.stdout.strip()}" if out.returncode == 0 else None
    except OSError:
        return None


def _inside_workdir(path: Path, what: str) -> Path:
    path = Path(path).resolve()
    if not path.is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"servesweep: {what} {path} is outside the workflow directory {Path.cwd()}; refusing")
    return path


def run_point(plan_path: Path, result_path: Path, log_dir: Path | None = None) -> int:
    plan = json.loads(Path(plan_path).read_text())
    result_path = _inside_workdir(result_path, "result path")
    run_dir = _inside_workdir(log_dir or default_log_dir(plan), "log dir")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    say = Say(f"{plan['recipe']} c{plan['concurrency']}", run_dir / "driver.log")
    die_with_parent(signal.SIGTERM)  # if the job shell dies, tear down rather than run on as an orphan
    old = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    handles: list[Handle] = []
    cleanup: list = []
    try:
        return _run(plan, Path(result_path), run_dir, say, handles, cleanup)
    except (PointFailed, MissingSecret, ports.PortsBusy, slurm.AllocationError) as e:
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
        if handles:
            t0 = time.monotonic()
            killed = stop_all(handles, grace_s=float(os.environ.get("SERVESWEEP_GRACE_S", "5")))
            say(
                f"teardown: {len(handles)} processes stopped in {time.monotonic() - t0:.1f} s"
                + (f" (SIGKILL needed for {', '.join(killed)})" if killed else "")
            )
        for fn in cleanup:
            fn()
        for s, h in old.items():
            signal.signal(s, h)


def _record_failure(run_dir: Path, reason: str) -> None:
    doc = {"time": _now(), "reason": reason, "logs": str(run_dir)}
    (run_dir / "failure.json").write_text(json.dumps(doc, indent=1) + "\n")


def _run(plan: dict, result_path: Path, run_dir: Path, say, handles: list[Handle], cleanup: list) -> int:
    t_start, started_at = time.monotonic(), _now()
    if plan["launcher"] == "slurm":
        alloc = slurm.current_allocation()
        if len(alloc.names) < plan["nodes"]:
            raise slurm.AllocationError(f"plan needs {plan['nodes']} nodes, allocation has {len(alloc.names)}")
        spawner = SrunSpawner(plan["container"])
        names, addrs, job_id = alloc.names, alloc.addrs, alloc.job_id
    else:
        spawner = LocalSpawner()
        n = plan["nodes"]
        names, addrs = ["localhost"] * n, ["127.0.0.1"] * n
        job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
    pinfo = plan["ports"]
    lease, notes = ports.lease_slot(
        _all_ports(plan),
        pinfo["block"],
        pinfo["slots"],
        seed=job_id,
        host="127.0.0.1" if spawner.kind == "local" else "0.0.0.0",
    )
    try:
        for note in notes:
            say(note)
        procs = {p["name"]: p for p in plan["processes"]}
        ctx = Context(addrs, names, lease.slot * pinfo["block"], job_id, run_dir, procs)
        (run_dir / "discovery").mkdir()
        say(
            f"starting {len(procs)} processes on {plan['nodes']} node(s) "
            f"(port slot {lease.slot}, job {job_id}, logs {run_dir})"
        )
        for p in plan["processes"]:
            env, _secret = ctx.env(p, rehearsal=plan["rehearsal"])
            argv = spawner.command(p, ctx.argv(p), ctx)
            handles.append(spawner.start(p, argv, env, run_dir / f"{p['name']}.log", Path.cwd()))
        t_spawned = time.monotonic()
        readiness = wait_ready(plan, ctx, handles, plan["readiness"]["timeout_s"], say)
        workers = {
            p["name"]: ctx.url("http://{addr:self}:{port:self.system}/metrics", p["name"])
            for p in plan["processes"]
            if p["role"] != "frontend" and p["registers"] and "system" in p["ports"]
        }
        fe_metrics = ctx.resolve(plan["client_url"], "") + "/metrics" if plan["frontend"] else None
        before = bench.worker_requests({n: metrics.scrape(u) for n, u in workers.items()})
        fe_before = metrics.scrape(fe_metrics) if fe_metrics else None
        art = run_dir / "aiperf"
        argv = bench.aiperf_argv(plan, ctx, art, list(workers.values()))
        short_tmp = Path(tempfile.mkdtemp(prefix="servesweep-"))
        cleanup.append(lambda: shutil.rmtree(short_tmp, ignore_errors=True))
        env = bench.aiperf_env(plan, run_dir, short_tmp, os.environ)
        t_bench = time.monotonic()
        b = plan["benchmark"]
        say(
            f"bench: aiperf at concurrency {b['concurrency']} for "
            + (f"{b['duration_s']:g} s" if b.get("duration_s") else f"{b['request_count']} requests")
            + f" (warm-up {b['warmup'] or 'none'}), artifacts {art}"
        )
        aiperf = LocalSpawner().start({"name": "aiperf"}, argv, env, run_dir / "aiperf.log", Path.cwd())
        handles.append(aiperf)
        engines = handles[:-1]
        next_note = t_bench + 10
        while aiperf.poll() is None:
            check_alive(engines, "mid-benchmark")
            if time.monotonic() >= next_note:
                say(f"bench: {time.monotonic() - t_bench:.0f} s elapsed")
                next_note += 10
            time.sleep(0.1)
        t_bench_end = time.monotonic()
        check_alive(engines, "mid-benchmark")
        after = bench.worker_requests({n: metrics.scrape(u) for n, u in workers.items()})
        fe_after = metrics.scrape(fe_metrics) if fe_metrics else None
        export = bench.read_export(art)
        figs, why = result.figures(plan, export, before, after, fe_before, fe_after)
        reasons = result.gate(plan, export, figs, aiperf.poll())
        if reasons:
            tail = aiperf.log_tail(8) if aiperf.poll() or not export else ""
            raise PointFailed("invalid run: " + "; ".join(reasons) + (f"\naiperf log tail:\n{tail}" if tail else ""))
        warm = (b.get("warmup") or {}).get("requests", 0)
        doc = {
            "schema": result.RESULT_SCHEMA,
            "identity": {
                "recipe": plan["recipe"],
                "concurrency": plan["concurrency"],
                "point": plan["point"],
                "cluster": plan["cluster"],
                "run_cluster": plan["run_cluster"],
                "rehearsal": plan["rehearsal"],
                "plan_fingerprint": plan["fingerprints"]["plan"],
                "curve_fingerprint": plan["fingerprints"]["curve"],
                "image": plan["image"],
                "engine": plan["engine"],
                "recipe_engine": plan["recipe_engine"],
                "model": plan["model"]["name"],
                "scenario": b["scenario"],
                "topology": plan["topology"],
                "job_id": job_id,
                "hosts": sorted(set(names)),
                "start_time": started_at,
                "end_time": _now(),
                "tools": {
                    "aiperf": export.get("aiperf_version"),
                    "engine": _engine_version(plan, spawner.kind),
                    "servesweep": result.git_commit(),
                },
            },
            "figures": figs,
            "unmeasured": why,
            "slo": result.slo_verdicts(plan["slo"], figs),
            "counting": {
                "requests_per_worker": (
                    f"delta of each worker's dynamo_component_requests_total over the aiperf run: includes "
                    f"{warm} warm-up requests and failed requests, excludes the readiness smoke request"
                ),
                "cache_read_share": "frontend cached_tokens / input_sequence_tokens over the aiperf run",
            },
            "timings_s": {
                "spawn": round(t_spawned - t_start, 3),
                "ready": round(readiness.smoke_at - t_spawned, 3),
                "last_health_to_ready": round(readiness.smoke_at - max(readiness.healthy_at.values()), 3),
                "ready_to_bench": round(t_bench - readiness.smoke_at, 3),
                "bench": round(t_bench_end - t_bench, 3),
            },
            "artifacts": os.path.relpath(art),
        }
        t_w = time.monotonic()
        result.write_result(result_path, doc)
        (run_dir / "failure.json").unlink(missing_ok=True)
        say(
            f"result {result_path}: {figs['requests_completed']} requests, "
            f"{figs['request_throughput']:.2f} req/s, TTFT p95 {figs['ttft_s']['p95']:.3f} s, "
            f"cache read {_pct(figs['cache_read_share'])}, per worker {figs['requests_per_worker']} "
            f"(written in {time.monotonic() - t_w:.3f} s)"
        )
        return 0
    finally:
        lease.release()


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"
