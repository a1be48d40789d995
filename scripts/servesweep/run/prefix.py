"""Theoretical prefix hit: the share of prompt tokens a perfect (unbounded, never evicting) prefix
cache could have served, given the trace's ``hash_ids`` of the requests aiperf actually sent, in
the order it sent them. Set against the measured cache-read share it shows what routing and
eviction cost. aiperf's per-request export names each request's trace session
(``conversation_id``) and its turn (``turn_index``)."""

from __future__ import annotations

import json
from pathlib import Path

AIPERF_BLOCK = 512  # aiperf's default --isl-block-size for mooncake traces


def _sessions(trace: Path) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for i, line in enumerate(trace.read_text().splitlines()):
        if line.strip():
            row = json.loads(line)
            rows.setdefault(str(row.get("session_id", i)), []).append(row)
    return rows


def _sent(records: list[dict]) -> list[tuple[int, str, int]]:
    """(start ns, session, turn) of every request aiperf sent, warm-up included (it warms the cache)."""
    out = []
    for rec in records:
        try:
            m = rec["metadata"]
            out.append((m.get("request_start_ns") or 0, str(m["conversation_id"]), int(m.get("turn_index") or 0)))
        except (ValueError, KeyError, TypeError):
            continue
    return sorted(out)


def theoretical_hit(dataset: dict, records: list[dict] | None, why: dict) -> float | None:
    """``records``: aiperf's per-request export (``repeats.request_records``)."""
    if dataset.get("kind") != "trace":
        why["theoretical_prefix_hit"] = "synthetic dataset: no hash_ids to reuse"
        return None
    if records is None:
        why["theoretical_prefix_hit"] = "aiperf wrote no per-request export"
        return None
    block = int(dataset.get("block_size") or AIPERF_BLOCK)
    try:
        sessions, sent = _sessions(Path(dataset["path"])), _sent(records)
    except (OSError, ValueError) as e:
        why["theoretical_prefix_hit"] = f"trace or per-request export unreadable: {e}"
        return None
    seen: set = set()
    hit = total = 0
    for _, session, turn in sent:
        rows = sessions.get(session)
        if rows is None or turn >= len(rows):
            why["theoretical_prefix_hit"] = f"request of session {session!r} turn {turn} is not in the trace"
            return None
        row = rows[turn]
        ids, length = row.get("hash_ids") or [], int(row.get("input_length") or 0)
        prefix = next((i for i, h in enumerate(ids) if h not in seen), len(ids))
        hit += min(prefix * block, length)
        total += length
        seen.update(ids)
    if not total:
        why["theoretical_prefix_hit"] = "no request with a prompt was sent"
        return None
    return hit / total
