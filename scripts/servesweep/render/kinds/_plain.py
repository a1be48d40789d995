"""What the kinds served without Dynamo share: their own OpenAI server per replica, several
replicas behind the stack's nginx (``plan.balancer``), a wide worker as one process per node
with rank 0 serving and the others headless."""

from __future__ import annotations

from ..engines import ProcessSpec, http_urls
from .base import Findings


def spec(ports: dict, argv: list[str], env: dict, headless: bool) -> ProcessSpec:
    if headless:
        return ProcessSpec(ports, tuple(argv), env, None, None, {}, True)
    return ProcessSpec(ports, tuple(argv), env, *http_urls())


def problems(name: str):
    """Recipe checks of a plain kind: no disaggregation, no Dynamo frontend."""

    def check(recipe) -> Findings:
        out = []
        if recipe.disaggregated:
            reason = f"plain {name} has no disaggregated serving here: use engine.kind dynamo.{name}"
            out.append(("topology.disaggregated", reason))
        if "frontend" in recipe.doc:
            out.append(("frontend", f"plain {name} runs without the Dynamo frontend (nginx balances)"))
        return out

    return check
