"""What the rule files call: input functions, params, resources and priorities, each answered here
from the object that knows it (the selection, its point index, shared stacks and capacity searches),
or, in a cluster job's nested snakemake, from the plan it was submitted with (:class:`JobKit`).
Nothing here writes a file or changes a count: the plans, selection and caches are written before
the DAG is built, the curve files once it is final (``workflow/writer``), and again by the writer
when a halving sweep is decided mid-run (``halving_results`` hands it the decision); a probe decided
after a checkpoint gets its plan from a job of its own (rule probe_plan)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.io import report

from ..contract import paths
from ..contract.plan import SLURM_RESOURCE_KEYS, batch_step_tasks, curve_file, slurm_resources
from ..render import profiling
from .selection import CHECK_S, Selection
from .smk import wildcards_only
from .sweep_inputs import SweepInputs


def config_flag(config: dict, key: str) -> bool:
    return str(config.get(key, "")).lower() in ("1", "true", "yes")


def priority(rank: int, conc: int) -> int:
    """A job's priority: its recipe's run order first, then its concurrency (ascending)."""
    return 10**9 - rank * 10**6 - conc


CHECK_CONC = 999_999  # a check's place in its recipe's order: after every point


class RuleKit(SweepInputs):
    """The main snakemake process's answers: a validated selection and what it composes."""

    def __init__(self, selection: Selection, workflow, config: dict, cluster: str, rehearsal: bool):
        self._settings(workflow, config, cluster, rehearsal)
        self.selection, self.index = selection, selection.index
        self.stacks, self.searches = selection.stacks, selection.searches
        self.recipes: dict = selection.recipes
        self.points: list = selection.points
        self.evals = [(r.name, b) for r in selection.selected for b in r.evals]  # (recipe, benchmark)
        self.searched: list[str] = self.searches.recipes  # the recipes with a capacity search
        self.submits_jobs = self.index.submits_jobs  # points run as cluster jobs and need resources
        # on a cluster: the recipes whose stack is a job of its own (known once the plans are written)
        self.held = [r.name for r in [*selection.selected, *selection.waiting()] if self.stacks.held(r.name)]
        self._kept: dict[str, list[str]] = {}  # a halving sweep decided in this run -> its kept variants' results
        if self.partial:  # a summary of what exists asks for no screen: no sweep waits for its decision
            selection.pending.clear()
            selection.searching.clear()
        self._damaged: dict[str, set] = {}  # recipe -> its damaged results' marker names

    def _settings(self, workflow, config: dict, cluster: str, rehearsal: bool) -> None:
        self.workflow, self.config = workflow, config
        self.cluster, self.rehearsal = cluster, rehearsal
        self.partial = config_flag(config, "partial")

    def smoke_point(self, recipe: str) -> int:
        """The point whose plan (and so whose stack) the recipe's checks use: its lowest concurrency."""
        return min(self.recipes[recipe].concurrency)

    def point_conc(self, wildcards) -> int:
        """The point a job runs on: its own, or for a check the recipe's smoke point (its stack)."""
        if "conc" in wildcards.keys():
            return int(wildcards.conc)
        return self.smoke_point(wildcards.recipe)

    def job_resources(self, recipe: str, conc: int, check: bool = False) -> dict:
        """What the point's own Slurm job (``check``: a check's on the point's stack) asks for: one
        startup and its own time. Only a recipe that reuses no stack has such jobs; every other runs
        on a held stack, sized from the curve file (run/stacks/held)."""
        res = batch_step_tasks(self.index.facts(recipe, conc).resources)
        if check:
            return dict(res, runtime_min=math.ceil((res["startup_s"] + CHECK_S) / 60))
        return res

    def plan_resources(self, check: bool = False, smoke_point: bool = False) -> dict:
        """Slurm resources straight from the point's plan (``check``: a check on the point's stack;
        ``smoke_point``: the recipe's smoke point's, for a profile whose concurrency may be no point's);
        none when nothing submits jobs (each resource costs Snakemake ~0.3 ms per job and a column in
        every dry-run job)."""
        if not self.submits_jobs:
            return {}

        def pick(key):
            def get(wildcards):
                conc = self.smoke_point(wildcards.recipe) if smoke_point else self.point_conc(wildcards)
                return slurm_resources(self.job_resources(wildcards.recipe, conc, check))[key]

            return get

        # mpi: the jobstep plugin then runs the driver in the batch step instead of an srun step of its
        # own, so a curve's stack keeper lives as long as the job, across the points of the group.
        # tasks_per_gpu=0: else the plugin turns `tasks` into --ntasks-per-gpu
        return dict(mpi="direct", tasks_per_gpu=0, **{k: pick(k) for k in SLURM_RESOURCE_KEYS})

    def _present(self, files: list[str]) -> list[str]:
        """--config partial=1: only the files there (the summary lists the others as missing)."""
        if not self.partial:
            return files
        return [f for f in files if os.path.exists(os.path.join(self.workflow.basedir, f))]

    def selected_results(self, wildcards=None) -> list[str]:
        return self._present([p.result for p in self.points])

    def selected_evals(self, wildcards=None) -> list[str]:
        return self._present([paths.eval_file(r, b) for r, b in self.evals])

    def selected_capacities(self, wildcards=None) -> list[str]:
        return self._present([paths.capacity_file(r) for r in self.searched])

    def rehearsal_results(self) -> list[str]:
        return [paths.result_file(p.recipe, p.conc, rehearsal=True) for p in self.points]

    def capacity_probes(self, checkpoints):
        """The probes that decide a recipe's capacity, each a point (a checkpoint): known ones are
        inputs; the next one is asked for and the search resumes once it has run, so `snakemake -n`
        shows exactly the probe still unknown."""

        def probes(wildcards):
            recipe = wildcards.recipe
            if recipe not in self.searched:
                raise WorkflowError(
                    f"{paths.capacity_file(recipe)}: recipe {recipe} declares no capacity search for cluster "
                    f"{self.cluster} (add capacity: {{min, max, tolerance}} and an slo)"
                )
            known, decision = self.searches.decision(recipe)
            rule = checkpoints.held_point if recipe in self.held else checkpoints.point
            found = [rule.get(recipe=recipe, conc=c).output.result for c in sorted(known)]
            if decision.next is not None:
                rule.get(recipe=recipe, conc=decision.next)  # raises until the probe has a result
            # the recipe's own points inside the bounds are probes too: decided before they are in,
            # the search would be stale again as soon as they were
            bounds = self.searches.bounds(recipe)
            for conc in (c for c in self.recipes[recipe].concurrency if c in bounds and c not in known):
                rule.get(recipe=recipe, conc=conc)  # raises until the point has a result
            return found

        return probes

    def point_inputs(self):
        """A point's plan (written before the DAG is built, or a probe's job's output) and, in a dry
        run, the marker of its damaged result (newer than it: listed as to be remeasured). One input
        function: each costs Snakemake a call per job."""

        @wildcards_only
        def inputs(wildcards):
            recipe, conc = wildcards.recipe, int(wildcards.conc)
            damaged = self.damaged(recipe, conc)
            return {"plan": self.index.plan_path(recipe, conc), **({"damaged": damaged} if damaged else {})}

        return inputs

    def damaged(self, recipe: str, conc: int) -> list[str]:
        """The dry run's marker of the point's damaged result (why.quarantine), an input of its rule
        so `snakemake -n` lists it; none in a real run (the result was moved aside)."""
        concs = self._damaged.get(recipe)
        if concs is None:
            try:
                names = os.listdir(self.selection.root / paths.damaged_marker(recipe, 1).rsplit("/", 1)[0])
            except OSError:
                names = []
            concs = self._damaged[recipe] = {n[1:-8] for n in names if n.endswith(".damaged")}
        return [paths.damaged_marker(recipe, conc)] if concs and str(conc) in concs else []

    def recipe_source(self, wildcards) -> str:
        return self.recipes[wildcards.recipe].source

    def capacity_curve(self, wildcards) -> str:
        """The curve file of the search's stack, which its capacity job takes the search off; none
        when its points reuse no stack."""
        recipe = wildcards.recipe
        return curve_file(self.index.server(recipe), False) if self.index.reuse(recipe) else ""

    def held_recipe_pattern(self) -> str:
        return "|".join(re.escape(name) for name in self.held)

    def held_profile_pattern(self) -> str:
        """The held recipes whose profile shares their stack (one of its own is a job of its own); none:
        a pattern nothing matches (Snakemake reads an empty one as no constraint)."""
        shared = [re.escape(n) for n in self.held if n in self.recipes and profiling.shared(self.recipes[n])]
        return "|".join(shared) or "(?!)"

    @staticmethod
    def slurm_site(wildcards, resources) -> list[str]:
        """The profile's partition and account for a held stack's job (its shape and time limit come
        from the point's plan and curve file: nothing here changes from run to run)."""
        args = []
        for key in ("slurm_partition", "slurm_account"):
            if resources.get(key):
                args += [f"--{key.removeprefix('slurm_')}", str(resources.get(key))]
        return args

    def scenario_of(self, recipe: str) -> str:
        return f"scenario {self.recipes[recipe].doc['scenario']['name']}"

    def point_result(self):
        """A point's result, as `snakemake --report` shows it."""

        @wildcards_only
        def category(wildcards):
            return self.scenario_of(wildcards.recipe)

        labels = {"recipe": "{recipe}", "concurrency": "{conc}"}
        caption = "../report/point.rst"
        return report(paths.RESULT, caption=caption, category=category, subcategory="{recipe}", labels=labels)

    def rehearsal_plan(self, wildcards) -> str:
        """A rehearsal point's plan; rehearsal plans exist only with --config rehearsal=1."""
        if not self.rehearsal:
            target = paths.result_file(wildcards.recipe, wildcards.conc, rehearsal=True)
            raise WorkflowError(f"{target} is a rehearsal target: add --config rehearsal=1")
        return paths.plan_file(wildcards.recipe, int(wildcards.conc), rehearsal=True)

    def smoke_plan(self):
        """The recipe's smoke point's plan: a check joins that point's stack."""

        @wildcards_only
        def plan(wildcards):
            if self.recipes and wildcards.recipe not in self.recipes:  # (a job's snakemake has none)
                raise WorkflowError(f"{wildcards.recipe}: no selected recipe of that name on cluster {self.cluster}")
            return paths.plan_file(wildcards.recipe, self.point_conc(wildcards))

        return plan

    def profile_input(self, pattern: str):
        """The profile's plan or settings (``paths.PROFILE_PLAN``, ``PROFILE_SETTINGS``): only for the
        concurrency the recipe's profile section names (a job's snakemake has no recipes to ask)."""

        @wildcards_only
        def path(wildcards):
            recipe = self.recipes.get(wildcards.recipe) if self.recipes else None
            conc = profiling.concurrency(recipe) if recipe else int(wildcards.conc)
            if self.recipes and conc != int(wildcards.conc):
                said = f"its profile runs at concurrency {conc}" if conc else "it declares no profile section"
                target = paths.profile_dir(wildcards.recipe, wildcards.conc)
                raise WorkflowError(f"{target}: recipe {wildcards.recipe} on cluster {self.cluster}: {said}")
            return pattern.format(recipe=wildcards.recipe, conc=conc)

        return path

    def stack_priority(self, rehearsal: bool):
        """A stack's points back to back (its recipes next to each other, each in ascending
        concurrency): a warm stack is never left idle while another one runs."""

        @wildcards_only
        def by_rank(wildcards):
            return priority(self.stacks.rank(wildcards.recipe, rehearsal), int(wildcards.conc))

        return by_rank

    def check_priority(self):
        """A check (``smoke``, ``eval-{benchmark}``) runs on its recipe's stack after the recipe's
        points (it never warms their caches)."""

        @wildcards_only
        def by_rank(wildcards):
            return priority(self.stacks.rank(wildcards.recipe, False), CHECK_CONC)

        return by_rank


class JobKit(RuleKit):
    """The nested snakemake of a cluster job: no validation, no rendering, no writing. It runs one
    point whose plan the main process wrote when it submitted the job, and takes the job's resources
    from that plan file: a recipe edited or broken while jobs wait in the queue changes nothing they run."""

    def __init__(self, workflow, config: dict, cluster: str, rehearsal: bool):
        self._settings(workflow, config, cluster, rehearsal)
        self.root = Path(workflow.basedir)
        self.recipes, self.points, self.evals, self.searched = {}, [], [], []  # the main process asks for them
        self.held: list[str] = []  # a held stack's points run from the main process, never in a job's snakemake
        self.submits_jobs = True  # it runs inside a cluster job: the job's own resources apply

    def plan_path(self, recipe: str, conc: int) -> str:
        """The plan the main process submitted: a sweep point's, else a probe's (rules/capacity.smk)."""
        sweep = paths.plan_file(recipe, conc)
        return sweep if (self.root / sweep).exists() else paths.plan_file(recipe, conc, probe=True)

    def smoke_point(self, recipe: str) -> int:
        """As the main process chose it: the lowest concurrency with a submitted plan."""
        concs = [conc for conc, _ in paths.point_files((self.root / paths.plan_file(recipe, 1)).parent)]
        return min(concs, default=1)

    def job_resources(self, recipe: str, conc: int, check: bool = False) -> dict:
        """The plan's own (a check's time limit was set when the main process submitted its job)."""
        return batch_step_tasks(json.loads((self.root / self.plan_path(recipe, conc)).read_text())["resources"])

    def point_inputs(self):
        @wildcards_only
        def inputs(wildcards):
            return {"plan": self.plan_path(wildcards.recipe, int(wildcards.conc))}

        return inputs

    def recipe_source(self, wildcards) -> str:
        raise RuntimeError(f"a cluster job renders no plan ({wildcards.recipe})")

    def halving_results(self, checkpoints, files):
        return lambda wildcards=None: []  # a cluster job runs one point, never the summary

    def search_results(self, files):
        return lambda wildcards=None: []

    def search_gate(self, checkpoints):
        return lambda wildcards=None: []

    def capacity_curve(self, wildcards) -> str:
        raise RuntimeError(f"a cluster job does not decide capacity searches ({wildcards.recipe})")

    def scenario_of(self, recipe: str) -> str:
        return "points"  # only `snakemake --report` (a main process) asks

    def stack_priority(self, rehearsal: bool):
        return wildcards_only(lambda wildcards: priority(0, int(wildcards.conc)))  # one point per job

    def check_priority(self):
        return wildcards_only(lambda wildcards: priority(0, CHECK_CONC))


def rule_kit(selection: Selection | None, workflow, config: dict, cluster: str, rehearsal: bool) -> RuleKit:
    """The main process's kit, or a cluster job's (no selection: it reads the plan it was submitted with)."""
    if selection is None:
        return JobKit(workflow, config, cluster, rehearsal)
    return RuleKit(selection, workflow, config, cluster, rehearsal)
