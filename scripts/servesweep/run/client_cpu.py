"""The client's CPU use over the benchmark window: how hard aiperf worked its cores.

The driver samples aiperf's process tree while it runs (:class:`Sampler`, about once a second: each
live process's own user + system time, the highest seen per process, summed) and keeps the samples
beside aiperf's artifacts. The result reads the CPU spent between the profiling window's first
request start and last request end (interpolated between samples) as ``figures.client.cpu_s``, the
client's cores (its CPU affinity: a Slurm step's CPUs, ``taskset``, else the host's) and
``cpu_share_per_core``: cpu_s / (window * cores), 1.0 being every core busy all the window.
A client near 1.0 was short of CPU whatever aiperf's own warnings said (docs/point.md).

``STREAMS_PER_CORE`` is what one client core has been seen to carry: the pre-flight warns beyond it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..contract.paths import CLIENT_CPU_FILE
from ..fileio.files import read_json_object, write_if_changed

# aiperf 0.13 on 2 cores drove ~250 concurrent streams accurately and saturated near 500-1000
# (field notes, "aiperf"): 125 concurrent requests per client core, the accurate end.
STREAMS_PER_CORE = 125


def planned_cores(plan) -> int:
    """The cores the plan gives the point's client: on Slurm the benchmark step's CPUs (the CPUs one
    task of the job holds on a node: the held stack's driver step asks for them, the batch step holds
    at least them); locally the host's cores."""
    if plan.launcher != "slurm":
        return cores_of()
    from ..contract.plan import batch_step_tasks

    return max(1, int(batch_step_tasks(plan.resources)["cpus_per_task"]))


def beyond_cores(concurrencies: list[int], cores: int) -> str | None:
    """Why the concurrencies beyond what ``cores`` client cores carry may be too many; None if none is."""
    over = [c for c in concurrencies if c > cores * STREAMS_PER_CORE]
    if not over:
        return None
    return (
        f"{', '.join(f'c{c}' for c in over)} {'is' if len(over) == 1 else 'are'} beyond what {cores} client core(s) "
        f"have been seen to carry ({cores * STREAMS_PER_CORE} concurrent requests at {STREAMS_PER_CORE} per core, "
        "docs/point.md): the client, not the server, may set the pace; its CPU use is recorded (figures.client) "
        "and a stalled client marks the point client-bound"
    )


def cores_of(pid: int | None = None) -> int:
    """The cores a process may run on (its affinity: a Slurm step's CPUs, a taskset), else the host's."""
    try:
        return len(os.sched_getaffinity(pid or 0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Sampler:
    """CPU seconds of a process tree over time; ``sample`` is cheap to call often (it acts once per ``every_s``)."""

    def __init__(self, pid: int, every_s: float = 1.0):
        self.pid, self.every_s, self.cores = pid, every_s, cores_of(pid)
        self.peak: dict[tuple[int, float], float] = {}  # (pid, start time) -> its CPU seconds
        self.samples: list[tuple[int, float]] = []  # (wall clock ns, the tree's CPU seconds so far)
        self._next = 0.0
        self.sample()

    def sample(self) -> None:
        import psutil

        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                key, t = (p.pid, p.create_time()), p.cpu_times()
            except psutil.Error:
                continue
            self.peak[key] = max(self.peak.get(key, 0.0), t.user + t.system)
        self.samples.append((time.time_ns(), round(sum(self.peak.values()), 3)))

    def save(self, artifact_dir: Path) -> None:
        doc = {"pid": self.pid, "cores": self.cores, "samples": self.samples}
        try:
            write_if_changed(Path(artifact_dir) / CLIENT_CPU_FILE, json.dumps(doc) + "\n")
        except OSError:  # a full disk costs the CPU figure, never the point
            pass


def _at(samples: list, t_ns: int) -> float:
    """The tree's CPU seconds at ``t_ns`` (within the samples' span), linear between samples."""
    for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        if t0 <= t_ns <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t_ns - t0) / (t1 - t0)
    return samples[-1][1]


def figures(artifact_dir: Path, window: tuple[int, int] | None) -> dict:
    """{cpu_s, cores, cpu_share_per_core} over the window (wall clock ns) as far as samples cover it;
    {} without samples around it."""
    doc = read_json_object(Path(artifact_dir) / CLIENT_CPU_FILE)
    samples = [(int(t), float(c)) for t, c in doc.get("samples") or []]
    if not window or len(samples) < 2:
        return {}
    start, end = max(window[0], samples[0][0]), min(window[1], samples[-1][0])
    if end <= start:
        return {}
    cores = int(doc.get("cores") or 1)
    cpu = max(0.0, _at(samples, end) - _at(samples, start))
    return {"cpu_s": round(cpu, 3), "cores": cores, "cpu_share_per_core": round(cpu / ((end - start) / 1e9 * cores), 3)}


def with_cpu(client: dict | None, artifact_dir: Path, records: list[dict] | None) -> dict | None:
    """A result's ``figures.client`` with the client's CPU use over its profiling window added."""
    if not client:
        return client
    from . import trust

    return client | figures(artifact_dir, trust.window_ns(trust.profiling(records or [])))
