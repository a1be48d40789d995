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


def accuracy_section(docs: list[dict], baseline: Path | None) -> list[str]:
    if not docs:
        return []
    rows = []
    for d in sorted(docs, key=lambda d: (d["identity"]["recipe"], d["eval"]["benchmark"])):
        recipe, benchmark = d["identity"]["recipe"], d["eval"]["benchmark"]
        base = _baseline_eval(baseline, recipe, benchmark) if baseline is not None else None
        tasks = ", ".join(d["eval"]["tasks"] or ["all"])
        rows.append([recipe, benchmark, tasks, _pct(d["score"]), _pct(d["stderr"]), f"{d['correct']} / {d['total']}",
                     str(d["unparsed"]), _pct(base["score"]) if base else "–", drop_flag(d, base)])  # fmt: skip
    table = tabulate(rows, HEADERS, tablefmt="github", disable_numparse=True)
    return ["", "## Accuracy (aiperf accuracy mode, on each recipe's stack)", "", table]
