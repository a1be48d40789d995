"""Sweeps over server configurations (render/sweep): the expansion, its refusals, the tie rule,
successive halving's decisions, and exact staleness per variant through real dry runs."""

from __future__ import annotations

import copy
import json
import re
import time

import pytest
import yaml

from servesweep.contract import paths
from servesweep.report.tuning import Standing, ranking, verdict_line
from servesweep.tools.samples import result_doc
from servesweep.workflow.halving import Screened, decide

from helpers import (
    CLUSTERS,
    SWEPT,
    assert_no_strays,
    copy_workflow,
    kill_strays,
    load_sweep,
    servesweep,
    snakemake,
    sweep_problems,
)

BASE = SWEPT
load, problems_of = load_sweep, sweep_problems


def test_the_product_of_axes_less_exclusions_with_linked_axes_moving_together(tmp_path):
    sweep = {
        "axes": {
            "seqs": {"field": "engine.args[--max-num-seqs]", "values": [2, 4]},
            "layout": {
                "field": "topology.aggregated",
                "values": [{"replicas": 1}, {"replicas": 2}],
                "labels": ["1x", "2x"],
            },
            "workers": {"field": "frontend.router.min_initial_workers", "values": [1, 2]},
        },
        "link": [["layout", "workers"]],
        "exclude": [{"seqs": 4, "layout": "1x"}],
    }  # fmt: skip
    recipes, problems = load(tmp_path, sweep)
    assert problems == []
    by_name = {r.name: r for r in recipes}
    assert sorted(by_name) == [
        "local-tune-mocker.seqs-2_layout-1x",
        "local-tune-mocker.seqs-2_layout-2x",
        "local-tune-mocker.seqs-4_layout-2x",
    ]
    v = by_name["local-tune-mocker.seqs-4_layout-2x"]
    assert v.doc["engine"]["args"][-2:] == ["--max-num-seqs", 4]
    assert v.doc["topology"]["aggregated"] == {"replicas": 2}
    assert v.doc["frontend"]["router"]["min_initial_workers"] == 2  # linked: moved with layout
    assert v.sweep_of == "local-tune-mocker" and dict(v.choice) == {"seqs": "4", "layout": "2x", "workers": "2"}
    assert "sweep" not in v.doc and v.sweep["excluded"] == ["seqs-4_layout-1x"]


def test_a_variant_that_fails_validation_names_the_recipe_the_variant_the_axis_and_the_field(tmp_path):
    sweep = {"axes": {"reps": {"field": "topology.aggregated.replicas", "values": [2, 0]}}}
    (msg,) = problems_of(tmp_path, sweep)
    where = "recipes/local-tune-mocker.yaml: topology.aggregated.replicas"
    assert msg.startswith(f"{where}: variant reps-0 (axis reps = 0)")


@pytest.mark.parametrize(
    ("sweep", "field", "says"),
    [
        ({"axes": {"x": {"field": "engine.bogus", "values": [1, 2]}}}, "sweep.axes.x.field", "not a field"),
        ({"axes": {"x": {"field": "concurrency", "values": [1, 2]}}}, "sweep.axes.x.field", "point axis"),
        ({"axes": {"x": {"field": "description", "values": ["a", "b"]}}}, "sweep.axes.x.field", "changes no plan"),
        ({"axes": {"x": {"field": "env.A", "values": []}}}, "sweep.axes.x.values", "should be non-empty"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "1"]}}}, "sweep.axes.x.values", "duplicate values"),
        ({"axes": {"x": {"field": "env.A", "values": ["a b", "a-b"]}}}, "sweep.axes.x.labels", "share the label"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "2"], "labels": ["a"]}}}, "sweep.axes.x.labels", "1 labels"),
        ({"axes": {"x": {"field": "env.A", "values": list("abcde")}, "y": {"field": "env.B", "values": list("abcd")}}},
         "sweep.max_variants", "20 variants"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "2"]}}, "link": [["x", "nope"]]}, "sweep.link[0]",
         "no axis"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "2"]}, "y": {"field": "env.B", "values": ["1"]}},
          "link": [["x", "y"]]}, "sweep.link[0]", "as many values"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "2"]}}, "exclude": [{"x": "3"}]}, "sweep.exclude[0].x",
         "no value or label"),
        ({"axes": {"X": {"field": "env.A", "values": ["1", "2"]}}}, "sweep.axes.X", "lowercase"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "2"]}}, "halving": {"target": 8}}, "sweep.halving",
         "without strategy"),
        ({"axes": {"x": {"field": "env.A", "values": ["1", "2"]}}, "strategy": "halving", "halving": {"target": 8,
          "screen_share": 0.1}}, "sweep.halving.screen_share", "under 3 s"),
    ],
)  # fmt: skip
def test_a_bad_sweep_is_refused_naming_the_field(tmp_path, sweep, field, says):
    msgs = problems_of(tmp_path, sweep)
    assert any(f"recipes/local-tune-mocker.yaml: {field}:" in m and says in m for m in msgs), msgs


def test_an_axis_whose_values_render_the_same_plan_is_refused(tmp_path):
    from servesweep.workflow.sweep_checks import idle_axes

    sweep = {"axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [4, "4"], "labels": ["n", "s"]}}}
    recipes, problems = load(tmp_path, sweep)
    assert problems == []
    (p,) = idle_axes(recipes, CLUSTERS["local"])
    assert p.field == "sweep.axes.seqs" and "changes no plan" in p.reason


def _standing(name, cap, tps, tol=0, searched=False, status="measured"):
    return Standing(name, {}, 2, cap, tol, searched, tps, None, status)


def test_a_leader_inside_the_noise_is_a_tie_and_one_ahead_is_named():
    a, b, c = _standing("a", 8, 1000.0), _standing("b", 8, 980.0), _standing("c", 4, 2000.0)
    _order, leaders = ranking([c, b, a])
    assert [s.name for s in leaders] == ["a", "b"]  # 2 % apart, no repeats: tied
    assert verdict_line(leaders, [a, b, c]).startswith("**Tied: `a`, `b`**")
    untried = _standing("d", None, None, status="not tried by the search")
    line = verdict_line(leaders, [a, b, c, untried])  # a search's tie says what it did not measure
    assert line.startswith("**Tied among the 3 measured: `a`, `b`**") and "1 not measured in full" in line, line
    _order, leaders = ranking([_standing("a", 8, 1100.0), _standing("b", 8, 1000.0)])
    assert [s.name for s in leaders] == ["a"]  # 10 % ahead
    # capacities within the search's tolerance are a tie; beyond it, the higher one leads
    _order, leaders = ranking([_standing("a", 12, 1.0, 4, True), _standing("b", 10, 9.0, 4, True)])
    assert [s.name for s in leaders] == ["a", "b"]
    _order, leaders = ranking([_standing("a", 16, 1.0, 4, True), _standing("b", 10, 9.0, 4, True)])
    assert [s.name for s in leaders] == ["a"]


def test_halving_keeps_the_best_screened_share_and_waits_for_missing_screens():
    names = [f"v{i}" for i in range(8)]
    # a known space: the SLO headroom falls with i, so v0 is the answer the full grid would name
    screens = [Screened(n, True, 0.3 + 0.05 * i, 1000.0) for i, n in enumerate(names)]
    out = decide(screens, names, {"target": 8, "keep": 0.25})
    assert sorted(set(names) - set(out)) == ["v0", "v1"]  # 2 of 8 measured in full: 1/4 of the grid
    assert out["v7"].startswith("screened out: 8 of 8 at c8")
    tied = [Screened(n, True, 0.3, 1000.0 - i) for i, n in enumerate(names)]  # none ahead of another
    assert decide(tied, names, {"target": 8, "keep": 0.25}) == {}  # a short screen decides no tie: all kept
    # a dense field, each screen within the noise of the next: ties are judged against the last one kept
    # by share (v1), never chained (a chain kept all 12 screens of the seed sweep's rehearsal)
    dense = [Screened(n, True, 0.3 * 1.08**i, 1000.0) for i, n in enumerate(names)]
    assert sorted(set(names) - set(decide(dense, names, {"target": 8, "keep": 0.25}))) == ["v0", "v1", "v2"]
    waiting = decide([*screens[:-1], None], names, {"target": 8})
    assert set(waiting) == set(names) and "7 of 8 measured" in waiting["v0"]
    # a screen a starved client left unjudged is measured in full, never screened out on its blanks
    starved = [*screens[:-1], Screened("v7", False, float("inf"), 0.0, unjudged="client-bound: 9 stalls")]
    out = decide(starved, names, {"target": 8, "keep": 0.25})
    assert sorted(set(names) - set(out)) == ["v0", "v1", "v7"] and out["v6"].startswith("screened out: 7 of 7")
    # a missed SLO with a limited figure unmeasured ties with no measured screen
    missed = [Screened(n, False, 1.2 + 0.01 * i, 1000.0) for i, n in enumerate(names[:-1])]
    blank = decide([*missed, Screened("v7", False, float("inf"), 1000.0)], names, {"target": 8, "keep": 0.25})
    assert "v7" in blank
    unmeasured = decide([*screens[:-1], Screened("v7", False, float("inf"), 0.0)], names, {"target": 8, "keep": 0.25})
    assert "SLO missed, a limited figure unmeasured" in unmeasured["v7"]


def test_a_rehearsal_decides_its_halving_round_from_its_own_screens(tmp_path):
    """A rehearsal's screens live under results/rehearsal/: its round two is decided from them, and
    the real run's round still waits for its own."""
    from servesweep.contract.paths import result_file
    from servesweep.workflow.halving import halving_round

    sweep = {"axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [2, 4, 8, 16]}},
             "strategy": "halving", "halving": {"target": 8, "keep": 0.25, "screen_share": 0.5}}  # fmt: skip
    recipes, problems = load(tmp_path, sweep, scenario=dict(BASE["scenario"], duration_s=8))
    assert problems == []
    screens = [r for r in recipes if r.screen]
    for i, r in enumerate(screens):  # the TTFT headroom falls with the index: seqs-2 is the answer
        f = tmp_path / result_file(r.name, 8, rehearsal=True)
        f.parent.mkdir(parents=True)
        doc = result_doc(r.name, 8, 0.05 * (i + 1), 100.0)
        if i == 3:  # seqs-16's screen: its client starved, so it is measured in full, not screened out
            doc["marks"] = [{"mark": "client-bound", "reason": "client-bound: aiperf's event loop stalled"}]
        f.write_text(json.dumps(doc))
    rehearsed = halving_round(tmp_path, recipes, rehearsal=True)["local-tune-mocker"]
    assert sorted(rehearsed) == [f"local-tune-mocker.seqs-{n}" for n in (4, 8)], rehearsed
    assert all(why.startswith("screened out") for why in rehearsed.values())
    real = halving_round(tmp_path, recipes)["local-tune-mocker"]
    assert len(real) == 4 and all("waits for the halving screens (0 of 4" in why for why in real.values())


def test_a_rehearsed_screen_runs_its_share_of_the_rehearsal_window_as_on_the_cluster(tmp_path):
    """A rehearsal caps every benchmark to its window; a halving screen keeps its share of it (else a
    rehearsed screen costs as much as a full point), never under the shortest screen allowed."""
    from servesweep.render.plan import render

    local = CLUSTERS["local"]
    cap = local.rehearsal_max_duration_s
    assert 12 <= cap < 30  # a quarter of it is over the 3 s floor, a tenth under it
    for share, screen_s in ((0.25, cap / 4), (0.1, 3.0)):
        sweep = {"axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [2, 4]}},
                 "strategy": "halving", "halving": {"target": 8, "screen_share": share}}  # fmt: skip
        recipes, problems = load(tmp_path, sweep, scenario=dict(BASE["scenario"], duration_s=60))
        assert problems == []
        full, screen = (next(r for r in recipes if r.screen == s) for s in (False, True))
        assert render(full, local, 8)["benchmark"]["duration_s"] == 60
        assert render(screen, local, 8)["benchmark"]["duration_s"] == 60 * share
        assert render(full, local, 8, rehearsal=local)["benchmark"]["duration_s"] == cap
        assert render(screen, local, 8, rehearsal=local)["benchmark"]["duration_s"] == screen_s
    # counted in requests: a rehearsed screen sends its share, never fewer than its concurrency
    scen = {k: v for k, v in BASE["scenario"].items() if k != "duration_s"} | {"requests": 100}
    sweep = {"axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [2, 4]}},
             "strategy": "halving", "halving": {"target": 8, "screen_share": 0.2}}  # fmt: skip
    recipes, problems = load(tmp_path, sweep, scenario=scen)
    assert problems == []
    full, screen = (next(r for r in recipes if r.screen == s) for s in (False, True))
    assert render(full, local, 8, rehearsal=local)["benchmark"]["request_count"] == 32  # 4 per user
    assert render(screen, local, 8, rehearsal=local)["benchmark"]["request_count"] == 8


def test_selecting_a_sweep_by_name_selects_its_variants(tmp_path):
    from servesweep.workflow.selection import with_variants

    recipes, _ = load(tmp_path, {"axes": {"x": {"field": "env.A", "values": ["1", "2"]}}})
    assert sorted(with_variants(["local-tune-mocker"], recipes)) == [
        "local-tune-mocker",
        "local-tune-mocker.x-1",
        "local-tune-mocker.x-2",
    ]


def test_a_variants_plan_is_rendered_by_name_and_a_sweep_file_alone_is_refused(tmp_path):
    """`servesweep plan` on a sweep's file (what rule probe_plan runs for a variant's probe decided
    mid-run): the variant named with --variant, else a refusal naming the choice, never a traceback."""
    source = "recipes/gemma4-livekit-tune-c150.yaml"
    r = servesweep("plan", source, "--conc", "7")
    assert r.returncode == 2 and "sweep: a sweep of 12 variants; name one with --variant" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    name = "gemma4-livekit-tune-c150.mnbt-4096_pls-4_layout-4xtp2"
    out = tmp_path / "probe.plan.json"
    r = servesweep("plan", source, "--conc", "150", "--variant", name, "--out", str(out))
    assert r.returncode == 0, r.stderr
    plan = json.loads(out.read_text())
    assert plan["recipe"] == name and plan["point"] == 150
    r = servesweep("plan", source, "--variant", "gemma4-livekit-tune-c150.nope")
    assert r.returncode == 2 and "no variant 'gemma4-livekit-tune-c150.nope'" in r.stderr, r.stderr


# -- exact staleness per variant: real dry runs on a copy whose points are marked up to date --


def stale_points(wf) -> set[str]:
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode == 0, r.stderr[-3000:]
    return set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", r.stdout + r.stderr))


def set_sweep(wf, values, base_seqs=4, description=None, blocks=4096):
    f = wf / "recipes" / "local-tune-mocker.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["sweep"]["axes"]["seqs"]["values"] = values
    args = doc["engine"]["args"]
    args[args.index("--max-num-seqs") + 1] = base_seqs
    args[args.index("--num-gpu-blocks-override") + 1] = blocks
    if description:
        doc["description"] = description
    f.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_staleness_is_exact_per_variant(tmp_path):
    wf = copy_workflow(tmp_path / "wf", ["local-tune-mocker"])
    set_sweep(wf, [2, 4])
    points = {f"results/local-tune-mocker.seqs-{n}/c8.json" for n in (2, 4)}
    assert stale_points(wf) == points
    for p in points:
        (wf / p).parent.mkdir(parents=True)
        (wf / p).write_text(json.dumps(result_doc(p.split("/")[1], 8, 0.1, 100.0)))
    assert snakemake(wf, "--touch", "results/summary.md").returncode == 0
    assert stale_points(wf) == set()
    set_sweep(wf, [2, 4, 8])  # a value added: only the new variant runs
    assert stale_points(wf) == {"results/local-tune-mocker.seqs-8/c8.json"}
    set_sweep(wf, [4])  # a value removed: nothing runs, its results stay
    assert stale_points(wf) == set() and (wf / "results/local-tune-mocker.seqs-2/c8.json").exists()
    set_sweep(wf, [2, 4], base_seqs=16)  # a base edit every variant overrides: no plan changed
    assert stale_points(wf) == set()
    set_sweep(wf, [2, 4], description="cosmetic")
    assert stale_points(wf) == set()
    set_sweep(wf, [2, 4], blocks=2048)
    assert stale_points(wf) == points  # a base edit that reaches every variant's plan
    said = snakemake(wf, "-n", "results/summary.md").stderr  # the dry run names the variant (--touch kept no
    assert "local-tune-mocker.seqs-2: 1 point (c8) stale — " in said, said  # source to name the field from)


def test_a_sweep_over_its_budget_is_refused_before_anything_runs(tmp_path):
    wf = copy_workflow(tmp_path / "wf", ["local-tune-mocker"])
    r = snakemake(wf, "-n", "results/summary.md", "--config", "budget_gpu_h=0.01")
    assert r.returncode == 2
    assert "--config budget_gpu_h: this run of the sweep is bound at" in r.stderr and "over its budget" in r.stderr
    assert not (wf / "results").exists() or not any((wf / "results").iterdir())
    ok = snakemake(wf, "-n", "results/summary.md")
    assert ok.returncode == 0 and "sweep local-tune-mocker: 3 variant(s)" in ok.stderr


def _run_sweep(tmp_path, concurrency: list[int], duration_s: float, sweep: dict, **more):
    """local-tune-mocker with this sweep (and ``more`` recipe fields), run for real to its summary:
    (the workflow, snakemake's run)."""
    wf = copy_workflow(tmp_path / "wf", ["local-tune-mocker"])
    f = wf / "recipes" / "local-tune-mocker.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["concurrency"], doc["scenario"]["duration_s"], doc["sweep"] = concurrency, duration_s, sweep
    doc |= more
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    since = time.time()
    try:
        r = snakemake(wf, "results/summary.md", timeout=600)
        assert r.returncode == 0, r.stderr[-4000:]
        assert_no_strays(since, wf)
    finally:
        kill_strays(since, wf)
    return wf, r


@pytest.mark.integration
def test_a_real_sweep_starts_one_stack_per_server_configuration_and_ranks_its_variants(tmp_path):
    """4 variants, 2 server configurations (an axis over the client's warm-up shares a stack): 2 engine
    starts; the summary ranks the variants and draws them."""
    axes = {
        "seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 8]},
        "warm": {"field": "scenario.warmup.requests", "values": [2, 4]},
    }
    wf, r = _run_sweep(tmp_path, [4], 4, {"axes": axes})
    stacks = {}
    for seqs in (1, 8):
        for warm in (2, 4):
            res = json.loads((wf / f"results/local-tune-mocker.seqs-{seqs}_warm-{warm}/c4.json").read_text())
            stacks.setdefault(seqs, set()).add(res["identity"]["stack"]["id"])
    assert all(len(ids) == 1 for ids in stacks.values()) and len(stacks[1] | stacks[8]) == 2, stacks
    assert (r.stdout + r.stderr).count("stack: starting stack") == 2
    summary = (wf / "results/summary.md").read_text()
    part = summary.split("## Tuning `local-tune-mocker`", 1)[1]
    assert "**Best" in part or "**Tied" in part or "**No variant" in part
    header = next(ln for ln in part.splitlines() if ln.startswith("| rank"))
    assert [c.strip() for c in header.split("|")[3:5]] == ["seqs", "warm"]  # the axis values as columns
    plot = wf / "results/plots/tuning-local-tune-mocker.png"
    assert plot.stat().st_size > 0 if "![tuning of" in part else "no trusted point to draw" in part


@pytest.mark.integration
def test_a_halving_sweep_runs_in_one_run_and_its_kept_variants_on_their_screens_stacks(tmp_path):
    """2 variants screened at c8, the better half kept: one snakemake run measures the screens, decides,
    and runs the kept variant in full on the stack its screen started (2 engine starts in all): its
    curve, its capacity search's probes and its eval; the summary says why the other was not
    measured; the next dry run has nothing to do."""
    sweep = {
        "axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 8]}},
        "strategy": "halving",
        "halving": {"target": 8, "keep": 0.5, "screen_share": 0.5},
    }
    # tolerance 2 over c4..c16: a probe at c6, c12 or c16 beside the listed c4 and c8, on the same stack
    more = {"capacity": {"min": 4, "max": 16, "tolerance": 2}, "evals": {"mmlu": {"tasks": ["abstract_algebra"]}}}
    wf, r = _run_sweep(tmp_path, [4, 8], 6, sweep, **more)
    out = r.stdout + r.stderr
    assert out.count("stack: starting stack") == 2, out[-4000:]
    full = {n: sorted(paths.point_files(wf / "results" / f"local-tune-mocker.seqs-{n}")) for n in (1, 8)}
    kept = [n for n, found in full.items() if found]
    assert len(kept) == 1 and {4, 8} < {c for c, _ in full[kept[0]]}, full  # a probe beside the points
    name = f"local-tune-mocker.seqs-{kept[0]}"
    screen = json.loads((wf / f"results/{name}.screen/c8.json").read_text())
    ids = {json.loads(p.read_text())["identity"]["stack"]["id"] for _, p in full[kept[0]]}
    assert ids == {screen["identity"]["stack"]["id"]}, (ids, screen["identity"]["stack"])
    # the kept variant's capacity search and eval ran in this run, on its stack
    assert (wf / paths.capacity_file(name)).is_file() and (wf / paths.eval_file(name, "mmlu")).is_file()
    evaluation = json.loads((wf / paths.eval_file(name, "mmlu")).read_text())
    assert evaluation["identity"]["stack"] == screen["identity"]["stack"]["id"], evaluation["identity"]
    # each stack ended once its counted turns were served: none waited for a turn never coming
    keepers = [f.read_text() for f in (wf / "logs" / "stacks").glob("*/*/keeper-driver.log")]
    assert len(keepers) == 2 and all("expected point(s) done" in k for k in keepers), [k[-600:] for k in keepers]
    part = (wf / "results/summary.md").read_text().split("## Tuning `local-tune-mocker`", 1)[1]
    assert part.count("screened out: ") == 1 and "waits for the halving screens" not in part
    again = snakemake(wf, "-n", "results/summary.md")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]


def test_the_seed_tuning_sweep_dry_runs_on_slurm_as_12_held_stacks_with_its_bill(tmp_path):
    wf = copy_workflow(tmp_path / "wf", ["gemma4-livekit-tune-c150"])
    r = snakemake(wf, "-n", "results/summary.md", profile="profiles/slurm-hgx02", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("checkpoint held_point:") == 12
    said = r.stderr
    expansion = (
        r"sweep gemma4-livekit-tune-c150: 12 variant\(s\) .*12 point\(s\) to run on 12 stack\(s\), "
        r"[0-9.]+ GPU-h expected, [0-9.]+ GPU-h bound \(budget 150 GPU-h\)"
    )
    assert re.search(expansion, said), said[-3000:]
    assert re.search(r"total: 12 allocation\(s\), [0-9.]+ GPU-h expected", said)
    assert "gemma4-livekit-tune-c150.mnbt-4096_pls-4_layout-4xtp2" in said


def test_a_waiting_halving_sweeps_expected_bill_counts_the_kept_share_of_its_full_points(tmp_path):
    """Before its screens are in, a halving sweep's bound counts every variant in full (all tied); its
    expected bill counts the share the decision keeps: less with keep 0.25 than with keep 1."""
    wf = copy_workflow(tmp_path / "wf", ["gemma4-livekit-tune-c150"])
    f = wf / "recipes" / "gemma4-livekit-tune-c150.yaml"
    base = yaml.safe_load(f.read_text())
    said = {}
    for keep in (0.25, 1.0):
        doc = copy.deepcopy(base)
        doc["sweep"] |= {"strategy": "halving", "halving": {"target": 150, "keep": keep}, "budget_gpu_h": 500}
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        r = snakemake(wf, "-n", "results/summary.md", profile="profiles/slurm-hgx02", timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        found = re.search(
            r"sweep gemma4-livekit-tune-c150: 12 variant.* ([0-9.]+) GPU-h expected, ([0-9.]+) GPU-h bound", r.stderr
        )
        assert found, r.stderr[-3000:]
        said[keep] = tuple(float(x) for x in found.groups())
    assert said[1.0][0] == said[1.0][1] == said[0.25][1], said  # every variant kept: expected is the bound
    assert said[0.25][0] < said[0.25][1], said
