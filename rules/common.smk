# Config, selection and the rule kit shared by every rule. Validation of every
# recipe happens here, at DAG-build time, so `snakemake -n` is the full check;
# only in the main process: a cluster job's nested snakemake runs the plan it
# was submitted with. What the rules call lives in servesweep/workflow/rulekit.py.
import functools
import os
import sys

from servesweep.contract import paths
from servesweep.fileio.files import private_outputs
from servesweep.run import stalelock
from servesweep.workflow import smk
from servesweep.workflow import writer as sw
from servesweep.workflow.bill import RUN_BUDGET_GPU_H
from servesweep.workflow.entry import (
    budget_override,
    check_config_or_exit,
    linger_override,
    load_or_exit,
)
from servesweep.workflow.rulekit import config_flag, rule_kit

private_outputs()  # this Snakemake process and what it starts write owner-only files
# Snakemake made its own folder (and its log) before this line ran: closing the folder closes them
if workflow.is_main_process and os.path.isdir(".snakemake"):
    if os.stat(".snakemake").st_uid == os.getuid():
        os.chmod(".snakemake", 0o700)
    stalelock.settle(
        os.getcwd(), smk.dry_run(workflow)
    )  # a lock left by a killed snakemake: removed if its owner is provably gone, else the command to run
check_config_or_exit(config)
CLUSTER = config.get("cluster", "local")
if budget_override(config) is not None:
    RUN_BUDGET_GPU_H.append(
        budget_override(config)
    )  # every sweep's budget for this run
# --config stack_reuse=0: one stack per point for this run (the drivers read it too).
if "stack_reuse" in config:
    sw.allow_stack_reuse(config_flag(config, "stack_reuse"))
# Rehearsal plans are rendered only when asked for: --config rehearsal=1.
REHEARSAL = config_flag(config, "rehearsal")
RUN_FILES = load_or_exit(
    workflow.basedir,
    CLUSTER,
    [r for r in str(config.get("recipes", "")).split(",") if r],
    REHEARSAL,
    workflow.is_main_process,
    functools.partial(
        smk.run_scope, workflow
    ),  # (targets, forced): known once the DAG is built
    linger_override(config),
    smk.dry_run(workflow),
    smk.target_recipes,  # a broken recipe no target names is listed, never a stop
    config_flag(config, "canary") if "canary" in config else True,
)
# what the rules ask, answered from the selection (None in a cluster job: from its submitted plan)
KIT = rule_kit(
    RUN_FILES.selection if RUN_FILES else None, workflow, config, CLUSTER, REHEARSAL
)
# On a cluster, the recipes whose stack is held (a Slurm job of its own): a capacity search or a
# linger keeps it; their points run from here as steps of that job (rules/points.smk).
HELD = KIT.held


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
