"""The summary's accuracy table: each selected recipe's evals (results/<recipe>/eval-<benchmark>.json),
score ± standard error; against a baseline results folder, a drop larger than the run's standard
error is flagged."""

from __future__ import annotations

import sys
from pathlib import Path

from tabulate import tabulate

from ..contract import paths
from ..fileio.yamlio import checked_json

HEADERS = ["recipe", "benchmark", "tasks", "score", "± stderr", "correct / total", "unparsed", "baseline", ""]


def load_evals(files: list[Path]) -> list[dict]:
    """Every readable eval file; one that fails its schema is named on stderr and left out."""
    out = []
    for p in files:
        doc, why = checked_json(Path(p), "eval.schema.yaml")
        if doc is None:
            print(f"servesweep: {p}: left out of the accuracy table: {why}", file=sys.stderr)
            continue
        out.append(doc)
    return out


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def drop_flag(doc: dict, base: dict | None) -> str:
    if base is None or base["score"] is None or doc["score"] is None:
        return ""
    drop = base["score"] - doc["score"]
    return f"⚠ down {100 * drop:.1f} points (> stderr)" if drop > (doc["stderr"] or 0) else ""


def _baseline_eval(baseline: Path, recipe: str, benchmark: str) -> dict | None:
    """The same eval in a baseline results folder (laid out as results/), if there and readable."""
    path = baseline / Path(paths.eval_file(recipe, benchmark)).relative_to(paths.RESULTS)
    found = load_evals([path]) if path.exists() else []
    return found[0] if found else None


def score_cell(doc: dict) -> str:
    """'75.0 %', or why there is no score: 'no gradable answers (12 unparsed)'."""
    if doc["score"] is None:
        return f"no gradable answers ({doc['unparsed']} unparsed)" if doc["total"] else "no questions graded"
    return _pct(doc["score"])


def floor_flag(doc: dict, floor: float | None) -> str:
    if floor is None or doc["score"] is None or doc["score"] >= floor:
        return ""
    return f"⚠ below its floor {100 * floor:.1f} %"


def accuracy_blocks(docs: list[dict], floors: dict, baseline: Path | None = None) -> dict[str, str]:
    """recipe -> why its accuracy forbids naming its stack best: no gradable answers, a score below the
    recipe's floor (evals.<benchmark>.floor), or a drop from its baseline larger than the stderr."""
    out: dict[str, str] = {}
    for d in docs:
        recipe, benchmark = d["identity"]["recipe"], d["eval"]["benchmark"]
        base = _baseline_eval(baseline, recipe, benchmark) if baseline is not None else None
        floor = (floors.get(recipe) or {}).get(benchmark)
        flags = [score_cell(d)] if d["score"] is None else [floor_flag(d, floor), drop_flag(d, base)]
        why = "; ".join(f for f in flags if f)
        if why:
            out[recipe] = "; ".join(x for x in (out.get(recipe), f"{benchmark}: {why}") if x)
    return out


def accuracy_section(docs: list[dict], baseline: Path | None, floors: dict | None = None) -> list[str]:
    if not docs:
        return []
    rows, notes = [], []
    for d in sorted(docs, key=lambda d: (d["identity"]["recipe"], d["eval"]["benchmark"])):
        recipe, benchmark = d["identity"]["recipe"], d["eval"]["benchmark"]
        base = _baseline_eval(baseline, recipe, benchmark) if baseline is not None else None
        floor = ((floors or {}).get(recipe) or {}).get(benchmark)
        tasks = ", ".join(d["eval"]["tasks"] or ["all"])
        flags = " ".join(f for f in (floor_flag(d, floor), drop_flag(d, base)) if f)
        rows.append([recipe, benchmark, tasks, score_cell(d), _pct(d["stderr"]), f"{d['correct']} / {d['total']}",
                     str(d["unparsed"]), _pct(base["score"]) if base else "–", flags])  # fmt: skip
        notes += [f"- {recipe} {benchmark}: aiperf warned: {w}" for w in d.get("warnings") or []]
    table = tabulate(rows, HEADERS, tablefmt="github", disable_numparse=True)
    head = ["", "## Accuracy (aiperf accuracy mode, on each recipe's stack)", "", table]
    return head + ([""] + notes if notes else [])
