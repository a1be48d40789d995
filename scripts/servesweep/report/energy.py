"""The energy figures of a result (run/energy) as the summary shows them, and kWh per stack for the
GPU-time table; unmeasured is `–` with the reason."""

from __future__ import annotations

import pandas as pd

from .fmt import num

J_PER_KWH = 3.6e6


def columns(doc: dict) -> dict:
    """The summary row's energy columns: the figures (None where unmeasured) and the cell text."""
    e = doc["figures"].get("energy")
    if e is None:
        why = (doc.get("unmeasured") or {}).get("energy", "the result predates the energy figures")
        return {"energy_j": None, "energy_per_output_token_j": None, "energy_cell": f"– ({why})"}
    roles = e.get("power_w_per_gpu_by_role") or {}
    power = " ".join(f"{r} {num(w)}" for r, w in roles.items()) or num(e["avg_power_w_per_gpu"])
    per_token = "–" if e["energy_per_output_token_j"] is None else f"{e['energy_per_output_token_j']:.3g}"
    per_joule = "–" if e["output_tokens_per_joule"] is None else f"{e['output_tokens_per_joule']:.3g}"
    idle = "–" if e["idle_power_w_per_gpu"] is None else num(e["idle_power_w_per_gpu"])
    cell = f"{power} W/GPU · {per_token} J/tok · {per_joule} tok/J · idle {idle} W ({e['source']})"
    return {"energy_j": e["energy_j"], "energy_per_output_token_j": e["energy_per_output_token_j"], "energy_cell": cell}


def kwh_lines(df: pd.DataFrame) -> list[str]:
    """Below the GPU-time table: the kWh each stack's benchmark windows drew, as measured; `–` where a
    point of the stack was not measured (startup, idle and linger are not metered: only GPU-hours)."""
    if "energy_j" not in df or df["energy_j"].isna().all():
        return []
    parts = []
    for stack, joules in df.groupby("stack_id", sort=False)["energy_j"]:
        parts.append(f"{stack} {'–' if joules.isna().any() else num(joules.sum() / J_PER_KWH, 4)} kWh")
    return ["", "GPU energy of the benchmark windows (aiperf's telemetry): " + "; ".join(parts) + "."]
