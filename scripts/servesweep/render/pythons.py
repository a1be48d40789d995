"""The Pythons a cluster declares, and the one a recipe picks among them by name.

A recipe never names a program: checking it (``validate``, the dry run's engine-argument check)
would run that program. ``engine.python`` names one of the cluster's own interpreters instead:
``engine_python`` (the cluster's default) or an ``engine_pythons`` key; its path as the cluster
writes it is accepted too, so a recipe written against one cluster's facts still reads the same.
"""

from __future__ import annotations

from .cluster import Cluster

DEFAULT_NAME = "engine_python"


def declared(cluster: Cluster) -> dict[str, str]:
    """Name -> interpreter, as the cluster facts write it."""
    return {DEFAULT_NAME: cluster.engine_python, **cluster.engine_pythons}


def resolve(chosen: str | None, cluster: Cluster, kind: str) -> str:
    """The interpreter an engine of ``kind`` runs with: the recipe's choice by name, else the cluster's."""
    if not chosen:
        return cluster.python_for(kind)
    return declared(cluster).get(chosen, chosen)


def problem(chosen: str | None, cluster: Cluster) -> str | None:
    """Why ``engine.python`` may not be used on ``cluster``, or None."""
    names = declared(cluster)
    if chosen is None or chosen in names or chosen in names.values():
        return None
    listed = ", ".join(f"{n} ({p})" for n, p in names.items())
    return (
        f"{chosen!r} is not a Python cluster {cluster.name!r} declares ({cluster.source}: engine_python, "
        f"engine_pythons); a recipe names one of them, never a program: {listed}"
    )


def declared_paths(cluster: Cluster) -> frozenset[str]:
    """Every interpreter a check may run for this cluster."""
    return frozenset(declared(cluster).values())
