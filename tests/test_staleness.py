"""Exact staleness, proven with `snakemake -n` in a temp copy of the workflow.

Outputs are marked up to date with `--touch` (no engine runs); each test then
makes one edit and checks which points the dry run would rerun.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from servesweep.tools.samples import result_doc

from helpers import LOCAL_RECIPES, ROOT, copy_workflow, snakemake

ALL_POINTS = {
    "results/local-agg-2x-mocker/c4.json",
    "results/local-agg-2x-mocker/c16.json",
    "results/local-disagg-1p1d-mocker/c4.json",
    "results/local-disagg-1p1d-mocker/c16.json",
}


def stale_points(wf) -> set[str]:
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    if "Nothing to be done" in out:
        return set()
    return set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", out))


def summary_stale(wf) -> bool:
    r = snakemake(wf, "-n", "results/summary.md")
    return "rule summary:" in r.stdout + r.stderr


@pytest.fixture(scope="module")
def settled_once(tmp_path_factory):
    """A workflow copy whose every point and summary is up to date: made once per module (four
    snakemake runs), copied for each test."""
    wf = copy_workflow(tmp_path_factory.mktemp("settled") / "wf", LOCAL_RECIPES)
    assert stale_points(wf) == ALL_POINTS
    for p in ALL_POINTS | {"results/summary.md", "results/summary.csv"}:
        (wf / p).parent.mkdir(parents=True, exist_ok=True)
        recipe, conc = p.split("/")[1], p.rsplit("/c", 1)[-1].removesuffix(".json")
        # a result must be a valid result document (an unusable one is moved aside and reruns)
        (wf / p).write_text(json.dumps(result_doc(recipe, int(conc), 0.1, 100.0)) if conc.isdigit() else "{}\n")
    r = snakemake(wf, "--touch", "results/summary.md")
    assert r.returncode == 0, r.stderr
    assert stale_points(wf) == set()
    return wf


@pytest.fixture
def settled(settled_once, tmp_path):
    """A copy of the module's settled workflow of this test's own (mtimes and Snakemake's records
    kept, so it is as up to date as the original); no test changes the original."""
    return Path(shutil.copytree(settled_once, tmp_path / "wf", symlinks=True))


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_cosmetic_edits_rerun_nothing(settled):
    r = settled / "recipes" / "local-agg-2x-mocker.yaml"
    text = r.read_text()
    # comment, blank lines, trailing whitespace and key order
    lines = text.splitlines()
    desc = next(i for i, ln in enumerate(lines) if ln.startswith("description:"))
    lines.insert(desc, lines.pop(desc + 1))  # swap description and clusters
    r.write_text("# a new comment\n\n" + "\n".join(ln + "  " for ln in lines) + "\n\n")
    assert stale_points(settled) == set()
    assert not summary_stale(settled)


def test_engine_arg_change_reruns_exactly_that_recipe(settled):
    edit(
        settled / "recipes" / "local-disagg-1p1d-mocker.yaml",
        "--num-gpu-blocks-override, 4096",
        "--num-gpu-blocks-override, 2048",
    )
    assert stale_points(settled) == {
        "results/local-disagg-1p1d-mocker/c4.json",
        "results/local-disagg-1p1d-mocker/c16.json",
    }


def test_added_concurrency_is_exactly_one_new_point(settled):
    edit(settled / "recipes" / "local-agg-2x-mocker.yaml", "concurrency: [4, 16]", "concurrency: [4, 8, 16]")
    assert stale_points(settled) == {"results/local-agg-2x-mocker/c8.json"}


def test_removed_recipe_leaves_the_summary_inputs(settled):
    (settled / "recipes" / "local-disagg-1p1d-mocker.yaml").unlink()
    r = snakemake(settled, "-n", "results/summary.md")
    out = r.stdout + r.stderr
    assert r.returncode == 0, r.stderr
    assert stale_points(settled) == set()
    m = re.search(r"rule summary:\n\s+input: ([^\n]+)", out)
    assert m, out
    assert "local-disagg" not in m.group(1) and "local-agg-2x-mocker/c4.json" in m.group(1)


def test_cluster_change_reruns_only_affected_points(settled):
    # 2-GPU nodes, 2 of them: the agg replicas still share node 0 (GPUs 0,1);
    # the disagg decode worker (DP2) no longer fits next to prefill and moves to node 1.
    facts = settled / "profiles" / "local" / "cluster.yaml"
    edit(facts, "nodes: 1\ngpus_per_node: 8", "nodes: 2\ngpus_per_node: 2")
    assert stale_points(settled) == {
        "results/local-disagg-1p1d-mocker/c4.json",
        "results/local-disagg-1p1d-mocker/c16.json",
    }


def test_dry_run_with_slurm_profile_needs_no_controller(tmp_path):
    wf = copy_workflow(tmp_path / "wf")
    r = snakemake(wf, "-n", "results/summary.md", "--config", "cluster=hcm-hgx02")
    assert r.returncode == 0, r.stderr
    assert "results/gemma4-livekit-2tp4-dyn-vllm-prod/c96.json" in r.stdout
    assert "results/gemma4-livekit-2tp4-dyn-vllm-prod/c150.json" in r.stdout
    assert "local-agg" not in r.stdout


def test_profile_name_resolves_and_slurm_dry_run_needs_no_controller(tmp_path):
    """`snakemake --profile slurm-hgx02 -n` exactly as written, after `make profiles`."""
    import os
    import subprocess
    import time

    from helpers import BIN

    home = tmp_path / "xdg"
    subprocess.run(["make", "-s", "-C", str(ROOT), "profiles", f"PROFILE_HOME={home}/snakemake"], check=True)
    # the production recipes without the tuning sweep (its 12 held stacks: tests/test_sweeps.py)
    wf = copy_workflow(tmp_path / "wf", [f.stem for f in (ROOT / "recipes").glob("*.yaml") if "-tune-" not in f.stem])
    env = dict(os.environ, XDG_CONFIG_HOME=str(home), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    t = time.monotonic()
    r = subprocess.run(
        [str(BIN / "snakemake"), "--profile", "slurm-hgx02", "-n", "results/summary.md"],
        cwd=wf,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    print(f"\nslurm-hgx02 dry run without a controller: {time.monotonic() - t:.1f} s")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "results/gemma4-livekit-2tp4-dyn-vllm-prod/c96.json" in r.stdout
    # every point a step of its recipe's held stack: no Slurm job per point, no group job
    assert r.stdout.count("checkpoint held_point:") == 5 and "group" not in r.stdout, r.stdout[-3000:]
    assert "gres=" not in r.stdout and "nodes=" not in r.stdout
    # the bill before anything is submitted: per stack, from the points' own plans
    res = json.loads((wf / ".plans/gemma4-hgx02-4x-tp2-sglang/c96.json").read_text())["resources"]
    gpus, points_s = res["nodes"] * res["gpus_per_node"], 2 * res["point_s"]  # c96, c150: the same budget
    line = next(ln for ln in r.stderr.splitlines() if "bill" not in ln and "gemma4-hgx02-4x-tp2-sglang:" in ln)
    assert f"2 point(s), 1 allocation(s) of {gpus} GPU(s), startup {res['startup_s']} s bound" in line, line
    assert f"= {gpus * (res['startup_s'] + points_s) / 3600:.2f} GPU-h" in line, line
    assert re.search(r"total: 2 allocation\(s\), [0-9.]+ GPU-h", r.stderr), r.stderr[-2000:]


def test_partial_summary_lists_missing_points(settled):
    (settled / "results/local-agg-2x-mocker/c16.json").unlink()
    r = snakemake(settled, "-n", "results/summary.md", "--config", "partial=1")
    assert r.returncode == 0, r.stderr
    m = re.search(r"rule summary:\n\s+input: ([^\n]+)", r.stdout + r.stderr)
    assert m and "local-agg-2x-mocker/c16.json" not in m.group(1) and "local-agg-2x-mocker/c4.json" in m.group(1)


# Recipe fields and what an edit to them reruns (docs/recipes.md's table states the same lists).
REPORTING_EDITS = [  # only the summary reruns
    ("slo", "ttft_p95_s: 0.5", "ttft_p95_s: 0.4"),
    ("description", "description: 2 aggregated", "description: Two aggregated"),
]
MEASUREMENT_EDITS = [  # every point of the recipe reruns
    ("engine.args", "--speedup-ratio, 1", "--speedup-ratio, 2"),
    ("env", "DYN_LOG: warn", "DYN_LOG: error"),
    ("scenario.duration_s", "duration_s: 20", "duration_s: 25"),
    ("frontend.router", "ttl_s: 1800", "ttl_s: 900"),
    ("topology", "replicas: 2, tp: 1", "replicas: 3, tp: 1"),
]


@pytest.mark.parametrize("field,old,new", REPORTING_EDITS, ids=[e[0] for e in REPORTING_EDITS])
def test_reporting_edit_reruns_only_the_summary(settled, field, old, new):
    edit(settled / "recipes" / "local-agg-2x-mocker.yaml", old, new)
    assert stale_points(settled) == set()
    assert summary_stale(settled) == (field == "slo")  # a description is not shown in the summary


@pytest.mark.parametrize("field,old,new", MEASUREMENT_EDITS, ids=[e[0] for e in MEASUREMENT_EDITS])
def test_measurement_edit_reruns_the_recipes_points(settled, field, old, new):
    edit(settled / "recipes" / "local-agg-2x-mocker.yaml", old, new)
    assert stale_points(settled) == {"results/local-agg-2x-mocker/c4.json", "results/local-agg-2x-mocker/c16.json"}


def test_rehearsal_is_asked_for_explicitly(tmp_path):
    wf = copy_workflow(tmp_path / "wf", LOCAL_RECIPES)
    target = "results/rehearsal/local-agg-2x-mocker/c4.json"
    r = snakemake(wf, "-n", target)
    assert r.returncode != 0 and "add --config rehearsal=1" in r.stdout + r.stderr
    assert not (wf / ".plans/rehearsal").exists()
    r = snakemake(wf, "-n", target, "--config", "rehearsal=1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "checkpoint rehearse_point:" in r.stdout  # a checkpoint: a halving sweep's screens decide mid-run
    # the rule name as target counts as a rehearsal too (it used to be guessed from the command line)
    r = snakemake(wf, "-n", "rehearsal_summary", "--config", "rehearsal=1")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert {f"results/rehearsal/{n}/c{c}.json" for n in LOCAL_RECIPES for c in (4, 16)} <= set(
        re.findall(r"output: (results/rehearsal/[^,\s]+/c\d+\.json)", out)
    )


def test_deleted_result_reruns_only_that_point(settled):
    """Snakemake does not rebuild a deleted intermediate by itself; the summary's missing-results
    input makes it (and only it) run again."""
    (settled / "results/local-agg-2x-mocker/c16.json").unlink()
    assert stale_points(settled) == {"results/local-agg-2x-mocker/c16.json"}


def _measured_with_current_plans(wf) -> None:
    """Each result as a point measured with its current plan records it (fingerprint and source)."""
    for p in ALL_POINTS:
        recipe, conc = p.split("/")[1], int(p.rsplit("/c", 1)[-1].removesuffix(".json"))
        doc = json.loads((wf / p).read_text())
        plan = json.loads((wf / f".plans/{recipe}/c{conc}.json").read_text())
        doc["identity"]["plan_fingerprint"] = plan["fingerprints"]["plan"]
        doc["source"] = json.loads((wf / f".plans/{recipe}/source.json").read_text())
        (wf / p).write_text(json.dumps(doc))


def test_a_trace_edited_in_place_makes_its_points_stale_and_why_names_it(settled):
    """Both local recipes replay the same trace: one row changed in place reruns all their points,
    and the cause names the file (the plan holds the data's digest, render/dataid)."""
    from helpers import servesweep

    _measured_with_current_plans(settled)
    assert stale_points(settled) == set()
    trace = settled / "recipes/traces/local-sessions.jsonl"
    rows = trace.read_text().splitlines()
    row = json.loads(rows[0])
    rows[0] = json.dumps({**row, "output_length": row["output_length"] + 1})
    trace.write_text("\n".join(rows) + "\n")
    assert stale_points(settled) == ALL_POINTS
    why = servesweep("why", cwd=settled)
    assert why.returncode == 0, why.stderr
    line = next(ln for ln in why.stdout.splitlines() if ln.startswith("local-agg-2x-mocker:"))
    assert "stale — data: dataset recipes/traces/local-sessions.jsonl sha256:" in line, why.stdout
    assert ";" not in line and "model" not in line  # the trace alone changed


def test_a_truncated_result_is_listed_by_the_dry_run_and_nothing_moves(settled):
    """The dry run lists what the real run will run: a damaged result's point, with its cause."""
    path = settled / "results/local-agg-2x-mocker/c16.json"
    path.write_bytes(path.read_bytes()[:80])
    r = snakemake(settled, "-n", "results/summary.md")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", out)) == {str(path.relative_to(settled))}
    assert "results/local-agg-2x-mocker/c16.json: not JSON" in r.stderr and "moves it aside" in r.stderr
    assert len(path.read_bytes()) == 80 and not list(path.parent.glob("*.unreadable-*"))  # nothing moved
