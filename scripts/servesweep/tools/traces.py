"""Generate small traces with shared prefixes and sessions: mooncake rows, or Weka trace files.

Each session starts with a system prefix shared by every session of its group,
and each turn resends the whole conversation so far plus new blocks: the KV
router can route a follow-up turn to the worker that already caches it.
Mooncake rows carry no timestamps, so aiperf drives them at a fixed concurrency.
Weka traces (aiperf weka_trace, the AgentX format) are one JSON file per
trajectory, with the times and think times an agentic replay follows.
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


def weka_traces(
    trajectories: int = 40, turns: int = 10, block: int = 64, model: str = "agent", seed: int = 17
) -> dict[str, dict]:
    """{file name: trace} in aiperf's Weka format (aiperf/dataset/loader/weka_trace_models.py)."""
    rng, out = random.Random(seed), {}
    for n in range(trajectories):
        history, t, requests = list(range(4)), 0.0, []  # hash ids are local to a trace
        for turn in range(turns):
            history = history + list(range(len(history), len(history) + rng.randint(1, 2)))
            think = round(rng.uniform(0.2, 1.0), 3)
            t = round(t + think + 0.5, 3)
            requests.append(
                {
                    "t": t, "type": "s", "model": model, "in": len(history) * block,
                    "out": rng.randint(16, 48), "hash_ids": history,
                    "stop": "end_turn" if turn == turns - 1 else "tool_use", "think_time": think,
                }
            )  # fmt: skip
        tid = f"traj-{n:03d}"
        doc = {"id": tid, "models": [model], "block_size": block, "hash_id_scope": "local", "requests": requests}
        out[f"{tid}.json"] = doc
    return out


def write_weka(out_dir: Path, **kw) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = weka_traces(**kw)
    for name, doc in traces.items():
        (out_dir / name).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return len(traces)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--sessions", type=int, default=240)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--weka", action="store_true", help="write Weka trace files into the folder OUT")
    a = ap.parse_args(argv)
    if a.weka:
        print(f"{a.out}: {write_weka(a.out, block=a.block)} Weka trace files")
        return 0
    rows = sessions_trace(a.sessions, a.turns, block=a.block)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    print(f"{a.out}: {len(rows)} requests in {a.sessions} sessions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
