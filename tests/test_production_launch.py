"""External cross-check of the production plans against what vLLM and Dynamo require.

Independent of how the renderer accounts for ports: each process's bindings are derived
here from its resolved argv and env the way the engine derives them, and checked against
the rules below. Sources (read, not copied):
- vLLM docs, serving/data_parallel_deployment.md: multi-node DP needs every rank to get rank 0's
  --data-parallel-address and --data-parallel-rpc-port (else ranks look for rank 0 on localhost);
  hybrid load balancing: --data-parallel-size-local / --data-parallel-start-rank / --data-parallel-hybrid-lb
  on every node, each node with its own API server.
- vLLM source: the ZMQ KV-event publisher binds its endpoint's port + the DP rank
  (distributed/kv_events.py); the NIXL side channel listens on VLLM_NIXL_SIDE_CHANNEL_PORT + the DP rank
  (kv_connector/v1/nixl_connector.py).
- Dynamo source: the file discovery store learns of keys only through inotify
  (lib/runtime/src/storage/kv/file.rs, watch()), blind to files other NFS/Lustre clients write;
  network discovery is --discovery-backend etcd with ETCD_ENDPOINTS.
- srt-slurm (c88ef73) renders the same flags for these layouts (etcd on the head node, hybrid LB per node).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from servesweep.contract.plan import Plan
from servesweep.run.spawn import Context

from helpers import STACK_CREDENTIALS, plan_of

PRODUCTION = [
    "gemma4-livekit-2tp4-dyn-vllm-prod",
    "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp",
    "dsv4-pro-gb300-3p1d-pdep8-ddep16",
    "dsv4-pro-gb200-3p1d-pdep8-ddep16-pergpu",
]


def resolved(name: str):
    plan = Plan.from_json(plan_of(name))
    addrs = [f"10.1.0.{i + 1}" for i in range(plan.nodes)]
    ctx = Context(
        addrs, [f"n{i}" for i in range(plan.nodes)], 0, "77", Path("/w/logs/x"), {p.name: p for p in plan.processes},
        credentials=STACK_CREDENTIALS,
    )  # fmt: skip
    procs = {}
    for p in plan.processes:
        env, _ = ctx.env(p, base={}, rehearsal=True)
        procs[p.name] = (p, ctx.argv(p), env)
    return plan, addrs, procs


def flag(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def dp_ranks(argv) -> list[int]:
    """The global DP ranks a vLLM process hosts, as vLLM reads its flags."""
    if "--data-parallel-rank" in argv:
        return [int(flag(argv, "--data-parallel-rank"))]
    size = int(flag(argv, "--data-parallel-size", 1))
    local = int(flag(argv, "--data-parallel-size-local", size))
    start = int(flag(argv, "--data-parallel-start-rank", 0))
    return list(range(start, start + local))


def engine_bindings(argv, env) -> list[tuple[int, str]]:
    """Ports a dynamo.vllm process binds: derived like the engine derives them."""
    out = [(int(env["DYN_SYSTEM_PORT"]), "system")]
    ranks = dp_ranks(argv)
    if "--kv-events-config" in argv:
        base = int(json.loads(flag(argv, "--kv-events-config"))["endpoint"].rsplit(":", 1)[1])
        out += [(base + r, f"kv-events rank {r}") for r in ranks]
    if "VLLM_NIXL_SIDE_CHANNEL_PORT" in env:
        out += [(int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) + r, f"nixl rank {r}") for r in ranks]
    if 0 in ranks and "--data-parallel-rpc-port" in argv:
        out.append((int(flag(argv, "--data-parallel-rpc-port")), "dp rpc"))
    return out


def other_bindings(argv) -> list[tuple[int, str]]:
    if "--http-port" in argv:
        return [(int(flag(argv, "--http-port")), "http")]
    urls = [flag(argv, "--listen-client-urls"), flag(argv, "--listen-peer-urls")]
    return [(int(u.rsplit(":", 1)[1]), "etcd") for u in urls if u]


@pytest.mark.parametrize("name", PRODUCTION)
def test_no_two_bindings_on_a_node_coincide(name):
    """Fails on 0f8ebb7: the gb200 per_gpu plan had 17 collisions per node (NIXL / KV events + rank)."""
    plan, _, procs = resolved(name)
    bound = defaultdict(list)
    for p, argv, env in procs.values():
        ports = engine_bindings(argv, env) if p.is_engine else other_bindings(argv)
        for port, what in ports:
            bound[(p.node, port)].append(f"{p.name} {what}")
    clashes = {k: v for k, v in bound.items() if len(v) > 1}
    assert not clashes, list(clashes.items())[:5]


def _dp_groups(procs) -> list[list]:
    workers = defaultdict(list)
    for p, argv, _ in procs.values():
        if p.is_engine:
            workers[(p.role, p.worker)].append((p, argv))
    return list(workers.values())


def test_single_process_workers_carry_no_dp_rendezvous():
    """gemma4's TP replicas are one process each: no rank-0 address or RPC port to meet at."""
    _, _, procs = resolved("gemma4-livekit-2tp4-dyn-vllm-prod")
    groups = _dp_groups(procs)
    assert len(groups) == 2 and all(len(g) == 1 for g in groups)
    for (p, argv), *_ in groups:
        assert "--data-parallel-address" not in argv and "--data-parallel-rpc-port" not in argv, p.name


@pytest.mark.parametrize("name", [n for n in PRODUCTION if "gemma" not in n])
def test_multi_node_dp_processes_know_rank_zero(name):
    plan, addrs, procs = resolved(name)
    groups = [g for g in _dp_groups(procs) if len(g) > 1]
    assert groups  # each of these recipes has DP workers spread over several processes
    for members in groups:
        rank0 = next(p for p, argv in members if 0 in dp_ranks(argv))
        rank0_rpc = next(a for p, a in members if p is rank0)
        for p, argv in members:
            assert flag(argv, "--data-parallel-address") == addrs[rank0.node], p.name
            assert flag(argv, "--data-parallel-rpc-port") == flag(rank0_rpc, "--data-parallel-rpc-port"), p.name
        ranks = sorted(r for _, a in members for r in dp_ranks(a))
        assert ranks == list(range(int(flag(members[0][1], "--data-parallel-size")))), ranks


@pytest.mark.parametrize("name", [n for n in PRODUCTION if "pergpu" not in n and "gemma" not in n])
def test_per_node_runs_hybrid_load_balancing(name):
    """Fails on 0f8ebb7: non-leader nodes ran --headless, so the KV router saw half of each worker."""
    plan, _, procs = resolved(name)
    engines = [(p, a) for p, a, _ in procs.values() if p.is_engine]
    for p, argv in engines:
        assert "--headless" not in argv and "--data-parallel-hybrid-lb" in argv, p.name
        assert "--data-parallel-size-local" in argv and "--data-parallel-start-rank" in argv, p.name
        assert p.registers and p.health_url, p.name  # each node registers and is health-checked
        assert "--kv-events-config" in argv, p.name  # and publishes its own ranks' KV events
    assert sum(plan.expect_registrations.values()) == len(engines)


@pytest.mark.parametrize("name", PRODUCTION)
def test_no_file_discovery_across_nodes(name):
    """Fails on 0f8ebb7: every plan used --discovery-backend file with DYN_FILE_KV on the shared dir."""
    plan, addrs, procs = resolved(name)
    (etcd,) = [p for p, _, _ in procs.values() if p.role == "etcd"]
    assert etcd.node == 0
    endpoint = f"https://{addrs[0]}:{etcd.ports['client'].port}"
    for p, argv, env in procs.values():
        if p.role in ("frontend", "agg", "prefill", "decode"):
            assert flag(argv, "--discovery-backend") == "etcd", p.name
            assert env["ETCD_ENDPOINTS"] == endpoint and "DYN_FILE_KV" not in env, p.name


@pytest.mark.parametrize("name", PRODUCTION)
def test_rank_offset_ports_get_blocks_of_dp_size(name):
    plan, _, procs = resolved(name)
    for p, _, _ in procs.values():
        if not p.is_engine:
            continue
        dp = plan.topology[f"{p.role}_worker"]["dp"]
        for kind in ("kv_events", "nixl"):
            if kind in p.ports:
                assert p.ports[kind].count == dp, (p.name, kind)
