"""Engine kinds as plug-ins: one module per kind in this folder, each defining ``KIND``
(a :class:`base.EngineKind`). Core code asks the kind; adding one is a new module here.
Modules starting with ``_`` hold what several kinds share."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable

from ...fileio.errors import Problem
from .base import EngineKind

_SKIP = {"base", "dynamo_frontend"}


def _discover() -> dict[str, EngineKind]:
    out = {}
    for m in pkgutil.iter_modules(__path__):
        if m.name.startswith("_") or m.name in _SKIP:
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{m.name}"), "KIND", None)
        if isinstance(kind, EngineKind):
            out[kind.name] = kind
    return out


KINDS: dict[str, EngineKind] = _discover()


def get(name: str) -> EngineKind:
    return KINDS[name]


def names() -> list[str]:
    return sorted(KINDS)


def unknown(name: object) -> str | None:
    """Why ``name`` is no engine kind (with the likeliest meant one), or None."""
    if isinstance(name, str) and name in KINDS:
        return None
    near = difflib.get_close_matches(str(name), names(), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"unknown engine kind {name!r}{hint}; the kinds are the modules of render/kinds: {', '.join(names())}"


def engine_python_problems(clusters: Iterable) -> list[Problem]:
    """Each cluster's ``engine_pythons`` key that names no kind (its file, the field, the likeliest meant
    kind): a misspelt key would leave that kind on the default python unnoticed."""
    return [
        Problem(c.source, f"engine_pythons.{k}", why) for c in clusters for k in c.engine_pythons if (why := unknown(k))
    ]


def distributions() -> list[str]:
    """Every package some kind reads its engine version from."""
    return sorted({d for k in KINDS.values() for d in k.distributions})


def canonical_distribution(dist: str) -> str:
    """The name a pin uses for ``dist`` (a CPU build's package counts as the engine's own)."""
    for k in KINDS.values():
        if dist in k.distributions:
            return k.distributions[0]
    return dist
