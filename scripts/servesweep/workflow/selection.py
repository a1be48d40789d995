"""The selection: every recipe validated, the points selected for one cluster, their plans rendered
(kept only as fingerprints and resources) and what each point's job asks for. It reads files and
never writes one: ``workflow/writer`` writes what the run needs from it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..checks.evalsets import problem_count
from ..checks.preflight import check_plan
from ..contract.paths import POINT_TARGET, capacity_file, plan_file, result_file, run_dir
from ..contract.plan import Plan, batch_step_tasks, stack_reuse_allowed
from ..fileio.errors import InputError, Problem
from ..fileio.yamlio import ParseCache
from ..render.cluster import all_clusters
from ..render.plan import layout, render_point
from ..render.recipe import Recipe, load_recipes
from ..render.topology import PlacementError
from . import why
from .capacity_search import CapacitySearches
from .engine_args import check_engine_args, pending
from .memo import RenderMemo
from .shared_stacks import SharedStacks

YAML_CACHE = ".snakemake/servesweep/recipes-parsed.json"
CHECK_S = 600  # a check's time in a job's limit (an eval's questions are counted only in the job)


@dataclass(frozen=True)
class Point:
    recipe: str
    conc: int

    @property
    def result(self) -> str:
        return result_file(self.recipe, self.conc)


class Selection:
    """Every recipe validated; the points selected for one cluster."""

    def __init__(
        self, root: Path, cluster: str, only: list[str] | None = None, targeted=None, scope=None, linger_s=None
    ):
        """``targeted``: () -> the recipes the run's targets name, or None (asked only when a recipe is
        broken); ``scope``: () -> (targets, forced) of this snakemake run, known only once the DAG is
        being built; ``linger_s``: --config linger_s for every recipe."""
        self.root = Path(root)
        self._layouts: dict = {}
        self._curves: dict = {}  # (recipe, rehearsal) -> the curve fingerprint of its plans
        self._first_render: dict = {}  # (recipe, conc) -> (plan, text) rendered for the argument check
        self.preflight_problems: list[Problem] = []
        self.preflight_notes: list[str] = []
        self.unchecked_args: dict[str, str] = {}  # "recipe file (kind)" -> why no parser checked it
        self.checked_args: dict[str, str] = {}  # "recipe file (kind)" -> the parser that did
        self._resources: dict = {}  # (recipe, conc, rehearsal) -> the plan's resources
        self._fingerprints: dict = {}  # (recipe, conc, rehearsal) -> the plan's fingerprint
        self._reuse: dict = {}  # recipe -> its points may share a warm stack
        self._memo_keys: dict = {}  # (recipe, rehearsal) -> its render memo key
        self.scope = scope or (lambda: (frozenset(), False))
        self.clusters = all_clusters(self.root / "profiles")
        if cluster not in self.clusters:
            known = ", ".join(sorted(self.clusters))
            raise InputError([Problem("config", "cluster", f"unknown cluster {cluster!r}; known: {known}")])
        self.cluster = self.clusters[cluster]
        files = sorted((self.root / "recipes").glob("*.yaml"))
        cache = ParseCache(self.root / YAML_CACHE)
        self.memo = RenderMemo(self.root)  # the writer saves it
        recipes, problems = load_recipes(files, self.clusters, root=self.root, cache=cache, verdicts=self.memo)
        # a broken recipe the run does not select is listed (entry prints it), never a stop
        named = set(only or ()) or (targeted() if problems and targeted else None)
        chosen = {f"recipes/{n}.yaml" for n in named} if named else None
        self.broken = [
            p for p in problems if chosen is not None and p.file.startswith("recipes/") and p.file not in chosen
        ]
        if len(problems) > len(self.broken):
            raise InputError([p for p in problems if p not in self.broken])
        cache.save()
        self.recipes: dict[str, Recipe] = {r.name: r for r in recipes}
        unknown = sorted(set(only or ()) - set(self.recipes))
        if unknown:
            raise InputError([Problem("config", "recipes", f"no such recipe(s): {', '.join(unknown)}")])
        self.selected = [r for r in recipes if cluster in r.clusters and (not only or r.name in only)]
        self.points = [Point(r.name, c) for r in self.selected for c in r.concurrency]
        self.searches = CapacitySearches(self)
        self._next_probe: dict[str, int | None] = {}  # recipe -> its capacity search's next probe
        self.stacks = SharedStacks(self)
        self.linger_override: float | None = linger_s

    def linger_s(self, recipe: str) -> float:
        """How long the recipe's stack stays up after its last point (stack.linger_s, --config linger_s)."""
        if self.linger_override is not None:
            return self.linger_override
        return float((self.recipes[recipe].doc.get("stack") or {}).get("linger_s", 0))

    def plan_resources(self, recipe: str, conc: int) -> dict:
        self._known(recipe, conc)
        return self._resources[(recipe, conc, False)]

    @property
    def submits_jobs(self) -> bool:
        """Whether points run as cluster jobs (which then need resources)."""
        return self.cluster.launcher != "local"

    def points_of(self, rehearsal: bool) -> list[Point]:
        """The points to render: the selected ones, or for rehearsal every point of every recipe."""
        if rehearsal:
            return [Point(r, c) for r in self.recipes for c in self.recipes[r].concurrency]
        return self.points

    def rendered(self, recipe: str, conc: int, rehearsal: bool = False) -> tuple[dict, str]:
        """The point's plan and its canonical text; its fingerprint, resources and reuse are kept."""
        self._check_point(recipe, conc, rehearsal)
        first = None if rehearsal else self._first_render.pop((recipe, conc), None)
        plan, text = first or self._render(recipe, conc, rehearsal)
        self._keep(recipe, conc, rehearsal, plan["resources"], plan["fingerprints"], plan["stack"]["reuse"])
        return plan, text

    def recall(self, recipe: str, conc: int, rehearsal: bool = False) -> bool:
        """Whether the point is known from the render memo (its plan file unchanged since): then
        nothing needs rendering or writing, and its fingerprint, resources and reuse are kept."""
        return self._recalled(recipe, conc, rehearsal) is not None

    def _recalled(self, recipe: str, conc: int, rehearsal: bool, data: bytes | None = None) -> dict | None:
        """The point's memo entry, when the memo vouches for its plan file (the entry is then kept)."""
        self._check_point(recipe, conc, rehearsal)
        path = os.path.join(self.root, plan_file(recipe, conc, rehearsal))  # a str path: 3 200 Path joins cost
        e = self.memo.recall(self.memo_key(recipe, rehearsal), conc, path, data)
        if e is not None:
            self._keep(recipe, conc, rehearsal, e["resources"], e, e["reuse"])
        return e

    def _check_point(self, recipe: str, conc: int, rehearsal: bool) -> None:
        r = self.recipes.get(recipe)
        if r is None or not (conc in r.concurrency if rehearsal else r.has_point(conc)):
            raise InputError([Problem(result_file(recipe, conc), "target", "no such point in any recipe")])

    def _keep(self, recipe: str, conc: int, rehearsal: bool, resources, fingerprints: dict, reuse) -> None:
        self._resources[(recipe, conc, rehearsal)] = resources
        self._fingerprints[(recipe, conc, rehearsal)] = fingerprints["plan"]
        self._curves[(recipe, rehearsal)] = fingerprints["curve"]
        self.stacks.keep(recipe, rehearsal, fingerprints["server"])
        self._reuse[recipe] = reuse and stack_reuse_allowed()

    def memo_key(self, recipe: str, rehearsal: bool) -> str:
        if (recipe, rehearsal) not in self._memo_keys:
            r = self.recipes[recipe]
            own = self.own_cluster(r) if rehearsal else self.cluster
            local = self.clusters["local"] if rehearsal else None
            self._memo_keys[(recipe, rehearsal)] = self.memo.key(r, own, local)
        return self._memo_keys[(recipe, rehearsal)]

    def _known(self, recipe: str, conc: int, rehearsal: bool = False) -> None:
        if (recipe, conc, rehearsal) not in self._resources and not self.recall(recipe, conc, rehearsal):
            self.rendered(recipe, conc, rehearsal)

    def curve_fingerprint(self, recipe: str, rehearsal: bool) -> str:
        return self._curves[(recipe, rehearsal)]

    def own_cluster(self, r: Recipe):
        return self.cluster if self.cluster.name in r.clusters else self.clusters[r.clusters[0]]

    def staleness(self) -> list:
        """Why each selected recipe's points would rerun (the dry run's cause lines)."""
        out = []
        for r in self.selected:
            fp = lambda c, name=r.name: self.fingerprint(name, c)  # noqa: E731
            self._known(r.name, r.concurrency[0])
            st = why.recipe_staleness(self.root, r, self.cluster, fp, self._curves[(r.name, False)])
            st.checks = why.check_staleness(self.root, r, fp(min(r.concurrency)))
            out.append(st)
        return out

    def fingerprint(self, recipe: str, conc: int) -> str:
        self._known(recipe, conc)
        return self._fingerprints[(recipe, conc, False)]

    def capacity(self, recipe: str):
        """(known probes, decision) of the recipe's capacity search."""
        known, decision = self.searches.decision(recipe)
        self._next_probe[recipe] = decision.next
        return known, decision

    def check_engine_args(self) -> None:
        """Every selected recipe's argv through its engines' own parsers, in one batch per venv."""
        checks = []
        for r in self.selected:
            plan, text = self._first_render[(r.name, r.concurrency[0])] = self._first_plan(r)
            checks += pending(plan, r)
        report = check_engine_args(checks, self.root)
        self.preflight_problems += report.problems
        self.unchecked_args = {f"{src} ({kind})": why for (src, kind), why in report.skipped.items()}
        self.checked_args = {f"{src} ({kind})": parser for (src, kind), parser in report.checked.items()}

    def preflight(self, plan: dict) -> None:
        """The job's pre-flight, from this host: a local point's problems stop the dry run; a Slurm
        point's paths this host cannot see are left to the job, and said so."""
        result = self.root / result_file(plan["recipe"], plan["point"])
        problems, notes = check_plan(Plan.from_json(plan), self.root, result, in_job=False)
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

    def drop_layouts(self) -> None:
        """Forget the per-recipe layouts once every plan is written (they would sit in Snakemake's heap)."""
        self._layouts.clear()

    def scenario_of(self, recipe: str) -> str:
        return f"scenario {self.recipes[recipe].doc['scenario']['name']}"

    def resources(self, recipe: str, conc: int, check: bool = False) -> dict:
        """What the point's job (``check``: a check's on the point's stack) asks the cluster for. The
        stale points of one server identity run as one Slurm job (a group summing the widths of its
        members): the first carries one startup plus every stale point's and declared eval's time and
        the plan's nodes and memory; the others, checks included, add nothing. A check with no stale
        point beside it asks for the stack alone: one startup and its own time."""
        self._known(recipe, conc)
        res = batch_step_tasks(self._resources[(recipe, conc, False)])
        stale = self.stacks.stale_points(recipe) if self._reuse[recipe] else []
        if check and stale:
            return dict(res, nodes=0, mem_mb=0, cpus_per_task=0, runtime_min=0, tasks=0)
        if check:
            return dict(res, runtime_min=math.ceil((res["startup_s"] + CHECK_S) / 60))
        if (recipe, conc) not in stale:
            return res
        if (recipe, conc) != stale[0]:
            return dict(res, nodes=0, mem_mb=0, cpus_per_task=0, runtime_min=0, tasks=0)
        evals = sum(len(self.recipes[m].evals) for m in self.stacks.mates(recipe))
        total = res["startup_s"] + sum(self._resources[(r, c, False)]["point_s"] for r, c in stale) + evals * CHECK_S
        return dict(res, runtime_min=math.ceil(total / 60))

    def reuse(self, recipe: str) -> bool:
        """Whether the recipe's points share a warm stack in this run (recipe and --config)."""
        return self._reuse.get(recipe, stack_reuse_allowed())

    def next_probe(self, recipe: str) -> int | None:
        return self._next_probe.get(recipe)

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

    def _first_plan(self, r: Recipe) -> tuple[dict, str]:
        """A curve's first plan, which the argument check and pre-flight read: from its file when
        the memo vouches for it, else rendered."""
        conc = r.concurrency[0]
        try:
            with open(os.path.join(self.root, plan_file(r.name, conc)), "rb") as f:
                data = f.read()
            if self._recalled(r.name, conc, False, data) is not None:
                text = data.decode()
                return json.loads(text), text
        except (OSError, ValueError):  # UnicodeDecodeError included
            pass
        return self._render(r.name, conc, False)

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
