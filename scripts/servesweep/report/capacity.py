"""results/<recipe>/capacity.json and the summary's capacity table (the search is ``..search``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tabulate import tabulate

from ..capacity.search import Bounds, decide, probe_met
from ..capacity.slo import slo_verdicts
from ..contract import paths
from ..contract.figures import BY_NAME, gpu_hours
from ..fileio.encode import canonical
from ..fileio.errors import InputError, Problem
from ..fileio.files import write_if_changed
from ..fileio.yamlio import checked_json
from .capacity_plot import capacity_plot
from .diagnosis import lowest_miss_line
from .fmt import num

SCHEMA = "servesweep.capacity/1"
TABLE = {"tablefmt": "github", "disable_numparse": True}


def _probe_row(path: str, doc: dict, slo: dict) -> dict:
    f, ident = doc["figures"], doc["identity"]
    verdict = slo_verdicts(slo, f)
    return {
        "concurrency": ident.get("point", ident["concurrency"]),
        "met": bool(verdict["met"]),
        "stopped": stop if isinstance(stop := probe_met(doc, slo), str) else None,  # its marks: cannot decide
        "verdicts": verdict["verdicts"],
        "result": path,
        "plan_fingerprint": ident["plan_fingerprint"],
        "end_time": ident["end_time"],
        **{k: BY_NAME[k].of(f) for k in ("total_tps_per_gpu", "output_tps_per_gpu", "req_s")},
        "gpu_hours": _gpu_hours(doc),
    }


def _gpu_hours(doc: dict) -> float | None:
    """What the probe cost: its benchmark, plus its stack's startup if it started the stack, × GPUs."""
    ident, bench = doc["identity"], doc.get("timings_s", {}).get("bench")
    if bench is None:
        return None
    stack = ident.get("stack") or {}
    startup = (stack.get("startup_s") or 0.0) if stack.get("position") == 1 else 0.0
    return gpu_hours(ident["topology"]["gpus"], bench + startup)


def capacity_doc(settings: dict, results: list[str]) -> dict:
    """capacity.json from the search settings and the probes' results; refuses an undecided search."""
    bounds, slo = Bounds.of(settings["bounds"]), settings["slo"]
    rows = []
    for path in results:
        doc, why = checked_json(path, paths.RESULT_SCHEMA_FILE)
        if doc is None:
            raise InputError([Problem(path, "", f"a probe's result is unusable: {why}; delete it to rerun the probe")])
        if doc["identity"]["recipe"] != settings["recipe"]:
            raise InputError([Problem(path, "identity.recipe", f"not a result of {settings['recipe']}")])
        rows.append(_probe_row(path, doc, slo))
    rows = sorted((r for r in rows if r["concurrency"] in bounds), key=lambda r: r["concurrency"])
    d = decide(bounds, {r["concurrency"]: r["stopped"] or r["met"] for r in rows})
    if not d.done:
        raise InputError([Problem(settings["source"], "capacity", f"undecided: probe c{d.next} has no result")])
    at = next((r for r in rows if r["concurrency"] == d.held), None)
    return {
        "schema": SCHEMA,
        "recipe": settings["recipe"],
        "scenario": settings["scenario"],
        "cluster": settings["cluster"],
        "slo": slo,
        "bounds": bounds.to_json(),
        "capacity": d.held,
        "lowest_miss": d.missed,
        "outcome": d.outcome,
        "at_capacity": None if at is None else {k: at[k] for k in ("total_tps_per_gpu", "output_tps_per_gpu", "req_s")},
        "probes": rows,
        "met_above_first_miss": list(d.ignored),
    }


def write_capacity(settings_path: Path, results: list[str], out: Path, plot: Path | None = None) -> dict:
    """capacity.json (and its plot, written first: the JSON is what Snakemake checks)."""
    doc = capacity_doc(json.loads(settings_path.read_text()), results)
    if plot is not None:
        capacity_plot(doc, plot)
    write_if_changed(out, canonical(doc))
    return doc


def load_capacities(paths: list[Path]) -> list[dict]:
    """Every readable capacity.json; one that fails its schema is named on stderr and left out."""
    out = []
    for p in paths:
        doc, why = checked_json(p, "capacity.schema.yaml")
        if doc is None:
            print(f"servesweep: {p}: left out of the capacity table: {why}", file=sys.stderr)
            continue
        out.append(doc | {"path": str(p)})
    return out


def _slo_text(slo: dict) -> str:
    return ", ".join(f"{k} ≤ {v:g}" for k, v in sorted(slo.items()))


def _conc(c) -> str:
    return "–" if c is None else f"c{c}"


def capacity_rows(docs: list[dict]) -> list[list[str]]:
    rows = []
    for d in sorted(docs, key=lambda d: (d["scenario"], d["recipe"])):
        at = d["at_capacity"] or {}
        rows.append(
            [
                d["scenario"],
                d["recipe"],
                _slo_text(d["slo"]),
                _conc(d["capacity"]),
                _conc(d["lowest_miss"]),
                d["outcome"],
                num(at.get("total_tps_per_gpu")),
                num(at.get("req_s"), 2),
                f"{len(d['probes'])} ({' '.join(_conc(p['concurrency']) for p in d['probes'])})",
                _probe_cost(d["probes"]),
                lowest_miss_line(d),  # energy's hook: what the lowest miss ran out of (report/diagnosis)
            ]
        )
    return rows


CAPACITY_HEADERS = [
    "scenario",
    "recipe",
    "SLO",
    "capacity",
    "lowest miss",
    "outcome",
    "total tok/s/GPU at capacity",
    "req/s at capacity",
    "probes",
    "GPU-h of the probes",
    "lowest miss ran out of",
]


def _probe_cost(probes: list[dict]) -> str:
    hours = [p.get("gpu_hours") for p in probes]
    return "–" if any(h is None for h in hours) else num(sum(hours), 3)


def capacity_deltas(docs: list[dict], base: list[dict]) -> list[list[str]]:
    """Capacity and tok/s/GPU at capacity against a baseline's, recipe by recipe. A capacity move no
    wider than either search's tolerance is not a change; a different SLO is said, not compared."""
    old = {d["recipe"]: d for d in base}
    rows = []
    for d in sorted(docs, key=lambda d: d["recipe"]):
        b = old.get(d["recipe"])
        if b is None:
            continue
        if b["slo"] != d["slo"]:
            rows.append([d["recipe"], _conc(b["capacity"]), _conc(d["capacity"]), "SLO changed: not compared", "–"])
            continue
        rows.append([d["recipe"], _conc(b["capacity"]), _conc(d["capacity"]), _capacity_move(d, b), _tps_move(d, b)])
    return rows


def _capacity_move(d: dict, b: dict) -> str:
    new, old = d["capacity"], b["capacity"]
    if new is None or old is None:
        return "–" if new == old else ("▼ lost" if new is None else "▲ gained")
    tol = max(d["bounds"]["tolerance"], b["bounds"]["tolerance"])
    mark = "≈ within tolerance" if abs(new - old) <= tol else ("▲ better" if new > old else "▼ worse")
    return f"{new - old:+d} ({(new - old) / old:+.0%}) {mark}"


def _tps_move(d: dict, b: dict) -> str:
    new = (d["at_capacity"] or {}).get("total_tps_per_gpu")
    old = (b["at_capacity"] or {}).get("total_tps_per_gpu")
    if not new or not old:
        return "–"
    return f"{(new - old) / old:+.1%}"


def capacity_section(docs: list[dict], base: list[dict] | None) -> list[str]:
    if not docs:
        return []
    parts = ["", "## Capacity at SLO", "", tabulate(capacity_rows(docs), CAPACITY_HEADERS, **TABLE)]
    for d in sorted(docs, key=lambda d: d["recipe"]):
        parts += ["", f"![capacity of {d['recipe']}]({d['recipe']}/{paths.CAPACITY_PLOT_FILE})"]
    if base is not None:
        rows = capacity_deltas(docs, base)
        headers = ["recipe", "baseline capacity", "capacity", "change", "total tok/s/GPU at capacity"]
        parts += ["", "### Capacity against the baseline", ""]
        parts.append(tabulate(rows, headers, **TABLE) if rows else "_No capacity in common with the baseline._")
    return parts
