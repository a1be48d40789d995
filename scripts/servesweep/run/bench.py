"""The aiperf command line, and reading what aiperf and the servers report."""

from __future__ import annotations

import signal
from pathlib import Path

from ..contract.plan import REPEAT_COOLDOWN_S, Plan
from ..fileio.encode import num_arg
from . import energy, metrics, repeats
from .spawn import Context

# a trace's format (recipe scenario.dataset.trace.format) -> aiperf --custom-dataset-type
TRACE_TYPES = {"mooncake": "mooncake_trace", "weka": "weka_trace"}


def aiperf_argv(plan: Plan, ctx: Context, artifact_dir: Path, server_metrics: list[str]) -> list[str]:
    b = plan.benchmark
    argv = [b.aiperf, "profile", "--model", plan.model["name"]]
    argv += ["--url", ctx.resolve(plan.client_url, "")]
    argv += ["--endpoint-type", b.endpoint]
    if b.streaming:
        argv.append("--streaming")
    argv += ["--concurrency", str(b.concurrency)]
    if b.tokenizer:
        argv += ["--tokenizer", b.tokenizer]
    argv += ["--use-server-token-count", "--ui-type", "none"]
    argv += energy.telemetry_argv(plan, ctx, artifact_dir)  # energy's hook: the cluster's GPU telemetry
    argv += ["--artifact-dir", str(artifact_dir)]
    if b.duration_s:
        argv += ["--benchmark-duration", num_arg(b.duration_s), "--benchmark-grace-period", num_arg(b.grace_s)]
    if b.request_count:
        argv += ["--request-count", str(b.request_count)]
    if b.repeats > 1:
        argv += ["--num-profile-runs", str(b.repeats), "--confidence-level", str(repeats.CONFIDENCE)]
        argv += ["--profile-run-cooldown-seconds", str(REPEAT_COOLDOWN_S)]
    argv += _warmup_args(b.warmup) + _dataset_args(b.dataset)
    if b.aiperf_scenario:  # aiperf applies the lock itself (timing mode, ignore-EOS, cache bust)
        argv += ["--scenario", b.aiperf_scenario] + (["--unsafe-override"] if b.scenario_override else [])
    if b.session_header:
        argv += ["--session-header", b.session_header]
    if server_metrics:
        argv += ["--server-metrics", *server_metrics]
    return argv


def _warmup_args(w: dict) -> list[str]:
    argv = []
    if w.get("requests"):
        argv += ["--warmup-request-count", str(w["requests"])]
    if w.get("duration_s"):
        argv += ["--warmup-duration", num_arg(w["duration_s"])]
    if w.get("agentic_cache_s"):
        argv += ["--agentic-cache-warmup-duration", num_arg(w["agentic_cache_s"])]
    if w.get("agentic_grace_s"):
        argv += ["--agentic-warmup-grace-period", num_arg(w["agentic_grace_s"])]
    return argv


def _dataset_args(ds: dict) -> list[str]:
    argv = []
    if ds["kind"] == "synthetic":
        argv += ["--synthetic-input-tokens-mean", str(ds["isl"]), "--output-tokens-mean", str(ds["osl"])]
        if ds.get("isl_stddev"):
            argv += ["--synthetic-input-tokens-stddev", str(ds["isl_stddev"])]
        argv += ["--num-dataset-entries", str(ds.get("entries", 3000))]
    elif ds["kind"] == "trace":
        argv += ["--input-file", ds["path"], "--custom-dataset-type", TRACE_TYPES[ds.get("format", "mooncake")]]
        if ds.get("block_size"):
            argv += ["--isl-block-size", str(ds["block_size"])]
        if ds.get("fixed_schedule"):
            argv.append("--fixed-schedule")
    elif ds["kind"] == "public":  # read offline from hf_home (HF_HUB_OFFLINE=1, aiperf_env)
        argv += ["--public-dataset", ds["name"]]
    else:
        argv += ["--input-file", ds["path"], "--custom-dataset-type", "multi_turn"]
    return argv


def aiperf_env(plan: Plan, run_dir: Path, tmp: Path, base: dict) -> dict:
    """aiperf's env. ``tmp`` must be a short path: aiperf puts ZMQ IPC sockets
    under TMPDIR and a Unix socket path is limited to 107 bytes."""
    env = dict(base)
    if plan.benchmark.hf_home:
        env["HF_HOME"] = str(Path(plan.benchmark.hf_home).resolve())
        env["HF_HUB_OFFLINE"] = "1"
    env["TMPDIR"] = str(tmp)
    env["XDG_CACHE_HOME"] = str(run_dir / "cache")
    env["MPLCONFIGDIR"] = str(tmp)
    env |= energy.telemetry_env(plan)  # energy's hook: only the plan's exporters, at the cluster's interval
    return env


def request_outcomes(records: list[dict] | None) -> dict | None:
    """The profiling phase's requests by outcome, from aiperf's per-request export
    (``repeats.request_records``): cancelled at the grace boundary (``metadata.was_cancelled``),
    errored (an ``error`` record), completed."""
    if records is None:
        return None
    counts = {"completed": 0, "cancelled": 0, "errored": 0}
    for rec in records:
        meta = rec.get("metadata") or {}
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        outcome = "cancelled" if meta.get("was_cancelled") else "errored" if rec.get("error") else "completed"
        counts[outcome] += 1
    return counts


def stat(export: dict, metric: str, key: str = "avg"):
    m = export.get(metric)
    if isinstance(m, dict):
        return m.get(key)
    return None


def worker_requests(plan: Plan, scrapes: dict) -> dict:
    """Process name -> the engine's request counter (``plan.server_metrics``), or None."""
    counter = plan.server_metrics["worker_requests"]
    return {
        name: (metrics.total(smp, counter["metric"], **counter["labels"]) if smp else None)
        for name, smp in scrapes.items()
    }


def client_died(rc: int | None, pid: int, when: str, tail: str) -> str | None:
    """Why the client's run is void when aiperf did not exit 0, or None. Checked before any figure
    or traffic comparison: a dead client's partial export holds requests still in flight, which
    would read as foreign traffic."""
    if rc == 0:
        return None
    how = f"was killed by {signal_name(-rc)}" if rc is not None and rc < 0 else "failed"
    return (
        f"client died: aiperf (pid {pid}) {how} {when} (aiperf exited with code {rc}); "
        f"no figure of this run is valid\naiperf log tail:\n{tail}"
    )


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# aiperf's own log lines that open each phase of its run (aiperf 0.13.0), and how a message names it
PHASES = (
    ("Phase warmup (warmup) started", "during aiperf's warm-up, before the benchmark"),
    ("Phase profiling (profiling) started", "mid-benchmark"),
    ("Phase profiling (profiling) complete", "after the benchmark, while aiperf wrote its results"),
)
SETUP = "during aiperf's setup, before the benchmark"


class AiperfPhase:
    """Where aiperf is in its run, read from its log as it grows: failures name the right phase
    (aiperf spends seconds on setup and warm-up before the benchmark starts)."""

    def __init__(self, log: Path):
        self.log, self.offset, self.when = log, 0, SETUP

    def now(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.when
        end = chunk.rfind(b"\n") + 1  # whole lines only: a mark split across reads is read next time
        self.offset += end
        text = chunk[:end].decode("utf-8", "replace")
        at, when = max((text.rfind(mark), when) for mark, when in PHASES)
        if at >= 0:
            self.when = when
        return self.when
