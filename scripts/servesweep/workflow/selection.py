"""The selection: every recipe validated, the points selected for one cluster, their plans rendered
(kept only as fingerprints and resources). It reads files and never writes one: ``workflow/writer``
writes what the run needs from it (the YAML parse cache it filled included), ``workflow/rulekit``
answers the rules from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checks.evalsets import problem_count
from ..checks.preflight import check_plan, warn_client
from ..contract.paths import YAML_CACHE, result_file, run_dir
from ..contract.plan import Plan
from ..fileio.errors import InputError, Problem
from ..fileio.yamlio import ParseCache
from ..render.cluster import all_clusters
from ..render.loading import load_recipes
from ..render.recipe import Recipe
from . import why
from .capacity_search import CapacitySearches
from .engine_args import check_engine_args, pending
from .halving import decide_screens, halving_round, screens_of, standings, undecided
from .index import PointIndex
from .memo import RenderMemo, file_stamp
from .run_points import RunPoints
from .search import not_tried, replay
from .shared_stacks import SharedStacks
from .sweep_checks import idle_axes

CHECK_S = 600  # a check's time in a job's limit (an eval's questions are counted only in the job)


@dataclass(frozen=True)
class Point:
    recipe: str
    conc: int

    @property
    def result(self) -> str:
        return result_file(self.recipe, self.conc)


def recipe_file_of(root: Path, name: str) -> str:
    """The file that declares a recipe: its own, or for a sweep's variant its sweep's."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        stem = ".".join(parts[:n])
        if (root / "recipes" / f"{stem}.yaml").exists():
            return f"recipes/{stem}.yaml"
    return f"recipes/{name}.yaml"


def with_variants(only: list[str] | None, recipes: list[Recipe]) -> list[str] | None:
    """--config recipes=NAME: a sweep's name selects all its variants."""
    if not only:
        return only
    return [*only, *(r.name for r in recipes if r.sweep_of in only)]


class Selection:
    """Every recipe validated; the points selected for one cluster."""

    def __init__(
        self,
        root: Path,
        cluster: str,
        only: list[str] | None = None,
        targeted=None,
        scope=None,
        linger_s=None,
        rehearsal: bool = False,
    ):
        """``targeted``: () -> the recipes the run's targets name, or None (asked only when a recipe is
        broken); ``scope``: () -> (targets, forced) of this snakemake run, known only once the DAG is
        being built; ``linger_s``: --config linger_s for every recipe; ``rehearsal``: a halving sweep's
        round is decided from the rehearsal's screens."""
        self.root = Path(root)
        self.preflight_problems: list[Problem] = []
        self.preflight_notes: list[str] = []
        self.unchecked_args: dict[str, str] = {}  # "recipe file (kind)" -> why no parser checked it
        self.checked_args: dict[str, str] = {}  # "recipe file (kind)" -> the parser that did
        self.clusters = all_clusters(self.root / "profiles")
        if cluster not in self.clusters:
            known = ", ".join(sorted(self.clusters))
            raise InputError([Problem("config", "cluster", f"unknown cluster {cluster!r}; known: {known}")])
        self.cluster = self.clusters[cluster]
        files = sorted((self.root / "recipes").glob("*.yaml"))
        cache = ParseCache(self.root / YAML_CACHE)
        memo = RenderMemo(self.root)
        recipes, problems = load_recipes(files, self.clusters, root=self.root, cache=cache, verdicts=memo)
        # a broken recipe the run does not select is listed (entry prints it), never a stop
        named = set(only or ()) or (targeted() if problems and targeted else None)
        chosen = {recipe_file_of(self.root, n) for n in named} if named else None
        self.broken = [
            p for p in problems if chosen is not None and p.file.startswith("recipes/") and p.file not in chosen
        ]
        if len(problems) > len(self.broken):
            raise InputError([p for p in problems if p not in self.broken])
        self.parse_cache = cache  # saved by the writer
        self.recipes: dict[str, Recipe] = {r.name: r for r in recipes}
        self.index = PointIndex(self.root, self.cluster, self.clusters, self.recipes, memo, linger_s)
        only = with_variants(only, recipes)
        unknown = sorted(set(only or ()) - set(self.recipes) - {r.sweep_of for r in recipes})
        if unknown:
            raise InputError([Problem("config", "recipes", f"no such recipe(s): {', '.join(unknown)}")])
        self.selected = [r for r in recipes if cluster in r.clusters and (not only or r.name in only)]
        idle = idle_axes(self.selected, self.cluster)
        if idle:
            raise InputError(idle)
        self.rehearsal = rehearsal
        self._halving_round()
        self._search_round()
        self.points = [Point(r.name, c) for r in self.selected for c in r.concurrency]
        self.searches = CapacitySearches(self.index, self.selected, [] if rehearsal else self.waiting())
        self.run = RunPoints(self.index, scope)
        self.stacks = SharedStacks(self.index, self.searches, self.run)

    def _halving_round(self) -> None:
        """The halving sweeps' rounds, from their screens' current results: a decided sweep's variants
        left out are deselected; an undecided one's variants wait for its screens in this run."""
        self.not_run = halving_round(self.root, self.selected, self.rehearsal, self._plan_of)  # sweep -> variant -> why
        deferred = {name for why in self.not_run.values() for name in why}
        # halving_results asks for their screens, decides, and then runs the kept variants in full,
        # their capacity searches and evals included
        self.pending = {
            base: [r for r in self.selected if r.name in why] for base, why in self.not_run.items() if undecided(why)
        }
        self._order = [r.name for r in self.selected]  # the selection file's order, also after a decision
        self.decided: set[str] = set()  # the waiting sweeps decided in this run
        self.selected = [r for r in self.selected if r.name not in deferred]

    def _search_round(self) -> None:
        """The model-based searches so far, from their trials' current results: a finished search's
        untried variants are deselected; an unfinished one keeps the trials chosen so far (this round's
        run now) and its other variants wait: rulekit's ``search_results`` chooses them as results come in."""
        self.searching: dict[str, list] = {}  # sweep -> its variants not chosen yet
        self._replays: dict[str, tuple] = {}  # sweep -> (its trials' result stamps, their replay)
        self.added: set[str] = set()  # variants a search chose in this run
        bases = sorted({r.sweep_of for r in self.selected if r.sweep_of and r.sweep["strategy"] == "search"})
        for base in bases:
            variants = [r for r in self.selected if r.sweep_of == base]
            rep = replay(self.root, variants, self.rehearsal, self._plan_of)
            self.not_run[base] = not_tried(variants, rep)
            left = [r for r in variants if r.name not in rep.chosen]
            if left and not rep.done:  # else finished, or every variant selected by name is chosen
                self.searching[base] = left
        left = {name for base in bases for name in self.not_run[base]}
        self.selected = [r for r in self.selected if r.name not in left]

    def search_state(self, base: str):
        """A searching sweep's replay now (again only when a trial's target result changed on disk: the
        summary's two inputs ask in turn); once finished its untried variants are ``not_run``."""
        searched = self._searched(base)
        variants = [r for r in self.recipes.values() if r.sweep_of == base and r.name in searched]
        target = self.search_target(base)
        stamp = tuple(file_stamp(self.root / result_file(r.name, target, self.rehearsal)) for r in variants)
        if self._replays.get(base, (None,))[0] != stamp:
            self._replays[base] = (stamp, replay(self.root, variants, self.rehearsal, self._plan_of))
        rep = self._replays[base][1]
        self.not_run[base] = not_tried(variants, rep)
        selected = {r.name for r in self.selected}
        self.added.update(n for n in rep.chosen if n not in selected)
        if rep.done:
            self.decided.add(base)
        return rep

    def search_target(self, base: str) -> int:
        return self.searching[base][0].sweep["search"]["target"]

    def _searched(self, base: str) -> set[str]:
        return {r.name for r in self.selected if r.sweep_of == base} | {r.name for r in self.searching[base]}

    def untried(self) -> list:
        """The variants a running search may still choose (their argv checked, their results trusted
        only once read back, as a selected recipe's)."""
        return [r for rs in self.searching.values() for r in rs]

    def waiting(self) -> list:
        """The variants this run may still measure in full: a halving sweep's after its screens, and a
        running search's not chosen yet."""
        return [r for rs in self.pending.values() for r in rs] + self.untried()

    def points_of(self, rehearsal: bool) -> list[Point]:
        """The points to render: the selected ones and those of the waiting variants, or for
        rehearsal every point of every recipe."""
        if rehearsal:
            return [Point(r, c) for r in self.recipes for c in self.recipes[r].concurrency]
        return self.points + [Point(r.name, c) for r in self.waiting() for c in r.concurrency]

    def screens(self, base: str) -> list:
        return screens_of(self.selected, base)

    def decide_pending(self, base: str) -> tuple[list, list[str]]:
        """A waiting halving sweep's (kept variants, screens without a current result): once every
        screen is in, the variants it leaves out are ``not_run``, with why."""
        screens = self.screens(base)
        found = standings(self.root, screens, self.rehearsal, self._plan_of)
        waiting = [s.name for s, standing in zip(screens, found, strict=True) if standing is None]
        if waiting:
            return [], waiting
        self.not_run[base] = decide_screens(screens, found)
        self.decided.add(base)
        return self._kept(base), []

    def _plan_of(self, recipe: str, conc: int) -> str:
        return self.index.facts(recipe, conc, self.rehearsal).plan

    def _kept(self, base: str) -> list:
        return [r for r in self.pending[base] if r.name not in self.not_run[base]]

    def reported(self) -> list:
        """The recipes the summary reports: the selected ones and the variants a halving decision or a
        search in this run kept or chose, in the order a later run's load selects them (its selection
        file is the same)."""
        kept = {r.name for base in self.decided if base in self.pending for r in self._kept(base)}
        names = {r.name for r in self.selected} | kept | self.added
        return [self.recipes[n] for n in self._order if n in names]

    def staleness(self) -> list:
        """Why each selected recipe's points would rerun (the dry run's cause lines)."""
        out = []
        for r in self.selected:
            fp = lambda c, name=r.name: self.index.facts(name, c).plan  # noqa: E731
            curve = self.index.facts(r.name, r.concurrency[0]).curve
            st = why.recipe_staleness(self.root, r, self.cluster, fp, curve)
            st.checks = why.check_staleness(self.root, r, fp(min(r.concurrency)))
            out.append(st)
        return out

    def capacity(self, recipe: str):
        """(known probes, decision) of the recipe's capacity search; its next probe is noted for the
        run's points (the bill, the curve files). The writer asks it; the rules ask the search itself."""
        known, decision = self.searches.decision(recipe)
        self.run.next_probes[recipe] = decision.next
        return known, decision

    def check_engine_args(self) -> None:
        """Every selected recipe's argv through its engines' own parsers, in one batch per venv."""
        checks = []
        for r in self.selected + self.untried():  # a search may choose any
            plan, _text = self.index.first_plan(r)
            checks += pending(plan, r)
        report = check_engine_args(checks, self.root)
        self.preflight_problems += report.problems
        self.unchecked_args = {f"{src} ({kind})": why for (src, kind), why in report.skipped.items()}
        self.checked_args = {f"{src} ({kind})": parser for (src, kind), parser in report.checked.items()}

    def preflight(self, plan: dict) -> None:
        """The job's pre-flight, from this host: a local point's problems stop the dry run; a Slurm
        point's paths this host cannot see are left to the job, and said so."""
        result = self.root / result_file(plan["recipe"], plan["point"])
        checked = Plan.from_json(plan)
        problems, notes = check_plan(checked, self.root, result, in_job=False)
        curve = self.recipes.get(plan["recipe"])
        warn_client(checked, curve.concurrency if curve else [])  # a curve beyond its client's cores
        self.preflight_problems += problems
        self.preflight_notes += notes

    def preflight_eval(self, r: Recipe, settings: dict) -> None:
        """An eval's questions in the cluster's datasets cache: a problem here, or on a Slurm cluster
        whose filesystems this host may not see, a note left to the job (which checks it first)."""
        field, c = f"evals.{settings['benchmark']}", self.cluster
        home = self.root / Path(c.hf_home or "~/.cache/huggingface").expanduser()
        try:
            problem_count(home, settings["benchmark"], settings["tasks"])
        except ValueError as e:
            if c.launcher == "slurm":
                note = f"{r.source}: {field}: not visible from this host ({e}); the job checks it first"
                self.preflight_notes.append(note)
            else:
                self.preflight_problems.append(Problem(r.source, field, str(e)))

    def selection_doc(self) -> dict:
        reported = self.reported()
        return {
            "cluster": self.cluster.name,
            "points": [
                {
                    "recipe": r.name,
                    "concurrency": c,
                    "result": result_file(r.name, c),
                    "scenario": r.doc["scenario"]["name"],
                    "log_dir": str(run_dir(r.name, c)),
                }
                for r in reported
                for c in r.concurrency
            ],
            # reporting settings: an edit reruns the summary, never a point
            "slo": {r.name: r.doc.get("slo") or {} for r in reported},
            "sweeps": {
                r.sweep_of: dict(r.sweep, not_run=self.not_run.get(r.sweep_of, {})) for r in reported if r.sweep_of
            },
            "eval_floors": {
                r.name: {b: e["floor"] for b, e in (r.doc.get("evals") or {}).items() if "floor" in e} for r in reported
            },
        }
