"""Benchmarks as aiperf names them: the trace formats it loads and the scenarios it locks.

aiperf 0.13 locks ``inferencex-agentx-mvp`` (aiperf/common/scenario/inferencex_agentx_mvp.py):
agentic replay of a Weka-format trace, streaming, ignore-EOS, first-turn-prefix cache bust, trace
delays kept, at least 900 s. A recipe that conflicts with a lock is refused here, naming the field;
aiperf would otherwise stop at start (ScenarioLockError) after the stack came up.
"""

from __future__ import annotations

AGENTX = "inferencex-agentx-mvp"
# aiperf's pinned Weka corpora (aiperf/plugin/plugins.yaml) -> their Hugging Face dataset repo
PUBLIC_WEKA = {
    "semianalysis_cc_traces_weka_062126": "semianalysisai/cc-traces-weka-062126",
    "semianalysis_cc_traces_weka_062126_256k": "semianalysisai/cc-traces-weka-062126-256k",
    "semianalysis_cc_traces_weka_061526": "semianalysisai/cc-traces-weka-061526",
    "semianalysis_cc_traces_weka_061326": "semianalysisai/cc-traces-weka-061326",
}
AGENTX_MIN_DURATION_S = 900
AGENTIC_WARMUP = ("agentic_cache_s", "agentic_grace_s")


def trace_format(scen: dict) -> str | None:
    """mooncake or weka for a trace (a pinned public corpus is Weka), None for other datasets."""
    if "public" in scen["dataset"]:
        return "weka"
    trace = scen["dataset"].get("trace")
    return trace.get("format", "mooncake") if trace else None


def problems(scen: dict) -> list[tuple[str, str]]:
    """(field, reason) for every scenario setting aiperf would refuse or ignore."""
    out, warm = [], scen.get("warmup") or {}
    if "requests" in warm and "duration_s" in warm:
        out.append(("scenario.warmup", "give warmup requests or duration_s, not both"))
    weka = trace_format(scen) == "weka"
    for key in AGENTIC_WARMUP:
        if key in warm and not weka:
            out.append((f"scenario.warmup.{key}", "agentic warm-up applies to agentic replay of a Weka trace only"))
    if scen.get("aiperf_scenario") == AGENTX:
        out += _agentx_problems(scen, weka, warm)
    return out


def _agentx_problems(scen: dict, weka: bool, warm: dict) -> list[tuple[str, str]]:
    rule = f"aiperf's {AGENTX} scenario"
    out = []
    if "public" not in scen["dataset"]:
        reason = (
            f"{rule} replays a Weka corpus aiperf can verify: dataset.public with its name (a local Weka "
            "folder is refused by aiperf as unpinned; rehearsals use a generated one)"
        )
        out.append(("scenario.dataset", reason))
    trace = scen["dataset"].get("trace") or {}
    if trace.get("fixed_schedule"):
        out.append(("scenario.dataset.trace.fixed_schedule", f"{rule} locks agentic-replay timing"))
    if "block_size" in trace and weka:
        out.append(("scenario.dataset.trace.block_size", "a Weka trace carries its own block_size"))
    if "requests" in scen:
        out.append(("scenario.requests", f"{rule} runs for a duration, not a request count"))
    if scen.get("duration_s", AGENTX_MIN_DURATION_S) < AGENTX_MIN_DURATION_S:
        out.append(("scenario.duration_s", f"{rule} runs at least {AGENTX_MIN_DURATION_S} s"))
    for key in ("requests", "duration_s"):
        if key in warm:
            reason = f"{rule} warms up by agentic replay: use warmup.agentic_cache_s / agentic_grace_s"
            out.append((f"scenario.warmup.{key}", reason))
    if scen.get("endpoint", "chat") != "chat":
        out.append(("scenario.endpoint", f"{rule} replays conversations: chat"))
    return out
