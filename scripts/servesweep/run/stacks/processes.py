"""One running stack: a port slot, the control plane, every process of the plan, readiness, teardown."""

from __future__ import annotations

import os
import shutil
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...checks import preflight
from ...contract import paths
from ...contract.plan import CONTROL_ROLES, Plan
from .. import balancer, credentials, preamble, slots, slurm
from ..ready import PointFailed, Readiness, RegistrationWatch, check_alive, wait_healthy, wait_ready
from ..spawn import Context, Handle, LocalSpawner, SrunSpawner, stop_all
from ..watch import StackWatch, targets


@dataclass(frozen=True)
class StackInfo:
    """What a point needs to know about a ready stack (also across processes, as JSON)."""

    id: str
    job_id: str
    node_addrs: list[str]
    node_names: list[str]
    port_shift: int
    run_dir: str
    startup_s: float  # spawn to ready (smoke token)
    spawn_s: float
    last_health_to_ready_s: float
    pids: dict = field(default_factory=dict)  # process -> pid (its launcher's under srun), on pid_host
    pid_host: str = ""

    def local_pids(self) -> dict:
        """The pids, when this is the host that started them (a pid means nothing on another)."""
        return self.pids if self.pid_host == socket.gethostname() else {}

    def context(self, plan: Plan) -> Context:
        procs = {p.name: p for p in plan.processes}
        return Context(self.node_addrs, self.node_names, self.port_shift, self.job_id, Path(self.run_dir), procs)

    def to_json(self) -> dict:
        return asdict(self)


class Stack:
    """Start with :meth:`start`; :meth:`stop` always runs (it stops whatever was started)."""

    def __init__(self, plan: Plan, run_dir: Path, result_path: Path, say):
        self.plan, self.run_dir, self.result_path, self.say = plan, run_dir, result_path, say
        self.handles: list[Handle] = []
        self.lease: slots.SlotLease | None = None
        self.ctx: Context | None = None
        self.readiness: Readiness | None = None
        self.registrations = RegistrationWatch(plan)
        self.stopped: StackWatch | None = None  # process states once ready (health: the point's watch)
        self.timings: dict[str, float] = {}

    def start(self) -> None:
        t0 = time.monotonic()
        plan = self.plan
        spawner, names, addrs, job_id = self._placement()
        self.lease, notes = slots.lease_slot(
            plan.all_ports, plan.ports["block"], plan.ports["slots"], seed=job_id,
            host="127.0.0.1" if spawner.kind == "local" else "0.0.0.0",
        )  # fmt: skip
        for note in notes:
            self.say(note)
        procs = {p.name: p for p in plan.processes}
        self.ctx = Context(addrs, names, self.lease.slot * plan.ports["block"], job_id, self.run_dir, procs)
        self._preflight(spawner)
        if plan.discovery["backend"] == "file":
            (self.run_dir / "discovery").mkdir()
        self.say(
            f"starting {len(procs)} processes on {plan.nodes} node(s) (port slot {self.lease.slot}, job {job_id}, "
            f"discovery {plan.discovery['backend']}, namespace {self.ctx.namespace}, logs {self.run_dir})"
        )
        deadline = t0 + plan.readiness["timeout_s"]
        control = [p for p in plan.processes if p.role in CONTROL_ROLES]
        self._make_credentials()
        shutil.copyfile(Path(preamble.__file__), self.run_dir / "preamble.py")
        for p in control:
            self._spawn(spawner, p)
        if control:
            wait_healthy([p.name for p in control], self.ctx, self.handles, deadline, self.say)
            self.say(f"control plane healthy: {', '.join(p.name for p in control)}")
        for p in plan.processes:
            if p.role not in CONTROL_ROLES:
                self._spawn(spawner, p)
        self.timings["spawn"] = time.monotonic() - t0
        self.readiness = wait_ready(plan, self.ctx, self.handles, max(deadline - time.monotonic(), 0), self.say)
        pids = {h.name: h.pid for h in self.handles} if spawner.kind == "local" else {}  # srun's state is not theirs
        self.stopped = StackWatch(targets(plan, pids, lambda template, name: None))

    def _make_credentials(self) -> None:
        """The stack's own control-plane credentials (0600 files in the run dir, nowhere else)."""
        tls = credentials.uses_tls(self.plan)
        if tls:
            credentials.make_tls(self.run_dir, self.ctx.node_addrs)
        if not any(p.role in CONTROL_ROLES for p in self.plan.processes):
            return
        self.ctx.credentials = credentials.make(self.run_dir) | (credentials.tls_pems(self.run_dir) if tls else {})
        user = credentials.nats_user(self.plan)
        if user:
            credentials.write_nats_config(self.run_dir, user, self.ctx.credentials["nats_password"])

    def _placement(self):
        """(spawner, node names, node addresses, job id)."""
        plan = self.plan
        if plan.launcher == "slurm":
            alloc = slurm.current_allocation()
            if len(alloc.names) < plan.nodes:
                raise slurm.AllocationError(f"plan needs {plan.nodes} nodes, allocation has {len(alloc.names)}")
            return SrunSpawner(plan.container), alloc.names, alloc.addrs, alloc.job_id
        job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
        return LocalSpawner(), ["localhost"] * plan.nodes, ["127.0.0.1"] * plan.nodes, job_id

    def _preflight(self, spawner) -> None:
        """Everything the stack's processes need, checked before the first one starts (each point
        checks its own client side: run/driver)."""
        preflight.require(self.plan, Path.cwd(), self.result_path, "server", self.say)

    def _spawn(self, spawner, p) -> None:
        env, _secret = self.ctx.env(p, rehearsal=self.plan.rehearsal)
        if p.role == "balancer":
            balancer.write_config(self.plan, self.ctx, self.run_dir / "balancer")
        argv = spawner.command(p, self.ctx.argv(p), self.ctx)
        self.handles.append(spawner.start(p.name, argv, env, paths.process_log(self.run_dir, p.name), Path.cwd()))

    def check(self, when: str) -> None:
        """Raise PointFailed if any process of the stack has exited or, once ready, has been stopped
        too long (run/watch) or a frontend no longer sees the plan's registrations."""
        check_alive(self.handles, when)
        if self.stopped is None:
            return
        self.stopped.look(when)
        try:
            self.registrations.look(self.ctx, when)
        except PointFailed as e:
            raise self.stopped.explain(e) from None

    def info(self, stack_id: str) -> StackInfo:
        r, c = self.readiness, self.ctx
        return StackInfo(
            stack_id, c.job_id, c.node_addrs, c.node_names, c.port_shift, str(c.run_dir),
            round(r.smoke_at - r.started + self.timings["spawn"], 3), round(self.timings["spawn"], 3),
            round(r.smoke_at - max(r.healthy_at.values(), default=r.smoke_at), 3),
            {h.name: h.pid for h in self.handles}, socket.gethostname(),
        )  # fmt: skip

    def stop(self) -> None:
        if self.handles:
            t0 = time.monotonic()
            killed = stop_all(self.handles, grace_s=float(os.environ.get("SERVESWEEP_GRACE_S", "5")))
            self.say(
                f"teardown: {len(self.handles)} processes stopped in {time.monotonic() - t0:.1f} s"
                + (f" (SIGKILL needed for {', '.join(killed)})" if killed else "")
            )
            self.handles.clear()
        if self.lease:
            self.lease.release()
            self.lease = None
