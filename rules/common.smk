# Config, selection and helpers shared by every rule. Validation of every
# recipe happens here, at DAG-build time, so `snakemake -n` is the full check.
import os
import sys

from servesweep import workflow as sw

CLUSTER = config.get("cluster", "local")
ONLY = [r for r in str(config.get("recipes", "")).split(",") if r]
# Rehearsal plans are rendered only when a rehearsal target is asked for.
REHEARSAL = any("rehearse" in a or "rehearsal/" in a for a in sys.argv)
SELECTION = sw.load_or_exit(workflow.basedir, CLUSTER, ONLY, REHEARSAL)


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


def plan_resources():
    """Slurm resources straight from the point's plan (constants when nothing
    submits jobs: resource callables cost Snakemake ~0.1 ms each per job)."""
    keys = ("nodes", "gres", "runtime_min", "cpus_per_task", "mem_mb", "slurm_extra")
    if SELECTION.cluster.launcher == "local":
        return dict(
            nodes=1,
            gres="",
            runtime_min=60,
            cpus_per_task=1,
            mem_mb=1000,
            slurm_extra="",
        )

    def pick(key):
        def get(wildcards):
            plan = SELECTION.plan(wildcards.recipe, int(wildcards.conc))
            res = plan["resources"]
            if key == "gres":
                return f"gpu:{res['gpus_per_node']}"
            if key == "slurm_extra":
                return "--exclusive" if res["exclusive"] else ""
            return res[key]

        return get

    return {k: pick(k) for k in keys}


def selected_results(wildcards=None):
    """Every selected point; with --config partial=1 only those that have a result
    (the summary then lists the others as missing, with the last failure's reason)."""
    results = [p.result for p in SELECTION.points]
    if str(config.get("partial", "")).lower() in ("1", "true", "yes"):
        return [r for r in results if os.path.exists(os.path.join(workflow.basedir, r))]
    return results
