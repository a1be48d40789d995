"""A point's marks, read back from its result: the ones the run wrote (run/trust: client-bound, not
streamed, stalled, short) and one 'stalled' per stack process the run's watch saw stopped or silent
inside the window and recover (the result's ``stalls``, run/watch). Every reader of marks reads them
here: the summary, its plots, the best table and the capacity search."""

from __future__ import annotations

STOPPING_SEARCH = ("client-bound", "not streamed", "stalled")  # a short probe is never ranked, yet decides


def marks_of(doc: dict) -> list[dict]:
    out = list(doc.get("marks") or [])
    for s in doc.get("stalls") or []:
        if isinstance(s, dict) and {"process", "seconds", "start_s"} <= s.keys():
            out.append({"mark": "stalled", "reason": (
                f"stalled: {s['process']} {s.get('seen') or 'stood still'} for {s['seconds']:.1f} s from "
                f"{s['start_s']:.1f} s after aiperf started")})  # fmt: skip
    return out
