"""What the Snakefile needs: the selection, plan paths, resources (entry point: ``render.entry``).

Validation and rendering run only in the main snakemake process (plans are
written only when their canonical JSON changes, atomically).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..contract import STACK_REUSE_ENV, Plan, curve_doc, curve_file, stack_reuse_allowed
from ..encode import canonical
from ..errors import InputError, Problem
from ..files import read_json_object, write_if_changed
from ..paths import (
    POINT_TARGET,
    REHEARSAL_SUMMARY_MD,
    SUMMARY_MD,
    capacity_file,
    missing_file,
    plan_file,
    result_file,
    run_dir,
    selection_file,
    source_file,
)
from ..preflight import check_plan
from ..yamlio import ParseCache
from . import why
from .capacity_search import CapacitySearches
from .cluster import all_clusters
from .engine_args import check_engine_args, pending
from .plan import layout, render_point
from .recipe import Recipe, load_recipes
from .topology import PlacementError

YAML_CACHE = ".snakemake/servesweep/recipes-parsed.json"


@dataclass(frozen=True)
class Point:
    recipe: str
    conc: int

    @property
    def result(self) -> str:
        return result_file(self.recipe, self.conc)


class Selection:
    """Every recipe validated; the points selected for one cluster."""

    def __init__(self, root: Path, cluster: str, only: list[str] | None = None):
        self.root = Path(root)
        self._layouts: dict = {}
        self._curves: dict = {}  # (recipe, rehearsal) -> the curve fingerprint of its plans
        self._first_render: dict = {}  # (recipe, conc) -> (plan, text) rendered for the argument check
        self.preflight_problems: list[Problem] = []
        self.preflight_notes: list[str] = []
        self.unchecked_args: dict[str, str] = {}  # "recipe file (kind)" -> why no parser checked it
        self.checked_args: dict[str, str] = {}  # "recipe file (kind)" -> the parser that did
        self._resources: dict = {}  # (recipe, conc, rehearsal) -> the written plan's resources
        self._fingerprints: dict = {}  # (recipe, conc, rehearsal) -> the written plan's fingerprint
        self._reuse: dict = {}  # recipe -> its points may share a warm stack
        self._will_run: dict = {}  # (recipe, rehearsal) -> points snakemake will run
        # curve files are written only once jobs are about to run (onstart), never in a dry run and
        # never per job while the DAG is built: until then the curves to write are only noted
        self._running = False
        self._unwritten_curves: set = set()
        # () -> (targets, forced) of this snakemake run; known only once the DAG is being built
        self.scope = lambda: (frozenset(), False)
        self.clusters = all_clusters(self.root / "profiles")
        if cluster not in self.clusters:
            known = ", ".join(sorted(self.clusters))
            raise InputError([Problem("config", "cluster", f"unknown cluster {cluster!r}; known: {known}")])
        self.cluster = self.clusters[cluster]
        files = sorted((self.root / "recipes").glob("*.yaml"))
        cache = ParseCache(self.root / YAML_CACHE)
        recipes, problems = load_recipes(files, self.clusters, root=self.root, cache=cache)
        if problems:
            raise InputError(problems)
        cache.save()
        self.recipes: dict[str, Recipe] = {r.name: r for r in recipes}
        unknown = sorted(set(only or ()) - set(self.recipes))
        if unknown:
            raise InputError([Problem("config", "recipes", f"no such recipe(s): {', '.join(unknown)}")])
        self.selected = [r for r in recipes if cluster in r.clusters and (not only or r.name in only)]
        self.points = [Point(r.name, c) for r in self.selected for c in r.concurrency]
        self.searches = CapacitySearches(self)
        self._next_probe: dict[str, int | None] = {}  # recipe -> its capacity search's next probe
        self._searching: dict[str, bool] = {}  # recipe -> the search, part of this run, wants more probes

    @staticmethod
    def plan_file(recipe: str, conc: int, rehearsal: bool = False) -> str:
        return plan_file(recipe, conc, rehearsal)

    def write_plans(self, rehearsal: bool = False) -> None:
        """Render every selected point (rehearsal: every point of every recipe) and write
        the plans that changed. Done before the DAG is built, so the point rule's input
        is a plain path and Snakemake's file inventory never sees a plan appear mid-build.
        Only each plan's resources are kept: the rest would sit in Snakemake's heap, and
        every garbage collection of its DAG build would walk it again.
        """
        points = [Point(r, c) for r in self.recipes for c in self.recipes[r].concurrency] if rehearsal else self.points
        if not rehearsal:
            self._check_engine_args()
        for p in points:
            self.plan_path(p.recipe, p.conc, rehearsal)
        self._write_sources(sorted({p.recipe for p in points}), rehearsal)
        if not rehearsal:  # the plans of the probes known so far and of the next one of each search
            self.searches.write_settings()
            for recipe in self.searches.recipes:
                self.capacity(recipe, asked=False)
        self._layouts.clear()

    def plan_path(self, recipe: str, conc: int, rehearsal: bool = False) -> str:
        """The point's plan file (rendered and written if not done yet)."""
        r = self.recipes.get(recipe)
        if r is None or not (conc in r.concurrency if rehearsal else r.has_point(conc)):
            raise InputError([Problem(result_file(recipe, conc), "target", "no such point in any recipe")])
        path = self.plan_file(recipe, conc, rehearsal)
        key = (recipe, conc, rehearsal)
        if key not in self._resources:
            first = None if rehearsal else self._first_render.pop((recipe, conc), None)
            plan, text = first or self._render(recipe, conc, rehearsal)
            if not rehearsal and conc == r.concurrency[0]:  # what a point reads and runs is the same for the curve
                self._preflight(plan)
            if not self.preflight_problems:
                write_if_changed(self.root / path, text)
            self._resources[key] = plan["resources"]
            self._fingerprints[key] = plan["fingerprints"]["plan"]
            self._curves[(recipe, rehearsal)] = plan["fingerprints"]["curve"]
            self._reuse[recipe] = plan["stack"]["reuse"] and stack_reuse_allowed()
        return path

    def _write_sources(self, recipes: list[str], rehearsal: bool) -> None:
        """Next to each recipe's plans, what they were rendered from (the driver copies it into
        results, so a later dry run can say in recipe terms why a point is stale)."""
        if self.preflight_problems:
            return
        for name in recipes:
            r = self.recipes[name]
            own = self._own_cluster(r) if rehearsal else self.cluster
            doc = why.source_doc(r, own, rehearsal, self._curves[(name, rehearsal)])
            write_if_changed(self.root / source_file(name, rehearsal), canonical(doc))

    def _own_cluster(self, r: Recipe):
        return self.cluster if self.cluster.name in r.clusters else self.clusters[r.clusters[0]]

    def staleness(self) -> list:
        """Why each selected recipe's points would rerun (the dry run's cause lines)."""
        out = []
        for r in self.selected:
            fp = lambda c, name=r.name: self.fingerprint(name, c)  # noqa: E731
            out.append(why.recipe_staleness(self.root, r, self.cluster, fp, self._curves[(r.name, False)]))
        return out

    def fingerprint(self, recipe: str, conc: int) -> str:
        self.plan_path(recipe, conc)
        return self._fingerprints[(recipe, conc, False)]

    def capacity(self, recipe: str, asked: bool = True):
        """(known probes, decision) of the recipe's capacity search. ``asked``: the search is part of
        this run, so the stack keeper of its curve is told whether more probes will come (it then
        stays warm between them)."""
        known, decision = self.searches.decision(recipe)
        self._next_probe[recipe] = decision.next
        if asked and self._searching.get(recipe) != (not decision.done):
            self._searching[recipe] = not decision.done
            self._write_curve(recipe, False)
        return known, decision

    def _check_engine_args(self) -> None:
        """Every selected recipe's argv through its engines' own parsers, in one batch per venv."""
        checks = []
        for r in self.selected:
            plan, text = self._first_render[(r.name, r.concurrency[0])] = self._render(r.name, r.concurrency[0], False)
            checks += pending(plan, r)
        report = check_engine_args(checks, self.root)
        self.preflight_problems += report.problems
        self.unchecked_args = {f"{src} ({kind})": why for (src, kind), why in report.skipped.items()}
        self.checked_args = {f"{src} ({kind})": parser for (src, kind), parser in report.checked.items()}

    def _preflight(self, plan: dict) -> None:
        """The job's pre-flight, from this host: a local point's problems stop the dry run; a Slurm
        point's paths this host cannot see are left to the job, and said so."""
        result = self.root / result_file(plan["recipe"], plan["point"])
        problems, notes = check_plan(Plan.from_json(plan), self.root, result, in_job=False)
        self.preflight_problems += problems
        self.preflight_notes += notes

    def scenario_of(self, recipe: str) -> str:
        return f"scenario {self.recipes[recipe].doc['scenario']['name']}"

    def resources(self, recipe: str, conc: int) -> dict:
        """What the point's job asks the cluster for. A curve's stale points run as one Slurm
        job (a group summing its members' resources): the first carries one startup plus every
        stale point's time and the plan's nodes and memory; the others add nothing."""
        self.plan_path(recipe, conc)
        res = batch_step_tasks(self._resources[(recipe, conc, False)])
        stale = self.curve_points(recipe) if self._reuse[recipe] else []
        if not stale or conc not in stale:
            return res
        if conc != stale[0]:
            return dict(res, nodes=0, mem_mb=0, cpus_per_task=0, runtime_min=0, tasks=0)

        total = res["startup_s"] + sum(self._resources[(recipe, c, False)]["point_s"] for c in stale)
        return dict(res, runtime_min=math.ceil(total / 60))

    def reuse(self, recipe: str) -> bool:
        """Whether the recipe's points share a warm stack in this run (recipe and --config)."""
        return self._reuse.get(recipe, stack_reuse_allowed())

    def curve_points(self, recipe: str) -> list[int]:
        """The recipe's points this run will execute: those requested (by name, or all through an
        aggregate target) that are stale, or all requested ones when forced; with the next probe of
        its capacity search when that is requested too (the probe then shares the curve's job)."""
        targets, forced = self.scope()
        sweep, probe = self.recipes[recipe].concurrency, self._next_probe.get(recipe)
        if targets and all(POINT_TARGET.fullmatch(t) or t.endswith("/capacity.json") for t in targets):
            points = [c for c in sweep if result_file(recipe, c) in targets]
            points += [probe] if probe is not None and capacity_file(recipe) in targets else []
        else:
            points = sweep + ([probe] if probe is not None else [])
        points = sorted(set(points))
        if forced:
            return points
        stale = set(self.stale_guess(recipe, points))
        return [c for c in points if c in stale]

    def stale_guess(self, recipe: str, points: list[int]) -> list[int]:
        """Of ``points``, those whose result is missing or from another plan (what snakemake will
        run unless told otherwise), in ascending concurrency."""
        out = []
        for c in sorted(points):
            path = self.root / result_file(recipe, c)
            if (recipe, c, False) not in self._fingerprints:
                continue
            try:
                done = json.loads(path.read_bytes())["identity"]["plan_fingerprint"]
            except (OSError, ValueError, KeyError, TypeError):
                done = None
            if done != self._fingerprints[(recipe, c, False)]:
                out.append(c)
        return out

    def write_missing(self, rehearsal: bool = False) -> str:
        """An input of the summary that is newer than it whenever a selected result is missing.

        Snakemake (since 7.7) does not rebuild a deleted intermediate file when what was built from
        it is up to date, so a deleted result would never rerun under ``results/summary.md``. This
        file is rewritten when results go missing after the summary was built; the summary is then
        stale, and its missing inputs are rebuilt with it."""
        path = self.root / missing_file(self.cluster.name, rehearsal)
        missing = [result_file(p.recipe, p.conc, rehearsal) for p in self.points]
        missing += [] if rehearsal else [capacity_file(r) for r in self.searches.recipes]
        missing = [m for m in missing if not (self.root / m).exists()]
        summary = self.root / (REHEARSAL_SUMMARY_MD if rehearsal else SUMMARY_MD)
        old = read_json_object(path)
        built_since = summary.exists() and path.exists() and summary.stat().st_mtime >= path.stat().st_mtime
        if not path.exists() or (missing and (missing != old.get("missing") or built_since)):
            write_if_changed(path, canonical({"missing": missing, "noticed": time.time()}))
        return missing_file(self.cluster.name, rehearsal)

    def will_run(self, recipe: str, conc: int, rehearsal: bool = False) -> None:
        """Snakemake decided this point runs (called once per job it will run, before any starts):
        the curve file then tells the stack keeper exactly how many points to expect."""
        points = self._will_run.setdefault((recipe, rehearsal), set())
        if conc not in points:
            points.add(conc)
            self._write_curve(recipe, rehearsal)

    def start_running(self) -> None:
        """Snakemake is about to run jobs (its onstart hook): write every curve noted so far; from now
        on (new probes after a checkpoint) each change is written at once."""
        self._running = True
        for recipe, rehearsal in sorted(self._unwritten_curves):
            self._write_curve(recipe, rehearsal)
        self._unwritten_curves.clear()

    def _write_curve(self, recipe: str, rehearsal: bool) -> None:
        if not self._running:
            self._unwritten_curves.add((recipe, rehearsal))
            return
        expected = len(self._will_run.get((recipe, rehearsal), ()))
        searching = not rehearsal and self._searching.get(recipe, False)
        write_if_changed(self.root / curve_file(recipe, rehearsal), canonical(curve_doc(expected, searching)))

    def _render(self, recipe: str, conc: int, rehearsal: bool) -> tuple[dict, str]:
        """(plan, its canonical text)."""
        try:
            return self._render_or_raise(recipe, conc, rehearsal)
        except PlacementError as e:
            raise InputError([Problem(self.recipes[recipe].source, f, r) for f, r in e.issues]) from None

    def _render_or_raise(self, recipe: str, conc: int, rehearsal: bool) -> tuple[dict, str]:
        r = self.recipes[recipe]
        if rehearsal:  # the recipe's own layout (selected cluster if it runs there), run locally
            own = self._own_cluster(r)
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

    def selection_doc(self) -> dict:
        return {
            "cluster": self.cluster.name,
            "points": [
                {
                    "recipe": p.recipe,
                    "concurrency": p.conc,
                    "result": p.result,
                    "scenario": self.recipes[p.recipe].doc["scenario"]["name"],
                    "log_dir": str(run_dir(p.recipe, p.conc)),
                }
                for p in self.points
            ],
            # reporting settings: an edit reruns the summary, never a point
            "slo": {r.name: r.doc.get("slo") or {} for r in self.selected},
        }

    def write_selection(self) -> str:
        path = selection_file(self.cluster.name)
        write_if_changed(self.root / path, canonical(self.selection_doc()))
        return path


def allow_stack_reuse(allowed: bool) -> None:
    """--config stack_reuse=0|1 for a whole run: rendering and every point driver (they inherit
    snakemake's environment, also in cluster jobs, whose nested snakemake sets it again) read it."""
    os.environ[STACK_REUSE_ENV] = "1" if allowed else "0"


def batch_step_tasks(res: dict) -> dict:
    """Task geometry for running the driver in the job's batch step (the rule's ``mpi`` resource):
    the Slurm plugin wants more than one task for such a job and at least one per node; the plan's
    CPUs are split over them so the job asks for no more CPUs than one task would."""
    tasks = max(2, res["nodes"])
    return dict(res, tasks=tasks, cpus_per_task=math.ceil(res["cpus_per_task"] / tasks))
