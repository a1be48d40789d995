"""The summary's inputs for the sweeps a run decides as it goes (part of :class:`rulekit.RuleKit`): a
halving sweep's kept variants once its screens are in, and a search's trials round by round. A
variant measured in full mid-run is measured as a selected recipe is: its points, its capacity
search and its evals (``_in_full``); the writer is told, so its stack waits for them."""

from __future__ import annotations

from snakemake.exceptions import IncompleteCheckpointException
from snakemake.io import checkpoint_target

from ..contract import paths


class SweepInputs:
    """Mixed into RuleKit, whose selection, recipes, searches, evals, held and rehearsal it reads."""

    def halving_results(self, checkpoints, files):
        """The full points of the variants a waiting halving sweep keeps (the summary's input): each
        screen is asked for as a checkpoint, and once all are in, the sweep is decided here, in this
        run: the screens' stacks stop waiting (``files``, the writer) and the kept variants' points run
        on them."""

        def results(wildcards=None):
            out = []
            for base in sorted(self.selection.pending):
                if base not in self._kept:
                    self._kept[base] = self._decide(checkpoints, base, files)
                out += self._kept[base]
            return out if self.rehearsal else self._present(out)

        return results

    def _decide(self, checkpoints, base: str, files) -> list[str]:
        screens = self.selection.screens(base)
        target = screens[0].sweep["halving"]["target"]
        rules = {s.name: self._point_rule(checkpoints, s.name) for s in screens}
        for s in screens:
            rules[s.name].get(recipe=s.name, conc=target)  # raises until the screen has run
        kept, waiting = self.selection.decide_pending(base)
        # a screen's file is there but not of its current plan: Snakemake counts a present checkpoint
        # output as done when it builds the DAG, though it runs the screen again; decided after that
        if waiting:
            path = paths.result_file(waiting[0], target, self.rehearsal)
            raise IncompleteCheckpointException(rules[waiting[0]].rule, checkpoint_target(path))
        out = [f for r in kept for f in self._in_full(r.name)]  # first: the writer then sees their searches
        files.halving_decided(base, kept)
        return out

    def _in_full(self, name: str) -> list[str]:
        """A variant kept or chosen mid-run, measured as a selected recipe is: its points, and (not in a
        rehearsal) its capacity search and evals, which the summary's later inputs then ask for."""
        r = self.recipes[name]
        if not self.rehearsal:
            self.searches.begin(name)  # self.searched is its list: selected_capacities asks for it
            self.evals += [(name, b) for b in r.evals if (name, b) not in self.evals]
        return [paths.result_file(name, c, self.rehearsal) for c in r.concurrency]

    def search_results(self, files):
        """The points of every variant a running search has chosen so far (the summary's input): each
        round's variants are chosen once the last round's target points are in (``search_gate``), and
        run at once, each curve on its servers' stack (``files``, the writer, is told)."""

        def results(wildcards=None):
            out = []
            for base in sorted(self.selection.searching):
                rep = self.selection.search_state(base)
                for name in (n for n in rep.chosen if n in self.selection.added):  # the rest: selected_results
                    out += self._in_full(name)
                    files.search_chose(name)
            if self.selection.searching:
                files.write_selection()  # a finished search names its untried variants (written once per change)
            return out

        return results

    def search_gate(self, checkpoints):
        """Asks for each running search's current round as checkpoints: the summary's input is built
        again once they are in, and ``search_results`` then chooses the next round."""

        def gate(wildcards=None):
            for base in sorted(self.selection.searching):
                rep = self.selection.search_state(base)
                target = self.selection.search_target(base)
                for name in rep.waiting:
                    rule = self._point_rule(checkpoints, name)
                    rule.get(recipe=name, conc=target)  # raises until the trial has run
                    # there, but not of its current plan: Snakemake counts it as done when it builds the DAG
                    path = paths.result_file(name, target, self.rehearsal)
                    raise IncompleteCheckpointException(rule.rule, checkpoint_target(path))
            return []

        return gate

    def _point_rule(self, checkpoints, recipe: str):
        if self.rehearsal:
            return checkpoints.rehearse_point
        return checkpoints.held_point if recipe in self.held else checkpoints.point
