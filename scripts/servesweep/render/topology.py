"""Logical workers -> physical process slots on nodes and GPUs.

A worker (one replica, or one prefill/decode worker) needs tp*dp*pp GPUs. It
either fits inside one node or takes whole nodes; it never straddles a node
boundary partially. Its launch mode decides how many processes run it:
per_worker (one), per_node (one per node it spans), per_gpu (one per DP rank).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cluster import Cluster


class PlacementError(Exception):
    def __init__(self, issues: list[tuple[str, str]]):
        self.issues = issues
        super().__init__("; ".join(f"{f}: {r}" for f, r in issues))


@dataclass(frozen=True)
class Role:
    """One worker kind of a topology, as the recipe states it."""

    name: str  # agg | prefill | decode
    field: str  # where it lives in the recipe, for messages
    workers: int
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: bool = False
    launch: str = "per_worker"
    args: tuple = ()
    env: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def gpus_per_worker(self) -> int:
        return self.tp * self.dp * self.pp


@dataclass(frozen=True)
class Worker:
    """A logical worker: a role plus its index (one replica, or one prefill/decode worker)."""

    role: Role
    index: int

    @property
    def name(self) -> str:
        return f"{self.role.name}-{self.index}"


@dataclass(frozen=True)
class Slot:
    """Where one physical process of a worker runs."""

    worker: Worker
    part: int  # index of this process within its worker
    parts: int  # processes of this worker
    node: int
    gpus: tuple[int, ...]
    dp_start: int  # first DP rank this process hosts
    dp_local: int  # DP ranks this process hosts
    leader: bool  # hosts DP rank 0 (binds the DP RPC port others connect to)

    @property
    def name(self) -> str:
        base = self.worker.name
        if self.worker.role.launch == "per_gpu":
            return f"{base}-r{self.dp_start}"
        if self.parts > 1:
            return f"{base}-n{self.part}"
        return base


def _worker_slots(w: Worker, node_gpus: list[tuple[int, tuple[int, ...]]]) -> list[Slot]:
    """Split a worker's GPUs (a list of (node, gpu ids)) into process slots."""
    role = w.role
    if role.launch == "per_gpu":
        flat = [(n, g) for n, gs in node_gpus for g in gs]
        return [Slot(w, i, len(flat), n, (g,), dp_start=i, dp_local=1, leader=i == 0) for i, (n, g) in enumerate(flat)]
    if role.launch == "per_node" and len(node_gpus) > 1:
        per_node_dp = max(role.dp // len(node_gpus), 1)
        return [
            Slot(
                w,
                i,
                len(node_gpus),
                n,
                gs,
                dp_start=min(i * per_node_dp, role.dp - 1),
                dp_local=per_node_dp if role.dp >= len(node_gpus) else role.dp,
                leader=i == 0,
            )
            for i, (n, gs) in enumerate(node_gpus)
        ]
    (n, gs), *_ = node_gpus
    all_gpus = tuple(g for _, gg in node_gpus for g in gg)
    return [Slot(w, 0, 1, n, all_gpus if len(node_gpus) == 1 else gs, 0, role.dp, True)]


def workers(roles: list[Role]) -> list[Worker]:
    return [Worker(r, i) for r in roles for i in range(r.workers)]


def place(roles: list[Role], cluster: Cluster) -> list[Slot]:
    """Deterministic first-fit placement; raise PlacementError with all issues."""
    gpn = cluster.gpus_per_node
    issues = []
    for r in roles:
        g = r.gpus_per_worker
        if g > gpn and g % gpn:
            issues.append(
                (
                    r.field,
                    f"a worker needs {g} GPUs (tp {r.tp} x dp {r.dp} x pp {r.pp}); on {gpn}-GPU nodes of "
                    f"{cluster.name!r} it would straddle a node: use a multiple of {gpn} or at most {gpn}",
                )
            )
        if g > gpn and r.launch == "per_worker":
            issues.append(
                (
                    f"{r.field}.launch",
                    f"a worker of {g} GPUs spans {g // gpn or 1} nodes of {cluster.name!r}: "
                    "use launch per_node or per_gpu",
                )
            )
        if r.launch == "per_node" and g > gpn and r.dp > 1 and (r.dp * gpn) % g:
            issues.append((r.field, f"dp {r.dp} does not split evenly over the {g // gpn} nodes of a worker"))
        if r.launch == "per_node" and g > gpn and r.dp > 1 and r.tp * r.pp > gpn:
            issues.append((r.field, "per_node launch with DP needs tp x pp to fit in one node"))
    if issues:
        raise PlacementError(issues)

    slots: list[Slot] = []
    node, used = 0, 0  # current node and GPUs used on it
    for w in workers(roles):
        g = w.role.gpus_per_worker
        if g <= gpn:
            if used + g > gpn:
                node, used = node + 1, 0
            node_gpus = [(node, tuple(range(used, used + g)))]
            used += g
        else:
            if used:
                node, used = node + 1, 0
            span = g // gpn
            node_gpus = [(node + k, tuple(range(gpn))) for k in range(span)]
            node, used = node + span - 1, gpn
        slots += _worker_slots(w, node_gpus)
    needed = node + 1
    if needed > cluster.nodes:
        total = sum(r.gpus_per_worker * r.workers for r in roles)
        raise PlacementError(
            [
                (
                    "topology",
                    f"needs {needed} nodes ({total} GPUs) but cluster {cluster.name!r} has "
                    f"{cluster.nodes} nodes of {gpn} GPUs",
                )
            ]
        )
    return slots
