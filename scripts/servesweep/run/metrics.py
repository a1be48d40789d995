"""Scraping Prometheus text from workers and the frontend (prometheus_client's parser)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def http_get(url: str, timeout: float = 2.0, tls: ssl.SSLContext | None = None) -> tuple[int, str]:
    """``tls``: the client side of an https endpoint (the stack's CA and certificate)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        return 0, str(e)


def http_post_json(url: str, body: dict, timeout: float = 10.0) -> tuple[int, dict | str]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as e:
        return 0, str(e)


def samples(text: str) -> list[tuple[str, dict, float]]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, s.labels, s.value))
    return out


def scrape(url: str) -> list[tuple[str, dict, float]] | None:
    status, text = http_get(url, timeout=3.0)
    if status != 200:
        return None
    return samples(text)


def total(smp, name: str, **labels) -> float | None:
    vals = [v for n, lab, v in smp if n == name and all(lab.get(k) == x for k, x in labels.items())]
    return sum(vals) if vals else None


def histogram(smp, name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound (summed over label sets)."""
    out: dict[float, float] = {}
    for n, lab, v in smp:
        if n == f"{name}_bucket":
            le = float(lab["le"])
            out[le] = out.get(le, 0.0) + v
    return out


def histogram_quantile(before: dict, after: dict, q: float) -> float | None:
    """Quantile of the observations between two scrapes, linear within a bucket."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, counts, strict=True):
        if c >= rank:
            if b == float("inf"):
                return prev_b
            width = c - prev_c
            return prev_b + (b - prev_b) * ((rank - prev_c) / width if width else 1.0)
        prev_b, prev_c = b, c
    return None
