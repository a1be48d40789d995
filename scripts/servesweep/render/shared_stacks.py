"""Which points share a warm stack: those of every recipe with the same server identity (a plan's
``fingerprints.server``: everything that makes the servers what they are, nothing the client
decides) whose stacks may be reused. They form one group (one Slurm job), run back to back, and the
group's first point carries the job's time for all of them."""

from __future__ import annotations


class SharedStacks:
    """A selection's recipes grouped by server identity; answers per recipe, computed once."""

    def __init__(self, selection):
        self.sel = selection
        self._servers: dict = {}  # (recipe, rehearsal) -> server fingerprint
        self._groups: dict | None = None  # (recipe, rehearsal) -> its mates, sorted by name
        self._ranks: dict = {}  # rehearsal -> recipe -> run order
        self._stale: dict = {}  # (mates, run scope, next probes) -> their stale points

    def keep(self, recipe: str, rehearsal: bool, server: str) -> None:
        if self._servers.get((recipe, rehearsal)) != server:
            self._servers[(recipe, rehearsal)] = server
            self._groups, self._ranks = None, {}

    def server(self, recipe: str, rehearsal: bool = False) -> str:
        return self._servers[(recipe, rehearsal)]

    def mates(self, recipe: str, rehearsal: bool = False) -> tuple[str, ...]:
        """The recipes whose points run on the same stack as this one's in this run (itself included):
        same server identity, stack reuse on. Alone when it reuses no stack."""
        if not self.sel.reuse(recipe):
            return (recipe,)
        return self._grouped().get((recipe, rehearsal), (recipe,))

    def _grouped(self) -> dict:
        """The groups, computed again (with the run order) after a recipe's server became known."""
        if self._groups is None:
            self._groups, self._ranks = self._group(), {}
        return self._groups

    def _group(self) -> dict:
        by_server: dict = {}
        for (name, rehearsal), server in sorted(self._servers.items()):
            if self.sel.reuse(name):
                by_server.setdefault((server, rehearsal), []).append(name)
        return {(n, rh): tuple(names) for (_s, rh), names in by_server.items() for n in names}

    def rank(self, recipe: str, rehearsal: bool = False) -> int:
        """Run order of recipes: the recipes of one stack next to each other (groups in the order of
        their first recipe's name), so a stack is never left idle while another one runs."""
        self._grouped()
        if rehearsal not in self._ranks:
            order = sorted(self.sel.recipes, key=lambda n: (self._mates_or_self(n, rehearsal)[0], n))
            self._ranks[rehearsal] = {n: i for i, n in enumerate(order)}
        return self._ranks[rehearsal].get(recipe, 0)

    def _mates_or_self(self, recipe: str, rehearsal: bool) -> tuple[str, ...]:
        return self.mates(recipe, rehearsal) if (recipe, rehearsal) in self._servers else (recipe,)

    def stale_points(self, recipe: str) -> list[tuple[str, int]]:
        """(recipe, concurrency) of every point this run executes on the recipe's stack, in run order.
        Asked again once a capacity search decides its next probe (results have come in by then)."""
        mates = self.mates(recipe)
        key = (mates, self.sel.scope(), tuple(self.sel.next_probe(m) for m in mates))
        if key not in self._stale:
            self._stale[key] = [(m, c) for m in mates for c in self.sel.curve_points(m)]
        return self._stale[key]
