# Config, selection and helpers shared by every rule. Validation of every
# recipe happens here, at DAG-build time, so `snakemake -n` is the full check;
# only in the main process: a cluster job's nested snakemake runs the plan it
# was submitted with.
import os
import re
import sys

from snakemake.exceptions import WorkflowError

from servesweep import paths
from servesweep.contract import slurm_resources
from servesweep.files import private_outputs
from servesweep.workflow import smk
from servesweep.workflow import writer as sw
from servesweep.workflow.entry import (
    check_config_or_exit,
    linger_override,
    load_or_exit,
)

wildcards_only = smk.wildcards_only


def config_flag(key):
    return str(config.get(key, "")).lower() in ("1", "true", "yes")


private_outputs()  # this Snakemake process and what it starts write owner-only files
# Snakemake made its own folder (and its log) before this line ran: closing the folder closes them
if workflow.is_main_process and os.path.isdir(".snakemake"):
    if os.stat(".snakemake").st_uid == os.getuid():
        os.chmod(".snakemake", 0o700)
check_config_or_exit(config)
CLUSTER = config.get("cluster", "local")
# --config stack_reuse=0: one stack per point for this run (the drivers read it too).
if "stack_reuse" in config:
    sw.allow_stack_reuse(config_flag("stack_reuse"))
ONLY = [r for r in str(config.get("recipes", "")).split(",") if r]
# Rehearsal plans are rendered only when asked for: --config rehearsal=1.
REHEARSAL = config_flag("rehearsal")


def run_scope():
    """(targets, forced) of this run, for sizing a curve's Slurm job (known once the DAG is built)."""
    return smk.run_scope(workflow)


SELECTION = load_or_exit(
    workflow.basedir,
    CLUSTER,
    ONLY,
    REHEARSAL,
    workflow.is_main_process,
    run_scope,
    linger_override(config),
    smk.dry_run(workflow),
    smk.target_recipes,  # a broken recipe no target names is listed, never a stop
    config_flag("canary") if "canary" in config else True,
)
# On a cluster, the recipes whose stack is held (a Slurm job of its own): a capacity search or a
# linger keeps it; their points run from here as steps of that job (rules/points.smk).
HELD = SELECTION.held_recipes()


envvars:
    "PATH",


# Rules call the `servesweep` command of the environment snakemake runs in.
os.environ["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
)
SW_ENV = "envs/servesweep.yaml"


wildcard_constraints:
    recipe=r"[a-z0-9][a-z0-9_-]*(\.[a-z0-9_-]+)*",
    conc=r"[1-9][0-9]*",
    benchmark=r"[a-z0-9]+",


def point_conc(wildcards):
    """The point a job runs on: its own, or for a check the recipe's smoke point (its stack)."""
    if "conc" in wildcards.keys():
        return int(wildcards.conc)
    return SELECTION.smoke_point(wildcards.recipe)


def plan_resources(check=False):
    """Slurm resources straight from the point's plan (``check``: a check on the point's stack);
    none when nothing submits jobs (each resource costs Snakemake ~0.3 ms per job and a column in
    every dry-run job).
    """
    if not SELECTION.submits_jobs:
        return {}

    def pick(key):
        def get(wildcards):
            res = SELECTION.resources(wildcards.recipe, point_conc(wildcards), check)
            return slurm_resources(res)[key]

        return get

    # mpi: the jobstep plugin then runs the driver in the batch step instead of an srun step of its
    # own, so a curve's stack keeper lives as long as the job, across the points of the group.
    return dict(
        mpi="direct",
        tasks=pick("tasks"),
        tasks_per_gpu=0,  # else the plugin turns `tasks` into --ntasks-per-gpu
        nodes=pick("nodes"),
        gres=pick("gres"),
        runtime=pick("runtime"),
        cpus_per_task=pick("cpus_per_task"),
        mem_mb=pick("mem_mb"),
        slurm_extra=pick("slurm_extra"),
    )


def selected_results(wildcards=None):
    """Every selected point; with --config partial=1 only those that have a result
    (the summary then lists the others as missing, with the last failure's reason)."""
    results = [p.result for p in SELECTION.points]
    if config_flag("partial"):
        return [r for r in results if os.path.exists(os.path.join(workflow.basedir, r))]
    return results


def selected_evals(wildcards=None):
    """Every selected recipe's accuracy benchmarks (partial=1: those there)."""
    files = [paths.eval_file(r, b) for r, b in SELECTION.evals]
    if config_flag("partial"):
        return [f for f in files if os.path.exists(os.path.join(workflow.basedir, f))]
    return files


def selected_capacities(wildcards=None):
    """capacity.json of every selected recipe that declares a capacity search (partial=1: those there)."""
    files = [paths.capacity_file(r) for r in SELECTION.searches.recipes]
    if config_flag("partial"):
        return [f for f in files if os.path.exists(os.path.join(workflow.basedir, f))]
    return files


def capacity_probes(wildcards):
    """The probes that decide a recipe's capacity, each a point (a checkpoint): known ones are inputs;
    the next one is asked for and the search resumes once it has run, so `snakemake -n` shows
    exactly the probe still unknown."""
    if wildcards.recipe not in SELECTION.searches.recipes:
        raise WorkflowError(
            f"{paths.capacity_file(wildcards.recipe)}: recipe {wildcards.recipe} declares no capacity "
            f"search for cluster {CLUSTER} (add capacity: {{min, max, tolerance}} and an slo)"
        )
    known, decision = SELECTION.capacity(wildcards.recipe)

    probe_rule = (
        checkpoints.held_point if wildcards.recipe in HELD else checkpoints.point
    )

    def probe(conc):
        return probe_rule.get(recipe=wildcards.recipe, conc=conc).output.result

    found = [probe(c) for c in sorted(known)]
    if decision.next is not None:
        probe(decision.next)  # raises until the probe has a result
    return found


def held_recipe_pattern():
    return "|".join(re.escape(name) for name in HELD)


def slurm_site(wildcards, resources):
    """The profile's partition and account for a held stack's job (its shape and time limit come
    from the point's plan and curve file: nothing here changes from run to run)."""
    args = []
    for key in ("slurm_partition", "slurm_account"):
        value = resources.get(key)
        if value:
            args += [f"--{key.removeprefix('slurm_')}", str(value)]
    return args


def point_result():
    """A point's result, as `snakemake --report` shows it."""
    return report(
        paths.RESULT,
        caption="../report/point.rst",
        category=point_category,
        subcategory="{recipe}",
        labels={"recipe": "{recipe}", "concurrency": "{conc}"},
    )


def rehearsal_plan(wildcards):
    """A rehearsal point's plan; rehearsal plans exist only with --config rehearsal=1."""
    if not REHEARSAL:
        raise WorkflowError(
            f"{paths.result_file(wildcards.recipe, wildcards.conc, rehearsal=True)} is a rehearsal target: "
            "add --config rehearsal=1"
        )
    return paths.plan_file(wildcards.recipe, int(wildcards.conc), rehearsal=True)


@wildcards_only
def point_category(wildcards):
    """A point's category in `snakemake --report`: its recipe's scenario."""
    return SELECTION.scenario_of(wildcards.recipe)


def stack_group(prefix):
    """The group of a point: every stale point on one server identity (of any recipe) in one group,
    merged into one job by the profiles' --group-components; none when the recipe reuses no stack.
    None at all when nothing submits jobs: Snakemake ignores groups in local runs, and a dry run
    then shows the jobs a local run has (and skips a per-job callable).
    """
    if not SELECTION.submits_jobs:
        return None

    @wildcards_only
    def group(wildcards):
        if not SELECTION.reuse(wildcards.recipe):
            return None
        rehearsal = prefix.startswith("rehearsal")
        server = SELECTION.stack_group(
            wildcards.recipe, point_conc(wildcards), rehearsal
        )
        gid = f"{prefix}-{server}"
        smk.name_group(
            workflow, gid, prefix + "-{server}"
        )  # what --group-components names
        return gid

    return group


def stack_priority(rehearsal):
    """A stack's points back to back (its recipes next to each other, each in ascending
    concurrency): a warm stack is never left idle while another one runs."""

    @wildcards_only
    def priority(wildcards):
        rank = SELECTION.run_rank(wildcards.recipe, rehearsal)
        return 10**9 - rank * 10**6 - int(wildcards.conc)

    return priority


def check_priority():
    """A check (``smoke``, ``eval-{benchmark}``) runs on its recipe's stack after the recipe's points
    (it never warms their caches)."""

    @wildcards_only
    def priority(wildcards):
        return 10**9 - SELECTION.run_rank(wildcards.recipe, False) * 10**6 - 999_999

    return priority


@wildcards_only
def smoke_plan(wildcards):
    """The recipe's smoke point's plan: the smoke joins that point's stack."""
    if (
        SELECTION.recipes and wildcards.recipe not in SELECTION.recipes
    ):  # (a job's snakemake has none)
        raise WorkflowError(
            f"{wildcards.recipe}: no selected recipe of that name on cluster {CLUSTER}"
        )
    return paths.plan_file(wildcards.recipe, point_conc(wildcards))
