"""Server-side figures over the profiling window only, whatever warm-up the scenario ran (requests,
a duration, an agentic cache warm-up): aiperf's server-metrics export aggregates its ``metrics``
over the profiling phase alone (the warm-up's are apart, in ``warmup_metrics``), each counter as its
delta and each histogram as its count, sum and buckets over the window. The driver's own scrapes
before and after aiperf bracket the warm-up too: a figure this module cannot take from the window
keeps theirs, and the result's ``counting`` note says which is which. A client-minus-server TTFT gap
is given only when both cover the same requests: never from a server TTFT that includes warm-up.
"""

from __future__ import annotations

from ..contract.plan import Plan
from . import metrics

WINDOW = "aiperf's server-metrics export over the profiling window only (warm-up excluded)"


def exported_name(metric: str) -> str:
    """A Prometheus counter as aiperf's export names it: its family, without ``_total``."""
    return metric.removesuffix("_total")


def _by_process(doc: dict, metric: str, urls: dict[str, str], labels: dict | None = None) -> dict[str, list]:
    """Process -> the stats (and buckets) of every series of ``metric`` it exported, label-filtered."""
    out: dict[str, list] = {}
    found = doc.get("metrics") or {}
    for s in (found.get(metric) or found.get(exported_name(metric)) or {}).get("series", []):
        name = urls.get(s.get("endpoint_url", ""))
        mine = all((s.get("labels") or {}).get(k) == v for k, v in (labels or {}).items())
        if name is not None and mine and isinstance(s.get("stats"), dict):
            out.setdefault(name, []).append(s)
    return out


def _totals(doc: dict, metric: str, urls: dict[str, str], names, labels: dict | None = None) -> dict | None:
    """Each named process's counter delta over the window (a histogram's ``_sum``: its sum); None
    unless every one exported it."""
    key = "total"
    if metric.endswith("_sum"):
        metric, key = metric.removesuffix("_sum"), "sum"
    series = _by_process(doc, metric, urls, labels)
    if not names or any(n not in series for n in names):
        return None
    return {n: sum(s["stats"].get(key) or 0.0 for s in series[n]) for n in names}


def _ttft(doc: dict, histogram: str, urls: dict[str, str], names) -> dict | None:
    """Mean, p50 and p95 of the server's TTFT histogram over the window, every named process together."""
    series = _by_process(doc, histogram, urls)
    if not names or any(n not in series for n in names):
        return None
    total = count = 0.0
    buckets: dict[float, float] = {}
    for n in names:
        for s in series[n]:
            total += s["stats"].get("sum") or 0.0
            count += s["stats"].get("count") or 0
            for le, c in (s.get("buckets") or {}).items():
                buckets[float(le)] = buckets.get(float(le), 0.0) + c
    if not count:
        return None
    return {
        "mean": total / count,
        "p50": metrics.histogram_quantile({}, buckets, 0.50) if buckets else None,
        "p95": metrics.histogram_quantile({}, buckets, 0.95) if buckets else None,
    }


def warmup_requests(records: list[dict] | None) -> int | None:
    """How many warm-up requests aiperf sent (its per-request export marks each request's phase)."""
    if records is None:
        return None
    return sum(1 for r in records if (r.get("metadata") or {}).get("benchmark_phase", "profiling") != "profiling")


def apply(plan: Plan, doc: dict | None, urls: dict[str, str], figs: dict, why: dict, warm_n: int | None) -> dict:
    """Make the scraped figures the profiling window's; the ``counting`` notes of what each covers.
    ``urls``: metrics URL -> process (engines and frontends); ``warm_n``: the warm-up requests sent."""
    doc, notes = doc or {}, {}
    scraped = "the driver's scrapes before and after aiperf" + (": warm-up included" if plan.benchmark.warmup else "")
    serving = [p for p in plan.processes if p.is_engine and not p.headless]
    roles = [[p.name for p in serving if p.role == role] for role in dict.fromkeys(p.role for p in serving)]
    counter = plan.server_metrics["worker_requests"]
    for key, metric, labels, groups in [
        ("requests_per_worker", counter["metric"], counter["labels"], roles),
        (
            "requests_per_frontend",
            "dynamo_frontend_requests_total",
            {},
            [list(plan.frontends)] if plan.frontends else [],
        ),
    ]:
        if groups:
            counts, how = _counts(doc, urls, figs[key], (metric, labels), groups, (bool(plan.benchmark.warmup), warm_n))
            figs[key] = counts if counts is not None else figs[key]
            notes[key] = f"{metric}, {how or scraped}"
    _window_ttft(plan, doc, urls, figs, why, notes, scraped)
    _window_cache(plan, doc, urls, figs, notes, scraped)
    return notes


def _counts(doc: dict, urls: dict, scraped: dict, counter: tuple, groups: list, warm: tuple) -> tuple:
    """(counts, how): the scrapes around aiperf less its warm-up requests (their total exact: each
    group, a role or the frontends, sees every request once; split as aiperf's warm-up counters saw
    them), else aiperf's profiling window (its edges a scrape interval wide), else (None, None).
    ``warm``: (whether the plan runs a warm-up, how many warm-up requests aiperf's export lists)."""
    ran_warmup, warm_n = warm
    names = [n for g in groups for n in g]
    if not ran_warmup and all(scraped.get(n) is not None for n in names):
        return dict(scraped), "the driver's scrapes before and after aiperf (no warm-up ran)"
    during = _by_process({"metrics": doc.get("warmup_metrics") or {}}, counter[0], urls, counter[1])
    seen = {n: sum(s["stats"].get("total") or 0.0 for s in during.get(n, [])) for n in names}
    split = all(len(g) == 1 or sum(seen[n] for n in g) > 0 for g in groups)  # how each group's share is known
    if warm_n and split and all(scraped.get(n) is not None for n in names):
        out = {}
        for group in groups:
            out |= _less(scraped, {n: seen[n] or (1.0 if len(group) == 1 else 0.0) for n in group}, warm_n)
        return out, f"the driver's scrapes around aiperf less the {warm_n} warm-up requests it sent (warm-up excluded)"
    window = _totals(doc, counter[0], urls, names, counter[1])
    return ({n: int(v) for n, v in window.items()}, WINDOW) if window is not None else (None, None)


def _less(scraped: dict, seen: dict, take: int) -> dict:
    """Each process's scraped count less its share of ``take`` warm-up requests (largest remainder)."""
    total = sum(seen.values())
    exact = {n: take * v / total if total else 0.0 for n, v in seen.items()}
    share = {n: int(v) for n, v in exact.items()}
    for n in sorted(exact, key=lambda n: exact[n] - share[n], reverse=True)[: take - sum(share.values())]:
        share[n] += 1
    return {n: max(0, int(scraped[n]) - share[n]) for n in seen}


def _window_ttft(plan: Plan, doc: dict, urls: dict, figs: dict, why: dict, notes: dict, scraped: str) -> None:
    ttft = plan.server_metrics["ttft"]
    names = list(plan.frontends) if ttft["source"] == "frontends" else [
        p.name for p in plan.processes if p.is_engine and not p.headless]  # fmt: skip
    server = _ttft(doc, ttft["histogram"], urls, names)
    if server is not None:
        figs["server_ttft_s"] = server
    notes["server_ttft_s"] = f"{ttft['histogram']} of the {ttft['source']}, {WINDOW if server else scraped}"
    client, mean = figs.get("client_ttft_mean_s"), figs["server_ttft_s"]["mean"]
    if server is None and plan.benchmark.warmup:  # a server TTFT over warm-up and benchmark: no gap
        figs["ttft_gap_s"] = None
        why["ttft_gap_s"] = "the server TTFT could be taken only with the warm-up included: not comparable"
    elif client is not None and mean is not None:
        figs["ttft_gap_s"] = client - mean
        why.pop("ttft_gap_s", None)


def _window_cache(plan: Plan, doc: dict, urls: dict, figs: dict, notes: dict, scraped: str) -> None:
    cache = plan.server_metrics["prefix_cache"]
    disagg = plan.topology["kind"] == "disaggregated" and "prefill_prefix_cache" in plan.server_metrics
    if disagg:
        cache, names = (
            plan.server_metrics["prefill_prefix_cache"],
            [p.name for p in plan.processes if p.role == "prefill"],
        )
    elif cache:
        names = list(plan.frontends) if cache["source"] == "frontends" else [
            p.name for p in plan.processes if p.is_engine and not p.headless]  # fmt: skip
    if not cache:
        return
    hits, queries = (_totals(doc, cache[k], urls, names) for k in ("hits", "queries"))
    if hits is not None and queries is not None and sum(queries.values()):
        figs["cache_read_share"] = sum(hits.values()) / sum(queries.values())
        notes["cache_read_share"] = f"{cache['hits']} / {cache['queries']}, {WINDOW}"
    elif figs.get("cache_read_share") is not None:
        notes["cache_read_share"] = f"{cache['hits']} / {cache['queries']}, {scraped}"


def frontend_urls(plan: Plan, ctx) -> dict[str, str]:
    """Metrics URL -> frontend: aiperf scrapes them with the engines, so their counters have a window too."""
    return {ctx.url(plan.process(f).metrics_url, f): f for f in plan.frontends if plan.process(f).metrics_url}
