"""Which points share a warm stack: those of every recipe with the same server identity (a plan's
``fingerprints.server``: everything that makes the servers what they are, nothing the client
decides) whose stacks may be reused. They run back to back on it. On Slurm every such stack is
*held*: a Slurm job of its own that its points, probes and checks reach as job steps
(``run/stacks/held``), sized here; a point's failure ends no other point."""

from __future__ import annotations

from .capacity_search import CapacitySearches
from .index import PointIndex
from .run_points import RunPoints


class SharedStacks:
    """A selection's recipes grouped by server identity; answers per recipe, computed once (again
    when the index learns a recipe's servers)."""

    def __init__(self, index: PointIndex, searches: CapacitySearches, run: RunPoints):
        self.index, self.searches, self.run = index, searches, run
        self._seen = -1  # the index's servers_seen the groups were made from
        self._groups: dict | None = None  # (recipe, rehearsal) -> its mates, sorted by name
        self._ranks: dict = {}  # rehearsal -> recipe -> run order
        self._stale: dict = {}  # (mates, run scope, next probes) -> their stale points

    def mates(self, recipe: str, rehearsal: bool = False) -> tuple[str, ...]:
        """The recipes whose points run on the same stack as this one's in this run (itself included):
        same server identity, stack reuse on. Alone when it reuses no stack."""
        if not self.index.reuse(recipe):
            return (recipe,)
        return self._grouped().get((recipe, rehearsal), (recipe,))

    def _grouped(self) -> dict:
        """The groups, computed again (with the run order) after a recipe's server became known."""
        if self._groups is None or self._seen != self.index.servers_seen:
            self._seen = self.index.servers_seen
            self._groups, self._ranks = self._group(), {}
        return self._groups

    def _group(self) -> dict:
        by_server: dict = {}
        for (name, rehearsal), server in sorted(self.index.servers().items()):
            if self.index.reuse(name):
                by_server.setdefault((server, rehearsal), []).append(name)
        return {(n, rh): tuple(names) for (_s, rh), names in by_server.items() for n in names}

    def rank(self, recipe: str, rehearsal: bool = False) -> int:
        """Run order of recipes: the recipes of one stack next to each other (groups in the order of
        their first recipe's name), so a stack is never left idle while another one runs."""
        self._grouped()
        if rehearsal not in self._ranks:
            order = sorted(self.index.recipes, key=lambda n: (self._mates_or_self(n, rehearsal)[0], n))
            self._ranks[rehearsal] = {n: i for i, n in enumerate(order)}
        return self._ranks[rehearsal].get(recipe, 0)

    def _mates_or_self(self, recipe: str, rehearsal: bool) -> tuple[str, ...]:
        return self.mates(recipe, rehearsal) if self.index.knows_server(recipe, rehearsal) else (recipe,)

    def stale_points(self, recipe: str) -> list[tuple[str, int]]:
        """(recipe, concurrency) of every point this run executes on the recipe's stack, in run order.
        Asked again once a capacity search decides its next probe (results have come in by then)."""
        mates = self.mates(recipe)
        key = (mates, self.run.scope(), tuple(self.run.next_probe(m) for m in mates))
        if key not in self._stale:
            self._stale[key] = [(m, c) for m in mates for c in self.run.curve_points(m)]
        return self._stale[key]

    def linger_s(self, recipe: str, rehearsal: bool = False) -> float:
        """The stack's linger: the longest any recipe on it asks for."""
        return max(self.index.linger_s(m) for m in self.mates(recipe, rehearsal))

    def held(self, recipe: str) -> bool:
        """On a cluster, whether the recipe's stack is held (its own Slurm job): whenever its points
        reuse a stack. A recipe that reuses none runs each point as a Slurm job of its own."""
        return self.index.submits_jobs and self.index.reuse(recipe)

    def points_s(self, recipe: str, points: list[tuple[str, int]]) -> float:
        """Seconds of the given points on the recipe's stack and of its searches' worst case of further
        probes beyond them: a held stack's job is sized from it (with one startup and the linger)."""
        total = sum(self.index.facts(r, c).resources["point_s"] for r, c in points)
        for m in self.mates(recipe):
            if self.searches.may_search(m):
                probe_s = self.index.facts(m, self.index.recipes[m].concurrency[0]).resources["point_s"]
                total += max(self.searches.probes_left(m) - 1, 0) * probe_s
        return total
