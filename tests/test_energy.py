"""GPU power and energy through aiperf's telemetry: the cluster fact, the plan, aiperf's options, the
result's figures, the summary; and aiperf's own collector against the stand-in DCGM exporter."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from servesweep.contract.plan import Plan
from servesweep.fileio.errors import InputError
from servesweep.render.cluster import load_cluster_file
from servesweep.render.plan import render
from servesweep.report.energy import columns, kwh_lines
from servesweep.run import energy
from servesweep.run.result import validate_result
from servesweep.run.spawn import Context
from servesweep.tools import dcgm_standin
from servesweep.tools.samples import result_doc

from helpers import CLUSTERS, ROOT, assert_no_strays, copy_workflow, kill_strays, load_recipe, require, snakemake

ENGINE_PYTHON = ROOT / ".venvs" / "engine" / "bin" / "python"
# aiperf's own DCGM collector scraping an exporter into its own telemetry store, then what it measured
# per GPU and which energy source its analyzer picks (run in the engine venv, where aiperf lives)
PROBE = """
import asyncio, json, sys, time
from aiperf.common.models.telemetry_models import TelemetryHierarchy
from aiperf.gpu_telemetry.dcgm_collector import DCGMTelemetryCollector
from aiperf.metrics.energy_efficiency_analyzer import EnergyEfficiencyAnalyzer
url, samples = sys.argv[1], int(sys.argv[2])
store, stamps, samples_of = TelemetryHierarchy(), set(), {}
async def keep(records, _collector):
    for r in records:
        store.add_record(r)
        stamps.add(r.timestamp_ns)
        d = r.telemetry_data
        sample = (r.timestamp_ns, d.nvidia_power_usage, d.nvidia_energy_consumption)
        samples_of.setdefault(r.gpu_index, []).append(sample)
async def collect():
    c = DCGMTelemetryCollector(url, collection_interval=0.05, record_callback=keep)
    await c.initialize()
    await c.start()
    deadline = time.monotonic() + 30
    while len(stamps) < samples and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await c.stop()
asyncio.run(collect())
gpus = {}
for per_gpu in store.telemetry_source_endpoints.values():
    for g in per_gpu.values():
        power = g.get_metric_result("nvidia_power_usage", "p", "p", "W")
        joules = g.get_metric_result("nvidia_energy_consumption", "e", "e", "MJ", is_counter=True).avg * 1e6
        gpus[g.metadata.gpu_index] = {"power_w": power.avg, "energy_j": joules, "host": g.metadata.hostname}
span = (max(stamps) - min(stamps)) / 1e9
e, p, n = sum(v["energy_j"] for v in gpus.values()), sum(v["power_w"] for v in gpus.values()), len(gpus)
resolve = EnergyEfficiencyAnalyzer._resolve_energy
sources = [resolve((e, n), (p, n), span)[2].name, resolve((0.0, 0), (p, n), span)[2].name]
samples = {i: sorted(v) for i, v in samples_of.items()}
print(json.dumps({"gpus": gpus, "stamps_ns": sorted(stamps), "samples": samples, "sources": sources}))
"""


@pytest.fixture
def standin(monkeypatch):
    """The stand-in exporter on a free loopback port, serving from a thread; stopped at the end. Also
    the wall-clock time of each scrape it served (aiperf stamps a sample once its answer is in: under
    load that is late by more than the 1 % a curve allows)."""
    gpu_curves = dcgm_standin.curves(2, 300.0, 100.0, 4.0, time.time())
    served: list[float] = []
    exposition = dcgm_standin.exposition

    def recorded(curves, hostname, t):
        served.append(t)
        return exposition(curves, hostname, t)

    monkeypatch.setattr(dcgm_standin, "exposition", recorded)
    srv = dcgm_standin.server(0, gpu_curves, "node-a")
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", gpu_curves, served
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def test_aiperfs_collector_reads_the_standins_curve_to_within_one_percent(standin):
    """Each GPU's counter delta is the curve's integral between aiperf's first and last sample, and its
    mean power the curve's mean over those samples; the counter is the analyzer's first choice."""
    require("engine venv", None if ENGINE_PYTHON.exists() else f"{ENGINE_PYTHON} is missing (make setup)")
    url, gpu_curves, served = standin
    out = subprocess.run([str(ENGINE_PYTHON), "-c", PROBE, url, "20"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    stamps = [s / 1e9 for s in doc["stamps_ns"]]
    assert len(doc["gpus"]) == 2 and len(stamps) >= 20 and len(served) >= len(stamps)
    for index, measured in doc["gpus"].items():
        curve = gpu_curves[int(index)]
        # each sample's values are the curve at the scrape the stand-in served: found by its counter
        # (aiperf stamps a sample once parsed, late under load and not always in serving order)
        sampled = [_served_at(curve, served, mj) for _ts, _w, mj in doc["samples"][index]]
        assert len(set(sampled)) == len(sampled) == len(stamps), (sampled, served)  # one scrape each
        assert measured["energy_j"] == pytest.approx(curve.energy_j(sampled[0], sampled[-1]), rel=0.01)
        mean = sum(curve.power_w(t) for t in sampled) / len(sampled)
        assert measured["power_w"] == pytest.approx(mean, rel=0.01) and measured["host"] == "node-a"
    assert doc["gpus"]["1"]["power_w"] > doc["gpus"]["0"]["power_w"]  # every GPU its own curve
    assert doc["sources"] == ["DCGM_COUNTER", "POWER_INTEGRATION"]


def _served_at(curve, served: list[float], counter_mj: float) -> float:
    """The serve time whose energy counter the sample read (MJ, as aiperf keeps it)."""
    at = lambda t: (dcgm_standin.COUNTER_AT_START_MJ + 1000.0 * curve.energy_j(curve.t0, t)) / 1e9  # noqa: E731
    return min(served, key=lambda t: abs(at(t) - counter_mj))


def test_the_standin_speaks_dcgm_on_loopback_only(standin):
    url, _, _ = standin
    text = dcgm_standin.exposition(dcgm_standin.curves(1, 200.0, 0.0, 1.0, 0.0), "h", 10.0)
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-standin-h-0",' in text and "} 200.000000" in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text  # mJ: 10 s at 200 W = 2e6 mJ more
    assert f"{dcgm_standin.COUNTER_AT_START_MJ + 2e6:.6f}" in text
    assert url.startswith("http://127.0.0.1:") and dcgm_standin.BIND == "127.0.0.1"


def _with_telemetry(cluster: str, telemetry: dict | None):
    c = CLUSTERS[cluster]
    doc = {k: v for k, v in c.doc.items() if k != "telemetry"} | ({"telemetry": telemetry} if telemetry else {})
    return dataclasses.replace(c, doc=doc)


def _plan(recipe: str, telemetry: dict | None) -> Plan:
    r = load_recipe(ROOT / "recipes" / f"{recipe}.yaml")
    return Plan.from_json(render(r, _with_telemetry(r.clusters[0], telemetry), r.concurrency[0]))


def _Addresses(plan: Plan) -> Context:  # noqa: N802 - reads as the stand-in it is
    """A running stack's context for ``plan``: node i at 10.0.0.(i+1), port slot 0."""
    addrs = [f"10.0.0.{n + 1}" for n in range(plan.nodes)]
    return Context(
        addrs, [f"n{n}" for n in range(plan.nodes)], 0, "job", Path("run"), {p.name: p for p in plan.processes}
    )


def test_the_cluster_fact_reaches_aiperf_with_every_gpu_node(tmp_path):
    plan = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "dcgm", "port": 9400, "interval_s": 0.1})
    assert plan.benchmark.gpu_telemetry == {"source": "dcgm", "port": 9400, "interval_s": 0.1}
    argv = energy.telemetry_argv(plan, _Addresses(plan), tmp_path)
    assert argv == ["--gpu-telemetry", "http://10.0.0.1:9400/metrics", "http://10.0.0.2:9400/metrics"]
    roles = json.loads((tmp_path / energy.NODES_FILE).read_text())
    assert roles == {
        "10.0.0.1:9400": dict.fromkeys("0123", "prefill"),
        "10.0.0.2:9400": dict.fromkeys("0123", "decode"),
    }
    assert energy.telemetry_env(plan) == {  # no foreign exporter on 9400/9401; the counter's grace: two samples
        "AIPERF_GPU_DEFAULT_DCGM_ENDPOINTS": "[]",
        "AIPERF_GPU_COLLECTION_INTERVAL": "0.1",
        "AIPERF_GPU_FINAL_SCRAPE_GRACE_NS": "200000000",
    }
    pynvml = _plan("local-agg-2x-mocker", {"source": "pynvml"})
    assert energy.telemetry_argv(pynvml, _Addresses(pynvml), tmp_path) == ["--gpu-telemetry", "pynvml"]
    assert json.loads((tmp_path / energy.NODES_FILE).read_text()) == {"localhost": {"0": "agg", "1": "agg"}}
    none = _plan("local-agg-2x-mocker", {"source": "none"})
    assert (
        none.benchmark.gpu_telemetry is None
        and "gpu_telemetry"
        not in render(load_recipe(ROOT / "recipes" / "local-agg-2x-mocker.yaml"), CLUSTERS["local"], 4)["benchmark"]
    )  # a cluster without telemetry renders the plan it rendered before telemetry existed
    assert energy.telemetry_argv(none, _Addresses(none), tmp_path) == ["--no-gpu-telemetry"]
    assert energy.telemetry_env(none) == {"AIPERF_GPU_DEFAULT_DCGM_ENDPOINTS": "[]"}


STANDIN = [".venvs/engine/bin/python", "{workdir}/scripts/servesweep/tools/dcgm_standin.py", "--port", "{port}"]


def test_an_exporter_the_stack_starts_is_a_stack_process_on_each_gpu_node(tmp_path):
    plan = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "exporter", "command": [*STANDIN, "--gpus", "4"]})
    exporters = [p for p in plan.processes if p.role == "telemetry"]
    assert [(p.name, p.node) for p in exporters] == [("gpu-telemetry-n0", 0), ("gpu-telemetry-n1", 1)]
    assert "{port:self.metrics}" in exporters[0].argv and exporters[0].ports["metrics"].port in plan.all_ports
    ctx = _Addresses(plan)
    port = ctx.port("gpu-telemetry-n1", "metrics")
    argv = energy.telemetry_argv(plan, ctx, tmp_path)
    assert argv[:2] == ["--gpu-telemetry", f"http://10.0.0.1:{ctx.port('gpu-telemetry-n0', 'metrics')}/metrics"]
    assert argv[2] == f"http://10.0.0.2:{port}/metrics"
    assert not any(p.role == "telemetry" for p in _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", None).processes)
    with pytest.raises(InputError, match=r"telemetry.command: names no \{port\}"):
        _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "exporter", "command": ["exporter", "--port", "9400"]})


def test_a_telemetry_fact_that_cannot_work_is_refused_naming_the_field(tmp_path):
    doc = yaml.safe_load((ROOT / "profiles" / "local" / "cluster.yaml").read_text())
    path = tmp_path / "cluster.yaml"
    for telemetry, message in (
        ({"source": "dcgm"}, "telemetry.port: required key is missing"),
        ({"source": "pynvml", "port": 9400}, "telemetry.port: 9400 is not one of ['only with source: dcgm']"),
        ({"source": "none", "interval_s": 1}, "telemetry.interval_s: 1 is not one of ['only with source: dcgm,"),
        ({"source": "exporter"}, "telemetry.command: required key is missing"),
        ({"source": "pynvml", "command": ["x"]}, "telemetry.command: ['x'] is not one of ['only with source: exporter"),
    ):
        path.write_text(yaml.safe_dump(doc | {"telemetry": telemetry}))
        with pytest.raises(InputError) as e:
            load_cluster_file(path)
        assert f"cluster.yaml: {message}" in str(e.value)


def _gpu(index: int, power: float, counter: bool) -> dict:
    """One GPU of aiperf's telemetry export: its power over the window, its energy counter's delta (MJ)."""
    metrics = {"nvidia_power_usage": {"avg": power, "unit": "W"}}
    if counter:
        metrics["nvidia_energy_consumption"] = {"avg": power * 10 / 1e6, "unit": "MJ"}
    return {"gpu_index": index, "hostname": "n", "metrics": metrics}


def _export(counter: bool = True) -> dict:
    """aiperf 0.13's profile_export_aiperf.json over a 10 s window; node 1's exporter also lists the four
    GPUs (at 700 W) that the stack does not hold."""
    node1 = {f"gpu_{i}": _gpu(i, 400.0 if i < 4 else 700.0, counter) for i in range(8)}
    return {
        "start_time": "2026-12-04T10:00:00.000000",
        "end_time": "2026-12-04T10:00:10.000000",
        "total_output_tokens": {"unit": "tokens", "avg": 20000.0},
        "telemetry_data": {
            "endpoints": {
                "10.0.0.1:9400": {"gpus": node1},
                "10.0.0.2:9400": {"gpus": {f"gpu_{i}": _gpu(i, 500.0, counter) for i in range(4)}},
            }
        },
    }


def _artifacts(tmp_path: Path, plan: Plan) -> Path:
    art = tmp_path / "aiperf"
    energy.telemetry_argv(plan, _Addresses(plan), art)
    samples = [  # 100 W before the first request at t=10 s, 450 W after it; GPU 7 is not the stack's
        {"timestamp_ns": t * 10**9, "telemetry_source_url": "http://10.0.0.1:9400/metrics", "gpu_index": g,
         "telemetry_data": {"nvidia_power_usage": 100.0 if t < 10 and g < 4 else 450.0}}
        for t in (8, 9, 11) for g in (0, 1, 2, 3, 7)
    ]  # fmt: skip
    (art / energy.TELEMETRY_EXPORT).write_text("\n".join(json.dumps(s) for s in samples) + "\n")
    (art / "profile_export.jsonl").write_text(json.dumps({"metadata": {"request_start_ns": 10 * 10**9}}) + "\n")
    return art


def test_the_result_records_the_stacks_power_energy_per_token_and_idle_power(tmp_path):
    plan = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "dcgm", "port": 9400})
    why: dict = {}
    art = _artifacts(tmp_path, plan)
    e = energy.figures(plan, _export(), art, why)
    assert e == {
        "source": "counter",
        "gpus": 8,
        "avg_power_w_per_gpu": pytest.approx(450.0),
        "power_w_per_gpu_by_role": {"decode": pytest.approx(500.0), "prefill": pytest.approx(400.0)},
        "energy_j": pytest.approx(36000.0),  # 4 x 400 W + 4 x 500 W for 10 s: node 1's other GPUs not counted
        "energy_per_output_token_j": pytest.approx(1.8),
        "output_tokens_per_joule": pytest.approx(1 / 1.8),
        "idle_power_w_per_gpu": 100.0,
        "telemetry": ["10.0.0.1:9400", "10.0.0.2:9400"],
    }
    assert why == {}
    integrated = energy.figures(plan, _export(counter=False), art, why)
    assert integrated["source"] == "integrated power" and integrated["energy_j"] == pytest.approx(36000.0)
    doc = result_doc("r", 4, 0.3, 1000.0)
    doc["figures"]["energy"] = e
    assert validate_result(doc) == []
    cell = columns(doc)["energy_cell"]
    assert cell == "decode 500 prefill 400 W/GPU · 1.8 J/tok · 0.556 tok/J · idle 100 W (counter)"


def test_repeated_runs_sum_their_energy_tokens_and_windows(tmp_path):
    plan = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "dcgm", "port": 9400})
    art = _artifacts(tmp_path, plan)
    for n, watts in ((1, 1.0), (2, 2.0)):  # the second run draws twice the power for the same tokens
        export = _export()
        for ep in export["telemetry_data"]["endpoints"].values():
            for g in ep["gpus"].values():
                g["metrics"]["nvidia_energy_consumption"]["avg"] *= watts
        (art / "profile_runs" / f"run_000{n}").mkdir(parents=True)
        (art / "profile_runs" / f"run_000{n}" / "profile_export_aiperf.json").write_text(json.dumps(export))
    merged = _export() | {"total_output_tokens": {"avg": 40000.0}}  # what repeats.merged_export hands over
    e = energy.figures(plan, merged, art, {})
    assert e["energy_j"] == pytest.approx(3 * 36000.0) and e["avg_power_w_per_gpu"] == pytest.approx(675.0)
    assert e["energy_per_output_token_j"] == pytest.approx(3 * 36000.0 / 40000.0)


def test_the_energy_is_the_counter_over_exactly_the_window_not_over_aiperfs_samples_span(tmp_path):
    """aiperf's delta runs from its first sample in the window to its last within the grace after it (here
    late, as a loaded client scrapes): the figure is the counter at the window's two ends, between samples."""
    plan = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "dcgm", "port": 9400})
    art, export = _artifacts(tmp_path, plan), _export()
    start = datetime.fromisoformat(export["start_time"]).timestamp()
    watts = {"10.0.0.1:9400": 400.0, "10.0.0.2:9400": 500.0}
    stamps = [start - 0.7 + 0.45 * i for i in range(27)] + [start + 11.5]  # a late last scrape, 1.5 s after the end
    lines = [
        {"timestamp_ns": round(t * 1e9), "telemetry_source_url": f"http://{ep}/metrics", "gpu_index": g,
         "telemetry_data": {"nvidia_energy_consumption": (1e6 + w * (t - start + 0.7)) / 1e6}}
        for t in stamps for ep, w in watts.items() for g in range(4)
    ]  # fmt: skip
    with (art / energy.TELEMETRY_EXPORT).open("a") as f:  # beside the idle samples before the first request
        f.write("\n".join(json.dumps(s) for s in lines) + "\n")
    for ep, w in watts.items():  # aiperf's own delta: first sample in the window to the late last one
        span = stamps[-1] - min(t for t in stamps if t >= start)
        for g in export["telemetry_data"]["endpoints"][ep]["gpus"].values():
            g["metrics"]["nvidia_energy_consumption"]["avg"] = w * span / 1e6
    e = energy.figures(plan, export, art, {})
    assert e["energy_j"] == pytest.approx(36000.0, rel=1e-6)  # 4 x 400 W + 4 x 500 W for exactly 10 s
    assert e["power_w_per_gpu_by_role"] == {"decode": pytest.approx(500.0), "prefill": pytest.approx(400.0)}
    assert e["idle_power_w_per_gpu"] == 100.0


def test_unmeasured_energy_is_a_dash_with_the_reason(tmp_path):
    why: dict = {}
    local = _plan("local-agg-2x-mocker", None)
    assert energy.figures(local, _export(), tmp_path, why) is None
    assert why["energy"] == "cluster local declares no GPU telemetry (telemetry: none or unset)"
    cpu = dataclasses.replace(local, topology={**local.topology, "gpus": 0})
    energy.figures(cpu, _export(), tmp_path, why)
    assert why["energy"] == "a CPU stack: no GPU to measure"
    plan = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "dcgm", "port": 9400})
    art = _artifacts(tmp_path, plan)
    one_node = _export()
    del one_node["telemetry_data"]["endpoints"]["10.0.0.2:9400"]  # its exporter was not reached
    assert energy.figures(plan, one_node, art, why) is None
    assert why["energy"] == (
        "aiperf measured no power or energy from the DCGM exporters at port 9400 for 10.0.0.2:9400 GPU 0, "
        "10.0.0.2:9400 GPU 1, 10.0.0.2:9400 GPU 2, 10.0.0.2:9400 GPU 3 over the window"
    )
    two_nodes = _plan("dsv4-gb200-1p1d-tp4-dyn-trtllm", {"source": "pynvml"})
    assert energy.figures(two_nodes, _export(), art, why) is None
    assert why["energy"] == "pynvml reads the client's own host only and this stack's GPUs span several nodes"
    doc = result_doc("r", 4, 0.3, 1000.0) | {"unmeasured": {"energy": "a CPU stack: no GPU to measure"}}
    doc["figures"]["energy"] = None
    assert columns(doc)["energy_cell"] == "– (a CPU stack: no GPU to measure)"


def test_the_gpu_time_table_gains_the_measured_kwh():
    import pandas as pd

    df = pd.DataFrame({"stack_id": ["a", "a", "b"], "energy_j": [1.8e6, 1.8e6, None]})
    assert kwh_lines(df) == ["", "GPU energy of the benchmark windows (aiperf's telemetry): a 1.0000 kWh; b – kWh."]
    assert kwh_lines(pd.DataFrame({"stack_id": ["a"], "energy_j": [None]})) == []


@pytest.mark.integration
def test_a_local_point_reads_the_stacks_standin_and_its_figures_equal_the_curve(tmp_path):
    """A real point (frontend, two mockers on virtual GPUs 0 and 1, aiperf, 6 s) with the local cluster's
    telemetry an exporter the stack starts (the stand-in, 8 GPUs): energy, energy per output token and power
    equal the curve's integral over aiperf's window within 1 %, and the summary shows them."""
    t0, curve = 1_796_000_000.0, ["--gpus", "8", "--base", "300", "--swing", "100", "--period", "4"]
    wf = copy_workflow(tmp_path / "wf", ["local-agg-2x-mocker"])
    recipe = yaml.safe_load((wf / "recipes" / "local-agg-2x-mocker.yaml").read_text())
    recipe.pop("evals", None)
    recipe["concurrency"], recipe["scenario"]["duration_s"] = [4], 6
    (wf / "recipes" / "local-agg-2x-mocker.yaml").write_text(yaml.safe_dump(recipe))
    cluster = wf / "profiles" / "local" / "cluster.yaml"
    telemetry = {"source": "exporter", "command": [*STANDIN, *curve, "--t0", str(t0)], "interval_s": 0.02}
    cluster.write_text(yaml.safe_dump(yaml.safe_load(cluster.read_text()) | {"telemetry": telemetry}))
    since = time.time()
    try:
        r = snakemake(wf, "results/summary.md", timeout=300, env={"PYTHONPATH": str(wf / "scripts")})
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        assert_no_strays(since, wf)  # the exporter stopped with the stack
    finally:
        kill_strays(since, wf)
    result = json.loads((wf / "results" / "local-agg-2x-mocker" / "c4.json").read_text())
    export = json.loads((wf / result["artifacts"] / "profile_export_aiperf.json").read_text())
    start, end = (datetime.fromisoformat(export[k]).timestamp() for k in ("start_time", "end_time"))
    gpu_curves = dcgm_standin.curves(8, 300.0, 100.0, 4.0, t0)
    curve_j = gpu_curves[0].energy_j(start, end) + gpu_curves[1].energy_j(start, end)  # the plan's GPUs 0 and 1
    e, tokens = result["figures"]["energy"], result["figures"]["output_tokens_total"]
    assert e["source"] == "counter" and e["gpus"] == 2
    assert e["energy_j"] == pytest.approx(curve_j, rel=0.01)
    assert e["energy_per_output_token_j"] == pytest.approx(curve_j / tokens, rel=0.01)
    assert e["output_tokens_per_joule"] == pytest.approx(tokens / curve_j, rel=0.01)
    assert e["avg_power_w_per_gpu"] == pytest.approx(curve_j / (end - start) / 2, rel=0.01)
    assert 200.0 <= e["idle_power_w_per_gpu"] <= 440.0  # the two curves' range, sampled before the first request
    assert f"{e['energy_per_output_token_j']:.3g} J/tok" in (wf / "results" / "summary.md").read_text()
