"""The summary on fixture results: tables, missing points, SLO verdicts, best pick, baseline deltas, plots."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest

from servesweep.report.summary import build_summary, num
from servesweep.run.result import validate_result
from servesweep.tools.samples import result_doc


@pytest.fixture
def fixture_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = {
        ("fast", 4): result_doc("fast", 4, 0.2, 17078.4),
        ("fast", 16): result_doc("fast", 16, 0.62, 30000.0),  # misses its SLO
        ("dense-img", 4): result_doc("dense-img", 4, 0.3, 9000.0, gpus=1),  # 9000/GPU beats fast's 8539
        ("dense-img", 16): result_doc("dense-img", 16, 0.45, 20000.0, gpus=1),
        ("other", 8): result_doc("other", 8, 0.1, 100.0, scenario="batch"),
    }
    paths = []
    for (r, c), doc in docs.items():
        assert validate_result(doc) == []
        p = Path("results") / r / f"c{c}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc))
        paths.append(p)
    points = [
        {
            "recipe": r,
            "concurrency": c,
            "result": f"results/{r}/c{c}.json",
            "scenario": d["identity"]["scenario"],
            "log_dir": f"logs/{r}/c{c}",
        }
        for (r, c), d in docs.items()
    ]
    points.append(
        {
            "recipe": "fast",
            "concurrency": 64,
            "result": "results/fast/c64.json",
            "scenario": "chat",
            "log_dir": "logs/fast/c64",
        }
    )
    points.append(
        {
            "recipe": "fast",
            "concurrency": 128,
            "result": "results/fast/c128.json",
            "scenario": "chat",
            "log_dir": "logs/fast/c128",
        }
    )
    Path("logs/fast/c64").mkdir(parents=True)
    Path("logs/fast/c64/failure.json").write_text(
        json.dumps({"time": "2026-12-01T01:00:00", "reason": "process agg-1 exited with code 3 during startup\n..."})
    )
    sel = Path(".plans/selection-local.json")
    sel.parent.mkdir()
    slos = {"fast": {"ttft_p95_s": 0.5}, "dense-img": {"ttft_p95_s": 0.5}, "other": {}}
    sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": slos}))
    return tmp_path, paths, sel


def test_tables_verdicts_best_and_missing(fixture_run):
    root, paths, sel = fixture_run
    build_summary(paths, sel, Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    assert "5 of 7 selected points have a result." in md
    assert "## Scenario `chat`" in md and "## Scenario `batch`" in md
    # figures formatted as people write them, rows linked to their JSON
    assert "[fast](fast/c4.json)" in md
    assert "0.07 / 0.13 / 0.20 / 0.32" in md
    assert "17 078" in md and "68 000 / 0" not in md and "4 000 / 1 / 0" in md  # ok / cancelled at grace / errors
    assert "2 400 / 1 600 (max/min 1.50)" in md
    # SLO verdicts: a miss names the figure
    row16 = next(ln for ln in md.splitlines() if "[fast](fast/c16.json)" in ln)
    assert "✗ ttft_p95_s 0.62 > 0.5" in row16
    row4 = next(ln for ln in md.splitlines() if "[fast](fast/c4.json)" in ln)
    assert row4.rstrip(" |").endswith("✓")
    # best per concurrency among SLO-meeting points: c16 goes to dense-img since fast missed
    best = md.split("## Best setup per concurrency")[1].split("##")[0]
    assert "| chat       | 4      | dense-img" in best
    assert "| chat       | 16     | dense-img" in best
    assert "| batch      | 8      | other" in best
    # missing points are listed, with the failure reason when there is one
    miss = md.split("## Missing points")[1].split("##")[0]
    assert "| fast     | 64     | last run failed 2026-12-01T01:00:00: process agg-1 exited with code 3" in miss
    assert "| fast     | 128    | not run yet" in miss
    prov = md.split("## Provenance")[1]
    assert "registry/x:1" in prov and "(local venv)" in prov


def test_csv_has_one_row_per_point_with_every_figure(fixture_run):
    _, paths, sel = fixture_run
    build_summary(paths, sel, Path("results/summary.md"))
    df = pd.read_csv("results/summary.csv")
    assert len(df) == 5
    for col in ("req_s", "ttft_p99_s", "itl_p99_ms", "output_tps_per_gpu", "cache_read_share", "slo_met", "result"):
        assert col in df.columns


def test_baseline_deltas_marked_by_direction(fixture_run, tmp_path):
    _, paths, sel = fixture_run
    base = tmp_path / "baseline"
    (base / "fast").mkdir(parents=True)
    (base / "fast" / "c4.json").write_text(json.dumps(result_doc("fast", 4, 0.25, 15000.0)))
    build_summary(paths, sel, Path("results/summary.md"), baseline=base)
    md = Path("results/summary.md").read_text()
    table = md.split("## Against baseline")[1].split("##")[0]
    row = next(ln for ln in table.splitlines() if ln.startswith("| fast"))
    assert "-20.0% ▲ better" in row  # TTFT p95 0.25 -> 0.20: lower is better
    assert "+13.9% ▲ better" in row  # output tok/s 15000 -> 17078
    (base / "fast" / "c4.json").write_text(json.dumps(result_doc("fast", 4, 0.1, 20000.0)))
    build_summary(paths, sel, Path("results/summary.md"), baseline=base)
    table = Path("results/summary.md").read_text().split("## Against baseline")[1]
    row = next(ln for ln in table.splitlines() if ln.startswith("| fast"))
    assert "+100.0% ▼ worse" in row and "-14.6% ▼ worse" in row


def test_plots_exist_and_are_real_images(fixture_run):
    _, paths, sel = fixture_run
    build_summary(paths, sel, Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    for name in ("chat-throughput-vs-interactivity.png", "chat-ttft-p95.png", "batch-ttft-p95.png"):
        p = Path("results/plots") / name
        assert f"(plots/{name})" in md
        assert p.stat().st_size > 10_000
        img = mpimg.imread(p)
        assert img.shape[0] > 300 and img.shape[1] > 500 and img.std() > 0.05


def test_number_format():
    assert num(17078.4) == "17 078" and num(0.514, 2) == "0.51" and num(None) == "–"


def _gpu_row(md: str, stack: str) -> list[str]:
    section = md.split("## GPU time per stack")[1].split("##")[0]
    row = next(ln for ln in section.splitlines() if ln.startswith(f"| {stack}"))
    return [c.strip() for c in row.strip("|").split("|")]


def _on_one_stack(points: dict, linger_s: float = 0.0) -> None:
    """Rewrite results as run on one stack: (recipe, conc) -> (position, start, end, caches_reset)."""
    for (recipe, conc), (pos, start, end, reset) in points.items():
        f = Path(f"results/{recipe}/c{conc}.json")
        doc = json.loads(f.read_text())
        doc["identity"]["stack"].update(id="stack-shared", position=pos, caches_reset=reset, linger_s=linger_s)
        doc["identity"].update(start_time=f"2026-12-01T00:{start}+00:00", end_time=f"2026-12-01T00:{end}+00:00")
        f.write_text(json.dumps(doc))


def test_gpu_hours_count_each_stack_start_once(fixture_run):
    """Two points on one warm stack pay one startup; one start per point would pay two."""
    root, paths, sel = fixture_run
    _on_one_stack({("fast", 4): (1, "00:00", "01:00", False), ("fast", 16): (2, "01:30", "02:30", None)})
    build_summary(paths, sel, Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    # 2 GPUs: startup 30 s, benchmark 2 x 60 s, idle 30 s between the points; one start per point
    # pays 2 x 30 s of startup
    cells = _gpu_row(md, "stack-shared")
    expected = ["stack-shared", "fast", "2", "2", "0.017", "0.067", "0.017", "0.000", "0", "0.000", "0.100", "0.083"]
    expected += ["0.100"]
    assert cells == expected, cells
    assert "cross-scenario reuse" not in md  # one scenario: warm caches are the curve's own


def test_a_lingering_stack_counts_its_linger_after_the_last_point(fixture_run):
    """A 90 s linger on 2 GPUs after the stack's last point: 0.05 GPU-h more spent."""
    root, paths, sel = fixture_run
    points = {("fast", 4): (1, "00:00", "01:00", False), ("fast", 16): (2, "01:30", "02:30", None)}
    _on_one_stack(points, linger_s=90)
    build_summary(paths, sel, Path("results/summary.md"))
    cells = _gpu_row(Path("results/summary.md").read_text(), "stack-shared")
    assert cells[7] == "0.050" and cells[10] == "0.150", cells


def test_the_last_runs_bill_is_set_against_what_its_stacks_spent(fixture_run):
    """The bill written as a Slurm run's jobs started (workflow/bill) beside the spend of the stacks
    started since (the shared one, not the earlier ones), by the same accounting (0.100 GPU-h above)."""
    root, paths, sel = fixture_run
    _on_one_stack({("fast", 4): (1, "05:00", "06:00", False), ("fast", 16): (2, "06:30", "07:30", None)})
    doc = json.loads(sel.read_text())
    sel.write_text(json.dumps(doc | {"cluster": "slurm-x"}))
    bill = Path(".plans/bill-slurm-x.json")
    bill.write_text(json.dumps({"time": "2026-12-01T00:04:00+00:00", "stacks": [], "gpu_h": 0.2, "gpu_h_bound": 0.5}))
    build_summary(paths, sel, Path("results/summary.md"))
    section = Path("results/summary.md").read_text().split("## Bill against spend")[1].split("##")[0]
    assert "billed 0.200 GPU-h" in section and ", bound 0.500)" in section, section
    assert "the 1 stack(s) it started spent 0.100 GPU-h (50% of the bill)" in section
    bill.write_text("{not a bill")
    build_summary(paths, sel, Path("results/summary.md"))
    assert "## Bill against spend" not in Path("results/summary.md").read_text()  # an unreadable bill: left out


def test_a_stack_shared_by_two_scenarios_counts_one_start_and_marks_unreset_caches(fixture_run):
    """Recipes with the same servers and different scenarios ran on one stack: one startup is spent,
    one start per recipe would be two; a later point without a cache reset is marked."""
    root, paths, sel = fixture_run
    _on_one_stack({("fast", 4): (1, "00:00", "01:00", False), ("other", 8): (2, "01:00", "02:00", None)})
    build_summary(paths, sel, Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    cells = _gpu_row(md, "stack-shared")
    assert cells[:3] == ["stack-shared ‡", "fast, other", "2"], cells
    # 2 GPUs x (30 + 120) s, no linger; per recipe 2 x 30 s startup
    assert cells[7:] == ["0.000", "0", "0.000", "0.083", "0.100", "0.100"], cells
    assert "‡ cross-scenario reuse without a prefix-cache reset" in md
    _on_one_stack({("fast", 4): (1, "00:00", "01:00", False), ("other", 8): (2, "01:00", "02:00", True)})
    build_summary(paths, sel, Path("results/summary.md"))
    assert "cross-scenario reuse" not in Path("results/summary.md").read_text()  # the caches were reset


def test_total_tokens_per_gpu_is_the_headline_and_picks_the_best(fixture_run):
    """The field reports active total (input + output) tok/s per GPU: a prefill-heavy setup with
    less output per GPU but more total per GPU is the best pick; an older result lacking the figure
    gets it derived from total_tps / GPUs."""
    _, paths, sel = fixture_run
    heavy = json.loads(Path("results/fast/c4.json").read_text())
    heavy["figures"]["total_tps"] = 400_000.0  # 200 000 per GPU on 2 GPUs
    del heavy["figures"]["total_tps_per_gpu"]  # as a result written before the figure existed
    assert validate_result(heavy) == []
    Path("results/fast/c4.json").write_text(json.dumps(heavy))
    build_summary(paths, sel, Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    header = next(ln for ln in md.split("## Scenario `chat`")[1].splitlines() if ln.startswith("| recipe"))
    assert header.index("total tok/s/GPU") < header.index("output tok/s/GPU")  # headline first
    best = md.split("## Best setup per concurrency (total tok/s per GPU, SLO met)")[1].split("##")[0]
    row = next(ln for ln in best.splitlines() if ln.startswith("| chat") and "| 4 " in ln)
    assert "fast" in row and "200 000" in row  # dense-img has more output/GPU (9 000 vs 8 539), less total
    df = pd.read_csv("results/summary.csv")
    assert df.loc[(df.recipe == "fast") & (df.concurrency == 4), "total_tps_per_gpu"].item() == 200_000.0


def test_cancellations_batch_and_preemptions_are_shown(fixture_run):
    _, paths, sel = fixture_run
    build_summary(paths, sel, Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| [fast](fast/c16.json)"))
    assert "agg 12.8 / 16 · 0 preempt." in row and "| 16 000 / 4 / 0 " in row  # ok / cancelled / errors
    df = pd.read_csv("results/summary.csv")
    assert {"cancelled", "batch", "total_tps_per_gpu"} <= set(df.columns)


def _with_repeats(doc: dict, tps_hw: float) -> dict:
    doc["figures"]["repeats"] = {"n": 3, "confidence_level": 0.95, "runs": [], "half_width": {"output_tps": tps_hw}}
    return doc


@pytest.mark.parametrize(
    ("new_tps", "new_hw", "base_hw", "mark"),
    [
        (15300.0, None, None, "≈ within noise"),  # +2 %, no repeats: inside the default 3 % band
        (16500.0, None, None, "▲ better"),  # +10 %: a real change
        (16500.0, 1000.0, 800.0, "≈ within noise"),  # +10 % but inside the combined intervals
        (16500.0, 300.0, 200.0, "▲ better"),  # +10 %, intervals narrower than the change
    ],
)
def test_deltas_are_judged_against_noise(fixture_run, tmp_path, new_tps, new_hw, base_hw, mark):
    _, paths, sel = fixture_run
    new = result_doc("fast", 4, 0.2, new_tps)
    Path("results/fast/c4.json").write_text(json.dumps(_with_repeats(new, new_hw) if new_hw else new))
    base = tmp_path / "baseline"
    (base / "fast").mkdir(parents=True)
    old = result_doc("fast", 4, 0.2, 15000.0)
    (base / "fast" / "c4.json").write_text(json.dumps(_with_repeats(old, base_hw) if base_hw else old))
    build_summary(paths, sel, Path("results/summary.md"), baseline=base)
    table = Path("results/summary.md").read_text().split("## Against baseline")[1].split("##")[0]
    header = next(ln for ln in table.splitlines() if ln.startswith("| recipe"))
    row = next(ln for ln in table.splitlines() if ln.startswith("| fast"))
    col = [c.strip() for c in header.split("|")].index("output tok/s")
    assert mark in row.split("|")[col], row


def test_repeated_points_show_value_plus_minus_half_width(fixture_run):
    _, paths, sel = fixture_run
    doc = result_doc("fast", 4, 0.2, 17078.4)
    doc["figures"]["repeats"] = {
        "n": 3,
        "confidence_level": 0.95,
        "runs": [{"req_s": 340.0}, {"req_s": 342.0}, {"req_s": 343.0}],
        "half_width": {"req_s": 2.5, "total_tps_per_gpu": 412.0},
    }
    assert validate_result(doc) == []
    Path("results/fast/c4.json").write_text(json.dumps(doc))
    build_summary(paths, sel, Path("results/summary.md"))
    row = next(ln for ln in Path("results/summary.md").read_text().splitlines() if ln.startswith("| [fast](fast/c4"))
    assert "341.57 ± 2.50" in row and "85 392 ± 412" in row


def _sourced(doc: dict, args: list, fingerprint: str) -> dict:
    recipe = {"name": doc["identity"]["recipe"], "doc": {"engine": {"kind": "vllm", "args": args}, "slo": {}}}
    cluster = {"name": "hcm-hgx02", "doc": {"placeholders": {"model_dir": "/lustre/a"}}}
    doc["source"] = {"schema": "servesweep.source/1", "plan_schema": "servesweep.plan/3", "recipe": recipe}
    doc["source"]["cluster"] = cluster
    doc["identity"]["plan_fingerprint"] = fingerprint
    assert validate_result(doc) == []
    return doc


def test_baseline_attribution_names_the_differing_fields(fixture_run, tmp_path):
    """Each compared recipe says which fields differ from the baseline's results, or that the config
    is the same (noise or environment)."""
    _, paths, sel = fixture_run
    now = {p: json.loads(Path(p).read_text()) for p in paths}
    for p, doc in now.items():
        fp = "a" * 16 if doc["identity"]["recipe"] == "dense-img" else "b" * 16
        Path(p).write_text(json.dumps(_sourced(doc, ["--max-num-seqs", "512"], fp)))
    base = tmp_path / "baseline"
    for recipe, fp in (("fast", "c" * 16), ("dense-img", "a" * 16)):
        (base / recipe).mkdir(parents=True)
        old = _sourced(
            result_doc(recipe, 4, 0.25, 15000.0), ["--max-num-seqs", "256" if recipe == "fast" else "512"], fp
        )
        (base / recipe / "c4.json").write_text(json.dumps(old))
    build_summary(paths, sel, Path("results/summary.md"), baseline=base)
    section = Path("results/summary.md").read_text().split("### What differs from the baseline")[1].split("\n## ")[0]
    rows = {ln.split("|")[1].strip(): ln for ln in section.splitlines() if ln.startswith("| ") and "recipe" not in ln}
    assert "engine.args: --max-num-seqs 256 → 512" in rows["fast"]
    assert "same config: noise or environment" in rows["dense-img"]


def _point_files(docs: dict, slos: dict | None = None, floors: dict | None = None) -> tuple[list[Path], Path]:
    paths, points = [], []
    for name, doc in docs.items():
        p = Path("results") / name / f"c{doc['identity']['concurrency']}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc))
        paths.append(p)
        points.append({"recipe": name, "concurrency": doc["identity"]["concurrency"], "result": str(p),
                       "scenario": doc["identity"]["scenario"], "log_dir": f"logs/{name}"})  # fmt: skip
    sel = Path(".plans/selection-local.json")
    sel.parent.mkdir(exist_ok=True)
    sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": slos or {}, "eval_floors": floors or {}}))
    return paths, sel


def _best(md: str) -> str:
    return md.split("## Best setup per concurrency")[1].split("##")[0]


def test_two_recipes_two_percent_apart_without_repeats_are_tied(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = {"a": result_doc("a", 4, 0.2, 10200.0), "b": result_doc("b", 4, 0.2, 10000.0)}
    build_summary(*_point_files(docs), Path("results/summary.md"))
    assert "| chat       | 4      | tied: a, b" in _best(Path("results/summary.md").read_text())
    docs["a"] = result_doc("a", 4, 0.2, 10400.0)  # 4 % ahead: beyond the 3 % band
    build_summary(*_point_files(docs), Path("results/summary.md"))
    assert "| chat       | 4      | a " in _best(Path("results/summary.md").read_text())


def test_repeats_intervals_decide_a_lead_and_other_client_settings_are_not_compared(tmp_path, monkeypatch):
    from servesweep.report.ranking import Candidate, leader

    narrow = leader([Candidate("a", 102.0, 0.5), Candidate("b", 100.0, 0.5)])
    assert narrow.leader.name == "a" and narrow.label == "a"  # 2 apart, intervals 1 wide together
    wide = leader([Candidate("a", 102.0, 1.5), Candidate("b", 100.0, 1.5)])
    assert wide.leader is None and wide.label == "tied: a, b"
    lower = leader([Candidate("a", 0.30), Candidate("b", 0.20)], higher_is_better=False)
    assert lower.label == "b"
    other = leader([Candidate("a", 100.0, settings="20 s"), Candidate("b", 99.0, settings="6 s")])
    assert other.label == "a" and [c.name for c in other.not_compared] == ["b"]
    unknown = leader([Candidate("a", 100.0, settings="20 s"), Candidate("old", 99.0)])  # written before settings
    assert unknown.label == "tied: a, old"
    marked = leader([Candidate("a", 500.0, marks=("client-bound",)), Candidate("b", 99.0)])
    assert marked.label == "b"
    monkeypatch.chdir(tmp_path)
    docs = {"a": result_doc("a", 4, 0.2, 10200.0), "b": result_doc("b", 4, 0.2, 10000.0)}
    docs["a"]["identity"]["client_settings"] = {"duration_s": 20, "warmup": {"requests": 8}, "scenario": "chat"}
    docs["b"]["identity"]["client_settings"] = {"duration_s": 6, "warmup": {}, "scenario": "chat"}
    build_summary(*_point_files(docs), Path("results/summary.md"))
    best = _best(Path("results/summary.md").read_text())
    cells = [c.strip() for c in next(ln for ln in best.splitlines() if ln.startswith("| chat")).strip("|").split("|")]
    assert cells[2] == "a" and cells[5] == "b" and cells[6] == "–", cells  # b ran 6 s: not compared, not "not ranked"


def test_a_stack_below_its_accuracy_floor_or_ungradable_is_never_named_best(tmp_path, monkeypatch):
    from servesweep.run import evals

    monkeypatch.chdir(tmp_path)
    docs = {"a": result_doc("a", 4, 0.2, 20000.0), "b": result_doc("b", 4, 0.2, 10000.0)}
    ident = {"recipe": "a", "cluster": "local", "rehearsal": False, "engine": "vllm", "plan_fingerprint": "p",
             "server_fingerprint": "s", "settings": "x", "stack": "k", "time": "t"}  # fmt: skip
    ev = {"schema": evals.SCHEMA, "identity": ident, "eval": {"benchmark": "gsm8k", "tasks": None, "n_shots": None},
          "score": None, "stderr": None, "correct": 0, "total": 12, "unparsed": 12, "tasks": []}  # fmt: skip
    Path("results/a").mkdir(parents=True)
    Path("results/a/eval-gsm8k.json").write_text(json.dumps(ev))
    paths, sel = _point_files(docs)
    build_summary(paths, sel, Path("results/summary.md"), evals=[Path("results/a/eval-gsm8k.json")])
    md = Path("results/summary.md").read_text()
    assert "| chat       | 4      | b " in _best(md) and "no gradable answers (12 unparsed)" in md
    ev |= {"score": 0.5, "stderr": 0.15, "correct": 6, "unparsed": 0}
    Path("results/a/eval-gsm8k.json").write_text(json.dumps(ev))
    paths, sel = _point_files(docs, floors={"a": {"gsm8k": 0.6}})
    build_summary(paths, sel, Path("results/summary.md"), evals=[Path("results/a/eval-gsm8k.json")])
    md = Path("results/summary.md").read_text()
    assert "| chat       | 4      | b " in _best(md) and "⚠ below its floor 60.0 %" in md


def test_gpu_time_counts_every_probe_and_check_a_stack_served(fixture_run):
    """A capacity search's probes outside the selection and an eval on the same stack are its GPU time."""
    from servesweep.run import evals

    root, paths, sel = fixture_run
    probe = result_doc("fast", 8, 0.3, 12000.0)  # not a selected point: only its search probed it
    Path("results/fast/c8.json").write_text(json.dumps(probe))
    cap = {"schema": "servesweep.capacity/1", "recipe": "fast", "scenario": "chat", "cluster": "local", "slo": {},
           "bounds": {"min": 4, "max": 8, "tolerance": 1}, "capacity": 8, "lowest_miss": None,
           "outcome": "meets the SLO at max", "at_capacity": None,
           "probes": [{"concurrency": 8, "met": True, "verdicts": [], "result": "results/fast/c8.json"}]}  # fmt: skip
    Path("results/fast/capacity.json").write_text(json.dumps(cap))
    ident = {"recipe": "fast", "cluster": "local", "rehearsal": False, "engine": "vllm", "plan_fingerprint": "p",
             "server_fingerprint": "s", "settings": "x", "stack": "stack-fast", "time": "t"}  # fmt: skip
    ev = {"schema": evals.SCHEMA, "identity": ident, "eval": {"benchmark": "gsm8k", "tasks": None, "n_shots": None},
          "score": 0.75, "stderr": 0.13, "correct": 9, "total": 12, "unparsed": 0, "tasks": [],
          "timings_s": {"bench": 180.0}}  # fmt: skip
    Path("results/fast/eval-gsm8k.json").write_text(json.dumps(ev))
    build_summary(paths, sel, Path("results/summary.md"), capacities=[Path("results/fast/capacity.json")],
                  evals=[Path("results/fast/eval-gsm8k.json")])  # fmt: skip
    cells = _gpu_row(Path("results/summary.md").read_text(), "stack-fast")
    assert cells[2] == "3" and cells[8:10] == ["1", "0.100"], cells  # c4, c16 and the probe c8; 2 GPUs x 180 s


def test_on_a_cluster_of_virtual_gpus_no_per_gpu_figure_is_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = {"a": result_doc("a", 4, 0.2, 20000.0), "b": result_doc("b", 4, 0.2, 10000.0, gpus=1)}
    for d in docs.values():
        d["source"] = {"schema": "servesweep.source/1", "plan_schema": "p", "recipe": {"name": "r", "doc": {}},
                       "cluster": {"name": "local", "doc": {"gpu_type": "virtual"}}}  # fmt: skip
    build_summary(*_point_files(docs), Path("results/summary.md"))
    md = Path("results/summary.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| [a]"))
    assert "10 000" not in row and "this cluster's GPUs are virtual (`gpu_type: virtual`)" in md
    best = _best(md)
    assert "(total tok/s of the stack: its GPUs are virtual, SLO met)" in best
    assert "| chat       | 4      | a " in best  # by the stack's tok/s, not b's 10 000 per 'GPU' against a's 10 000
    csv = pd.read_csv("results/summary.csv")
    assert csv["total_tps_per_gpu"].isna().all() and csv["output_tps_per_gpu"].isna().all()
