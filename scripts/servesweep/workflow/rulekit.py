"""What the rule files call: input functions, params, resources, groups and priorities, each an
answer read from the run's selection (the main process's :class:`workflow.writer.Workflow` or a
cluster job's :class:`workflow.entry.SubmittedPlans`). Nothing here writes a file or changes a
count: the curve files are written once the DAG is final (the onstart hook,
workflow/smk.jobs_to_run); a probe decided after a checkpoint gets its plan from a job of its own
(rule probe_plan), and a search's capacity job takes it off its stack's curve file."""

from __future__ import annotations

import os
import re

from snakemake.exceptions import WorkflowError
from snakemake.io import report

from ..contract import paths
from ..contract.plan import SLURM_RESOURCE_KEYS, slurm_resources
from ..render.profiling import concurrency as profile_concurrency
from .smk import wildcards_only


def config_flag(config: dict, key: str) -> bool:
    return str(config.get(key, "")).lower() in ("1", "true", "yes")


class RuleKit:
    def __init__(self, selection, workflow, config: dict, cluster: str, rehearsal: bool):
        self.sel, self.workflow, self.config = selection, workflow, config
        self.cluster, self.rehearsal = cluster, rehearsal
        self.held = selection.held_recipes()  # on a cluster: the recipes whose stack is a job of its own
        self.partial = config_flag(config, "partial")

    def point_conc(self, wildcards) -> int:
        """The point a job runs on: its own, or for a check the recipe's smoke point (its stack)."""
        if "conc" in wildcards.keys():
            return int(wildcards.conc)
        return self.sel.smoke_point(wildcards.recipe)

    def plan_resources(self, check: bool = False, smoke_point: bool = False) -> dict:
        """Slurm resources straight from the point's plan (``check``: a check on the point's stack;
        ``smoke_point``: the recipe's smoke point's, for a profile whose concurrency may be no point's);
        none when nothing submits jobs (each resource costs Snakemake ~0.3 ms per job and a column in
        every dry-run job)."""
        if not self.sel.submits_jobs:
            return {}

        def pick(key):
            def get(wildcards):
                conc = self.sel.smoke_point(wildcards.recipe) if smoke_point else self.point_conc(wildcards)
                return slurm_resources(self.sel.resources(wildcards.recipe, conc, check))[key]

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
        return self._present([p.result for p in self.sel.points])

    def selected_evals(self, wildcards=None) -> list[str]:
        return self._present([paths.eval_file(r, b) for r, b in self.sel.evals])

    def selected_capacities(self, wildcards=None) -> list[str]:
        return self._present([paths.capacity_file(r) for r in self.sel.searches.recipes])

    def capacity_probes(self, checkpoints):
        """The probes that decide a recipe's capacity, each a point (a checkpoint): known ones are
        inputs; the next one is asked for and the search resumes once it has run, so `snakemake -n`
        shows exactly the probe still unknown."""

        def probes(wildcards):
            recipe = wildcards.recipe
            if recipe not in self.sel.searches.recipes:
                raise WorkflowError(
                    f"{paths.capacity_file(recipe)}: recipe {recipe} declares no capacity search for cluster "
                    f"{self.cluster} (add capacity: {{min, max, tolerance}} and an slo)"
                )
            known, decision = self.sel.capacity(recipe)
            rule = checkpoints.held_point if recipe in self.held else checkpoints.point
            found = [rule.get(recipe=recipe, conc=c).output.result for c in sorted(known)]
            if decision.next is not None:
                rule.get(recipe=recipe, conc=decision.next)  # raises until the probe has a result
            return found

        return probes

    def point_inputs(self):
        """A point's plan (written before the DAG is built, or a probe's job's output) and, in a dry
        run, the marker of its damaged result (newer than it: listed as to be remeasured). One input
        function: each costs Snakemake a call per job."""

        @wildcards_only
        def inputs(wildcards):
            recipe, conc = wildcards.recipe, int(wildcards.conc)
            damaged = getattr(self.sel, "damaged", lambda recipe, conc: [])(recipe, conc)
            return {"plan": self.sel.plan_path(recipe, conc), **({"damaged": damaged} if damaged else {})}

        return inputs

    def recipe_source(self, wildcards) -> str:
        return self.sel.recipe_source(wildcards.recipe)

    def capacity_curve(self, wildcards) -> str:
        return self.sel.capacity_curve(wildcards.recipe)

    def held_recipe_pattern(self) -> str:
        return "|".join(re.escape(name) for name in self.held)

    @staticmethod
    def slurm_site(wildcards, resources) -> list[str]:
        """The profile's partition and account for a held stack's job (its shape and time limit come
        from the point's plan and curve file: nothing here changes from run to run)."""
        args = []
        for key in ("slurm_partition", "slurm_account"):
            if resources.get(key):
                args += [f"--{key.removeprefix('slurm_')}", str(resources.get(key))]
        return args

    def point_result(self):
        """A point's result, as `snakemake --report` shows it."""

        @wildcards_only
        def category(wildcards):
            return self.sel.scenario_of(wildcards.recipe)

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
            if self.sel.recipes and wildcards.recipe not in self.sel.recipes:  # (a job's snakemake has none)
                raise WorkflowError(f"{wildcards.recipe}: no selected recipe of that name on cluster {self.cluster}")
            return paths.plan_file(wildcards.recipe, self.point_conc(wildcards))

        return plan

    def profile_input(self, pattern: str):
        """The profile's plan or settings (``paths.PROFILE_PLAN``, ``PROFILE_SETTINGS``): only for the
        concurrency the recipe's profile section names (a job's snakemake has no recipes to ask)."""

        @wildcards_only
        def path(wildcards):
            recipe = self.sel.recipes.get(wildcards.recipe) if self.sel.recipes else None
            conc = profile_concurrency(recipe) if recipe else int(wildcards.conc)
            if self.sel.recipes and conc != int(wildcards.conc):
                said = f"its profile runs at concurrency {conc}" if conc else "it declares no profile section"
                target = paths.profile_dir(wildcards.recipe, wildcards.conc)
                raise WorkflowError(f"{target}: recipe {wildcards.recipe} on cluster {self.cluster}: {said}")
            return pattern.format(recipe=wildcards.recipe, conc=conc)

        return path

    def stack_priority(self, rehearsal: bool):
        """A stack's points back to back (its recipes next to each other, each in ascending
        concurrency): a warm stack is never left idle while another one runs."""

        @wildcards_only
        def priority(wildcards):
            return 10**9 - self.sel.run_rank(wildcards.recipe, rehearsal) * 10**6 - int(wildcards.conc)

        return priority

    def check_priority(self):
        """A check (``smoke``, ``eval-{benchmark}``) runs on its recipe's stack after the recipe's
        points (it never warms their caches)."""

        @wildcards_only
        def priority(wildcards):
            return 10**9 - self.sel.run_rank(wildcards.recipe, False) * 10**6 - 999_999

        return priority
