"""Generate small mooncake-style traces with shared prefixes and sessions.

Each session starts with a system prefix shared by every session of its group,
and each turn resends the whole conversation so far plus new blocks: the KV
router can route a follow-up turn to the worker that already caches it.
No timestamps, so aiperf drives them at a fixed concurrency.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def sessions_trace(
    sessions: int = 240,
    turns: int = 4,
    groups: int = 6,
    shared_blocks: int = 4,
    new_blocks: int = 2,
    block: int = 64,
    osl: tuple[int, int] = (24, 64),
    seed: int = 11,
) -> list[dict]:
    rng = random.Random(seed)
    next_id = groups * shared_blocks
    rows = []
    for s in range(sessions):
        g = s % groups
        history = list(range(g * shared_blocks, (g + 1) * shared_blocks))
        for _ in range(turns):
            history = history + list(range(next_id, next_id + new_blocks))
            next_id += new_blocks
            rows.append(
                {
                    "session_id": f"s{s:04d}",
                    "input_length": len(history) * block,  # full blocks: a hash id has one size
                    "output_length": rng.randint(*osl),
                    "hash_ids": history,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--sessions", type=int, default=240)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--block", type=int, default=64)
    a = ap.parse_args(argv)
    rows = sessions_trace(a.sessions, a.turns, block=a.block)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    print(f"{a.out}: {len(rows)} requests in {a.sessions} sessions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
