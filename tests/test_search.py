"""Model-based search (workflow/search, strategy: search): optuna's TPE chooses each trial from the
scores before it; the search is replayed from the results on disk, so the same results choose the
same trials and a resumed search reruns nothing it has."""

from __future__ import annotations

import json
import random
import re
import time

import pytest
import yaml

from servesweep.contract import paths
from servesweep.contract.paths import result_file
from servesweep.tools.samples import result_doc
from servesweep.workflow.search import Space, replay, settings, suggest

from helpers import assert_no_strays, copy_workflow, kill_strays, snakemake
from helpers import load_sweep as load
from helpers import sweep_problems as problems_of

SPACE = {
    "axes": {
        "seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 2, 4]},
        "speed": {"field": "engine.args[--speedup-ratio]", "values": [0.5, 1, 2]},
    },
    "strategy": "search",
}


def _known(recipe) -> tuple[float, float]:
    """A space with a known answer: (TTFT p95, tok/s). Enough slots for c8 only with 4 per replica;
    the faster the engine the better: seqs-4_speed-2 is the grid's winner, the only one this far ahead."""
    seqs, speed = (float(dict(recipe.choice)[a].replace("p", ".")) for a in ("seqs", "speed"))
    ttft = (0.1 if seqs >= 4 else 0.4 * 4 / seqs) / speed
    return ttft, 1000.0 * speed * min(seqs, 4) / 4


def _measure(root, recipes, names, plans=None) -> None:
    for r in (r for r in recipes if r.name in names):
        f = root / result_file(r.name, 8)
        f.parent.mkdir(parents=True, exist_ok=True)
        doc = result_doc(r.name, 8, *_known(r))
        if plans:
            doc["identity"]["plan_fingerprint"] = plans[r.name]
        f.write_text(json.dumps(doc))


def _search(root, recipes, plan_of=None, plans=None):
    """Run the search to its end as the workflow would: measure each round's variants, replay."""
    rounds = []
    while not (rep := replay(root, recipes, plan_of=plan_of)).done:
        assert rep.waiting not in rounds, rep  # each round's results were written and read back
        rounds.append(rep.waiting)
        _measure(root, recipes, rep.waiting, plans)
    return rep, rounds


def test_a_search_names_the_grids_winner_of_a_known_space_in_fewer_trials_than_the_grid(tmp_path):
    """5 trials of a 3 x 3 space, over 10 seeds: the winner every time (a random choice of 5 of the 9
    variants holds it 5 times in 9); each search replays to the same trials."""
    found = []
    for seed in range(10):
        root = tmp_path / f"seed-{seed}"
        root.mkdir()
        recipes, problems = load(root, SPACE | {"search": {"target": 8, "trials": 5, "seed": seed}}, concurrency=[8])
        assert problems == [] and len(recipes) == 9
        rep, rounds = _search(root, recipes)
        assert len(rep.history) == 5 and len(set(rep.chosen)) == 5 and len(rounds) == 5  # 5 of the grid's 9
        found.append(max((s, n) for n, s in rep.history if s is not None)[1] == "local-tune-mocker.seqs-4_speed-2")
        assert replay(root, recipes).history == rep.history  # the same results choose the same trials
    assert all(found), found


# seed 000's shape: two ranked axes and a layout of two labels (an unordered axis)
LAYOUT_SPACE = {
    "axes": {
        "seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 2, 4]},
        "speed": {"field": "engine.args[--speedup-ratio]", "values": [1, 2]},
        "layout": {"field": "topology.aggregated", "values": [{"replicas": 1, "tp": 1}, {"replicas": 2, "tp": 1}],
                   "labels": ["1x", "2x"]},
    },
    "strategy": "search",
}  # fmt: skip


def test_the_search_starts_with_every_label_of_an_unordered_axis_and_finds_the_better_layout(tmp_path):
    """Seed 000's shape: 3 x 2 ranked values and a layout of two labels that alone decides (the rest is
    noise). The balanced start tries both layouts in its first two trials, each differing from the
    other in every axis; over 10 seeds 5 trials name a variant of the better layout every time (a
    random start then TPE named the worse layout for 5 of 30 seeds on the seed's rehearsed scores)."""
    space = LAYOUT_SPACE
    for seed in range(10):
        root = tmp_path / f"seed-{seed}"
        root.mkdir()
        recipes, problems = load(root, space | {"search": {"target": 8, "trials": 5, "seed": seed}}, concurrency=[8])
        assert problems == [] and len(recipes) == 12
        noise = random.Random(seed)
        while not (rep := replay(root, recipes)).done:
            for r in (r for r in recipes if r.name in rep.waiting):
                tps = (3600.0 if dict(r.choice)["layout"] == "2x" else 3400.0) + noise.gauss(0, 45)
                f = root / result_file(r.name, 8)
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps(result_doc(r.name, 8, 0.1, tps)))
        first, second = (dict(r.choice) for r in recipes if r.name in [n for n, _ in rep.history[:2]])
        assert all(first[a] != second[a] for a in ("seqs", "speed", "layout")), (first, second)
        best = max((s, n) for n, s in rep.history if s is not None)[1]
        assert best.endswith("layout-2x"), (seed, rep.history)


def test_a_failed_start_trial_is_replaced_by_a_balanced_one_and_a_batch_replays_the_same(tmp_path):
    """The start counts scored trials, as TPE does: after two start trials that could not be scored the
    third is still balanced (the one sequence-slot value not yet tried, for each of 5 seeds; a TPE
    random draw has it 4 times in 10); a batch of 3 from the same history is the same batch every
    time, 3 different untried variants."""
    recipes, problems = load(tmp_path, LAYOUT_SPACE | {"search": {"target": 8, "trials": 5}}, concurrency=[8])
    assert problems == []
    space, spec = Space(recipes[0].sweep, [r.name for r in recipes]), settings(recipes[0].sweep)
    assert space.startup(spec) == 2  # a third of 5 is 1; the layout has 2 labels
    for seed in range(5):
        seeded = {**spec, "seed": seed}
        (first,) = suggest(space, seeded, [], 1)
        (second,) = suggest(space, seeded, [(first, None)], 1)
        assert all(a != b for a, b in zip(space.params[first].values(), space.params[second].values(), strict=True))
        (third,) = suggest(space, seeded, [(first, None), (second, None)], 1)
        seqs = {space.params[n]["seqs"] for n in (first, second, third)}
        assert len(seqs) == 3, (seed, first, second, third)
    history = [(first, None), (second, 3400.0)]
    batch = suggest(space, {**spec, "batch": 3}, history, 3)
    assert batch == suggest(space, {**spec, "batch": 3}, history, 3)
    assert len(set(batch)) == 3 and not set(batch) & {first, second}, batch


def test_a_resumed_search_reruns_nothing_and_a_result_of_another_plan_is_measured_again(tmp_path):
    recipes, problems = load(tmp_path, SPACE | {"search": {"target": 8, "trials": 4, "batch": 2}}, concurrency=[8])
    assert problems == []
    plans = {r.name: f"{i:016x}" for i, r in enumerate(recipes)}
    rep, rounds = _search(tmp_path, recipes, lambda name, conc: plans[name], plans)
    assert [len(r) for r in rounds] == [2, 2]  # two at a time
    first = rounds[0][0]
    plans[first] = "f" * 16  # an edited plan: its result no longer counts: the search waits for it again
    again = replay(tmp_path, recipes, plan_of=lambda name, conc: plans[name])
    assert again.waiting == (first,) and not again.history


@pytest.mark.parametrize(
    ("search", "changes", "field", "says"),
    [
        ({"target": 16, "trials": 4}, {}, "sweep.search.target", "not one of the recipe's concurrencies"),
        ({"target": 8, "trials": 9}, {}, "sweep.search.trials", "9 trials for 9 variants"),
        ({"target": 8, "trials": 3, "batch": 4}, {}, "sweep.search.batch", "more than the 3 trials"),
    ],
)  # fmt: skip
def test_a_bad_search_is_refused_naming_the_field(tmp_path, search, changes, field, says):
    msgs = problems_of(tmp_path, SPACE | {"search": search}, concurrency=[8], **changes)
    assert any(f"recipes/local-tune-mocker.yaml: {field}:" in m and says in m for m in msgs), msgs
    unasked = {k: v for k, v in SPACE.items() if k != "strategy"} | {"search": {"target": 8, "trials": 3}}
    assert any("search settings without strategy: search" in m for m in problems_of(tmp_path, unasked))


@pytest.mark.integration
def test_a_search_chooses_its_trials_in_one_run_each_on_a_stack_of_its_own(tmp_path):
    """4 variants, 2 trials, one snakemake run: the second trial is chosen once the first is in, and
    each trial's capacity search runs on its stack as it is chosen; two engine starts in all; the
    summary says which variants the search never tried; a rerun has nothing to do."""
    wf = copy_workflow(tmp_path / "wf", ["local-tune-mocker"])
    f = wf / "recipes" / "local-tune-mocker.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["concurrency"], doc["scenario"]["duration_s"] = [8], 6
    doc["sweep"] = {
        "axes": {"seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 8]},
                 "speed": {"field": "engine.args[--speedup-ratio]", "values": [1, 2]}},
        "strategy": "search", "search": {"target": 8, "trials": 2},
    }  # fmt: skip
    doc["capacity"] = {"min": 4, "max": 16, "tolerance": 8}
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    since = time.time()
    try:
        dry = snakemake(wf, "-n", "results/summary.md")
        said = "search: 1 of 2 trial(s) chosen so far; the other 1 chosen by the search (a balanced start, then"
        assert said in dry.stderr, dry.stderr
        r = snakemake(wf, "results/summary.md", timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-4000:]
        assert_no_strays(since, wf)
    finally:
        kill_strays(since, wf)
    assert out.count("stack: starting stack") == 2, out[-4000:]
    measured = sorted(p.name for p in (wf / "results").glob("local-tune-mocker.*") if (p / "c8.json").exists())
    assert len(measured) == 2, measured
    for name in measured:  # each trial's capacity, decided in this run (the second's chosen mid-run)
        capacity = json.loads((wf / paths.capacity_file(name)).read_text())
        assert capacity["recipe"] == name, capacity
    part = (wf / "results/summary.md").read_text().split("## Tuning `local-tune-mocker`", 1)[1]
    assert part.count("not tried by the search (2 trials of 4 variants") == 2, part
    again = snakemake(wf, "-n", "results/summary.md")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]
    # a finished search chooses nothing more: its untried variants are said as such, no trial is pending
    assert "chosen so far" not in again.stderr and "as trials are chosen" not in again.stderr, again.stderr
    assert "search: 2 variant(s) not measured in full" in again.stderr, again.stderr


def test_the_seed_sweep_as_a_search_submits_one_trial_first_and_bills_its_trials_not_the_grid(tmp_path):
    """On slurm-hgx02, seed 000's 12-variant sweep as a 5-trial search: the dry run lists the first
    trial's held stack only, and the bill's bound counts 5 variants (the costliest), not 12."""
    wf = copy_workflow(tmp_path / "wf", ["gemma4-livekit-tune-c150"])
    f = wf / "recipes" / "gemma4-livekit-tune-c150.yaml"
    doc = yaml.safe_load(f.read_text())
    bounds = {}
    for strategy in ("grid", "search"):
        doc["sweep"] |= {"strategy": strategy} | (
            {"search": {"target": 150, "trials": 5}} if strategy == "search" else {}
        )
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        r = snakemake(wf, "-n", "results/summary.md", profile="profiles/slurm-hgx02", timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        line = next(ln for ln in r.stderr.splitlines() if "sweep gemma4-livekit-tune-c150: 12 variant(s)" in ln)
        bounds[strategy] = float(re.search(r"([0-9.]+) GPU-h bound", line).group(1))
    assert r.stdout.count("checkpoint held_point:") == 1, r.stdout[-3000:]
    said = "1 of 5 trial(s) chosen so far; the other 4 chosen by the search (a balanced start, then optuna's TPE"
    assert said + "; seed 0" in r.stderr
    # the run's bill prices the 4 trials still to choose: its bound is the sweep line's
    assert "gemma4-livekit-tune-c150: up to 4 trial stack(s) as the search chooses them" in r.stderr, r.stderr
    total = next(ln for ln in r.stderr.splitlines() if "total: up to 5 allocation(s)" in ln)
    assert float(re.search(r"([0-9.]+) GPU-h bound", total).group(1)) == pytest.approx(bounds["search"], abs=0.011)
    # the variants' bills are alike: 5 trials are bound near 5/12 of the grid
    assert 0.3 < bounds["search"] / bounds["grid"] < 0.5, bounds


def test_a_search_variant_selected_by_name_is_measured_as_any_recipe(tmp_path):
    """`--config recipes=<variant>` of a search sweep: that variant alone, chosen without a search
    (nothing left to choose from), its point listed by the dry run."""
    wf = copy_workflow(tmp_path / "wf", ["local-tune-mocker"])
    f = wf / "recipes" / "local-tune-mocker.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["sweep"] = SPACE | {"search": {"target": 8, "trials": 3}}
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    name = "local-tune-mocker.seqs-2_speed-1"
    r = snakemake(wf, "-n", "results/summary.md", "--config", f"recipes={name}")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert set(re.findall(r"output: (results/[^,\s]+/c\d+\.json)", r.stdout)) == {f"results/{name}/c8.json"}
