"""Theoretical prefix hit: the share of prompt tokens a perfect (unbounded, never evicting) prefix
cache could have served, given the trace's ``hash_ids`` of the requests aiperf actually sent, in
the order it sent them. Set against the measured cache-read share it shows what routing and
eviction cost. aiperf's per-request export names each request's trace session
(``conversation_id``) and its turn (``turn_index``)."""

from __future__ import annotations

import json
from pathlib import Path

AIPERF_BLOCK = 512  # aiperf's default --isl-block-size for mooncake traces


def _sessions(trace: Path, block: int) -> dict[str, list[dict]]:
    """Session -> its turns in order, each ``{hash_ids, input_length, block}``: a mooncake JSONL file,
    or a Weka folder (one trajectory per file, its own block size; ids local to it unless the file
    says they are global)."""
    if trace.is_dir():
        return _weka_sessions(trace)
    rows: dict[str, list[dict]] = {}
    for i, line in enumerate(trace.read_text().splitlines()):
        if line.strip():
            row = json.loads(line)
            rows.setdefault(str(row.get("session_id", i)), []).append({**row, "block": block})
    return rows


def _weka_sessions(folder: Path) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        sid, local = str(doc.get("id", path.stem)), doc.get("hash_id_scope", "local") == "local"
        block = int(doc.get("block_size") or AIPERF_BLOCK)
        for req in doc.get("requests") or []:
            ids = [(sid, h) if local else h for h in req.get("hash_ids") or []]
            rows.setdefault(sid, []).append({"hash_ids": ids, "input_length": req.get("in") or 0, "block": block})
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


def theoretical_hit(dataset: dict, records: list[dict] | None, why: dict, warm: set | None = None) -> float | None:
    """``records``: aiperf's per-request export (``repeats.request_records``). ``warm``: the blocks the
    stack's earlier points already sent (a warm stack whose caches were not reset), the cache's start;
    the blocks this point sends are added to it. Without it the figure is a cold cache's."""
    if dataset.get("kind") == "public":
        why["theoretical_prefix_hit"] = (
            f"the pinned corpus {dataset.get('name')} is read by aiperf from the Hugging Face cache; "
            "servesweep does not read it"
        )
        return None
    if dataset.get("kind") != "trace":
        why["theoretical_prefix_hit"] = "synthetic dataset: no hash_ids to reuse"
        return None
    if records is None:
        why["theoretical_prefix_hit"] = "aiperf wrote no per-request export"
        return None
    try:
        sessions, sent = (
            _sessions(Path(dataset["path"]), int(dataset.get("block_size") or AIPERF_BLOCK)),
            _sent(records),
        )
    except (OSError, ValueError, AttributeError, TypeError) as e:
        why["theoretical_prefix_hit"] = f"trace {dataset['path']} or the per-request export unreadable: {e}"
        return None
    return _replay(sessions, sent, why, warm if warm is not None else set())


def _replay(sessions: dict, sent: list, why: dict, seen: set) -> float | None:
    """Each request's prompt through a perfect unbounded cache that starts with ``seen``."""
    hit = total = 0
    for _, session, turn in sent:
        rows = sessions.get(session) or sessions.get(session.split("::", 1)[0])  # aiperf's Weka chain: trace::chain
        if rows is None or turn >= len(rows):
            why["theoretical_prefix_hit"] = f"request of session {session!r} turn {turn} is not in the trace"
            return None
        row = rows[turn]
        ids, length = row.get("hash_ids") or [], int(row.get("input_length") or 0)
        prefix = next((i for i, h in enumerate(ids) if h not in seen), len(ids))
        hit += min(prefix * row["block"], length)
        total += length
        seen.update(ids)
    if not total:
        why["theoretical_prefix_hit"] = "no request with a prompt was sent"
        return None
    return hit / total


def load_warm(path: Path) -> set:
    """The blocks a warm stack's earlier points sent (``save_warm``); none for the stack's first point."""
    try:
        return {tuple(h) if isinstance(h, list) else h for h in json.loads(path.read_text())}
    except (OSError, ValueError, TypeError):
        return set()


def save_warm(path: Path, seen: set) -> None:
    """For the stack's next point (written atomically: a reader never sees half a list)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(sorted(seen, key=repr)))
    tmp.replace(path)


def cache_note(warm_blocks: int) -> str:
    """What the theoretical figure's cache started with."""
    if warm_blocks:
        return f"warm cache: starts with the {warm_blocks} blocks the stack's earlier points sent"
    return "cold cache: the stack's first point, or its caches were reset"
