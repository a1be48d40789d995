"""A result's figures against a recipe's SLO (no pandas: the workflow's capacity search uses it too)."""

from __future__ import annotations

from ..contract.figures import SLO_FIGURES


def slo_verdicts(slo: dict, f: dict) -> dict:
    """A result's figures against an SLO: the recipe's current one, so an SLO edit needs no rerun."""
    verdicts = []
    for key, limit in sorted(slo.items()):
        value = SLO_FIGURES[key].of(f)
        verdicts.append({"slo": key, "limit": limit, "value": value, "met": value is not None and value <= limit})
    return {"verdicts": verdicts, "met": all(v["met"] for v in verdicts) if verdicts else None}
