"""The plan: the typed contract between rendering and running.

Render writes a plan as canonical JSON (``schemas/plan.schema.yaml``); the run side
loads it here into frozen dataclasses and reads nothing else. Strings may hold
runtime references that only the run can resolve (``run.spawn.Context``), defined once
below (``RUNTIME_REF``): ``{addr:PROC}``, ``{port:PROC.PORT}``, ``{rank_port:PROC.PORT}``
(the first DP rank's port of a block), ``{job_id}``, ``{run_dir}``, ``{workdir}``,
``{namespace}``, ``{servesweep_python}``; ``PROC`` may be ``self``.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..fileio.encode import canonical
from ..fileio.files import write_if_changed
from ..fileio.yamlio import checked_json, schema_errors
from . import paths

PLAN_SCHEMA = "servesweep.plan/8"
# The runtime-reference grammar: {KIND:PROC[.PORT]} or {NAME}; only the run resolves them.
REF_KINDS = ("addr", "port", "rank_port")
REF_NAMES = ("job_id", "run_dir", "workdir", "namespace", "servesweep_python")
RUNTIME_REF = re.compile(rf"\{{({'|'.join(REF_KINDS)}):([A-Za-z0-9_.-]+)\}}|\{{({'|'.join(REF_NAMES)})\}}")
USER_REF_NAMES = ("job_id", "run_dir")  # the ones a recipe may write too
CONTROL_ROLES = ("etcd", "nats", "kvstore")  # started first, on node 0; every other process needs them
ENGINE_ROLES = ("agg", "prefill", "decode")
# The stack references (``{"from_stack": name}``) that hand a process one of the stack's TLS files
# (paths.TLS_*: run/credentials makes them; render names them in argv/env) as PEM text.
TLS_PEM_REFS = {"tls_ca_pem": paths.TLS_CA, "tls_cert_pem": paths.TLS_CERT, "tls_key_pem": paths.TLS_KEY}
PREAMBLE_SCRIPT = "{run_dir}/preamble.py"  # run/preamble.py, copied there: argv[1] of a process it wraps
REPEAT_COOLDOWN_S = 5  # aiperf's --profile-run-cooldown-seconds between a point's repeats
TELEMETRY_ROLE = "telemetry"  # a GPU exporter the stack starts on a node (render/telemetry, run/energy)


STACK_REUSE_ENV = "SERVESWEEP_STACK_REUSE"  # "0": one stack per point for a whole run (--config stack_reuse=0)


def stack_reuse_allowed() -> bool:
    return os.environ.get(STACK_REUSE_ENV, "1").lower() not in ("0", "false", "no")


# The render -> run channels: the plan (PLAN_SCHEMA, load_plan), the curve file (schemas/curve.schema.yaml:
# curve_doc / read_curve) and one env knob (STACK_REUSE_ENV). Nothing else crosses from render to run.


class CurveHint(NamedTuple):
    """What the main process tells a stack's keeper through the curve file."""

    expected: int  # points this run expects on the stack
    searching: bool  # a capacity search on the stack may still ask for more probes
    linger_s: float  # how long the stack stays up after its last point (a follow-up run attaches)
    points_s: float  # the expected points' time and the searches' worst case beyond them (a held job's size)
    canary: bool = True  # a stack that died in this run ends its server configuration's other points
    deciding: bool = False  # a halving screen on the stack waits for its sweep's decision (until its deadline)


def curve_doc(
    expected: int, searching: list[str], linger_s: float = 0, points_s: float = 0, canary: bool = True,
    deciding: tuple[tuple[str, ...], float] = ((), 0.0),
) -> dict:  # fmt: skip
    """``searching``: the recipes on the stack whose capacity search may still ask for more probes
    (each search's capacity job takes its recipe off: :func:`end_search`); ``deciding``: (its halving
    screens whose sweep is not decided yet, the epoch second after which the stack waits no longer:
    its sweep's screens' bound, one after another); the decision takes each off (:func:`halving_decided`)."""
    screens, until = deciding
    return {
        "expected": expected,
        "searching": sorted(searching),
        "linger_s": linger_s,
        "points_s": points_s,
        "canary": canary,
        "deciding": sorted(screens),
        "deciding_until": until,
    }


def read_curve(path: Path) -> CurveHint:
    """An unreadable file counts as one point, no search and no linger (the keeper's idle timeout is safe)."""
    doc, _why = checked_json(path, "curve.schema.yaml")
    if not doc:
        return CurveHint(1, False, 0.0, 0.0)
    return CurveHint(
        max(doc["expected"], 1), bool(doc["searching"]), float(doc.get("linger_s", 0)),
        float(doc.get("points_s", 0)), bool(doc.get("canary", True)),
        bool(doc.get("deciding")) and time.time() < doc.get("deciding_until", 0),
    )  # fmt: skip


def end_search(path: Path, recipe: str) -> None:
    """The recipe's capacity search asks for no more probes (its capacity job runs): off the curve file."""
    _update_curve(path, lambda doc: _without(doc, "searching", recipe))


def halving_decided(path: Path, screen: str, more: int, searching: list[str] = ()) -> None:
    """The screen's sweep is decided: off the stack's ``deciding``, with ``more`` turns to expect (a kept
    variant's points and evals, else none) and its capacity search ``searching`` while it may probe."""

    def decided(doc: dict) -> bool:
        if screen in doc.get("deciding", ()):
            doc["expected"], doc["searching"] = doc["expected"] + more, sorted({*doc["searching"], *searching})
        return _without(doc, "deciding", screen)

    _update_curve(path, decided)


def _without(doc: dict, key: str, recipe: str) -> bool:
    found = recipe in doc.get(key, ())
    doc[key] = [r for r in doc.get(key, ()) if r != recipe]
    return found


def _update_curve(path: Path, change) -> None:
    """Read, ``change`` (True: changed) and write the curve file under a lock on the curves' folder:
    a capacity job and the main process's halving decision may update one stack's file at once. An
    unreadable file is left to the keeper's idle timeout."""
    path = Path(path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        doc, _why = checked_json(path, "curve.schema.yaml")
        if doc and change(doc):
            write_if_changed(path, canonical(doc))
    finally:
        os.close(fd)


def curve_file(server: str, rehearsal: bool) -> str:
    """Written by the main snakemake process next to the plans, read by the point drivers: how
    many points this run expects on the stack of one server identity ({"expected": n}, summed over
    every recipe that has it), a hint for the stack keeper."""
    return paths.curve_file(server, rehearsal)


def plan_source(plan_path: Path, curve_fingerprint: str) -> dict | None:
    """What render wrote next to the plan (``.plans/<recipe>/source.json``, servesweep.source/1):
    the recipe and cluster facts it was rendered from. None unless it belongs to this plan (same
    curve fingerprint): a result must never claim a source it was not measured from."""
    try:
        doc = json.loads((Path(plan_path).parent / paths.SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and doc.get("curve_fingerprint") == curve_fingerprint
    return doc if ok and isinstance(doc.get("recipe"), dict) and isinstance(doc.get("cluster"), dict) else None


# Environment names that hold credentials: a recipe may name them only by reference ({from_env: ...}),
# and no process inherits them from the driver unless its own env names them.
SECRET_NAME = re.compile(r"(^|_)(TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIALS?)(_|$)|(^|_)(API_)?KEY$", re.IGNORECASE)


def without_secrets(environ) -> dict:
    """``environ`` without any variable whose name looks like a credential."""
    return {k: v for k, v in environ.items() if not SECRET_NAME.search(k)}


def host_side(path: str, mounts: list[str] | tuple[str, ...]) -> str | None:
    """The path model, in one place: where a path a container process sees lies on the host, through
    the container's mounts (``host:inside[:flags]``); None when it lies only inside the image."""
    for m in mounts:
        host, inside = m.split(":")[:2]
        inside = inside.rstrip("/") or "/"
        if path == inside or path.startswith(inside + "/"):
            return host.rstrip("/") + path[len(inside) :]
    return None


def command_of(argv) -> list:
    """A process's own command: its argv without the preamble that runs first (render/preamble)."""
    argv = list(argv)
    if len(argv) > 1 and argv[1] == PREAMBLE_SCRIPT:
        return argv[argv.index("--") + 1 :]
    return argv


class PlanError(Exception):
    """A plan file the run side cannot use; the message names the file and why."""


@dataclass(frozen=True)
class PortBlock:
    """``count`` ports reserved from ``port``; this process binds [port+offset, port+offset+width)."""

    port: int
    count: int = 1
    offset: int = 0
    width: int = 1

    @property
    def bound(self) -> range:
        return range(self.port + self.offset, self.port + self.offset + self.width)

    def to_json(self) -> dict:
        return {"port": self.port, "count": self.count, "offset": self.offset, "width": self.width}


@dataclass(frozen=True)
class Process:
    """One physical process of the stack, everything the run side needs to start and watch it."""

    name: str
    role: str  # etcd | nats | kvstore | frontend | balancer | sysguard | agg | prefill | decode | telemetry
    worker: int | None
    node: int
    gpus: tuple[int, ...]
    ports: dict[str, PortBlock]
    env: dict
    argv: tuple[str, ...]
    health_url: str | None
    metrics_url: str | None
    registers: dict[str, int]  # frontend component -> instances this process adds
    headless: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "role": self.role,
            "worker": self.worker,
            "node": self.node,
            "gpus": list(self.gpus),
            "ports": {k: p.to_json() for k, p in self.ports.items()},
            "env": self.env,
            "argv": list(self.argv),
            "health_url": self.health_url,
            "metrics_url": self.metrics_url,
            "registers": self.registers,
            "headless": self.headless,
        }

    @classmethod
    def from_json(cls, d: dict) -> Process:
        return cls(
            **{
                **d,
                "gpus": tuple(d["gpus"]),
                "argv": tuple(d["argv"]),
                "ports": {k: PortBlock(**v) for k, v in d["ports"].items()},
            }
        )

    @property
    def command(self) -> list[str]:
        return command_of(self.argv)

    @property
    def is_engine(self) -> bool:
        return self.role in ENGINE_ROLES


@dataclass(frozen=True)
class Benchmark:
    endpoint: str
    streaming: bool
    concurrency: int
    duration_s: float | None
    grace_s: float  # aiperf's grace period after duration_s: in-flight requests then are cancelled
    repeats: int  # aiperf runs of the point on the same stack (--num-profile-runs)
    request_count: int | None
    warmup: dict
    dataset: dict
    session_header: str | None
    scenario: str
    aiperf_scenario: str | None  # a scenario aiperf locks (--scenario), e.g. inferencex-agentx-mvp
    scenario_override: bool  # --unsafe-override: a rehearsal below the lock; aiperf marks it not submission-valid
    aiperf: str
    tokenizer: str | None
    hf_home: str | None
    gpu_telemetry: dict | None = None  # {source: dcgm|exporter|pynvml, ...}; None: unmeasured (run/energy)


@dataclass(frozen=True)
class Plan:
    schema: str
    recipe: str
    recipe_file: str
    cluster: str
    run_cluster: str
    launcher: str
    rehearsal: bool
    image: str | None
    engine: str
    recipe_engine: str
    server_metrics: dict  # {worker_requests: {metric, labels}, ttft: {histogram, source}}: the engine's names
    model: dict
    dynamo: dict | None
    setup: dict | None
    topology: dict  # kind, per-role shapes, gpus, nodes, processes
    processes: tuple[Process, ...]
    client_url: str
    frontends: tuple[str, ...]
    balancer: dict | None  # {process, upstreams, session_header}: nginx in front of several frontends
    expect_registrations: dict[str, int]
    readiness: dict
    validity: dict
    container: dict | None
    discovery: dict
    stack: dict  # {reuse, prefix_reset}: whether the stale points of a curve share one warm stack, and the reset
    ports: dict
    resources: dict
    benchmark: Benchmark
    point: int
    fingerprints: dict
    data: dict | None  # the dataset aiperf reads, by content (render/dataid); None when synthetic
    model_data: dict  # the model folder the engines load, by content, or its declared version

    @classmethod
    def from_json(cls, doc: dict) -> Plan:
        return cls(
            **{
                **doc,
                "processes": tuple(Process.from_json(p) for p in doc["processes"]),
                "frontends": tuple(doc["frontends"]),
                "benchmark": Benchmark(**doc["benchmark"]),
            }
        )

    @property
    def nodes(self) -> int:
        return self.topology["nodes"]

    @property
    def gpus_total(self) -> int:
        return self.topology["gpus"]

    @property
    def concurrency(self) -> int:
        """The concurrency it runs (rehearsal may cap the target's, which is ``point``)."""
        return self.benchmark.concurrency

    def process(self, name: str) -> Process:
        return next(p for p in self.processes if p.name == name)

    @property
    def all_ports(self) -> list[int]:
        """Every port any process of the plan binds (before the run's slot shift)."""
        return sorted({n for p in self.processes for b in p.ports.values() for n in b.bound})


def load_plan(path: Path) -> Plan:
    """Read a plan file: its version first (a clear error for another one), then its shape."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{path}: cannot read plan: {e}") from None
    version = doc.get("schema") if isinstance(doc, dict) else None
    if version != PLAN_SCHEMA:
        raise PlanError(
            f"{path}: schema: plan version {version!r} is not {PLAN_SCHEMA!r} (this servesweep's); "
            "render it again with the same servesweep that runs it (rerun snakemake from the main process)"
        )
    errors = schema_errors(doc, "plan.schema.yaml")
    if errors:
        where = ".".join(map(str, errors[0].absolute_path)) or "(top)"
        raise PlanError(f"{path}: {where}: {errors[0].message} (schemas/plan.schema.yaml)")
    return Plan.from_json(doc)


# The Slurm executor plugin's resource -> its value from a plan's resources (batch-step geometry
# applied, ``runtime_min`` the job's limit). The one mapping: the plugin's jobs (its keys are what a
# rule declares, workflow/rulekit) and a held stack's own sbatch (:func:`sbatch_args`, run/stacks/held).
_SLURM_RESOURCES = {
    "nodes": lambda res: res["nodes"],
    "tasks": lambda res: res["tasks"],
    "cpus_per_task": lambda res: res["cpus_per_task"],
    "mem_mb": lambda res: res["mem_mb"],
    "runtime": lambda res: res["runtime_min"],
    "gres": lambda res: f"gpu:{res['gpus_per_node']}" if res["gpus_per_node"] else "",
    "slurm_extra": lambda res: "--exclusive" if res["exclusive"] else "",
}
SLURM_RESOURCE_KEYS = tuple(_SLURM_RESOURCES)


def slurm_resources(res: dict) -> dict:
    """A job's resources in the Slurm executor plugin's names (``_SLURM_RESOURCES``)."""
    return {key: value(res) for key, value in _SLURM_RESOURCES.items()}


def sbatch_args(r: dict) -> list[str]:
    """:func:`slurm_resources` as sbatch options."""
    out = [f"--nodes={r['nodes']}", f"--ntasks={r['tasks']}", f"--cpus-per-task={r['cpus_per_task']}"]
    out += [f"--mem={r['mem_mb']}M", f"--time={r['runtime']}"] + ([f"--gres={r['gres']}"] if r["gres"] else [])
    return out + r["slurm_extra"].split()


def batch_step_tasks(res: dict) -> dict:
    """Task geometry for running the driver in the job's batch step (the rule's ``mpi`` resource):
    the Slurm plugin wants more than one task for such a job and at least one per node; the plan's
    CPUs are split over them so the job asks for no more CPUs than one task would."""
    tasks = max(2, res["nodes"])
    return dict(res, tasks=tasks, cpus_per_task=math.ceil(res["cpus_per_task"] / tasks))
