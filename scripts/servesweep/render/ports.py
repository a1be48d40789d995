"""Every port any process binds, including the ones an engine derives from a base.

Rendering assigns ports from the cluster's ``port_base`` in plan order, so a
plan is deterministic. Engines that add the DP rank to a configured base
(vLLM's KV-event publisher and NIXL side channel; the mocker's KV-event ports)
get a block of DP size per worker: every process of that worker is given the
same base and binds only its own ranks (``offset`` = its first DP rank,
``width`` = its ranks). :func:`binding_collisions` proves at render time that
no two bindings of a run host coincide. At run time the driver shifts every
port by a slot (``run.slots``).
"""

from __future__ import annotations

from ..contract.plan import PortBlock

# Every port stays below 32768: Dynamo parses DYN_SYSTEM_PORT as a signed 16-bit
# integer (measured: 40753 is rejected), and Linux hands out 32768+ as ephemeral ports.
PORT_LIMIT = 32768


def usable_slots(base: int, block: int, slots: int) -> int:
    """How many of `slots` blocks fit below PORT_LIMIT."""
    return max(0, min(slots, (PORT_LIMIT - base) // block))


class PortAllocator:
    def __init__(self, base: int, block: int):
        self.base, self.block, self.next = base, block, base

    def take(self, count: int = 1) -> PortBlock:
        p = PortBlock(self.next, count, 0, count)
        self.next += count
        return p

    @property
    def used(self) -> int:
        return self.next - self.base


def ranks_of(block: PortBlock, first_rank: int, ranks: int) -> PortBlock:
    """The part of a worker's per-rank block that one process binds."""
    return PortBlock(block.port, block.count, first_rank, ranks)


def binding_collisions(processes, one_host: bool) -> list[str]:
    """Ports two processes (or two ports of one process) would bind on the same host.

    ``one_host``: every node runs on one machine (local and rehearsal), so all bindings meet.
    """
    seen: dict[tuple[int, int], str] = {}
    out = []
    for p in processes:
        host = 0 if one_host else p.node
        for name, block in p.ports.items():
            if block.offset + block.width > block.count:
                out.append(f"{p.name}.{name} binds past its block ({block.to_json()})")
            for n in block.bound:
                owner = seen.setdefault((host, n), f"{p.name}.{name}")
                if owner != f"{p.name}.{name}":
                    out.append(f"port {n} on node {host}: {owner} and {p.name}.{name}")
    return out
