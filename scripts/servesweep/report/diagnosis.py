"""Why a point runs as it does, in one line with the numbers behind it: what its load ran out of.

Pure functions of a result document: the engines' own gauges the run kept (``figures.engine_load``
from run/engine_load, ``batch_by_role``, ``preemptions``) and the client's TTFT against the server's.
The capacity table names what its lowest miss ran out of with the same line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

KV_FULL = 0.95  # KV-cache use at or above this share of the pool counts as full
AT_CAP = 0.9  # a role's mean batch at or above this share of its cap counts as at the cap
QUEUED = 1.0  # mean requests waiting in the engines at or above this count as a queue
PREFILL_HEAVY = 0.5  # prefill at or above this share of the engines' request time makes a queue prefill's
CLIENT_SHORT = 0.8  # the engines held less than this share of the client's concurrency: the client fell short
CLIENT_GAP = (0.05, 0.5)  # client TTFT above the server's by at least (s, share of the client's): the client's time


@dataclass(frozen=True)
class Diagnosis:
    bound: str  # queue-, KV-cache-, batch-cap-, prefill-, client-bound, not saturated, or unknown
    because: str  # the numbers behind it

    @property
    def line(self) -> str:
        return f"{self.bound}: {self.because}"


def _n(x: float) -> str:
    return f"{x:.1f}".removesuffix(".0")


def _at_cap(batch: dict, caps: dict) -> list[str]:
    """'decode 31.6 of cap 32' for each role whose mean batch sits at its cap."""
    out = []
    for role, cap in sorted(caps.items()):
        b = batch.get(role)
        if b and cap and b["mean"] >= AT_CAP * cap:
            out.append(f"{role} batch {_n(b['mean'])} of cap {cap} (p99 {_n(b['p99'])})")
    return out


def _kv(load: dict, preemptions: int | None) -> Diagnosis | None:
    kv = load.get("kv_cache_use")
    full = kv is not None and kv["max"] >= KV_FULL
    if not full and not preemptions:
        return None
    parts = [f"KV cache {kv['max']:.0%} full at peak (mean {kv['mean']:.0%})"] if kv else []
    parts += [f"{preemptions} preemptions"] if preemptions else []
    return Diagnosis("KV-cache-bound", ", ".join(parts))


def _queue(load: dict, batch: dict) -> Diagnosis | None:
    waiting = load.get("waiting")
    if waiting is None or waiting["mean"] < QUEUED:
        return None
    queued = f"{_n(waiting['mean'])} requests waiting on average (p99 {_n(waiting['p99'])})"
    capped = _at_cap(batch, load.get("batch_cap") or {})
    if capped:
        return Diagnosis("batch-cap-bound", f"{'; '.join(capped)}; {queued}")
    share = load.get("prefill_share")
    if share is not None and share >= PREFILL_HEAVY:
        return Diagnosis("prefill-bound", f"prefill took {share:.0%} of the engines' request time; {queued}")
    held = load.get("in_flight")
    held_text = f"the engines ran {_n(held['mean'])} at once" if held else "the running batch is not exported"
    cap = "" if load.get("batch_cap") else ", batch cap unknown (engine default)"
    return Diagnosis("queue-bound", f"{queued} while {held_text}{cap}")


def _client(load: dict, figs: dict, concurrency: int) -> Diagnosis | None:
    held, waiting = load.get("in_flight"), load.get("waiting")
    if held is not None and waiting is not None and held["mean"] + waiting["mean"] < CLIENT_SHORT * concurrency:
        return Diagnosis(
            "client-bound",
            f"the engines ran {_n(held['mean'])} and queued {_n(waiting['mean'])} requests on average of the "
            f"{concurrency} the client keeps in flight: the client (or the path to the engines) fell short",
        )
    gap, client = figs.get("ttft_gap_s"), figs.get("client_ttft_mean_s")
    if gap is not None and client and gap >= CLIENT_GAP[0] and gap >= CLIENT_GAP[1] * client:
        return Diagnosis(
            "client-bound",
            f"client TTFT {client * 1000:.0f} ms is {gap * 1000:.0f} ms above the server's: the time is the client's",
        )
    return None


def diagnose(doc: dict) -> Diagnosis:
    """The bound of one result, checked in order: KV cache, queue (batch cap, prefill), client, none."""
    figs, ident = doc["figures"], doc["identity"]
    load = figs.get("engine_load")
    if load is None:
        why = (doc.get("unmeasured") or {}).get("engine_load", "the result predates the engine-load figures")
        return Diagnosis("unknown", why)
    concurrency = ident["concurrency"]
    for found in (_kv(load, figs.get("preemptions")), _queue(load, figs.get("batch_by_role") or {})):
        if found:
            return found
    if load.get("waiting") is None and load.get("in_flight") is None:
        return Diagnosis("unknown", "the engines export neither a waiting nor a running gauge")
    client = _client(load, figs, concurrency)
    if client:
        return client
    held, kv = load.get("in_flight"), load.get("kv_cache_use")
    parts = [f"the engines ran {_n(held['mean'])} of the client's {concurrency} at once" if held else None]
    parts.append("none waiting" if load.get("waiting") is not None else "waiting not exported")
    parts.append(f"KV cache at most {kv['max']:.0%}" if kv else None)
    return Diagnosis("not saturated", ", ".join(p for p in parts if p))


def diagnose_file(path: str | Path) -> Diagnosis:
    """The diagnosis of a result file; one that cannot be read is unknown, with the reason."""
    try:
        return diagnose(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return Diagnosis("unknown", f"{path} unreadable ({type(e).__name__})")


def lowest_miss_line(capacity: dict) -> str:
    """What the capacity search's lowest missing probe ran out of: its diagnosis, named by probe."""
    miss = capacity.get("lowest_miss")
    probe = next((p for p in capacity.get("probes") or [] if p["concurrency"] == miss), None)
    if probe is None:
        return "–" if miss is None else f"c{miss}: unknown: no result of the probe"
    return f"c{miss}: {diagnose_file(probe['result']).line}"
