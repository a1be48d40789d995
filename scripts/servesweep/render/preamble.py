"""What runs in an engine's (or frontend's) own process before it: the recipe's setup scripts and
version pins, as arguments of ``run/preamble.py``, which then replaces itself with the process.

Rehearsal runs mockers from a local environment: no setup script and no pin applies there, and the
preamble only reports the versions that ran.
"""

from __future__ import annotations

import json

from ..contract.plan import PREAMBLE_SCRIPT
from ..fileio.errors import Problem
from . import kinds

SCRIPT = PREAMBLE_SCRIPT  # the driver copies run/preamble.py there; every container mounts the run dir
DYNAMO_DISTRIBUTIONS = ["ai-dynamo", "ai-dynamo-runtime"]


def pins(doc: dict, kind: str) -> list[dict]:
    """The versions the recipe pins, as the preamble checks (and, with install, installs) them."""
    out = []
    dyn = doc.get("dynamo") or {}
    if "version" in dyn:
        v = dyn["version"]
        pin = {"dists": DYNAMO_DISTRIBUTIONS, "version": v}
        if dyn.get("install"):
            pin["install"] = [f"{d}=={v}" for d in reversed(DYNAMO_DISTRIBUTIONS)]
        out.append(pin)
    if "git" in dyn:
        out.append({"dists": DYNAMO_DISTRIBUTIONS, "commit": dyn["git"]})
    if "version" in doc["engine"]:
        out.append({"dists": list(kinds.get(kind).distributions), "version": doc["engine"]["version"]})
    return out


def reported(kind: str) -> list[str]:
    k = kinds.get(kind)
    return (DYNAMO_DISTRIBUTIONS if k.dynamo else []) + list(k.distributions)


def wrap(argv: tuple[str, ...], python: str, doc: dict, kind: str, engine: bool, rehearsal: bool) -> tuple[str, ...]:
    """``argv`` run through the preamble by the same Python (an engine's or the frontend's)."""
    out = [python, SCRIPT, "--lock-dir", "{run_dir}/setup-locks"]
    for d in reported(kind):
        out += ["--report", d]
    if not rehearsal:
        setup = (doc.get("setup") or {}).get("post_install")
        if setup and engine:
            out += ["--setup", setup]
        chosen = pins(doc, kind) if engine else [p for p in pins(doc, kind) if p["dists"] == DYNAMO_DISTRIBUTIONS]
        if chosen:
            out += ["--pins", json.dumps(chosen, separators=(",", ":"), sort_keys=True)]
    return (*out, "--", *argv)


def pin_problems(doc: dict, label: str) -> list[Problem]:
    """Pins the preamble cannot honour for this engine kind."""
    kind, dyn, out = kinds.get(doc["engine"]["kind"]), doc.get("dynamo") or {}, []
    if dyn and not kind.dynamo:
        out.append(Problem(label, "dynamo", f"engine kind {kind.name} runs no Dynamo: a Dynamo pin would do nothing"))
    if "git" in dyn and dyn.get("install"):
        reason = "a commit pin is verified (pip's direct_url record), not built here: build it into the image"
        out.append(Problem(label, "dynamo.install", reason))
    if "version" in doc["engine"] and not kind.distributions:
        out.append(Problem(label, "engine.version", f"{kind.name} has no engine package of its own to pin"))
    return out
