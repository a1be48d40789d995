"""Dynamo's system ports, read-only, on the node address.

A Dynamo worker's system server also serves admin routes (``/engine/control/sleep``,
``update_weights_from_disk``, ``pause_generation``) with no way to authenticate them. The workers
bind it on 127.0.0.1; this guard, one per node, listens on each worker's public system port and
passes on only ``GET /health``, ``/live`` and ``/metrics`` (what the driver reads). Anything else
gets 403 and never reaches the worker.

Standalone (standard library only): it runs in the engine's own Python, inside the container
when the stack has one. Usage: ``sysguard.py HOST:PORT=LOCAL_PORT ...``.
"""

from __future__ import annotations

import asyncio
import signal
import sys

ALLOWED = {"/health", "/live", "/metrics"}
HEAD_LIMIT = 8192
TIMEOUT_S = 30.0
FORBIDDEN = b"HTTP/1.0 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def allowed(head: bytes) -> str | None:
    """The path of a request the guard passes on, else None."""
    try:
        method, target, _ = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
    except (UnicodeDecodeError, ValueError):
        return None
    path = target.split("?", 1)[0]
    return target if method == "GET" and path in ALLOWED else None


async def _relay(reader, writer, upstream: int) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S)
        target = allowed(head)  # no longer than HEAD_LIMIT: the reader's limit raises first
        if target is None:
            writer.write(FORBIDDEN)
            return
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", upstream), TIMEOUT_S)
        try:
            up_writer.write(f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            while chunk := await asyncio.wait_for(up_reader.read(65536), TIMEOUT_S):
                writer.write(chunk)
                await writer.drain()
        finally:
            up_writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):  # noqa: UP041 - before 3.11 it is its own class
        pass  # the client sees the connection close: the driver retries or reports
    finally:
        writer.close()


async def serve(routes: list[tuple[str, int, int]]) -> None:
    servers = []
    for host, port, upstream in routes:
        servers.append(
            await asyncio.start_server(
                lambda r, w, up=upstream: _relay(r, w, up), host, port, limit=HEAD_LIMIT, reuse_address=True
            )
        )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"sysguard: serving {len(routes)} system port(s) read-only", flush=True)
    await stop.wait()
    for s in servers:
        s.close()


def parse(args: list[str]) -> list[tuple[str, int, int]]:
    out = []
    for a in args:
        listen, _, local = a.partition("=")
        host, _, port = listen.rpartition(":")
        out.append((host, int(port), int(local)))
    return out


if __name__ == "__main__":
    asyncio.run(serve(parse(sys.argv[1:])))
