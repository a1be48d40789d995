"""The KV-store service a recipe's connector needs: a Mooncake master with its HTTP metadata server,
a control-plane process of the plan like etcd (node 0, its own ports, started and healthy before
the workers, stopped with the stack), whose address every worker gets in its env.

Which connectors need it: vLLM's ``MooncakeStoreConnector`` (also inside a ``MultiConnector``) and
SGLang's ``--hicache-storage-backend mooncake``. The variable names are the ones Mooncake's store
client reads (and srt-slurm sets): ``MOONCAKE_MASTER``, ``MOONCAKE_TE_META_DATA_SERVER``,
``MOONCAKE_LOCAL_HOSTNAME``, ``MOONCAKE_PROTOCOL``, ``MOONCAKE_DEVICE``, ``MOONCAKE_GLOBAL_SEGMENT_SIZE``.
The master has no authentication of its own: it listens on its node's address only.
"""

from __future__ import annotations

import json

from ..fileio.errors import Problem
from .engines import ProcessSpec
from .ports import PortAllocator

STORE_CONNECTORS = ("MooncakeStoreConnector",)
NAME = "kvstore"


def _connectors(cfg) -> list[str]:
    if isinstance(cfg, dict):
        own = [cfg["kv_connector"]] if isinstance(cfg.get("kv_connector"), str) else []
        return own + [c for v in cfg.values() for c in _connectors(v)]
    if isinstance(cfg, list):
        return [c for v in cfg for c in _connectors(v)]
    return []


def _needs_in(args: list[str]) -> bool:
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "--kv-transfer-config":
            try:
                if set(_connectors(json.loads(value))) & set(STORE_CONNECTORS):
                    return True
            except ValueError:
                continue
        if flag == "--hicache-storage-backend" and value == "mooncake":
            return True
    return False


def needed(doc: dict) -> bool:
    """Whether any engine argument list of the recipe names a connector that needs the store."""
    lists = [doc["engine"].get("args", [])]
    topo = doc["topology"]
    lists += [r.get("args", []) for r in (topo.get("disaggregated") or {}).values()]
    lists += [(topo.get("aggregated") or {}).get("args", [])]
    return any(_needs_in([str(a) for a in args]) for args in lists)


def process(binary: str, alloc: PortAllocator) -> ProcessSpec:
    """mooncake_master bound to its node's address: RPC, HTTP metadata and admin/metrics ports."""
    ports = {"rpc": alloc.take(), "metadata": alloc.take(), "metrics": alloc.take()}
    argv = [binary, "--rpc_address={addr:self}", "--rpc_port={port:self.rpc}"]
    argv += ["--enable_http_metadata_server=true", "--http_metadata_server_host={addr:self}"]
    argv += ["--http_metadata_server_port={port:self.metadata}"]
    argv += ["--metrics_host={addr:self}", "--metrics_port={port:self.metrics}"]
    base = "http://{addr:self}"
    return ProcessSpec(ports, tuple(argv), {}, f"{base}:{{port:self.metadata}}/health", None)


def worker_env(doc: dict) -> dict:
    """Where a worker finds the store, and the recipe's transport settings (``kv_store``)."""
    cfg = doc.get("kv_store") or {}
    env = {
        "MOONCAKE_MASTER": f"{{addr:{NAME}}}:{{port:{NAME}.rpc}}",
        "MOONCAKE_TE_META_DATA_SERVER": f"http://{{addr:{NAME}}}:{{port:{NAME}.metadata}}/metadata",
        "MOONCAKE_LOCAL_HOSTNAME": "{addr:self}",
        "MOONCAKE_PROTOCOL": cfg.get("protocol", "tcp"),
    }
    if "device" in cfg:
        env["MOONCAKE_DEVICE"] = cfg["device"]
    if "global_segment_size" in cfg:
        env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] = cfg["global_segment_size"]
    return env


def problems(doc: dict, label: str) -> list[Problem]:
    if "kv_store" in doc and not needed(doc):
        reason = (
            f"no engine argument names a connector that uses it ({', '.join(STORE_CONNECTORS)}): it would do nothing"
        )
        return [Problem(label, "kv_store", reason)]
    return []
