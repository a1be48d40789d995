"""Every path the workflow reads or writes, relative to the workflow directory: the patterns the
rules use (Snakemake wildcards ``{recipe}``, ``{conc}``) and the functions the code uses, one place.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path("results")
LOGS = Path("logs")
SUMMARY_MD = RESULTS / "summary.md"
SUMMARY_CSV = RESULTS / "summary.csv"
SUMMARY_LOG = "logs/summary.log"
REHEARSAL_SUMMARY_MD = RESULTS / "rehearsal/summary.md"
REHEARSAL_SUMMARY_CSV = RESULTS / "rehearsal/summary.csv"
REHEARSAL_SUMMARY_LOG = "logs/rehearsal/summary.log"
REPORT = RESULTS / "report.html"
DEMO_LOG = "logs/demo.log"  # `make demo`: Snakemake's own output, kept off the terminal
PLANS = ".plans"
# names the workflow gives its own entries beside the recipes' folders (results/, logs/, .plans/):
# a recipe of one of these names would share or shadow them
RESERVED_NAMES = frozenset(
    {SUMMARY_MD.name, SUMMARY_CSV.name, REPORT.name, "summary.log", "plots", "rehearsal", "stacks", "capacity"}
)

# rule patterns
RESULT = "results/{recipe}/c{conc}.json"
SCREEN = "screen"  # a halving sweep's screen of a variant: recipe '<variant>.screen', results/<variant>.screen/
REHEARSAL_RESULT = "results/rehearsal/{recipe}/c{conc}.json"
PLAN = ".plans/{recipe}/c{conc}.json"
# a capacity probe outside the recipe's concurrencies, decided mid-run: its plan is a job's output
PROBE_PLAN = ".plans/{recipe}/probe-c{conc}.json"
PROBE_PLAN_GLOB = "probe-c*.json"  # in a recipe's plans folder
PROBE_PLAN_LOG = "logs/{recipe}/probe-c{conc}.plan.log"
POINT_LOG = "logs/{recipe}/c{conc}.snakemake.log"
REHEARSAL_POINT_LOG = "logs/rehearsal/{recipe}/c{conc}.snakemake.log"
CAPACITY_FILE, CAPACITY_PLOT_FILE = "capacity.json", "capacity.png"  # in a recipe's results folder
CAPACITY = f"results/{{recipe}}/{CAPACITY_FILE}"
CAPACITY_PLOT = f"results/{{recipe}}/{CAPACITY_PLOT_FILE}"
CAPACITY_SETTINGS = ".plans/capacity/{recipe}.json"
CAPACITY_LOG = "logs/{recipe}/capacity.log"
SMOKE = "results/{recipe}/smoke.json"
SMOKE_LOG = "logs/{recipe}/smoke.snakemake.log"
SMOKE_REQUESTS = "scripts/servesweep/checks/smoke-requests.yaml"
EVAL = "results/{recipe}/eval-{benchmark}.json"
EVAL_SETTINGS = ".plans/{recipe}/eval-{benchmark}.json"  # the recipe's evals entry: an edit reruns only it
EVAL_LOG = "logs/{recipe}/eval-{benchmark}.snakemake.log"
# an engine profile (run/profile): its plan (shared: the point's at its concurrency) and settings
PROFILE = "results/{recipe}/profile-c{conc}"  # a folder: each role's trace files and PROFILE_INDEX
PROFILE_PLAN = ".plans/{recipe}/profile-c{conc}.plan.json"
PROFILE_SETTINGS = ".plans/{recipe}/profile-c{conc}.settings.json"
PROFILE_LOG = "logs/{recipe}/profile-c{conc}.snakemake.log"
PROFILE_INDEX = "index.json"  # in the profile's folder: role, process, files, sizes, window
PROFILE_TRACES = "profiles"  # in the profiled stack's run dir: one folder per process
# in a point's (a check's) run dir
FAILURE_FILE = "failure.json"  # why its last attempt wrote no result
DRIVER_LOG = "driver.log"  # the driver's progress lines
AIPERF_LOG = "aiperf.log"
CLIENT_CPU_FILE = "client-cpu.json"  # beside aiperf's artifacts: its process tree's CPU over time (run/client_cpu)
UNSAVED_RESULT = "result.unsaved.json"  # a valid result that could not be written to its target
GPU_TELEMETRY_NODES = "gpu-telemetry-nodes.json"  # beside aiperf's artifacts: exporter -> GPU -> role (run/energy)
AIPERF_GPU_TELEMETRY = "gpu_telemetry_export.jsonl"  # aiperf's per-sample GPU telemetry export
CREDENTIALS_FILE = "credentials.json"  # the stack's own secrets (0600)
# in a stack's dir (logs/stacks/<server>/<id>/) and its server identity's dir (logs/stacks/<server>/)
CURRENT_FILE = "current.json"  # the server identity's stack a new point joins
REGISTRY_LOCK = "registry.lock"  # serializes joining against stopping
CLIENT_LOCK = "client.lock"  # a held stack's points run their steps one at a time from the submitting host
CLIENT_QUEUE = "client-queue"  # ... in this order: one ticket per waiting point, per host
STATE_FILE = "state.json"  # the keeper's state
SERVED_FILE, RUNNING_FILE = "served.json", "running.json"  # the points': how many done, which one runs
OWNER_FILE = "owner.json"  # the snakemake run a lingering stack serves now
TURN_LOCK, KEEPER_LOCK = "turn.lock", "keeper.lock"  # one benchmark at a time; one keeper per stack
KEEPER_LOG, KEEPER_DRIVER_LOG = "keeper.log", "keeper-driver.log"  # its stdout; its progress lines
JOB_LOG = "job.log"  # a held stack's Slurm job output
HOLD_SCRIPT = "hold.sh"  # a held stack's batch script
WAITING_DIR = "waiting"  # the points attached to a stack, one file per pid
# what a requeued held stack's new run keeps in place (the rest of the dir moves aside)
KEPT_ACROSS_RESTARTS = frozenset(
    {KEEPER_LOCK, TURN_LOCK, JOB_LOG, KEEPER_DRIVER_LOG, KEEPER_LOG, SERVED_FILE, OWNER_FILE, HOLD_SCRIPT, WAITING_DIR}
)
# the workflow's own state beside Snakemake's: the render side's caches (safe to delete) and the main
# processes' heartbeats (contract/heartbeat)
STATE_DIR = ".snakemake/servesweep"
YAML_CACHE = f"{STATE_DIR}/recipes-parsed.json"
MEMO_FILE = f"{STATE_DIR}/rendered.json"
SNAKEMAKE_LOCKS = ".snakemake/locks"  # Snakemake's own lock files (run/stalelock)
RUN_OWNERS = f"{STATE_DIR}/owners"  # one record per main snakemake running here (run/stalelock)
HEARTBEAT_DIR = f"{STATE_DIR}/heartbeats"
# in schemas/: what a point's result (and a capacity probe's) must match
RESULT_SCHEMA_FILE = "result.schema.yaml"
# a stack's TLS material, in its run dir (run/credentials): what processes are given, and what making
# it leaves nowhere (the CA's key, the signing request, the extensions file are deleted at once)
TLS_DIR, TLS_CA, TLS_CERT, TLS_KEY = "tls", "ca.pem", "node.pem", "node.key"
TLS_CA_KEY, TLS_REQUEST, TLS_EXTENSIONS = "ca.key", "node.csr", "ext.cnf"
SOURCE_FILE = "source.json"  # beside a recipe's plans: what they were rendered from (workflow/why)
POINT_TARGET = re.compile(r"results/(?P<recipe>[^/\s]+)/c(?P<conc>[0-9]+)\.json")  # a point's result, as a target
CAPACITY_TARGET = re.compile(r"results/(?P<recipe>[^/\s]+)/capacity\.json")  # a recipe's capacity, as a target


RECIPE_FILE_TARGET = re.compile(r"results/(?:rehearsal/)?(?P<recipe>[^/]+)/[^/]+")  # any file of one recipe


POINT_FILE = re.compile(r"c(?P<conc>[0-9]+)\.json")  # a point's result or plan, in its recipe's folder


def point_files(folder: Path | str, every_recipe: bool = False) -> list[tuple[int, Path]]:
    """The point files (``c<conc>.json``: results or plans) in a recipe's folder, or with ``every_recipe``
    in each recipe folder under ``folder``, with their concurrency, in name order. ``capacity.json``
    and a moved-aside ``c4.json.unreadable-1`` are no point's (``c*.json`` alone would take the first)."""
    found = sorted(Path(folder).glob("*/c*.json" if every_recipe else "c*.json"))
    return [(int(m.group("conc")), p) for p in found if (m := POINT_FILE.fullmatch(p.name))]


def recipe_of_target(target: str) -> str | None:
    """The recipe a target file belongs to (its result, capacity, plot), or None (summary, plots …)."""
    m = RECIPE_FILE_TARGET.fullmatch(str(Path(target)))
    return m.group("recipe") if m and m.group("recipe") != "rehearsal" else None


def check_log_dir(recipe: str, check: str) -> Path:
    """A check's own logs (``smoke`` or ``eval-<benchmark>``; its stack's are the stack's)."""
    return LOGS / recipe / check


def eval_file(recipe: str, benchmark: str) -> str:
    return EVAL.format(recipe=recipe, benchmark=benchmark)


def eval_settings_file(recipe: str, benchmark: str) -> str:
    return EVAL_SETTINGS.format(recipe=recipe, benchmark=benchmark)


def profile_dir(recipe: str, conc: int) -> str:
    return PROFILE.format(recipe=recipe, conc=conc)


def profile_plan_file(recipe: str, conc: int) -> str:
    return PROFILE_PLAN.format(recipe=recipe, conc=conc)


def profile_settings_file(recipe: str, conc: int) -> str:
    return PROFILE_SETTINGS.format(recipe=recipe, conc=conc)


def _sub(rehearsal: bool) -> str:
    return "rehearsal/" if rehearsal else ""


def result_file(recipe: str, conc: int, rehearsal: bool = False) -> str:
    return f"results/{_sub(rehearsal)}{recipe}/c{conc}.json"


def earlier_run_dir(restart: int) -> str:
    """In a held stack's dir: what its job's run before the ``restart``-th one left (its state, logs,
    credentials, etcd data; run/stacks/registry.reincarnate)."""
    return f"{EARLIER_RUN_PREFIX}{restart}"


EARLIER_RUN_PREFIX = "before-restart-"


def plan_file(recipe: str, conc: int, rehearsal: bool = False, probe: bool = False) -> str:
    """``probe``: a capacity probe outside the recipe's concurrencies (PROBE_PLAN)."""
    return f"{PLANS}/{_sub(rehearsal)}{recipe}/{'probe-' if probe else ''}c{conc}.json"


def damaged_marker(recipe: str, conc: int) -> str:
    """A dry run's note that the point's result is damaged: an input of its rule (workflow/why.quarantine)."""
    return f"{PLANS}/{recipe}/c{conc}.damaged"


def source_file(recipe: str, rehearsal: bool = False) -> str:
    """What render wrote next to a recipe's plans (workflow/why)."""
    return f"{PLANS}/{_sub(rehearsal)}{recipe}/{SOURCE_FILE}"


def curve_file(server: str, rehearsal: bool) -> str:
    """Per server identity (a plan's ``fingerprints.server``): the points its stack should expect."""
    return f"{PLANS}/curves/{'rehearsal-' if rehearsal else ''}{server}.json"


def bill_file(cluster: str) -> str:
    """The bill of the last Slurm run that started jobs (workflow/bill), for the summary to compare."""
    return f"{PLANS}/bill-{cluster}.json"


def missing_file(cluster: str, rehearsal: bool) -> str:
    return f"{PLANS}/missing-{'rehearsal-' if rehearsal else ''}{cluster}.json"


def selection_file(cluster: str) -> str:
    return f"{PLANS}/selection-{cluster}.json"


def capacity_file(recipe: str) -> str:
    return CAPACITY.format(recipe=recipe)


def capacity_settings_file(recipe: str) -> str:
    return CAPACITY_SETTINGS.format(recipe=recipe)


def capacity_plot_file(recipe: str) -> str:
    return CAPACITY_PLOT.format(recipe=recipe)


def logs_dir(recipe: str, rehearsal: bool = False) -> Path:
    return LOGS / _sub(rehearsal) / recipe


def run_dir(recipe: str, conc: int, rehearsal: bool = False) -> Path:
    """A point's own logs: its driver, aiperf's artifacts, failure.json (and a solo stack's processes)."""
    return Path(f"logs/{_sub(rehearsal)}{recipe}/c{conc}")


def stacks_dir(server: str, rehearsal: bool = False) -> Path:
    """The warm stacks of one server identity (shared by every recipe that has it): one directory
    per stack (state, keeper, process logs)."""
    return LOGS / _sub(rehearsal) / "stacks" / server


def plots_dir(rehearsal: bool = False) -> Path:
    """The summary's plots, next to it (it links them relatively)."""
    return RESULTS / ("rehearsal/plots" if rehearsal else "plots")


def process_log(run_dir: Path, process: str) -> Path:
    """A stack process's stdout and stderr, in its run dir."""
    return Path(run_dir) / f"{process}.log"
