"""Two API smoke files row by row (``servesweep diff A B`` when both are smoke files): which rows
differ and in which fields, as seed 000 compared Dynamo with `vllm serve`. The error text of a
refused request is shown, not compared (each server words its own)."""

from __future__ import annotations

import json
from pathlib import Path

from ..fileio.errors import InputError, Problem
from ..fileio.yamlio import checked_json

COMPARED = ("status", "ok", "content", "reasoning", "tool_calls", "finish_reason", "usage")
SHOWN = 80  # characters of a differing value


def is_smoke(path: Path) -> bool:
    try:
        doc = json.loads(Path(path).read_text(errors="replace"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and str(doc.get("schema", "")).startswith("servesweep.smoke/")


def load(path: Path) -> dict:
    doc, why = checked_json(path, "smoke.schema.yaml")
    if doc is None:
        raise InputError([Problem(str(path), "", f"not a usable smoke file: {why}")])
    return doc


def diff_lines(a: dict, b: dict, labels: tuple[str, str]) -> tuple[list[str], bool]:
    """(lines, every row equal)."""
    left, right = ({r["id"]: r for r in d["rows"]} for d in (a, b))
    ia, ib = a["identity"], b["identity"]
    lines = [f"{labels[0]}: {ia['recipe']} ({ia['engine']}); {labels[1]}: {ib['recipe']} ({ib['engine']})"]
    if ia["request_set"] != ib["request_set"]:
        lines.append("the request sets differ (edited between the two runs): rows may not be comparable")
    equal = 0
    for rid in dict.fromkeys([*left, *right]):
        if rid not in left or rid not in right:
            lines.append(f"{rid}: only in {labels[0] if rid in left else labels[1]}")
            continue
        fields = [f for f in COMPARED if left[rid].get(f) != right[rid].get(f)]
        if not fields:
            equal += 1
            continue
        lines.append(f"{rid}: differs in {', '.join(fields)}")
        for f in fields:
            lines.append(f"    {f}: {_shown(left[rid].get(f))} | {_shown(right[rid].get(f))}")
        if "status" in fields:
            for side, row in zip(labels, (left[rid], right[rid]), strict=True):
                if row.get("error"):
                    lines.append(f"    error ({side}): {_shown(row['error'])}")
    rows = len(dict.fromkeys([*left, *right]))
    lines.append(f"{equal} of {rows} rows equal")
    return lines, equal == rows


def _shown(value) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)  # one line: newlines and tabs escaped
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
