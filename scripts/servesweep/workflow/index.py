"""The run's index of rendered points: each point rendered (or recalled from the render memo)
once, and kept as frozen :class:`PointFacts` (the plan itself is on disk). One index per run,
made with the selection and handed to stack sharing and capacity search, which read it and never
reach back into the selection."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from ..contract.paths import plan_file, result_file
from ..contract.plan import stack_reuse_allowed
from ..fileio.errors import InputError, Problem
from ..render.plan import data_inputs, layout, render_point
from ..render.recipe import Recipe
from ..render.topology import PlacementError
from .memo import RenderMemo


@dataclass(frozen=True)
class PointFacts:
    """What the workflow keeps of a rendered point."""

    resources: Mapping  # the plan's resources (read-only)
    plan: str  # fingerprints.plan: a result measured with another plan is stale
    curve: str  # fingerprints.curve
    server: str  # fingerprints.server: the points with the same servers share a stack
    reuse: bool  # the plan's stack.reuse, and --config stack_reuse


class PointIndex:
    def __init__(self, root: Path, cluster, clusters: dict, recipes: dict, memo: RenderMemo, linger_override=None):
        self.root, self.cluster, self.clusters = Path(root), cluster, clusters
        self.recipes: Mapping[str, Recipe] = MappingProxyType(recipes)
        self.memo = memo  # the writer saves it
        self.linger_override: float | None = linger_override
        self._facts: dict[tuple, PointFacts] = {}  # (recipe, conc, rehearsal) -> its facts
        self._servers: dict[tuple, str] = {}  # (recipe, rehearsal) -> its server fingerprint
        self._curves: dict[tuple, str] = {}  # (recipe, rehearsal) -> its curve fingerprint
        self._reuse: dict[str, bool] = {}  # recipe -> its points may share a warm stack
        self.servers_seen = 0  # how many server fingerprints changed: stack sharing regroups on a change
        self._layouts: dict = {}
        self._memo_keys: dict = {}
        self._data: dict = {}  # (recipe, rehearsal) -> what its points read (render/dataid)
        self._first_render: dict = {}  # (recipe, conc) -> (plan, text) rendered for the argument check

    @property
    def submits_jobs(self) -> bool:
        """Whether points run as cluster jobs (which then need resources)."""
        return self.cluster.launcher != "local"

    def linger_s(self, recipe: str) -> float:
        """How long the recipe's stack stays up after its last point (stack.linger_s, --config linger_s)."""
        if self.linger_override is not None:
            return self.linger_override
        return float((self.recipes[recipe].doc.get("stack") or {}).get("linger_s", 0))

    def facts(self, recipe: str, conc: int, rehearsal: bool = False) -> PointFacts:
        """The point's facts: recalled from the memo, else rendered."""
        key = (recipe, conc, rehearsal)
        if key not in self._facts and not self.recall(recipe, conc, rehearsal):
            self.rendered(recipe, conc, rehearsal)
        return self._facts[key]

    def known(self, recipe: str, conc: int, rehearsal: bool = False) -> PointFacts | None:
        return self._facts.get((recipe, conc, rehearsal))

    def server(self, recipe: str, rehearsal: bool = False) -> str:
        return self._servers[(recipe, rehearsal)]

    def knows_server(self, recipe: str, rehearsal: bool = False) -> bool:
        return (recipe, rehearsal) in self._servers

    def servers(self) -> dict[tuple, str]:
        """(recipe, rehearsal) -> server fingerprint, of the recipes known so far."""
        return dict(self._servers)

    def reuse(self, recipe: str) -> bool:
        """Whether the recipe's points share a warm stack in this run (recipe and --config)."""
        return self._reuse.get(recipe, stack_reuse_allowed())

    def rendered(self, recipe: str, conc: int, rehearsal: bool = False) -> tuple[dict, str]:
        """The point's plan and its canonical text; its facts are kept."""
        self._check_point(recipe, conc, rehearsal)
        first = None if rehearsal else self._first_render.pop((recipe, conc), None)
        plan, text = first or self._render(recipe, conc, rehearsal)
        fp = plan["fingerprints"]
        reuse = plan["stack"]["reuse"] and stack_reuse_allowed()
        self._keep(
            recipe,
            conc,
            rehearsal,
            PointFacts(MappingProxyType(plan["resources"]), fp["plan"], fp["curve"], fp["server"], reuse),
        )
        return plan, text

    def recall(self, recipe: str, conc: int, rehearsal: bool = False, data: bytes | None = None) -> bool:
        """Whether the memo vouches for the point's plan file (unchanged since it was written): then
        nothing needs rendering or writing, and its facts are kept."""
        self._check_point(recipe, conc, rehearsal)
        path = os.path.join(self.root, self.plan_path(recipe, conc, rehearsal))  # a str path: 3 200 Path joins cost
        e = self.memo.recall(self.memo_key(recipe, rehearsal), conc, path, data)
        if e is not None:
            reuse = e["reuse"] and stack_reuse_allowed()
            facts = PointFacts(MappingProxyType(e["resources"]), e["plan"], e["curve"], e["server"], reuse)
            self._keep(recipe, conc, rehearsal, facts)
        return e is not None

    def plan_path(self, recipe: str, conc: int, rehearsal: bool = False) -> str:
        """Where the point's plan is: a sweep point's is written before the DAG is built, a capacity
        probe's outside the concurrencies is the output of a job (rules/capacity.smk)."""
        return plan_file(recipe, conc, rehearsal, probe=not rehearsal and conc not in self.recipes[recipe].concurrency)

    def _keep(self, recipe: str, conc: int, rehearsal: bool, facts: PointFacts) -> None:
        self._facts[(recipe, conc, rehearsal)] = facts
        self._curves[(recipe, rehearsal)] = facts.curve
        self._reuse[recipe] = facts.reuse
        if self._servers.get((recipe, rehearsal)) != facts.server:
            self._servers[(recipe, rehearsal)] = facts.server
            self.servers_seen += 1

    def _check_point(self, recipe: str, conc: int, rehearsal: bool) -> None:
        r = self.recipes.get(recipe)
        if r is None or not (conc in r.concurrency if rehearsal else r.has_point(conc)):
            raise InputError([Problem(result_file(recipe, conc), "target", "no such point in any recipe")])

    def memo_key(self, recipe: str, rehearsal: bool) -> str:
        """The recipe, its clusters, the code and the data its points read."""
        if (recipe, rehearsal) not in self._memo_keys:
            r = self.recipes[recipe]
            own = self.own_cluster(r) if rehearsal else self.cluster
            local = self.clusters["local"] if rehearsal else None
            self._memo_keys[(recipe, rehearsal)] = self.memo.key(r, own, local, self.data(recipe, rehearsal))
        return self._memo_keys[(recipe, rehearsal)]

    def data(self, recipe: str, rehearsal: bool = False) -> dict:
        """The plan's ``data`` and ``model_data`` of the recipe's points (a file's digest read once)."""
        if (recipe, rehearsal) not in self._data:
            r = self.recipes[recipe]
            own = self.own_cluster(r) if rehearsal else self.cluster
            self._data[(recipe, rehearsal)] = data_inputs(r, own, self.clusters["local"] if rehearsal else None)
        return self._data[(recipe, rehearsal)]

    def curve_fingerprint(self, recipe: str, rehearsal: bool) -> str:
        return self._curves[(recipe, rehearsal)]

    def own_cluster(self, r: Recipe):
        return self.cluster if self.cluster.name in r.clusters else self.clusters[r.clusters[0]]

    def first_plan(self, r: Recipe) -> tuple[dict, str]:
        """A curve's first plan, which the argument check and pre-flight read: from its file when
        the memo vouches for it, else rendered (and then not rendered again for its plan file)."""
        conc = r.concurrency[0]
        try:
            with open(os.path.join(self.root, plan_file(r.name, conc)), "rb") as f:
                data = f.read()
            if self.recall(r.name, conc, False, data):
                text = data.decode()
                self._first_render[(r.name, conc)] = json.loads(text), text
                return self._first_render[(r.name, conc)]
        except (OSError, ValueError):  # UnicodeDecodeError included
            pass
        self._first_render[(r.name, conc)] = self._render(r.name, conc, False)
        return self._first_render[(r.name, conc)]

    def drop_layouts(self) -> None:
        """Forget the per-recipe layouts once every plan is written (they would sit in Snakemake's heap)."""
        self._layouts.clear()

    def _render(self, recipe: str, conc: int, rehearsal: bool) -> tuple[dict, str]:
        """(plan, its canonical text), remembered in the render memo."""
        try:
            plan, text = self._render_or_raise(recipe, conc, rehearsal)
        except PlacementError as e:
            raise InputError([Problem(self.recipes[recipe].source, f, r) for f, r in e.issues]) from None
        self.memo.remember(self.memo_key(recipe, rehearsal), conc, plan, text)
        return plan, text

    def _render_or_raise(self, recipe: str, conc: int, rehearsal: bool) -> tuple[dict, str]:
        r = self.recipes[recipe]
        if rehearsal:  # the recipe's own layout (selected cluster if it runs there), run locally
            own = self.own_cluster(r)
            return render_point(r, own, conc, self.clusters["local"], self._layout(r, own, True))
        if self.cluster.name not in r.clusters:
            raise InputError(
                [Problem(r.source, "clusters", f"recipe is not selected for cluster {self.cluster.name!r}")]
            )
        return render_point(r, self.cluster, conc, None, self._layout(r, self.cluster, False))

    def _layout(self, r: Recipe, cluster, rehearsal: bool):
        key = (r.name, rehearsal)
        if key not in self._layouts:
            self._layouts[key] = layout(r, cluster, self.clusters["local"] if rehearsal else None)
        return self._layouts[key]
