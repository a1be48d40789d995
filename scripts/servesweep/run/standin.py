"""Rehearsal stand-in for a headless engine process (a non-leader node of a
multi-node worker): it binds the ports the plan gives it, so port collisions
show up in rehearsal, and waits for SIGTERM. It serves nothing."""

from __future__ import annotations

import argparse
import signal
import socket
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ports", nargs="*", default=[], help="PORT:COUNT blocks to bind")
    a = ap.parse_args(argv)
    held = []
    for item in a.ports:
        base, count = (int(x) for x in item.split(":"))
        for port in range(base, base + count):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
    print(f"standin: holding {len(held)} ports", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
