"""Whether a point's figures can be trusted: the client's health, the steadiness of its window, its size.

From aiperf's own log (event-loop stall warnings) and its per-request export (chunks per answer,
when each response arrived), a point gets **marks**: ``client-bound`` (its client stalled for more
than CLIENT_STALL_SHARE of the window), ``not streamed`` (fewer than STREAMED_MIN_SHARE of its
answers arrived in more than one chunk), ``stalled`` (requests outstanding and no response for
longer than the stall bound), ``short`` (a window under MIN_WINDOW_S or fewer than MIN_COMPLETED
requests). A client-bound or not-streamed point's TTFT, ITL and per-user rates are not measured:
the client read buffered tokens in batches, so they are set to null with the mark as the reason
(not recomputed over the requests that did stream: those are the ones the starved client happened
to read in time, a biased subset). The end-to-end rate per user (output tokens / latency) does not
depend on when chunks were read and is always recorded. A marked point is never ranked, never drawn
on a Pareto plot as measured, and a capacity search meeting one stops (capacity/search.probe_met;
a short probe is only never ranked).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path

from ..contract import paths
from . import repeats

# The client's event loop stalled for more than this share of the window: beyond it, more than 1 in 20
# requests may have been read late, so the p95 an SLO judges is the client's, not the server's.
CLIENT_STALL_SHARE = 0.05
# a test rig (a loaded 2-core host, 6 s windows) may loosen the bound where it tests anything but the
# client's health: SERVESWEEP_CLIENT_STALL_SHARE, a share > 0 (over 1, or inf: the stalls of aiperf's
# several services add up, so only a bound over the number of services never marks)
STALL_SHARE_ENV = "SERVESWEEP_CLIENT_STALL_SHARE"


def stall_share() -> float:
    try:
        share = float(os.environ.get(STALL_SHARE_ENV, CLIENT_STALL_SHARE))
    except ValueError:
        return CLIENT_STALL_SHARE
    return share if share > 0 else CLIENT_STALL_SHARE


STREAMED_MIN_SHARE = 0.9  # answers of 2+ tokens that must have arrived in 2+ chunks
STALL_MIN_S = 5.0  # a silence with requests outstanding longer than this (or 3x the median TTFT) is a stall
STALL_TTFT_FACTOR = 3.0
MIN_WINDOW_S = 5.0  # a shorter benchmark window is marked short
MIN_COMPLETED = 20  # fewer completed requests are marked short
CLIENT_FIGURES = (("ttft_s",), ("itl_ms",), ("output_tps_per_user",), ("client_ttft_mean_s",), ("ttft_gap_s",))

_STALL = re.compile(
    r"^(?P<t>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(?P<ms>\d{3}))?.*?Event loop for (?P<svc>\S+) is taking too long"
    r" to run\. Overhead: (?P<ms_over>[\d,]+(?:\.\d+)?)ms"
)


def _metric(rec: dict, name: str):
    value = (rec.get("metrics") or {}).get(name)
    return value.get("value") if isinstance(value, dict) else None


def profiling(records: list[dict]) -> list[dict]:
    """The benchmark's own requests: not warm-up, not failed, not cancelled, with their times."""
    out = []
    for r in records:
        meta = r.get("metadata") or {}
        if meta.get("benchmark_phase", "profiling") != "profiling" or meta.get("was_cancelled") or r.get("error"):
            continue
        if isinstance(meta.get("request_start_ns"), int) and isinstance(meta.get("request_end_ns"), int):
            out.append(r)
    return out


def window_ns(reqs: list[dict]) -> tuple[int, int] | None:
    if not reqs:
        return None
    return min(r["metadata"]["request_start_ns"] for r in reqs), max(r["metadata"]["request_end_ns"] for r in reqs)


def client_stalls(artifact_dir: Path, window: tuple[int, int] | None) -> dict:
    """aiperf's "Event loop ... taking too long" warnings of every service in its logs, inside the
    window when it is known (a stall loading the dataset before it is no harm)."""
    stalls = []
    for log in sorted(Path(artifact_dir).glob(f"**/logs/{paths.AIPERF_LOG}")):  # aiperf's own, per profile run
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            m = _STALL.match(line)
            if m and _inside(m, window):
                stalls.append(float(m["ms_over"].replace(",", "")))
    return {"stall_warnings": len(stalls), "worst_stall_ms": max(stalls, default=None), "stall_ms_total": sum(stalls)}


def _inside(m: re.Match, window: tuple[int, int] | None) -> bool:
    if window is None:
        return True
    try:  # aiperf logs local wall-clock time, the export's clock
        at = time.mktime(time.strptime(m["t"], "%Y-%m-%d %H:%M:%S")) + int(m["ms"] or 0) / 1000
    except ValueError:
        return True
    return window[0] / 1e9 - 1 <= at <= window[1] / 1e9 + 1


def streaming(reqs: list[dict]) -> dict:
    """The share of answers of 2+ output tokens that arrived in 2+ chunks, and the end-to-end output
    rate per user (output tokens / request latency, mean over requests)."""
    judged = streamed = 0
    rates = []
    for r in reqs:
        tokens, latency_ms = _tokens(r), _metric(r, "request_latency")
        if tokens and latency_ms:
            rates.append(tokens / (latency_ms / 1000))
        chunks = _metric(r, "http_req_chunks_received")
        if chunks is not None and (tokens or 0) >= 2:
            judged += 1
            streamed += chunks > 1
    return {
        "requests_judged": judged,
        "streamed_share": streamed / judged if judged else None,
        "e2e_output_tps_per_user": sum(rates) / len(rates) if rates else None,
    }


def _tokens(r: dict):
    t = _metric(r, "output_sequence_length")
    return t if t is not None else _metric(r, "output_token_count")


def _answering(r: dict, bound_ms: float) -> list[tuple[int, int]]:
    """When the client was getting this request's answer, as intervals from its first chunk to its end,
    split only where two chunks lay more than the bound apart (a long answer costs one max(), not a loop)."""
    start, end = r["metadata"]["request_start_ns"], r["metadata"]["request_end_ns"]
    ttft = _metric(r, "time_to_first_token")
    if not isinstance(ttft, (int, float)):
        return [(end, end)]
    first, gaps = start + int(ttft * 1e6), _metric(r, "inter_chunk_latency") or []
    if not gaps or max(gaps) <= bound_ms:
        return [(first, max(first, end))]
    out, at, since = [], first, first
    for gap in gaps:
        if gap > bound_ms:
            out.append((since, at))
            since = at + int(gap * 1e6)
        at += int(gap * 1e6)
    return [*out, (since, max(at, end))]


def silences(reqs: list[dict]) -> list[dict]:
    """Stretches with requests outstanding and no response longer than the bound: max(STALL_MIN_S,
    STALL_TTFT_FACTOR x the median TTFT), so a long prefill is not a stall. ``at_s`` from the window's start."""
    span = window_ns(reqs)
    if span is None:
        return []
    ttfts = [t for t in (_metric(r, "time_to_first_token") for r in reqs) if isinstance(t, (int, float))]
    bound_s = max(STALL_MIN_S, STALL_TTFT_FACTOR * statistics.median(ttfts) / 1000 if ttfts else 0.0)
    answering = sorted([(span[0], span[0])] + [iv for r in reqs for iv in _answering(r, bound_s * 1000)])
    spans = [(r["metadata"]["request_start_ns"], r["metadata"]["request_end_ns"]) for r in reqs]
    out, reach = [], span[0]
    for a, b in answering:
        if (a - reach) / 1e9 > bound_s:
            waiting = [s for s, e in spans if s < a <= e]  # sent before the next response, not yet done
            began = max(reach, min(waiting, default=a))
            if (a - began) / 1e9 > bound_s:
                out.append({"at_s": round((began - span[0]) / 1e9, 3), "for_s": round((a - began) / 1e9, 3),
                            "bound_s": round(bound_s, 3)})  # fmt: skip
        reach = max(reach, b)
    return out


def assess(artifact_dir: Path, streaming_run: bool) -> tuple[dict, list[dict]]:
    """(the client's health, stalls in the window) from aiperf's artifacts; ({}, []) without an export."""
    records = repeats.request_records(Path(artifact_dir))
    if records is None:
        return {}, []
    reqs = profiling(records)
    span = window_ns(reqs)
    client = client_stalls(artifact_dir, span) | streaming(reqs)
    client["window_s"] = round((span[1] - span[0]) / 1e9, 3) if span else None
    if not streaming_run:
        client["streamed_share"] = None  # one chunk per answer is what was asked for
    return client, silences(reqs)


def marks(f: dict, client: dict, silent: list[dict]) -> list[dict]:
    """Why the point's figures cannot all be trusted or compared: [{mark, reason}], empty when they can."""
    out = []
    window = client.get("window_s") or f.get("benchmark_duration_s")
    stalled_ms = client.get("stall_ms_total") or 0.0
    bound = stall_share()
    if window and stalled_ms / 1000 > bound * window:
        out.append({"mark": "client-bound", "reason": (
            f"client-bound: aiperf's event loop stalled {client['stall_warnings']} times for {stalled_ms / 1000:.2f} s "
            f"of the {window:.1f} s window (worst {client['worst_stall_ms']:.0f} ms; bound "
            f"{bound:.0%})")})  # fmt: skip
    share = client.get("streamed_share")
    if share is not None and share < STREAMED_MIN_SHARE:
        out.append({"mark": "not streamed", "reason": (
            f"not streamed: only {share:.0%} of {client['requests_judged']} answers arrived in more than one chunk "
            f"(bound {STREAMED_MIN_SHARE:.0%}): the client read buffered tokens at once")})  # fmt: skip
    for s in silent:
        out.append({"mark": "stalled", "reason": (
            f"stalled: requests outstanding and no response for {s['for_s']:.1f} s from {s['at_s']:.1f} s into the "
            f"window (aiperf's per-request export; bound {s['bound_s']:g} s)")})  # fmt: skip
    out += _short(f, window)
    return out


def _short(f: dict, window) -> list[dict]:
    done = f.get("requests_completed") or 0
    if (window is not None and window < MIN_WINDOW_S) or done < MIN_COMPLETED:
        return [{"mark": "short", "reason": (
            f"short: {done} requests completed in {window or 0:.1f} s; a ranked point needs at least "
            f"{MIN_COMPLETED} requests and {MIN_WINDOW_S:g} s")}]  # fmt: skip
    return []


def mask(f: dict, why: dict, found: list[dict]) -> None:
    """A client-bound or not-streamed point's client-timed figures become unmeasured, with the reason."""
    reasons = [m["reason"] for m in found if m["mark"] in ("client-bound", "not streamed")]
    if not reasons:
        return
    for (name,) in CLIENT_FIGURES:
        value = f.get(name)
        f[name] = {k: None for k in value} if isinstance(value, dict) else None
        why[name] = "; ".join(reasons)
