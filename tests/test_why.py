"""Why a point reruns: the dry run's cause lines on measured local results, `servesweep diff`
across recipes, plans and results, and the summary's baseline attribution.

One real measurement (two points of a small mocker recipe) is shared by the module; each test
edits a recipe or the cluster facts and puts them back in a finalizer.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT, copy_workflow, no_processes_left, snakemake, stray_processes, write_recipe

pytestmark = pytest.mark.integration

NAME = "why-agg"
POINTS = [f"results/{NAME}/c{c}.json" for c in (2, 4)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("why") / "wf", [])
    base = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    base.pop("evals")  # the points' causes only (a check's are in test_smoke)
    write_recipe(wf, base, NAME, conc=(2, 4), duration=3)
    with no_processes_left(wf) as since:
        r = snakemake(wf, *POINTS)
        left = stray_processes(since, wf)  # at once: the last point returns only after its stack is gone
    assert r.returncode == 0, r.stderr[-3000:]
    assert left == [], left
    return wf


STATE = ("recipes", "results", ".plans", ".snakemake", "profiles/local/cluster.yaml")


@pytest.fixture
def wf(measured, tmp_path):
    """The measured workflow; its recipes, cluster facts, results, plans and Snakemake's own records
    (mtimes included) restored after the test, so no test sees another's dry runs or edits."""
    saved = tmp_path / "saved"
    for name in STATE:
        _copy(measured / name, saved / name)
    yield measured
    for name in STATE:
        if (measured / name).is_dir():
            shutil.rmtree(measured / name)
        _copy(saved / name, measured / name)


def _copy(src, dst) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)


def causes(wf) -> list[str]:
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode == 0, r.stderr[-3000:]
    return [ln.removeprefix("servesweep: ") for ln in r.stderr.splitlines() if ln.startswith(f"servesweep: {NAME}")]


def edit_recipe(wf, mutate) -> None:
    path = wf / f"recipes/{NAME}.yaml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_results_keep_their_source(measured):
    for f in (POINTS[0], f".plans/{NAME}/c2.json", f".plans/{NAME}/source.json", f"logs/{NAME}/c2/driver.log"):
        assert stat.S_IMODE((measured / f).stat().st_mode) == 0o600, f  # owner-only on a shared filesystem
    assert stat.S_IMODE((measured / ".snakemake").stat().st_mode) == 0o700  # Snakemake's own folder and log
    doc = json.loads((measured / POINTS[0]).read_text())
    src = doc["source"]
    assert src["schema"] == "servesweep.source/1" and src["recipe"]["name"] == NAME
    assert src["cluster"]["name"] == "local" and "port_base" in src["cluster"]["doc"]
    assert len(json.dumps(src)) < 8000  # recipe + cluster facts, not the plan


def test_fresh_results_print_nothing(wf):
    assert causes(wf) == []


def test_engine_argument_edit_names_the_flag_and_the_points(wf):
    edit_recipe(wf, lambda d: d["engine"]["args"].__setitem__(5, 2048))
    assert causes(wf) == [f"{NAME}: 2 points (c2, c4) stale — engine.args: --num-gpu-blocks-override 4096 → 2048"]


def test_cluster_fact_edit_names_the_used_field_only(wf):
    path = wf / "profiles/local/cluster.yaml"
    text = path.read_text()
    text = text.replace("readiness_timeout_s: 90", "readiness_timeout_s: 95")
    text = text.replace("max_concurrency: 32", "max_concurrency: 16")  # rehearsal only: not used here
    path.write_text(text)
    assert causes(wf) == [f"{NAME}: 2 points (c2, c4) stale — cluster local: readiness_timeout_s 90 → 95"]


def test_added_concurrency_is_a_new_point(wf):
    edit_recipe(wf, lambda d: d.__setitem__("concurrency", [2, 4, 8]))
    assert causes(wf) == [f"{NAME} c8: new point"]


def test_deleted_result_says_no_result(wf):
    (wf / POINTS[1]).unlink()
    assert causes(wf) == [f"{NAME} c4: no result"]


def test_truncated_result_says_unreadable(wf):
    path = wf / POINTS[0]
    path.write_bytes(path.read_bytes()[:100])
    (wf / f"{POINTS[0]}.unreadable-1").unlink(missing_ok=True)
    truncated = path.read_bytes()
    (line,) = causes(wf)
    assert line.startswith(f"{NAME} c2: result unreadable (not JSON (")
    # a dry run names it and touches nothing; the real run moves it aside (bytes kept) and reruns it
    assert path.read_bytes() == truncated and not (wf / f"{POINTS[0]}.unreadable-1").exists()
    r = snakemake(wf, "-n", POINTS[0])
    assert f"{POINTS[0]}: not JSON" in r.stderr and "a real run moves it aside and reruns the point" in r.stderr
    assert f"output: {POINTS[0]}" in r.stdout and path.read_bytes() == truncated  # listed, as the run will run it


def test_slo_only_edit_says_summary_only(wf):
    edit_recipe(wf, lambda d: d.__setitem__("slo", {"ttft_p95_s": 0.75}))
    assert causes(wf) == [f"{NAME}: slo.ttft_p95_s 0.5 → 0.75 — summary only, no point stale"]
    r = snakemake(wf, "-n", *POINTS)
    assert "Nothing to be done" in r.stdout + r.stderr


def test_cosmetic_edit_prints_nothing(wf):
    edit_recipe(wf, lambda d: d.__setitem__("description", "the same setup, described otherwise"))
    assert causes(wf) == []


def diff(wf, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "servesweep", "diff", *args], cwd=wf, capture_output=True, text=True, timeout=120
    )


def test_diff_across_recipes_plans_and_results(wf):
    recipe, plan, result = f"recipes/{NAME}.yaml", f".plans/{NAME}/c2.json", POINTS[0]
    for a, b in [(recipe, result), (plan, result), (result, plan), (recipe, plan)]:
        r = diff(wf, a, b)
        assert r.returncode == 0, (a, b, r.stdout, r.stderr)
        assert "same measurement" in r.stdout
    r = diff(wf, POINTS[0], POINTS[1])
    assert r.returncode == 1 and "concurrency 2 → 4" in r.stdout
    edited = wf / "edited" / f"{NAME}.yaml"  # a recipe's file name is its name
    edited.parent.mkdir(exist_ok=True)
    shutil.copy(wf / recipe, edited)
    text = edited.read_text().replace("--speedup-ratio\n  - 1\n", "--speedup-ratio\n  - 2\n")
    edited.write_text(text)
    r = diff(wf, result, str(edited))
    assert r.returncode == 1 and "engine.args: --speedup-ratio 1 → 2" in r.stdout, r.stdout
    r = diff(wf, result, "no-such-file.json")
    assert r.returncode == 2 and "no-such-file.json" in r.stderr and "Traceback" not in r.stderr


def test_why_command_shows_every_cause(wf):
    def many(d):
        args = d["engine"]["args"]
        args[1], args[3], args[5] = 32, 2, 2048
        d["env"]["DYN_LOG"] = "info"

    edit_recipe(wf, many)
    (line,) = causes(wf)
    assert re.search(r"… and 1 more \(servesweep why why-agg shows all\)$", line), line
    r = subprocess.run(
        [sys.executable, "-m", "servesweep", "why", NAME], cwd=wf, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "env.DYN_LOG warn → info" in r.stdout and "shows all" not in r.stdout, r.stdout
