"""results/summary.md (+ .csv, plots): which setup is best at which load, and did it meet its SLO."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pandas as pd
from tabulate import tabulate

from ..capacity.slo import slo_verdicts
from ..contract import figures, paths
from ..contract.marks import marks_of
from ..fileio.files import write_if_changed
from ..fileio.yamlio import checked_json
from .accuracy import accuracy_blocks, accuracy_section, load_evals
from .attribution import attribution_section
from .best import best_per_concurrency, best_section  # noqa: F401 - best_per_concurrency: re-exported
from .capacity import capacity_section, load_capacities
from .diagnosis import diagnose
from .energy import columns as energy_columns
from .fmt import num
from .gpu_time import bill_section, gpu_time_section, read_bill
from .missing import missing_points
from .plots import plots
from .profiles import profiles_section
from .tuning import tuning_section

NOISE_BAND = figures.NOISE_BAND  # the one declared band: contract/figures


def flatten(doc: dict, path: str, slo: dict) -> dict:
    i, f = doc["identity"], doc["figures"]
    workers = {k: v for k, v in f["requests_per_worker"].items() if v is not None}
    verdict = slo_verdicts(slo, f)
    miss = [v for v in verdict["verdicts"] if not v["met"]]
    return {
        "scenario": i["scenario"],
        "recipe": i["recipe"],
        "concurrency": i.get("point", i["concurrency"]),
        "cluster": i["cluster"],
        "engine": i["recipe_engine"],
        "image": i["image"],
        "gpus": i["topology"]["gpus"],
        "nodes": i["topology"]["nodes"],
        "plan_fingerprint": i["plan_fingerprint"],
        "curve_fingerprint": i["curve_fingerprint"],
        "start_time": i["start_time"],
        "end_time": i["end_time"],
        "job_id": i["job_id"],
        "request_plane_tls": i.get("request_plane_tls"),
        **figures.flat(f),
        "total_tps_per_gpu": _total_per_gpu(f, i["topology"]["gpus"]),
        **_trust_columns(doc),
        "cache_read_unmeasured": (doc.get("unmeasured") or {}).get("cache_read_share"),
        "theoretical_prefix_hit": f.get("theoretical_prefix_hit"),
        "requests": f["requests_completed"],
        "errors": f["requests_errored"],
        "cancelled": f.get("requests_cancelled", 0),
        "batch": _batch_cell(f.get("batch_by_role"), f.get("preemptions")),
        "workers": len(workers),
        "worker_requests": json.dumps(workers, sort_keys=True),
        "worker_min": min(workers.values()) if workers else None,
        "worker_max": max(workers.values()) if workers else None,
        "stack_id": i["stack"]["id"],
        "stack_position": i["stack"]["position"],
        "startup_s": i["stack"]["startup_s"],
        "caches_reset": i["stack"].get("caches_reset"),
        "linger_s": i["stack"].get("linger_s", 0.0),
        "bench_s": doc["timings_s"].get("bench"),
        "slo_met": verdict["met"],
        "logs_note": _logs_note(doc.get("logs")),
        "diagnosis": diagnose(doc).line,  # energy's hook: what the point ran out of (report/diagnosis)
        **energy_columns(doc),  # energy's hook: GPU power and energy (report/energy)
        "slo_missed": "; ".join(_missed(v) for v in miss),
        "result": path,
        **_half_widths(f.get("repeats")),
    }


def _missed(v: dict) -> str:
    if v["value"] is None:  # unmeasured (a marked point's client-timed figure): not a value over the limit
        return f"{v['slo']} not measured"
    return f"{v['slo']} {_g(v['value'])} > {_g(v['limit'])}"


def _trust_columns(doc: dict) -> dict:
    """The point's marks (run/trust), the client settings it is compared under, and its figures on a
    cluster whose GPUs are virtual (no per-GPU figure: the ranked throughput is the stack's)."""
    f, i = doc["figures"], doc["identity"]
    cluster = ((doc.get("source") or {}).get("cluster") or {}).get("doc") or {}
    virtual = cluster.get("gpu_type") == "virtual"
    per_gpu = _total_per_gpu(f, i["topology"]["gpus"])
    settings = i.get("client_settings")  # None in results written before it: compared with any
    marks = marks_of(doc)
    out = {
        "marks": "; ".join(m["reason"] for m in marks),
        "mark_kinds": ", ".join(dict.fromkeys(m["mark"] for m in marks)),
        "client_settings": None if settings is None else json.dumps(settings, sort_keys=True),
        "virtual_gpus": virtual,
        "rank_tps": f.get("total_tps") if virtual else per_gpu,
        "silences": json.dumps(doc.get("silences") or []),
    }
    if virtual:
        out |= {"total_tps_per_gpu": None, "output_tps_per_gpu": None}
    return out


def _logs_note(logs: dict | None) -> str:
    """'' for clean logs; else what the stack's logs hold or miss (such a point is never the best)."""
    if not logs or logs["clean"]:
        return ""
    parts = [f"{n} {what}" for what, n in (("traceback(s)", logs["tracebacks"]), ("fatal", logs["fatal"])) if n]
    parts += [f"missing '{m}'" for m in logs["missing"]]
    return "⚠ logs: " + ", ".join(parts)


def _half_widths(repeats: dict | None) -> dict:
    """``<figure>_hw``: half the confidence interval of a figure measured over repeats."""
    hw = (repeats or {}).get("half_width") or {}
    return {f"{fig.name}_hw": figures.half_width(hw, fig.name) for fig in figures.COMPARED}


def _total_per_gpu(f: dict, gpus: int):
    """Results from before the figure existed: derived the same way the run computes it."""
    if "total_tps_per_gpu" in f:
        return f["total_tps_per_gpu"]
    return figures.per_gpu(f, gpus)["total_tps_per_gpu"]


def _batch_cell(batch: dict | None, preemptions: int | None) -> str:
    """'decode 32.5 / 48 · 0 preempt.': each role's batch mean / p99, then preemptions."""
    roles = " ".join(f"{role} {v['mean']:.1f} / {v['p99']:.0f}" for role, v in (batch or {}).items()) or "–"
    return f"{roles} · {'–' if preemptions is None else preemptions} preempt."


def _image(x) -> str:
    return x if isinstance(x, str) and x else "(local venv)"


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def load_results(files: list[Path], slos: dict, unreadable: list | None = None) -> pd.DataFrame:
    """One row per result; SLO verdicts against ``slos`` (recipe -> its current SLO). A file that is
    not a valid result is left out, named with its reason in ``unreadable`` and on stderr."""
    rows = []
    for p in files:
        doc, why = checked_json(p, paths.RESULT_SCHEMA_FILE)
        if doc is None:
            print(f"servesweep: {p}: left out of the summary: {why}", file=sys.stderr)
            (unreadable if unreadable is not None else []).append([str(p), why])
            continue
        rows.append(flatten(doc, str(p), slos.get(doc["identity"]["recipe"]) or {}))
    return pd.DataFrame(rows)


def _sec(x) -> str:
    return num(x, 2)


def _share(x) -> str:
    return "–" if x is None or pd.isna(x) else f"{x:.1%}"


def _pm(value, hw, digits: int = 0) -> str:
    """'17 078 ± 412' where the point was measured with repeats."""
    if hw is None or pd.isna(hw) or value is None or pd.isna(value):
        return num(value, digits)
    return f"{num(value, digits)} ± {num(hw, digits)}"


def _worker_cell(row) -> str:
    workers = json.loads(row.worker_requests)
    if not workers:
        return "–"
    lo, hi = row.worker_min, row.worker_max
    balance = f"max/min {hi / lo:.2f}" if lo else "max/min ∞"
    if len(workers) <= 4:
        return " / ".join(num(v) for v in workers.values()) + f" ({balance})"
    return f"{num(lo)}–{num(hi)} over {len(workers)} ({balance})"


def _verdict(row) -> str:
    if row.slo_met is None or (isinstance(row.slo_met, float) and math.isnan(row.slo_met)):
        verdict = "no SLO"
    else:
        verdict = "✓" if row.slo_met else f"✗ {row.slo_missed}"
    return f"{verdict} {row.logs_note}" if row.logs_note else verdict


def scenario_table(df: pd.DataFrame, md_dir: Path) -> str:
    """The scenario's points; an unmeasured prefix hit shows as '–' with a numbered footnote."""
    rows, notes = [], {}
    for r in df.sort_values(["recipe", "concurrency"]).itertuples():
        actual = _share(r.cache_read_share)
        if actual == "–" and isinstance(r.cache_read_unmeasured, str):
            actual += f" [{notes.setdefault('prefix hit not measured: ' + r.cache_read_unmeasured, len(notes) + 1)}]"
        verdict = _verdict(r)
        if r.marks:  # its client-timed figures are '–', it is not ranked: say why once, below the table
            verdict = f"⚠ {r.mark_kinds} [{notes.setdefault(r.marks, len(notes) + 1)}] · {verdict}"
        link = os.path.relpath(r.result, md_dir)
        rows.append(
            [
                f"[{r.recipe}]({link})",
                r.concurrency,
                _pm(r.req_s, r.req_s_hw, 2),
                " / ".join(_sec(getattr(r, f"ttft_{q}_s")) for q in ("p50", "p90", "p95", "p99")),
                f"{num(r.itl_p50_ms, 1)} / {num(r.itl_p99_ms, 1)}",
                _pm(r.total_tps_per_gpu, r.total_tps_per_gpu_hw),
                num(r.output_tps_per_gpu),
                num(r.output_tps),
                num(r.acceptance_length),
                f"{actual} / {_share(r.theoretical_prefix_hit)}",
                _worker_cell(r),
                r.batch,
                f"{num(r.requests)} / {num(r.cancelled)} / {num(r.errors)}",
                r.energy_cell,
                r.diagnosis,
                verdict,
            ]
        )
    headers = [
        "recipe",
        "conc",
        figures.label("req_s"),
        figures.joined(("ttft_p50_s", "ttft_p90_s", "ttft_p95_s", "ttft_p99_s")),
        figures.joined(("itl_p50_ms", "itl_p99_ms")),
        *(figures.label(n) for n in ("total_tps_per_gpu", "output_tps_per_gpu", "output_tps", "acceptance_length")),
        "prefix hit actual / theoretical",
        "requests per worker",
        "batch mean / p99 · preemptions",
        "ok / cancelled at grace / errors",
        "GPU power · energy per output token · tokens per joule · idle",
        "what it ran out of",
        "SLO",
    ]
    table = tabulate(rows, headers, tablefmt="github", disable_numparse=True)
    footnotes = [f"[{n}] {why}" for why, n in notes.items()]
    if df["virtual_gpus"].any():
        footnotes.append("Per-GPU figures are '–': this cluster's GPUs are virtual (`gpu_type: virtual`).")
    return "\n\n".join([table, *footnotes, *_tls_note(df)])


def _tls_note(df: pd.DataFrame) -> list[str]:
    """Rows that ran the request plane with and without mutual TLS measure different stacks: say so."""
    tls = df.dropna(subset=["request_plane_tls"]).groupby("request_plane_tls")["recipe"].unique()
    if len(tls) < 2:
        return []
    on, off = ", ".join(sorted(tls.get(True, []))), ", ".join(sorted(tls.get(False, [])))
    return [f"Request-plane TLS differs between these rows: on for {on}; off for {off}."]


def _noise(hw_new, hw_old, old: float) -> float:
    """How far two values may differ by noise alone: the sum of their confidence half-widths when
    both were measured with repeats, else NOISE_BAND of the baseline."""
    if all(h is not None and not pd.isna(h) for h in (hw_new, hw_old)):
        return hw_new + hw_old
    return NOISE_BAND * abs(old)


def baseline_table(df: pd.DataFrame, base: pd.DataFrame) -> str:
    merged = df.merge(base, on=["recipe", "concurrency"], suffixes=("", "_base"))
    if merged.empty:
        return "_No point in common with the baseline._"
    rows = []
    for r in merged.sort_values(["recipe", "concurrency"]).itertuples():
        cells = [r.recipe, r.concurrency]
        for fig, higher in ((f.name, f.higher_is_better) for f in figures.COMPARED):
            new, old = getattr(r, fig), getattr(r, f"{fig}_base")
            if new is None or old is None or pd.isna(new) or pd.isna(old) or old == 0:
                cells.append("–")
                continue
            pct = (new - old) / abs(old) * 100
            better = (pct > 0) == higher
            noise = _noise(getattr(r, f"{fig}_hw", None), getattr(r, f"{fig}_hw_base", None), old)
            mark = " ≈ within noise" if abs(new - old) <= noise else (" ▲ better" if better else " ▼ worse")
            cells.append(f"{pct:+.1f}%{mark}")
        rows.append(cells)
    headers = ["recipe", "conc"] + [f.heading for f in figures.COMPARED]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _not_drawn(sdf: pd.DataFrame) -> list[str]:
    """Marked points are left off the plots (run/trust): name them, so nothing is silently missing."""
    marked = sdf[sdf["marks"] != ""].sort_values(["recipe", "concurrency"])
    if marked.empty:
        return []
    names = "; ".join(f"{r.recipe} c{r.concurrency} ({r.mark_kinds})" for r in marked.itertuples())
    return ["", f"Not drawn as measured: {names}."]


def _served(df: pd.DataFrame, caps: list[dict], slos: dict) -> pd.DataFrame:
    """Every point the stacks served: the selected ones and the capacity searches' other probes."""
    probes = sorted({p["result"] for c in caps for p in c["probes"]} - set(df["result"]))
    probes = [Path(p) for p in probes if Path(p).is_file()]
    return pd.concat([df, load_results(probes, slos)], ignore_index=True) if probes else df


def _checks(evals_docs: list[dict]) -> dict:
    """stack id -> the seconds of each eval it ran (eval files before their timings are left out)."""
    out: dict = {}
    for d in evals_docs:
        if (d.get("timings_s") or {}).get("bench") is not None:
            out.setdefault(d["identity"]["stack"], []).append(d["timings_s"]["bench"])
    return out


def _provenance_section(df: pd.DataFrame) -> list[str]:
    prov = []
    for recipe, rdf in df.groupby("recipe"):
        written = f"{rdf['end_time'].min()} … {rdf['end_time'].max()}"
        prints = ", ".join(sorted(set(rdf["plan_fingerprint"])))
        prov.append([recipe, _image(rdf["image"].iloc[0]), prints, written])
    headers = ["recipe", "image", "plan fingerprints", "results written"]
    return ["", "## Provenance", "", tabulate(prov, headers, tablefmt="github", disable_numparse=True)]


def _by_point(df: pd.DataFrame) -> dict:
    return {(r.recipe, int(r.concurrency)): r.result for r in df.itertuples()}


def build_summary(
    results: list[Path],
    selection: Path,
    out_md: Path,
    baseline: Path | None = None,
    capacities: list[Path] = (),
    evals: list[Path] = (),
) -> None:
    sel = json.loads(Path(selection).read_text())
    root = Path.cwd()
    md_dir = out_md.parent
    (md_dir / "plots").mkdir(parents=True, exist_ok=True)  # a declared output, also with no result
    slos = sel["slo"]
    unreadable: list = []
    df = load_results(results, slos, unreadable)
    evals_docs = load_evals(list(evals))
    parts = [f"# servesweep summary: cluster `{sel['cluster']}`", ""]
    parts.append(f"{len(df)} of {len(sel['points'])} selected points have a result.")
    missing = missing_points(sel, set(df["result"]) if len(df) else set(), root)
    if len(df):
        made = plots(df, md_dir / "plots", slos)
        for scen, sdf in df.groupby("scenario"):
            parts += ["", f"## Scenario `{scen}`", "", scenario_table(sdf, md_dir), ""]
            parts += [f"![{f}](plots/{f})" for f in made.get(scen, [])]
            parts += _not_drawn(sdf)
        base_dir = Path(baseline) if baseline else None
        parts += best_section(df, accuracy_blocks(evals_docs, sel.get("eval_floors") or {}, base_dir))
    base_caps = load_capacities(sorted(Path(baseline).glob(f"*/{paths.CAPACITY_FILE}"))) if baseline else None
    caps = load_capacities(list(capacities))
    parts += capacity_section(caps, base_caps)
    parts += tuning_section(df, sel.get("sweeps") or {}, caps, md_dir / "plots", root)
    parts += accuracy_section(evals_docs, Path(baseline) if baseline else None, sel.get("eval_floors") or {})
    parts += profiles_section([p["recipe"] for p in sel["points"]], root, md_dir)  # links, never inputs
    if unreadable:
        parts += ["", "## Unreadable results (left out; they rerun on the next run)", ""]
        parts.append(tabulate(unreadable, ["file", "why"], tablefmt="github", disable_numparse=True))
    parts += ["", "## Missing points", ""]
    if missing:
        parts.append(tabulate(missing, ["recipe", "conc", "reason", "logs"], tablefmt="github", disable_numparse=True))
    else:
        parts.append("None: every selected point has a result.")
    if baseline:
        base_files = [p for _, p in paths.point_files(baseline, every_recipe=True)]
        base = load_results(base_files, slos) if base_files else pd.DataFrame()
        parts += ["", f"## Against baseline `{baseline}`", ""]
        parts.append(baseline_table(df, base) if len(base) and len(df) else "_Baseline has no results._")
        if len(base) and len(df):
            parts += attribution_section(_by_point(df), _by_point(base))
    if len(df):
        parts += gpu_time_section(_served(df, caps, slos), _checks(evals_docs))
        parts += bill_section(df, read_bill(root / paths.bill_file(sel["cluster"])))
        parts += _provenance_section(df)
    csv = out_md.with_suffix(".csv")
    write_if_changed(csv, df.to_csv(index=False) if len(df) else "")
    write_if_changed(out_md, "\n".join(parts) + "\n")
    print(f"summary: {out_md} ({len(df)} points, {len(missing)} missing)")
