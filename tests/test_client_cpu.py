"""The client's CPU over the benchmark window (run/client_cpu): sampled from a real process tree,
read over the profiling window only, in the result's schema; the pre-flight's per-core figure."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil

import fixture_exports as fx
from servesweep.contract.paths import CLIENT_CPU_FILE
from servesweep.run import client_cpu
from servesweep.run.result import validate_result
from servesweep.tools.samples import result_doc

from helpers import plan_of

CHILD_AND_PARENT = """
import subprocess, sys, time
def burn(s):
    end = time.process_time() + s
    while time.process_time() < end:
        pass
code = "import time\\nend = time.process_time() + 0.25\\nwhile time.process_time() < end: pass\\n"
child = subprocess.Popen([sys.executable, "-c", code])
burn(0.25)
child.wait()
"""


def test_the_sampler_counts_a_process_tree_parent_and_child():
    p = subprocess.Popen([sys.executable, "-c", CHILD_AND_PARENT])
    try:
        cpu = client_cpu.Sampler(p.pid, every_s=0.0)
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            cpu.sample()
            time.sleep(0.02)
    finally:
        for proc in [*psutil.Process(p.pid).children(recursive=True), p] if p.poll() is None else []:
            proc.kill()
        p.wait(timeout=30)
    seen = [c for _, c in cpu.samples]
    assert seen == sorted(seen)  # never goes back
    assert len(cpu.peak) >= 2 and seen[-1] >= 0.35, cpu.peak  # both processes' time, most of the 0.5 s
    assert cpu.cores >= 1


def _samples(tmp_path, samples, cores=2):
    (tmp_path / CLIENT_CPU_FILE).write_text(json.dumps({"pid": 1, "cores": cores, "samples": samples}))


def test_the_cpu_of_the_window_only_is_read_per_core(tmp_path):
    s = 10**9
    # startup burns 5 CPU-s before the window; 3 CPU-s in the 2 s window from 10 s to 12 s; 1 after
    _samples(tmp_path, [(0, 0.0), (9 * s, 5.0), (11 * s, 6.5), (13 * s, 8.0), (14 * s, 9.0)])
    got = client_cpu.figures(tmp_path, (10 * s, 12 * s))
    assert got == {"cpu_s": 1.5, "cores": 2, "cpu_share_per_core": 0.375}  # 0.75 CPU-s/s on 2 cores
    assert client_cpu.figures(tmp_path, (20 * s, 30 * s)) == {}  # outside what was sampled
    assert client_cpu.figures(tmp_path, None) == {}
    assert client_cpu.figures(tmp_path / "none", (10 * s, 12 * s)) == {}


def test_the_result_carries_it_and_the_schema_takes_it(tmp_path):
    records = fx.steady(20)  # 20 requests from T0 over 3.9 s
    t0 = fx.T0_NS
    _samples(tmp_path, [(t0 - 10**9, 0.0), (t0, 0.0), (t0 + 5 * 10**9, 5.0)], cores=1)  # busy from T0
    client = client_cpu.with_cpu({"window_s": 3.9}, tmp_path, records)
    assert client["cores"] == 1 and 0.99 <= client["cpu_share_per_core"] <= 1.0  # a saturated core
    assert client_cpu.with_cpu(None, tmp_path, records) is None  # no export: nothing to add to
    doc = result_doc("r", 4, 0.2, 100.0)
    doc["figures"]["client"] = client
    assert validate_result(doc) == []
    doc["figures"]["client"]["cores"] = 0
    assert validate_result(doc)


def test_the_cores_of_a_process_are_its_affinity():
    import os

    assert client_cpu.cores_of() == len(os.sched_getaffinity(0))


def _concurrency_notes(plan: dict, in_job: bool) -> list[str]:
    from servesweep.checks.preflight import client_warnings
    from servesweep.contract.plan import Plan

    return client_warnings(Plan.from_json(plan), in_job=in_job)


def test_the_preflight_warns_beyond_what_the_clients_cores_carry_locally():
    cores = client_cpu.cores_of()
    carried = cores * client_cpu.STREAMS_PER_CORE
    assert _concurrency_notes(plan_of("local-agg-2x-mocker", carried), in_job=True) == []
    [note] = _concurrency_notes(plan_of("local-agg-2x-mocker", carried + 1), in_job=True)
    assert "recipes/local-agg-2x-mocker.yaml: concurrency: c" in note
    assert f"c{carried + 1} is beyond what {cores} client core(s)" in note and f"({carried} concurrent" in note


def test_on_slurm_the_plan_gives_the_benchmark_step_the_cpus_of_a_task_and_warns_beyond_them():
    from servesweep.contract.plan import Plan, batch_step_tasks
    from servesweep.run.stacks.held_step import _step_argv

    plan = plan_of("gemma4-hgx02-4x-tp2-sglang", 64)
    cpus = batch_step_tasks(plan["resources"])["cpus_per_task"]
    assert client_cpu.planned_cores(Plan.from_json(plan)) == cpus > 1
    cur = type("Cur", (), {"job": "42", "dir": "/x"})()
    assert f"--cpus-per-task={cpus}" in _step_argv(cur, "node0", ["run-point"], "p", cpus)
    assert _concurrency_notes(plan_of("gemma4-hgx02-4x-tp2-sglang", cpus * client_cpu.STREAMS_PER_CORE), False) == []
    over = plan_of("gemma4-hgx02-4x-tp2-sglang", cpus * client_cpu.STREAMS_PER_CORE + 1)
    assert f"beyond what {cpus} client core(s)" in _concurrency_notes(over, False)[0]


def test_the_dry_run_warns_on_a_line_of_its_own(tmp_path, capsys):
    import yaml

    from servesweep.workflow.entry import load_or_exit

    from helpers import copy_workflow

    wf = copy_workflow(tmp_path / "wf", ["local-agg-2x-mocker"])
    path = wf / "recipes/local-agg-2x-mocker.yaml"
    doc = yaml.safe_load(path.read_text())
    over = client_cpu.cores_of() * client_cpu.STREAMS_PER_CORE + 1
    doc["concurrency"] = [4, over]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_or_exit(wf, "local")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "client core(s)" in ln]
    assert len(lines) == 1 and lines[0].startswith("servesweep: warning: ")
    assert f"recipes/local-agg-2x-mocker.yaml: concurrency: c{over} is beyond what" in lines[0]
