"""What the Snakefile's rules ask (entry point: ``workflow.entry``): a :class:`Selection` to answer,
and every file the run reads from render written here, in one place: plans, their sources, the
capacity settings, the curve files, the missing-points and selection files. Plans are written
only when their canonical JSON changes, atomically, and only in the main snakemake process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..checks.evaldata import eval_data
from ..checks.evalsets import settings_doc
from ..contract import heartbeat
from ..contract.paths import (
    CAPACITY_PLOT,
    PROBE_PLAN_GLOB,
    REHEARSAL_SUMMARY_MD,
    SUMMARY_MD,
    bill_file,
    capacity_file,
    capacity_settings_file,
    damaged_marker,
    eval_settings_file,
    missing_file,
    plan_file,
    profile_plan_file,
    profile_settings_file,
    result_file,
    selection_file,
    source_file,
)
from ..contract.plan import STACK_REUSE_ENV, curve_doc, curve_file
from ..fileio.encode import canonical, digest
from ..fileio.files import read_json_object, write_if_changed
from ..render import profiling
from ..render.plan import render
from . import why
from .bill import bill_doc, stack_bills
from .selection import CHECK_S, Point, Selection


class Workflow:
    """The main process's answers to the rules (:class:`workflow.entry.RuleView`) and its writes."""

    def __init__(self, selection: Selection, canary: bool = True):
        self.sel = selection
        self.canary = canary  # --config canary: a held stack that died ends its configuration's other points
        self._will_run: dict = {}  # (recipe, rehearsal) -> points snakemake will run
        self._checks: dict[str, set[str]] = {}  # recipe -> the checks snakemake will run on its stack (a turn each)
        self._searching: set[str] = set()  # recipes whose search, part of this run, may ask for more probes
        # curve files are written only once jobs are about to run (onstart), never in a dry run and
        # never per job while the DAG is built: until then the curves to write are only noted
        self._running = False
        self._unwritten_curves: set = set()
        self._written: set = set()  # (recipe, conc, rehearsal) whose plan this run has written
        self.beat: heartbeat.Beat | None = None
        self._damaged: dict[str, set] = {}  # recipe -> its damaged results' marker names

    # what the rules read (the selection's answers)
    @property
    def points(self) -> list[Point]:
        return self.sel.points

    @property
    def searches(self):
        return self.sel.searches

    @property
    def recipes(self) -> dict:
        return self.sel.recipes

    @property
    def submits_jobs(self) -> bool:
        return self.sel.submits_jobs

    def resources(self, recipe: str, conc: int, check: bool = False) -> dict:
        return self.sel.resources(recipe, conc, check)

    def reuse(self, recipe: str) -> bool:
        return self.sel.reuse(recipe)

    def run_rank(self, recipe: str, rehearsal: bool) -> int:
        return self.sel.stacks.rank(recipe, rehearsal)

    def held_recipes(self) -> list[str]:
        """The selected recipes whose points run on a held stack (its own Slurm job): known once the
        plans are written (the server identities group them)."""
        return [r.name for r in self.sel.selected if self.sel.stacks.held(r.name)]

    def scenario_of(self, recipe: str) -> str:
        return self.sel.scenario_of(recipe)

    # what is written
    def write_plans(self, rehearsal: bool = False) -> None:
        """Render every selected point (rehearsal: every point of every recipe) and write the plans
        that changed, before the DAG is built: the point rule's input is then a plain path, and
        Snakemake's file inventory never sees a plan appear mid-build."""
        sel = self.sel
        if not rehearsal:
            sel.check_engine_args()
        points = sel.points_of(rehearsal)
        for p in points:
            self._write_plan(p.recipe, p.conc, rehearsal)
        self._write_sources(sorted({p.recipe for p in points}), rehearsal)
        if not rehearsal:  # each search's settings and probe plans
            for name in sel.searches.recipes:
                write_if_changed(sel.root / capacity_settings_file(name), canonical(sel.searches.settings_doc(name)))
                self._write_probe_plans(name)
            self._write_eval_settings()
            self._write_profiles()
        sel.index.drop_layouts()
        if not sel.preflight_problems:
            sel.index.memo.save()

    @property
    def evals(self) -> list[tuple[str, str]]:
        """(recipe, benchmark) of every selected recipe's accuracy benchmarks."""
        return [(r.name, b) for r in self.sel.selected for b in r.evals]

    def _write_eval_settings(self) -> None:
        """Each eval's settings beside the recipe's plans (an edit reruns that eval only), its
        questions checked in the cluster's datasets cache like a point's inputs."""
        home = self.sel.root / Path(self.sel.cluster.hf_home or "~/.cache/huggingface").expanduser()
        for r in self.sel.selected:
            for benchmark, settings in r.evals.items():
                doc = settings_doc(benchmark, settings)
                self.sel.preflight_eval(r, doc)
                doc["data"] = eval_data(home, benchmark, settings.get("tasks"))  # its questions' copy
                if not self.sel.preflight_problems:
                    write_if_changed(self.sel.root / eval_settings_file(r.name, benchmark), canonical(doc))

    def _write_profiles(self) -> None:
        """Each recipe's profile plan and settings (render/profiling), beside its points' plans: never one of them."""
        for r in self.sel.selected:
            conc = profiling.concurrency(r)
            if conc is not None and not self.sel.preflight_problems:
                plan, settings = profiling.profile_files(r, render(r, self.sel.cluster, conc))
                write_if_changed(self.sel.root / profile_plan_file(r.name, conc), canonical(plan))
                write_if_changed(self.sel.root / profile_settings_file(r.name, conc), canonical(settings))

    def _write_plan(self, recipe: str, conc: int, rehearsal: bool) -> None:
        """Once per point and run: the capacity rule asks for its next probe on every DAG update."""
        if (recipe, conc, rehearsal) in self._written:
            return
        self._written.add((recipe, conc, rehearsal))
        first = not rehearsal and conc == self.sel.recipes[recipe].concurrency[0]
        if not first and self.sel.index.recall(recipe, conc, rehearsal):
            return  # its plan file is what this render would write
        plan, text = self.sel.index.rendered(recipe, conc, rehearsal)
        if first:  # one pre-flight per curve
            self.sel.preflight(plan)
        if not self.sel.preflight_problems:
            write_if_changed(self.sel.root / self.sel.index.plan_path(recipe, conc, rehearsal), text)

    def _write_probe_plans(self, recipe: str) -> None:
        """The next probe's plan, and those of earlier probes outside the concurrencies rendered again
        (a recipe edit then reruns them; a probe decided mid-run gets its plan from a job)."""
        _known, decision = self.sel.capacity(recipe)
        probes = {decision.next} if decision.next is not None else set()
        bounds = self.sel.searches.bounds(recipe)
        for path in (self.sel.root / plan_file(recipe, 1, probe=True)).parent.glob(PROBE_PLAN_GLOB):
            conc = path.stem.removeprefix("probe-c")
            probes |= {int(conc)} if conc.isdigit() and int(conc) in bounds else set()
        for conc in sorted(probes):
            self._write_plan(recipe, conc, False)

    def _write_sources(self, recipes: list[str], rehearsal: bool) -> None:
        """Next to each recipe's plans, what they were rendered from (the driver copies it into
        results, so a later dry run can say in recipe terms why a point is stale)."""
        if self.sel.preflight_problems:
            return
        for name in recipes:
            curve = self.sel.index.curve_fingerprint(name, rehearsal)
            made_from = f"{self.sel.index.memo_key(name, rehearsal)} {curve}"  # the recipe, its clusters and the code

            def source(name=name, curve=curve) -> str:
                r = self.sel.recipes[name]
                own = self.sel.index.own_cluster(r) if rehearsal else self.sel.cluster
                return canonical(why.source_doc(r, own, rehearsal, curve, self.sel.index.data(name, rehearsal)))

            self._write_made(self.sel.root / source_file(name, rehearsal), made_from, source)

    def _write_made(self, path: Path, made_from: str, text) -> None:
        """Write ``text()`` to ``path`` unless the memo saw it written from ``made_from`` and unchanged since."""
        memo = self.sel.index.memo
        if not memo.file_current(path, made_from):
            write_if_changed(path, text())
            memo.file_written(path, made_from)

    def capacity(self, recipe: str):
        """(known probes, decision) of the recipe's capacity search (the next probe's plan is written
        before the DAG is built, or by its own job once a checkpoint decides it)."""
        return self.sel.capacity(recipe)

    def plan_path(self, recipe: str, conc: int) -> str:
        return self.sel.index.plan_path(recipe, conc)

    def damaged(self, recipe: str, conc: int) -> list[str]:
        """The dry run's marker of the point's damaged result (why.quarantine), an input of its rule
        so `snakemake -n` lists it; none in a real run (the result was moved aside)."""
        concs = self._damaged.get(recipe)
        if concs is None:
            try:
                names = os.listdir(self.sel.root / damaged_marker(recipe, 1).rsplit("/", 1)[0])
            except OSError:
                names = []
            concs = self._damaged[recipe] = {n[1:-8] for n in names if n.endswith(".damaged")}
        return [damaged_marker(recipe, conc)] if concs and str(conc) in concs else []

    def recipe_source(self, recipe: str) -> str:
        return self.sel.recipes[recipe].source

    def capacity_curve(self, recipe: str) -> str:
        """The curve file of the search's stack, which its capacity job takes the search off; none
        when its points reuse no stack."""
        return curve_file(self.sel.stacks.server(recipe), False) if self.sel.reuse(recipe) else ""

    def write_missing(self, rehearsal: bool = False) -> str:
        """An input of the summary that is newer than it whenever a selected result is missing.

        Snakemake (since 7.7) does not rebuild a deleted intermediate file when what was built from
        it is up to date, so a deleted result would never rerun under ``results/summary.md``. This
        file is rewritten when results go missing after the summary was built; the summary is then
        stale, and its missing inputs are rebuilt with it."""
        sel = self.sel
        path = sel.root / missing_file(sel.cluster.name, rehearsal)
        missing = [result_file(p.recipe, p.conc, rehearsal) for p in sel.points]
        missing += [] if rehearsal else [capacity_file(r) for r in sel.searches.recipes]
        missing = [m for m in missing if not os.path.exists(os.path.join(sel.root, m))]
        summary = sel.root / (REHEARSAL_SUMMARY_MD if rehearsal else SUMMARY_MD)
        old = read_json_object(path)
        built_since = summary.exists() and path.exists() and summary.stat().st_mtime >= path.stat().st_mtime
        if not path.exists() or (missing and (missing != old.get("missing") or built_since)):
            write_if_changed(path, canonical({"missing": missing, "noticed": time.time()}))
        return missing_file(sel.cluster.name, rehearsal)

    def will_run(self, recipe: str, conc: int, rehearsal: bool = False) -> None:
        """Snakemake runs this point: the curve file then tells the stack keeper exactly how many
        points to expect."""
        points = self._will_run.setdefault((recipe, rehearsal), set())
        if conc not in points:
            points.add(conc)
            self._write_curve(recipe, rehearsal)

    def smoke_point(self, recipe: str) -> int:
        """The point whose plan (and so whose stack) the recipe's API smoke uses: its lowest concurrency."""
        return min(self.sel.recipes[recipe].concurrency)

    def will_check(self, recipe: str, check: str) -> None:
        """Snakemake runs one of the recipe's checks: one more turn its stack's keeper waits for."""
        checks = self._checks.setdefault(recipe, set())
        if check not in checks:
            checks.add(check)
            self._write_curve(recipe, False)

    def start_running(self, points=(), checks=(), searches=()) -> None:
        """Snakemake is about to run jobs (its onstart hook; ``points``, ``checks``, ``searches``: those
        its DAG runs, workflow/smk.jobs_to_run): write every curve, once. A search's later probes are
        not counted: its recipe stays in the curve's ``searching`` until its capacity job runs."""
        for recipe in searches:
            if not self.sel.capacity(recipe)[1].done:
                self._searching.add(recipe)
                self._unwritten_curves.add((recipe, False))
                self._drop_undecided(recipe)
        for recipe, conc, rehearsal in points:
            self.will_run(recipe, conc, rehearsal)
        for recipe, check in checks:
            self.will_check(recipe, check)
        self._running = True
        if self.sel.submits_jobs and self.beat is None:  # jobs on other nodes stop when this process is gone
            self.beat = heartbeat.start(self.sel.root)
        for recipe, rehearsal in sorted(self._unwritten_curves):
            self._write_curve(recipe, rehearsal)
        self._unwritten_curves.clear()
        if self.sel.submits_jobs:  # the bill as jobs start (the run's targets known by now)
            bills = stack_bills(self.sel)
            if bills:
                when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
                write_if_changed(self.sel.root / bill_file(self.sel.cluster.name), canonical(bill_doc(bills, when)))

    def _drop_undecided(self, recipe: str) -> None:
        """A search this run resumes (its capacity job runs, more probes to come): its earlier
        capacity.json no longer holds, and while it exists Snakemake stops the search after its first
        new probe (a checkpoint re-evaluation treats the capacity job as done). Its job rewrites it;
        the probes' results stay."""
        for path in (capacity_file(recipe), CAPACITY_PLOT.format(recipe=recipe)):
            (self.sel.root / path).unlink(missing_ok=True)

    def _write_curve(self, recipe: str, rehearsal: bool) -> None:
        """The curve file of the recipe's stack: the points of every recipe on it (same servers)."""
        if not self._running:
            self._unwritten_curves.add((recipe, rehearsal))
            return
        if not self.sel.reuse(recipe):
            return  # its points start stacks of their own
        stacks = self.sel.stacks
        mates = stacks.mates(recipe, rehearsal)
        points = [(m, c) for m in mates for c in sorted(self._will_run.get((m, rehearsal), ()))]
        searching = [] if rehearsal else [m for m in mates if m in self._searching]
        server, linger = stacks.server(recipe, rehearsal), stacks.linger_s(recipe, rehearsal)
        checks = sum(len(self._checks.get(m, ())) for m in mates)
        held_s = stacks.points_s(recipe, points) + checks * CHECK_S if not rehearsal and stacks.held(recipe) else 0
        doc = curve_doc(len(points) + checks, searching, linger, held_s, self.canary)
        write_if_changed(self.sel.root / curve_file(server, rehearsal), canonical(doc))

    def write_selection(self) -> str:
        """The selected points and reporting settings (the summary's input); the memo saved last."""
        sel = self.sel
        path = selection_file(sel.cluster.name)
        made_from = digest(canonical([sel.cluster.name, [sel.index.memo_key(r.name, False) for r in sel.selected]]))
        self._write_made(sel.root / path, made_from, lambda: canonical(sel.selection_doc()))
        if not sel.preflight_problems:
            sel.index.memo.save()
        return path


def allow_stack_reuse(allowed: bool) -> None:
    """--config stack_reuse=0|1 for a whole run: rendering and every point driver (they inherit
    snakemake's environment, also in cluster jobs, whose nested snakemake sets it again) read it."""
    os.environ[STACK_REUSE_ENV] = "1" if allowed else "0"
