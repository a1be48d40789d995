"""The figure audit: every client figure the summary shows, recomputed from aiperf's per-request
export of each point (its artifacts), compared with the summary's CSV to the summary's rounding.
A figure the summary shows as '–' is checked to carry a reason (a mark or an unmeasured note).
Rates over the window (req/s, output tok/s) are recomputed over the span of the profiled requests,
which aiperf measures from its own phase clock: they agree to RATE_TOLERANCE, not to rounding."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..contract.marks import marks_of
from ..run import repeats, trust  # tools may read the run side: report/ may not

DIGITS = {"ttft": 2, "latency": 2, "itl": 1, "req_s": 2, "tps": 0}  # as summary.md writes them
RATE_TOLERANCE = 0.03


def _values(reqs: list[dict], name: str) -> list[float]:
    out = []
    for r in reqs:
        v = trust._metric(r, name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
    return out


def _pct(values: list[float], q: float, scale: float = 1.0):
    return float(np.percentile(values, q)) * scale if values else None


def recompute(records: list[dict]) -> dict:
    """The summary's client figures from the per-request export alone (profiling, completed requests)."""
    reqs = trust.profiling(records)
    span = trust.window_ns(reqs)
    window = (span[1] - span[0]) / 1e9 if span else None
    ttft, itl, lat = (_values(reqs, n) for n in ("time_to_first_token", "inter_token_latency", "request_latency"))
    tokens = [trust._tokens(r) or 0 for r in reqs]
    user = _values(reqs, "output_token_throughput_per_user")
    out = {f"ttft_{q}_s": _pct(ttft, int(q[1:]), 1e-3) for q in ("p50", "p90", "p95", "p99")}
    out |= {f"itl_{q}_ms": _pct(itl, int(q[1:])) for q in ("p50", "p90", "p99")}
    out |= {f"latency_{q}_s": _pct(lat, int(q[1:]), 1e-3) for q in ("p50", "p99")}
    out["requests"] = len(reqs)
    out["req_s"] = len(reqs) / window if window else None
    out["output_tps"] = sum(tokens) / window if window else None
    out["output_tps_per_user"] = sum(user) / len(user) if user else None
    out["e2e_tps_per_user"] = trust.streaming(reqs)["e2e_output_tps_per_user"]
    return out


def _digits(name: str) -> int:
    return next((d for key, d in DIGITS.items() if name.startswith(key) or name.endswith(key)), 0)


def _agrees(name: str, shown: float, again: float) -> bool:
    if name in ("req_s", "output_tps"):
        return abs(shown - again) <= RATE_TOLERANCE * max(abs(shown), abs(again))
    unit = 10 ** -_digits(name)
    return abs(shown - again) <= unit or round(shown, _digits(name)) == round(again, _digits(name))


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def audit_point(row: pd.Series, root: Path) -> list[list]:
    """[figure, summary, recomputed, verdict] for one summary row."""
    doc = json.loads((root / row["result"]).read_text())
    records = repeats.request_records(root / doc["artifacts"])
    if records is None:
        return [["*", "", "", f"no per-request export under {doc['artifacts']}"]]
    why = doc.get("unmeasured") or {}
    marks = "; ".join(dict.fromkeys(m["mark"] for m in marks_of(doc)))
    out = []
    for name, again in recompute(records).items():
        if name not in row.index:
            continue
        shown = row[name]
        if _missing(shown):
            reason = marks or next((w for k, w in why.items() if k.split(".")[0] in name), "")
            verdict = f"– ({reason})" if reason else "✗ shown as – without a reason"
        elif _missing(again):
            verdict = "not in the per-request export"
        else:
            verdict = "✓" if _agrees(name, float(shown), again) else "✗ differs"
        out.append([name, shown, again, verdict])
    return out


def audit(summary_csv: Path, root: Path) -> tuple[list[list], int]:
    """(rows: result, figure, summary, recomputed, verdict; the number of disagreements)."""
    df = pd.read_csv(summary_csv)
    rows, bad = [], 0
    for _, row in df.iterrows():
        for cells in audit_point(row, root):
            rows.append([row["result"], *cells])
            bad += str(cells[-1]).startswith("✗")
    return rows, bad
