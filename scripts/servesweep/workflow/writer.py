"""Every file the run reads from render, written here in one place (the answers to the rules are
``workflow/rulekit``'s, which only read): plans, their sources, the capacity settings, the curve
files, the missing-points and selection files, the render memo and the YAML parse cache. Two steps
write: :meth:`RunFiles.write_plans` and the rest of ``workflow.entry``'s load before the DAG is
built, :meth:`RunFiles.start_running` (the onstart hook) once it is final. Plans are written only
when their canonical JSON changes, atomically, and only in the main snakemake process.
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
    eval_file,
    eval_settings_file,
    missing_file,
    plan_file,
    profile_plan_file,
    profile_settings_file,
    result_file,
    selection_file,
    source_file,
)
from ..contract.plan import STACK_REUSE_ENV, curve_doc, curve_file, halving_decided
from ..fileio.encode import canonical, digest
from ..fileio.files import read_json_object, write_if_changed
from ..render import profiling
from ..render.plan import render
from . import why
from .bill import bill_doc, stack_bills, trials_bills
from .selection import CHECK_S, Selection

DECIDING_MARGIN_S = 90.0  # a deciding stack's wait beyond its sweep's screens' bound


def _outdated(out: Path, inputs: list[Path]) -> bool:
    """Whether Snakemake runs the job that makes ``out`` by its mtime rule (missing, or older than an
    input): a job added mid-run, after the onstart hook counted the DAG's."""
    try:
        made = out.stat().st_mtime
    except OSError:
        return True
    return any(p.stat().st_mtime > made for p in inputs if p.exists())


class RunFiles:
    """The main process's writes, from its :class:`Selection`."""

    def __init__(self, selection: Selection, canary: bool = True):
        self.selection = selection
        self.canary = canary  # --config canary: a held stack that died ends its configuration's other points
        self._will_run: dict = {}  # (recipe, rehearsal) -> points snakemake will run
        self._checks: dict[str, set[str]] = {}  # recipe -> the checks snakemake will run on its stack (a turn each)
        self._searching: set[str] = set()  # recipes whose search, part of this run, may ask for more probes
        self._deciding: set[str] = set()  # halving screens whose sweep waits for its screens in this run
        self._deciding_until = 0.0  # when their stacks wait no longer (the screens' bound, one after another)
        self._chosen: set[str] = set()  # variants a search chose (search_chose)
        # curve files are written only once jobs are about to run (onstart), never in a dry run and
        # never per job while the DAG is built: until then the curves to write are only noted
        self._running = False
        self._unwritten_curves: set = set()
        self._written: set = set()  # (recipe, conc, rehearsal) whose plan this run has written
        self.beat: heartbeat.Beat | None = None

    def write_plans(self, rehearsal: bool = False) -> None:
        """Render every selected point (rehearsal: every point of every recipe) and write the plans
        that changed, before the DAG is built: the point rule's input is then a plain path, and
        Snakemake's file inventory never sees a plan appear mid-build."""
        sel = self.selection
        if not rehearsal:
            sel.parse_cache.save()  # the recipes the selection parsed, kept for the next run
            sel.check_engine_args()
        points = sel.points_of(rehearsal)
        for p in points:
            self._write_plan(p.recipe, p.conc, rehearsal)
        self._write_sources(sorted({p.recipe for p in points}), rehearsal)
        if not rehearsal:  # each search's settings and probe plans (a variant's a search may choose too)
            for name in sel.searches.recipes + sel.searches.candidates:
                write_if_changed(sel.root / capacity_settings_file(name), canonical(sel.searches.settings_doc(name)))
                self._write_probe_plans(name)
            self._write_eval_settings()
            self._write_profiles()
        sel.index.drop_layouts()
        if not sel.preflight_problems:
            sel.index.memo.save()

    def _write_eval_settings(self) -> None:
        """Each eval's settings beside the recipe's plans (an edit reruns that eval only), its
        questions checked in the cluster's datasets cache like a point's inputs."""
        home = self.selection.root / Path(self.selection.cluster.hf_home or "~/.cache/huggingface").expanduser()
        for r in self.selection.selected + self.selection.waiting():
            for benchmark, settings in r.evals.items():
                doc = settings_doc(benchmark, settings)
                self.selection.preflight_eval(r, doc)
                doc["data"] = eval_data(home, benchmark, settings.get("tasks"))  # its questions' copy
                if not self.selection.preflight_problems:
                    write_if_changed(self.selection.root / eval_settings_file(r.name, benchmark), canonical(doc))

    def _write_profiles(self) -> None:
        """Each recipe's profile plan and settings (render/profiling), beside its points' plans (shared: the
        point's plan at the profile's concurrency; own: a plan of its own)."""
        for r in self.selection.selected:
            conc = profiling.concurrency(r)
            if conc is not None and not self.selection.preflight_problems:
                plan, settings = profiling.profile_files(r, render(r, self.selection.cluster, conc))
                write_if_changed(self.selection.root / profile_plan_file(r.name, conc), canonical(plan))
                write_if_changed(self.selection.root / profile_settings_file(r.name, conc), canonical(settings))

    def _write_plan(self, recipe: str, conc: int, rehearsal: bool) -> None:
        """Once per point and run (a search's next probe may be one of the sweep's points)."""
        if (recipe, conc, rehearsal) in self._written:
            return
        self._written.add((recipe, conc, rehearsal))
        first = not rehearsal and conc == self.selection.recipes[recipe].concurrency[0]
        if not first and self.selection.index.recall(recipe, conc, rehearsal):
            return  # its plan file is what this render would write
        plan, text = self.selection.index.rendered(recipe, conc, rehearsal)
        if first:  # one pre-flight per curve
            self.selection.preflight(plan)
        if not self.selection.preflight_problems:
            write_if_changed(self.selection.root / self.selection.index.plan_path(recipe, conc, rehearsal), text)

    def _write_probe_plans(self, recipe: str) -> None:
        """The next probe's plan, and those of earlier probes outside the concurrencies rendered again
        (a recipe edit then reruns them; a probe decided mid-run gets its plan from a job)."""
        _known, decision = self.selection.capacity(recipe)
        probes = {decision.next} if decision.next is not None else set()
        bounds = self.selection.searches.bounds(recipe)
        for path in (self.selection.root / plan_file(recipe, 1, probe=True)).parent.glob(PROBE_PLAN_GLOB):
            conc = path.stem.removeprefix("probe-c")
            probes |= {int(conc)} if conc.isdigit() and int(conc) in bounds else set()
        for conc in sorted(probes):
            self._write_plan(recipe, conc, False)

    def _write_sources(self, recipes: list[str], rehearsal: bool) -> None:
        """Next to each recipe's plans, what they were rendered from (the driver copies it into
        results, so a later dry run can say in recipe terms why a point is stale)."""
        sel = self.selection
        if sel.preflight_problems:
            return
        for name in recipes:
            curve = sel.index.curve_fingerprint(name, rehearsal)
            made_from = f"{sel.index.memo_key(name, rehearsal)} {curve}"  # the recipe, its clusters and the code

            def source(name=name, curve=curve) -> str:
                r = sel.recipes[name]
                own = sel.index.own_cluster(r) if rehearsal else sel.cluster
                return canonical(why.source_doc(r, own, rehearsal, curve, sel.index.data(name, rehearsal)))

            self._write_made(sel.root / source_file(name, rehearsal), made_from, source)

    def _write_made(self, path: Path, made_from: str, text) -> None:
        """Write ``text()`` to ``path`` unless the memo saw it written from ``made_from`` and unchanged since."""
        memo = self.selection.index.memo
        if not memo.file_current(path, made_from):
            write_if_changed(path, text())
            memo.file_written(path, made_from)

    def write_missing(self, rehearsal: bool = False) -> None:
        """An input of the summary that is newer than it whenever a selected result is missing.

        Snakemake (since 7.7) does not rebuild a deleted intermediate file when what was built from
        it is up to date, so a deleted result would never rerun under ``results/summary.md``. This
        file is rewritten when results go missing after the summary was built; the summary is then
        stale, and its missing inputs are rebuilt with it."""
        sel = self.selection
        path = sel.root / missing_file(sel.cluster.name, rehearsal)
        missing = [result_file(p.recipe, p.conc, rehearsal) for p in sel.points]
        missing += [] if rehearsal else [capacity_file(r) for r in sel.searches.recipes]
        missing = [m for m in missing if not os.path.exists(os.path.join(sel.root, m))]
        summary = sel.root / (REHEARSAL_SUMMARY_MD if rehearsal else SUMMARY_MD)
        old = read_json_object(path)
        built_since = summary.exists() and path.exists() and summary.stat().st_mtime >= path.stat().st_mtime
        if not path.exists() or (missing and (missing != old.get("missing") or built_since)):
            write_if_changed(path, canonical({"missing": missing, "noticed": time.time()}))

    def will_run(self, recipe: str, conc: int, rehearsal: bool = False) -> None:
        """Snakemake runs this point: the curve file then tells the stack keeper exactly how many
        points to expect."""
        points = self._will_run.setdefault((recipe, rehearsal), set())
        if conc not in points:
            points.add(conc)
            self._write_curve(recipe, rehearsal)

    def will_check(self, recipe: str, check: str) -> None:
        """Snakemake runs one of the recipe's checks: one more turn its stack's keeper waits for."""
        checks = self._checks.setdefault(recipe, set())
        if check not in checks:
            checks.add(check)
            self._write_curve(recipe, False)

    def start_running(self, points=(), checks=(), searches=(), summarized: bool = False) -> None:
        """Snakemake is about to run jobs (its onstart hook; ``points``, ``checks``, ``searches``: those
        its DAG runs, workflow/smk.jobs_to_run): write every curve, once. A search's later probes are
        not counted: its recipe stays in the curve's ``searching`` until its capacity job runs."""
        sel = self.selection
        for recipe in searches:
            if not sel.capacity(recipe)[1].done:
                self._searching.add(recipe)
                self._unwritten_curves.add((recipe, False))
                self._drop_undecided(recipe)
        if summarized:  # the summary decides each waiting halving sweep: its screens' stacks wait for it
            self._wait_for_decisions()
        for recipe, conc, rehearsal in points:
            self.will_run(recipe, conc, rehearsal)
        for recipe, check in checks:
            own = check.startswith("profile-") and not profiling.shared(sel.recipes[recipe])
            if not own:  # a profile on a stack of its own is no turn on the points' stack
                self.will_check(recipe, check)
        self._running = True
        if sel.index.submits_jobs and self.beat is None:  # jobs on other nodes stop when this process is gone
            self.beat = heartbeat.start(sel.root)
        for recipe, rehearsal in sorted(self._unwritten_curves):
            self._write_curve(recipe, rehearsal)
        self._unwritten_curves.clear()
        if sel.index.submits_jobs:  # the bill as jobs start (the run's targets known by now)
            bills, trials = stack_bills(sel), list(trials_bills(sel).values())
            if bills or trials:
                when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
                doc = bill_doc(bills, when, trials)
                write_if_changed(sel.root / bill_file(sel.cluster.name), canonical(doc))

    def _wait_for_decisions(self) -> None:
        sel = self.selection
        screens = [s for base in sel.pending if base not in sel.decided for s in sel.screens(base)]
        bound = 0.0
        for s in screens:
            res = sel.index.facts(s.name, s.concurrency[0], sel.rehearsal).resources
            bound += res["startup_s"] + res["point_s"]
            self._deciding.add(s.name)
            self._unwritten_curves.add((s.name, sel.rehearsal))
        self._deciding_until = time.time() + bound + DECIDING_MARGIN_S

    def _drop_undecided(self, recipe: str) -> None:
        """A search this run resumes (its capacity job runs, more probes to come): its earlier
        capacity.json no longer holds, and while it exists Snakemake stops the search after its first
        new probe (a checkpoint re-evaluation treats the capacity job as done). Its job rewrites it;
        the probes' results stay."""
        for path in (capacity_file(recipe), CAPACITY_PLOT.format(recipe=recipe)):
            (self.selection.root / path).unlink(missing_ok=True)

    def _write_curve(self, recipe: str, rehearsal: bool) -> None:
        """The curve file of the recipe's stack: the points of every recipe on it (same servers)."""
        if not self._running:
            self._unwritten_curves.add((recipe, rehearsal))
            return
        if not self.selection.index.reuse(recipe):
            return  # its points start stacks of their own
        stacks = self.selection.stacks
        mates = stacks.mates(recipe, rehearsal)
        points = [(m, c) for m in mates for c in sorted(self._will_run.get((m, rehearsal), ()))]
        # a search its results have decided asks for no more probes (its capacity job may have taken it
        # off this file already: a rewrite must not put it back)
        searching = [] if rehearsal else [m for m in mates if m in self._searching and self._probing(m)]
        deciding = [m for m in mates if m in self._deciding]
        server, linger = self.selection.index.server(recipe, rehearsal), stacks.linger_s(recipe, rehearsal)
        checks = sum(len(self._checks.get(m, ())) for m in mates)
        if not rehearsal and stacks.held(recipe):  # sized for a deciding screen's wait and its variant in full
            variants = [self.selection.recipes[m].variant_name for m in deciding]
            waiting = [(v, c) for v in variants for c in self.selection.run.curve_points(v)]
            wait_s = max(self._deciding_until - time.time(), 0.0) if deciding else 0.0
            evals = sum(len(self.selection.recipes[v].evals) for v in variants)  # a kept variant's, too
            held_s = stacks.points_s(recipe, points + waiting) + (checks + evals) * CHECK_S + wait_s
        else:
            held_s = 0
        doc = curve_doc(len(points) + checks, searching, linger, held_s, self.canary, (deciding, self._deciding_until))
        write_if_changed(self.selection.root / curve_file(server, rehearsal), canonical(doc))

    def _probing(self, recipe: str) -> bool:
        return self.selection.searches.probes_left(recipe) > 0

    def halving_decided(self, base: str, kept: list) -> None:
        """A waiting halving sweep is decided (rulekit's ``halving_results``): each screen's stack stops
        waiting and expects its variant's full points if kept, else ends once its points are served;
        the selection file says which variants were left out, and why."""
        sel, rehearsal = self.selection, self.selection.rehearsal
        kept_names = {r.name for r in kept}
        for screen in sel.screens(base):
            variant = screen.variant_name
            if variant not in kept_names:
                concs = []
            elif rehearsal:
                concs = sel.run.stale_guess(variant, sel.recipes[variant].concurrency, rehearsal)
            else:  # as this run's scope runs them (all of them when forced)
                concs = sel.run.curve_points(variant)
            self._will_run.setdefault((variant, rehearsal), set()).update(concs)
            searching, checks = self._measured_in_full(variant) if variant in kept_names else (False, 0)
            if screen.name in self._deciding:  # its stack's file, updated in place (a capacity job may too)
                self._deciding.discard(screen.name)
                if sel.index.reuse(screen.name):
                    path = sel.root / curve_file(sel.index.server(screen.name, rehearsal), rehearsal)
                    halving_decided(path, screen.name, len(concs) + checks, [variant] if searching else [])
            elif concs or checks or searching:
                self._write_curve(variant, rehearsal)
        self.write_selection()

    def search_chose(self, variant: str) -> None:
        """A search chose this variant (rulekit's ``search_results``): its points run, on its own stack
        or one it shares, and the selection file names it."""
        sel, rehearsal = self.selection, self.selection.rehearsal
        if variant in self._chosen:
            return
        self._chosen.add(variant)
        for mate in sel.stacks.mates(variant, rehearsal):  # an earlier trial on the same servers (a rehearsal's
            done = mate in self._chosen and not sel.run.stale_guess(mate, sel.recipes[mate].concurrency, rehearsal)
            if done and mate != variant:  # mockers drop some settings): its stack served it, expects it no more
                self._will_run.pop((mate, rehearsal), None)
        concs = sel.recipes[variant].concurrency
        concs = sel.run.stale_guess(variant, concs, rehearsal) if rehearsal else sel.run.curve_points(variant)
        self._measured_in_full(variant)
        self._will_run.setdefault((variant, rehearsal), set()).update(concs)
        self._write_curve(variant, rehearsal)  # once, every turn counted
        self.write_selection()

    def _measured_in_full(self, variant: str) -> tuple[bool, int]:
        """A variant kept or chosen mid-run, noted for its stack's curve (the caller writes it): an
        unfinished capacity search keeps the stack waiting for its probes, and each eval the summary
        will ask for is one more turn on it, as start_running counts them for a selected recipe.
        (whether it searches, the eval turns added)"""
        sel = self.selection
        if sel.rehearsal:
            return False, 0
        searching = variant in sel.searches.recipes and not sel.capacity(variant)[1].done
        if searching:
            self._searching.add(variant)
            self._drop_undecided(variant)
        plan = sel.root / plan_file(variant, min(sel.recipes[variant].concurrency))  # the smoke point's
        checks = self._checks.setdefault(variant, set())
        before = len(checks)
        for benchmark in sel.recipes[variant].evals:
            out, settings = sel.root / eval_file(variant, benchmark), sel.root / eval_settings_file(variant, benchmark)
            if _outdated(out, [plan, settings]):
                checks.add(f"eval-{benchmark}")
        return searching, len(checks) - before

    def write_selection(self) -> None:
        """The selected points and reporting settings (the summary's input); the memo saved last."""
        sel = self.selection
        path = selection_file(sel.cluster.name)
        keys = [sel.index.memo_key(r.name, False) for r in sel.reported()]
        made_from = digest(canonical([sel.cluster.name, keys, sel.not_run]))  # a halving decision rewrites it
        self._write_made(sel.root / path, made_from, lambda: canonical(sel.selection_doc()))
        if not sel.preflight_problems:
            sel.index.memo.save()


def allow_stack_reuse(allowed: bool) -> None:
    """--config stack_reuse=0|1 for a whole run: rendering and every point driver (they inherit
    snakemake's environment, also in cluster jobs, whose nested snakemake sets it again) read it."""
    os.environ[STACK_REUSE_ENV] = "1" if allowed else "0"
