"""Dry-run scaling: `snakemake -n results/summary.md --profile local` on generated sweeps vs a
bare Snakefile with the same targets and rule shape (rules that only touch), same profile.
Also: what the Snakefile spends validating every recipe and rendering (and checking) every
plan, timed in a fresh process as a dry run pays it, and peak RSS of both dry runs."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from common import BIN, ROOT, copy_workflow, header, timed_child

CONCS = [1, 2, 4, 8, 16, 32, 64, 128]
BARE = """import glob, os
PLANS = sorted(glob.glob(".bare-plans/*/c*.json"))
POINTS = [(os.path.basename(os.path.dirname(p)), os.path.basename(p)[1:-5]) for p in PLANS]

rule summary:
    input: [f"results/{r}/c{c}.json" for r, c in POINTS]
    output: "results/summary.md"
    shell: "touch {output}"

rule point:
    input: ".bare-plans/{recipe}/c{conc}.json"
    output: "results/{recipe}/c{conc}.json"
    shell: "touch {output}"
"""

# The same targets with every Snakemake directive our rules have in a local run (checkpoint, report
# outputs with category callable and labels, log + tee, priority callable, conda, a resource, the
# quoted shell fields, the summary's inputs and outputs, the rehearsal and capacity rules, global
# wildcard constraints) and constants in place of our code: what Snakemake itself charges for the
# rule shape, without a line of servesweep.
SHAPED = """import glob, inspect, os
PLANS = sorted(glob.glob(".bare-plans/*/c*.json"))
POINTS = [(os.path.basename(os.path.dirname(p)), os.path.basename(p)[1:-5]) for p in PLANS]
for f in (".bare-plans/selection.json", ".bare-plans/missing.json"):
    open(f, "a").close()


wildcard_constraints:
    recipe=r"[a-z0-9][a-z0-9_-]*(\\.[a-z0-9_-]+)*",
    conc=r"[1-9][0-9]*",


def wildcards_only(fn):
    fn._overwrite_params = inspect.signature(fn).parameters
    return fn


@wildcards_only
def priority(wildcards):
    return 10**9 - int(wildcards.conc)


@wildcards_only
def category(wildcards):
    return "scenario chat"


rule summary:
    input:
        selection=".bare-plans/selection.json",
        missing=".bare-plans/missing.json",
        results=[f"results/{r}/c{c}.json" for r, c in POINTS],
        capacity=lambda w: [],
    output:
        md=report("results/summary.md", caption="caption.rst", category="Summary"),
        csv=report("results/summary.csv", caption="caption.rst", category="Summary"),
        plots=report(directory("results/plots"), patterns=["{name}.png"], caption="caption.rst", category="Plots"),
    log: "logs/summary.log"
    conda: "env.yaml"
    params: baseline=""
    shell:
        "touch {output.md:q} --selection {input.selection:q} --baseline={params.baseline:q} "
        "--capacity {input.capacity:q} -- {input.results:q} 2> {log:q}"

checkpoint point:
    input: plan=".bare-plans/{recipe}/c{conc}.json"
    output:
        result=report(
            "results/{recipe}/c{conc}.json",
            caption="caption.rst",
            category=category,
            subcategory="{recipe}",
            labels={"recipe": "{recipe}", "concurrency": "{conc}"},
        ),
    log: "logs/{recipe}/c{conc}/point.log"
    priority: priority
    conda: "env.yaml"
    resources: point_slots=1
    shell: "touch {input.plan:q} {output.result:q} 2>&1 | tee {log:q}"

rule rehearse_point:
    input: plan=".bare-plans/rehearsal/{recipe}/c{conc}.json"
    output: result="results/rehearsal/{recipe}/c{conc}.json"
    log: "logs/rehearsal/{recipe}/c{conc}/point.log"
    priority: priority
    conda: "env.yaml"
    resources: point_slots=1
    shell: "touch {input.plan:q} {output.result:q} 2>&1 | tee {log:q}"

rule capacity:
    input: settings=".bare-plans/capacity/{recipe}.json", probes=lambda w: []
    output:
        capacity=report("results/{recipe}/capacity.json", caption="caption.rst", category="Capacity at SLO"),
        plot=report("results/plots/capacity-{recipe}.png", caption="caption.rst", category="Capacity at SLO"),
    log: "logs/{recipe}/capacity.log"
    conda: "env.yaml"
    shell: "touch {output.capacity:q} {output.plot:q} {input.probes:q} 2> {log:q}"
"""


# A warm machine writes bytecode; some sandboxes set PYTHONDONTWRITEBYTECODE, making every
# snakemake start recompile itself, which would hide our cost in a slower baseline.
ENV = {"PYTHONDONTWRITEBYTECODE": ""}

# What rules/common.smk runs: validate every recipe, render every plan, write the changed ones.
SNAKEFILE_WORK = """import sys, time
sys.path.insert(0, "scripts")
from servesweep.workflow import entry as workflow
t = time.perf_counter()
workflow.load_or_exit(".", "local")
print(time.perf_counter() - t)
"""


def make_sweep(root: Path, n: int) -> tuple[Path, Path, Path]:
    wf = copy_workflow(root / f"wf{n}", recipes=[])
    agg = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    dis = yaml.safe_load((ROOT / "recipes/local-disagg-1p1d-mocker.yaml").read_text())
    for i in range(n):
        doc = dict(agg if i % 2 == 0 else dis)
        doc = yaml.safe_load(yaml.safe_dump(doc))
        doc["name"] = f"gen-{i:04d}"
        doc["concurrency"] = CONCS
        doc["engine"]["args"] = doc["engine"]["args"] + ["--max-num-seqs", str(64 + i)]
        (wf / "recipes" / f"gen-{i:04d}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    bare = root / f"bare{n}"
    for i in range(n):
        d = bare / ".bare-plans" / f"gen-{i:04d}"
        d.mkdir(parents=True)
        for c in CONCS:
            (d / f"c{c}.json").write_text("{}\n")
    (bare / "Snakefile").write_text(BARE)
    shaped = root / f"shaped{n}"
    shutil.copytree(bare / ".bare-plans", shaped / ".bare-plans")
    (shaped / "Snakefile").write_text(SHAPED)
    (shaped / "caption.rst").write_text("a point\n")
    (shaped / "env.yaml").write_text("dependencies: []\n")
    return wf, bare, shaped


def _snakefile_work(wf: Path, cold: bool) -> float:
    if cold:
        shutil.rmtree(wf / ".snakemake" / "servesweep", ignore_errors=True)
    r = subprocess.run([sys.executable, "-c", SNAKEFILE_WORK], cwd=wf, capture_output=True, text=True, env=ENV)
    return float(r.stdout)


def _measure(tmp: Path, n: int, reps: int) -> tuple:
    wf, bare, shaped = make_sweep(tmp, n)
    sm = [str(BIN / "snakemake"), "results/summary.md", "-n", "--profile", str(wf / "profiles/local")]
    dirs = {"ours": wf, "bare": bare, "shaped": shaped}
    for d in dirs.values():  # warm-up: bytecode, plans, parse cache
        timed_child(sm, d, ENV)
    wall = {k: [] for k in dirs}
    rss = {k: [] for k in dirs}
    cold, warm = [], []
    for _ in range(reps):  # alternate, so drift hits all three
        for k, d in dirs.items():
            w, m, _ = timed_child(sm, d, ENV)
            wall[k].append(w), rss[k].append(m)
        cold.append(_snakefile_work(wf, cold=True))
        warm.append(_snakefile_work(wf, cold=False))
    med = statistics.median
    return (n, n * len(CONCS), *(med(wall[k]) for k in dirs), med(rss["ours"]), med(rss["bare"]), med(cold), med(warm))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,100,400")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    header("dry-run scaling", f"{BIN}/python bench/dryrun_scaling.py --sizes {a.sizes} --reps {a.reps}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [_measure(Path(tmp), int(x), a.reps) for x in a.sizes.split(",")]
    print(
        f"{'recipes':>7} {'points':>6} {'servesweep s':>12} {'bare s':>7} {'shaped s':>8} {'ours/bare':>9} "
        f"{'shaped/bare':>11} {'ours/shaped':>11} {'RSS MiB':>8} {'bare MiB':>8} {'validate+render s':>17} "
        f"{'(parse cache empty)':>19}"
    )
    for n, pts, o, b, sh, ro, rb, rc, rw in rows:
        print(
            f"{n:>7} {pts:>6} {o:>12.2f} {b:>7.2f} {sh:>8.2f} {o / b:>9.2f} {sh / b:>11.2f} {o / sh:>11.2f} "
            f"{ro:>8.0f} {rb:>8.0f} {rw:>17.2f} {rc:>19.2f}"
        )
    (_, p0, o0, b0, *_), (_, p1, o1, b1, *_) = rows[0], rows[-1]
    if p1 != p0:
        ours, bare = 1000 * (o1 - o0) / (p1 - p0), 1000 * (b1 - b0) / (p1 - p0)
        print(f"\nslope: servesweep {ours:.2f} ms/point, bare {bare:.2f} ms/point")
    print(
        "bare: the same targets, rules that only touch. shaped: the same targets and every Snakemake directive\n"
        "of our rules in a local run (checkpoint, report outputs, log + tee, priority, conda, a resource, quoted\n"
        "shell fields, the rehearsal and capacity rules) with constants for our code: shaped/bare is what\n"
        "Snakemake charges for the rule shape; servesweep/shaped is what servesweep's own code adds.\n"
        "validate+render: what rules/common.smk does before the DAG is built (validate every recipe, render\n"
        "every plan, write those that changed), timed in a fresh process; the last column without the\n"
        "YAML parse cache and render memo (.snakemake/servesweep/), as on a first run or after every recipe changed."
    )


if __name__ == "__main__":
    main()
