"""The points this snakemake run executes, per recipe: those its targets ask for that are stale
(all of them when forced), and the next probe of a capacity search it runs. Known only once the
DAG is being built (the run's scope), and asked again as a search decides its next probe."""

from __future__ import annotations

import json

from ..contract.paths import CAPACITY_TARGET, POINT_TARGET, capacity_file, result_file
from .index import PointIndex


class RunPoints:
    def __init__(self, index: PointIndex, scope=None):
        """``scope``: () -> (targets, forced) of this snakemake run."""
        self.index = index
        self.scope = scope or (lambda: (frozenset(), False))
        self.next_probes: dict[str, int | None] = {}  # recipe -> its capacity search's next probe

    def next_probe(self, recipe: str) -> int | None:
        return self.next_probes.get(recipe)

    def curve_points(self, recipe: str) -> list[int]:
        """The recipe's points this run will execute: those requested (by name, or all through an
        aggregate target) that are stale, or all requested ones when forced; with the next probe of
        its capacity search when that is requested too (the probe then shares the curve's job)."""
        targets, forced = self.scope()
        sweep, probe = self.index.recipes[recipe].concurrency, self.next_probes.get(recipe)
        if targets and all(POINT_TARGET.fullmatch(t) or CAPACITY_TARGET.fullmatch(t) for t in targets):
            points = [c for c in sweep if result_file(recipe, c) in targets]
            points += [probe] if probe is not None and capacity_file(recipe) in targets else []
        else:
            points = sweep + ([probe] if probe is not None else [])
        points = sorted(set(points))
        if forced:
            return points
        stale = set(self.stale_guess(recipe, points))
        return [c for c in points if c in stale]

    def stale_guess(self, recipe: str, points: list[int], rehearsal: bool = False) -> list[int]:
        """Of ``points``, those whose result is missing or from another plan (what snakemake will
        run unless told otherwise), in ascending concurrency."""
        out = []
        for c in sorted(points):
            facts = self.index.known(recipe, c, rehearsal)
            if facts is None:
                continue
            try:
                doc = json.loads((self.index.root / result_file(recipe, c, rehearsal)).read_bytes())
                done = doc["identity"]["plan_fingerprint"]
            except (OSError, ValueError, KeyError, TypeError):
                done = None
            if done != facts.plan:
                out.append(c)
        return out
