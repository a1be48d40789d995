"""The workflow's side of capacity at SLO: which probes are known (a current result on disk),
which one runs next, what the capacity rule reads, and a line for the dry run.

A result counts as known only if it was measured with the point's current plan; the SLO is
the recipe's current one, so an SLO edit re-decides from the results already there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..capacity.search import Bounds, Decision, decide, describe, probe_met, probes_left_at_most
from ..contract import paths
from .index import PointIndex


class CapacitySearches:
    """The capacity searches of a selection (recipes that declare ``capacity``)."""

    def __init__(self, index: PointIndex, selected: list, waiting: list = ()):
        self.index = index
        self.recipes = [r.name for r in selected if "capacity" in r.doc]  # the summary asks for their capacity
        # variants a halving decision or a search may measure in full in this run: their search joins
        # ``recipes`` once they are (``begin``); until then bills and held jobs count its worst case
        self.candidates = [r.name for r in waiting if "capacity" in r.doc]
        self._docs: dict[Path, tuple] = {}  # result -> ((mtime_ns, size), its identity and figures)
        self._said: set[str] = set()

    def begin(self, recipe: str) -> None:
        """A candidate measured in full from now on: its search is part of this run."""
        if recipe in self.candidates and recipe not in self.recipes:
            self.recipes.append(recipe)

    def may_search(self, recipe: str) -> bool:
        return recipe in self.recipes or recipe in self.candidates

    def bounds(self, recipe: str) -> Bounds:
        return Bounds.of(self.index.recipes[recipe].doc["capacity"])

    def settings_doc(self, name: str) -> dict:
        """What the capacity rule needs of a recipe (written only when it changes: an SLO or bounds
        edit reruns the capacity rule, never a probe)."""
        r = self.index.recipes[name]
        return {
            "recipe": name,
            "source": r.source,
            "scenario": r.doc["scenario"]["name"],
            "cluster": self.index.cluster.name,
            "bounds": self.bounds(name).to_json(),
            "slo": r.doc["slo"],
        }

    def known(self, recipe: str) -> dict[int, bool | str]:
        """Concurrency -> met the SLO (or why the probe cannot decide), for every current result inside the bounds."""
        bounds, slo, out = self.bounds(recipe), self.index.recipes[recipe].doc["slo"], {}
        for conc, path in paths.point_files(self.index.root / paths.RESULTS / recipe):
            if conc not in bounds:
                continue
            doc = self._read(path)
            if doc and doc["identity"].get("plan_fingerprint") == self.index.facts(recipe, conc).plan:
                out[conc] = probe_met(doc, slo)
        return out

    def probes_left(self, recipe: str) -> int:
        """The worst case of the probes still to run, the next one included."""
        bounds = self.bounds(recipe)
        return probes_left_at_most(bounds, decide(bounds, self.known(recipe)))

    def decision(self, recipe: str) -> tuple[dict[int, bool], Decision]:
        """(known probes, the search state), said once on stderr."""
        met = self.known(recipe)
        d = decide(self.bounds(recipe), met)
        line = describe(recipe, self.bounds(recipe), met, d)
        if line not in self._said:
            self._said.add(line)
            print(f"servesweep: {line}", file=sys.stderr)
        return met, d

    def _read(self, path: Path) -> dict | None:
        try:
            st = path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if self._docs.get(path, (None,))[0] != stamp:
                doc = json.loads(path.read_bytes())
                kept = {"identity": doc["identity"], "figures": doc["figures"]}
                kept |= {k: doc.get(k) for k in ("marks", "stalls")}  # contract/marks: they stop a search
                self._docs[path] = (stamp, kept)
            return self._docs[path][1]
        except (OSError, ValueError, KeyError, TypeError):
            return None
