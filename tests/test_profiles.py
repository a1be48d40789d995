"""Engine profiles as targets (render/profiling, run/profile, rules/checks.smk): a recipe's profile
section never changes a point's plan; the profile's own plan gives the profiled roles the engine's
profiler; a kind with no profiler, or a field with no effect on the cluster, is refused by field."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from servesweep.contract import paths
from servesweep.render import profiling
from servesweep.render.loading import load_recipe, load_recipes
from servesweep.render.plan import render
from servesweep.report.profiles import profiles_section
from servesweep.run import profile as run_profile

from helpers import CLUSTERS, ROOT, copy_workflow, no_processes_left, snakemake


def _recipe(tmp_path: Path, name: str, profile: dict | None, mutate=None):
    doc = yaml.safe_load((ROOT / "recipes" / f"{name}.yaml").read_text())
    if profile is not None:
        doc["profile"] = profile
    if mutate:
        mutate(doc)
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _problems(tmp_path: Path, name: str, profile: dict, cluster: str) -> list[str]:
    _recipes, problems = load_recipes([_recipe(tmp_path, name, profile)], CLUSTERS, cluster, root=ROOT)
    return [f"{p.field}: {p.reason}" for p in problems]


def test_an_own_stack_profile_changes_no_point_plan(tmp_path):
    name = "local-agg-2x-vllm-cpu"
    plain = load_recipe(_recipe(tmp_path, name, None))
    profiled = load_recipe(_recipe(tmp_path, name, {"kind": "torch", "window_s": 3, "stack": "own"}))
    for conc in plain.concurrency:
        assert render(profiled, CLUSTERS["local"], conc) == render(plain, CLUSTERS["local"], conc)
    point = render(plain, CLUSTERS["local"], 2)
    plan, settings = profiling.profile_files(profiled, point)
    # its own plan and its own stack: no warm stack of the points is shared or changed
    assert plan["fingerprints"]["plan"] != point["fingerprints"]["plan"]
    assert plan["fingerprints"]["server"] != point["fingerprints"]["server"]
    assert plan["stack"]["reuse"] is False and plan["point"] == 2 and settings["concurrency"] == 2
    assert settings["stack"] == "own"


def test_a_shared_profile_arms_every_point_and_is_the_point_plan_at_its_concurrency(tmp_path):
    """The default: the points' stack starts with the profiler configured (one stack for the points
    and the profile); the window, the concurrency and the load change no point's plan."""
    name = "local-agg-2x-vllm-cpu"
    plain = load_recipe(_recipe(tmp_path, name, None))
    profiled = load_recipe(_recipe(tmp_path, name, {"kind": "torch", "window_s": 3}))
    longer = load_recipe(_recipe(tmp_path, name, {"kind": "torch", "window_s": 9, "concurrency": 5}))
    local = CLUSTERS["local"]
    for conc in plain.concurrency:
        point = render(profiled, local, conc)
        assert point["fingerprints"]["server"] != render(plain, local, conc)["fingerprints"]["server"]
        assert all("--profiler-config" in p["argv"] for p in point["processes"] if p["role"] == "agg")
        assert render(longer, local, conc) == point
    point = render(profiled, local, 2)
    plan, settings = profiling.profile_files(profiled, point)
    assert plan == point and settings["stack"] == "shared" and plan["stack"]["reuse"] is True
    rehearsed = render(profiled, CLUSTERS["slurm-hgx02"], 2, rehearsal=local) if "slurm-hgx02" in CLUSTERS else None
    assert rehearsed is None or not any("--profiler-config" in p["argv"] for p in rehearsed["processes"])


def test_vllm_profile_plan_turns_the_torch_profiler_on_for_each_replica(tmp_path):
    r = load_recipe(_recipe(tmp_path, "local-agg-2x-vllm-cpu", {"kind": "torch", "steps": 7, "concurrency": 4}))
    assert profiling.concurrency(r) == 4
    plan, settings = profiling.profile_files(r, render(r, CLUSTERS["local"], 4))
    engines = [p for p in plan["processes"] if p["role"] == "agg"]
    assert len(engines) == 2
    for p in engines:
        flag = p["argv"].index("--profiler-config")
        cfg = json.loads(p["argv"][flag + 1])
        assert cfg["profiler"] == "torch" and cfg["max_iterations"] == 7
        assert cfg["torch_profiler_dir"] == f"{{run_dir}}/{paths.PROFILE_TRACES}/{p['name']}"
    rows = {s["name"]: s for s in settings["processes"]}
    assert set(rows) == {"agg-0", "agg-1"} and settings["steps"] == 7 and settings["window_s"] is None
    assert rows["agg-0"]["start"] == "http://{addr:self}:{port:self.http}/start_profile"
    assert rows["agg-0"]["stop"].endswith("/stop_profile")


def test_disaggregated_profile_covers_only_the_named_role(tmp_path):
    r = load_recipe(_recipe(tmp_path, "dsv4-pro-gb300-1p1d-pdep8-ddep8-mtp", None, _disagg_dynamo_vllm))
    cluster = CLUSTERS[r.clusters[0]]
    plan, settings = profiling.profile_files(r, render(r, cluster, r.concurrency[0]))
    profiled = {p["name"] for p in plan["processes"] if "--profiler-config" in p["argv"]}
    decode = {p["name"] for p in plan["processes"] if p["role"] == "decode"}
    assert profiled == decode and decode
    starts = [s["start"] for s in settings["processes"] if s["start"]]
    assert starts and all(s.endswith("/engine/control/start_profile") for s in starts)  # dynamo.vllm's routes


def _disagg_dynamo_vllm(doc: dict) -> None:
    doc["name"] = "prof-disagg"
    doc["profile"] = {"kind": "nsys", "roles": ["decode"], "window_s": 4}
    assert "disaggregated" in doc["topology"], "the production recipe is disaggregated"


def test_nsys_wraps_the_profiled_processes_and_sglang_takes_its_steps_in_the_start_request(tmp_path):
    r = load_recipe(_recipe(tmp_path, "gemma4-hgx02-4x-tp2-sglang", {"kind": "nsys", "window_s": 2}))
    plan, settings = profiling.profile_files(r, render(r, CLUSTERS[r.clusters[0]], r.concurrency[0]))
    engines = [p for p in plan["processes"] if p["role"] == "agg"]
    assert engines and all(p["argv"][:2] == ["nsys", "profile"] for p in engines)
    assert all(s["body"]["activities"] == ["CUDA_PROFILER"] for s in settings["processes"])
    r = load_recipe(_recipe(tmp_path, "gemma4-hgx02-4x-tp2-sglang", {"kind": "torch", "steps": 5}))
    plan, settings = profiling.profile_files(r, render(r, CLUSTERS[r.clusters[0]], r.concurrency[0]))
    assert all(s["body"]["num_steps"] == 5 for s in settings["processes"])
    assert all("SGLANG_TORCH_PROFILER_DIR" in p["env"] for p in plan["processes"] if p["role"] == "agg")


@pytest.mark.parametrize(
    ("name", "profile", "cluster", "field", "reason"),
    [
        ("local-agg-2x-mocker", {"kind": "torch"}, "local", "profile.kind", "exposes no profiler"),
        ("local-agg-2x-vllm-cpu", {"kind": "nsys"}, "local", "profile.kind", "runs the engines on CPUs"),
        ("local-agg-2x-vllm-cpu", {"kind": "torch", "roles": ["decode"]}, "local", "profile.roles[0]", "no decode"),
        ("local-agg-2x-vllm-cpu", {"kind": "torch", "steps": 3, "window_s": 2}, "local", "profile.steps", "not both"),
        ("gemma4-hgx02-4x-tp2-sglang", {"kind": "nsys", "steps": 3}, None, "profile.steps", "use window_s"),
        ("local-agg-2x-vllm-cpu", {"kind": "perf"}, "local", "profile.kind", ""),
    ],
)
def test_a_profile_that_could_have_no_effect_is_refused_by_field(tmp_path, name, profile, cluster, field, reason):
    found = _problems(tmp_path, name, profile, cluster)
    assert any(f.startswith(f"{field}: ") and reason in f for f in found), found


def test_published_traces_and_index_rows(tmp_path):
    ctx = _Ctx(tmp_path / "stack")
    traces = tmp_path / "stack" / paths.PROFILE_TRACES / "agg-0"
    traces.mkdir(parents=True)
    (traces / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    procs = [{"name": "agg-0", "role": "agg", "traces": f"{{run_dir}}/{paths.PROFILE_TRACES}/agg-0", "files": ["*"]}]
    found = run_profile.wait_for_traces(ctx, procs, deadline_s=10)
    out = tmp_path / "results" / "r" / "profile-c2"
    rows = run_profile._publish(found, ctx, {"processes": procs}, out)
    size = found["agg-0"][0].stat().st_size
    assert rows == [
        {"role": "agg", "process": "agg-0", "files": [{"path": "agg/agg-0/rank0.pt.trace.json.gz", "bytes": size}]}
    ]
    assert (out / rows[0]["files"][0]["path"]).read_bytes() == found["agg-0"][0].read_bytes()
    assert not list(out.parent.glob(".*partial"))  # renamed into place whole


def test_no_trace_within_the_deadline_fails_the_profile(tmp_path):
    procs = [{"name": "agg-0", "role": "agg", "traces": "{run_dir}/profiles/agg-0", "files": ["*"]}]
    with pytest.raises(run_profile.PointFailed, match="none from"):
        run_profile.wait_for_traces(_Ctx(tmp_path), procs, deadline_s=1)


def test_a_capture_takes_only_its_own_processs_new_reports(tmp_path):
    """A shared stack's run dir holds every process's nsys reports and earlier captures': agg-1 takes
    its own new ones (either name nsys's repeat mode may write), never agg-10's or an earlier one."""
    r = load_recipe(_recipe(tmp_path, "gemma4-hgx02-4x-tp2-sglang", {"kind": "nsys", "window_s": 2}))
    _plan, settings = profiling.profile_files(r, render(r, CLUSTERS[r.clusters[0]], r.concurrency[0]))
    proc = next(p for p in settings["processes"] if p["name"] == "agg-1")
    (tmp_path / "agg-1.1.nsys-rep").write_bytes(b"earlier")
    ctx = _Ctx(tmp_path)
    earlier = frozenset(run_profile.trace_files(ctx, proc))
    for name in ("agg-1.nsys-rep", "agg-1.2.nsys-rep", "agg-10.nsys-rep", "agg-10.1.nsys-rep"):
        (tmp_path / name).write_bytes(b"report")
    found = run_profile.trace_files(ctx, proc, earlier)
    assert [f.name for f in found] == ["agg-1.2.nsys-rep", "agg-1.nsys-rep"]


def test_a_settings_file_that_is_not_one_exits_2(tmp_path, capsys):
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"schema": "other"}))
    assert run_profile.run_profile(tmp_path / "plan.json", bad, tmp_path / "out") == 2
    assert "not a profile settings file" in capsys.readouterr().out


def test_summary_links_each_profile_on_disk(tmp_path):
    folder = tmp_path / "results" / "r" / "profile-c2"
    folder.mkdir(parents=True)
    index = {"profile": {"kind": "torch", "window_s": 3.0, "steps": None, "concurrency": 2},
             "processes": [{"role": "agg", "process": "agg-0", "files": [{"path": "x", "bytes": 1}]}]}  # fmt: skip
    (folder / paths.PROFILE_INDEX).write_text(json.dumps(index))
    lines = profiles_section(["r", "r", "other"], tmp_path, tmp_path / "results")
    row = next(line for line in lines if line.startswith("| r "))
    assert "[profile-c2](r/profile-c2/index.json)" in row and "3.0 s at c2" in row and "agg-0 (agg)" in row
    assert profiles_section(["other"], tmp_path, tmp_path / "results") == []


def test_dry_run_lists_the_profile_alone_and_refuses_another_concurrency(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    _recipe(wf / "recipes", "local-agg-2x-vllm-cpu", {"kind": "torch", "window_s": 3, "stack": "own"})
    target = paths.profile_dir("local-agg-2x-vllm-cpu", 2)
    r = snakemake(wf, "-n", target, "--config", "recipes=local-agg-2x-vllm-cpu")
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = r.stdout + r.stderr
    assert "rule profile:" in jobs and "rule point:" not in jobs and "checkpoint point:" not in jobs
    for f in (paths.profile_plan_file, paths.profile_settings_file):
        assert (wf / f("local-agg-2x-vllm-cpu", 2)).is_file()
    r = snakemake(wf, "-n", paths.profile_dir("local-agg-2x-vllm-cpu", 4))
    assert r.returncode != 0 and "its profile runs at concurrency 2" in r.stdout + r.stderr


def test_capture_starts_loads_and_stops_each_engine_in_order(tmp_path):
    """Against a stand-in engine: start on each profiled process, the load only inside the window, stop,
    then the traces the stop wrote; the index counts the load's requests."""
    events: list[str] = []
    server = _StandInEngine(events, tmp_path / paths.PROFILE_TRACES / "agg-0")
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        traces = f"{{run_dir}}/{paths.PROFILE_TRACES}/agg-0"
        proc = {"name": "agg-0", "role": "agg", "traces": traces, "files": ["*"], "body": {"dir": "{run_dir}"},
                "start": url + "/start_profile", "stop": url + "/stop_profile"}  # fmt: skip
        settings = {"kind": "torch", "window_s": 1.0, "steps": None, "concurrency": 2, "processes": [proc]}
        stack = SimpleNamespace(info=SimpleNamespace(context=lambda plan: _Ctx(tmp_path)), check=lambda when: None)
        plan = SimpleNamespace(client_url=url, model={"name": "m"})
        load, found = run_profile._capture(plan, stack, settings, lambda line: None)
    finally:
        server.shutdown()
    assert events[0] == f"start {tmp_path}" and events[-1] == "stop" and "chat" in events
    assert load["requests"] == events.count("chat") and load["answered"] == load["requests"] > 0
    assert [f.name for f in found["agg-0"]] == ["trace.json"]


class _StandInEngine(ThreadingHTTPServer):
    """Answers the profiler's start and stop (the stop writes a trace) and chat requests, noting each."""

    def __init__(self, events: list[str], traces: Path):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
                if self.path == "/start_profile":
                    events.append(f"start {body['dir']}")
                elif self.path == "/stop_profile":
                    traces.mkdir(parents=True)
                    (traces / "trace.json").write_text('{"traceEvents": []}')
                    events.append("stop")
                else:
                    events.append("chat")
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Ctx:
    """The run's resolution of ``{run_dir}`` (run/spawn.Context), all a trace lookup needs."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def resolve(self, s: str, me: str) -> str:
        return s.replace("{run_dir}", str(self.run_dir))


@pytest.mark.integration
def test_real_vllm_profile_on_the_points_stack_names_the_model_operators_and_leaves_the_point_alone(tmp_path):
    """One vLLM replica on the CPU whose stack starts with its torch profiler idle (profile.stack shared,
    the default); one run asks for the point and the profile: one engine start, the point measured
    un-profiled and the profile a turn of its own on the same stack, 8 engine steps recorded (a trace of
    ~1 MB, written at once; a window of seconds writes ~40 MB per second on the CPU and is run by hand:
    docs/checks.md). The trace names the model's operators; the profile leaves the point as it was."""
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    name = "local-vllm-profile"
    _recipe(wf / "recipes", "local-agg-2x-vllm-cpu", {"kind": "torch", "steps": 8}, _one_replica)
    target, point = paths.profile_dir(name, 2), paths.result_file(name, 2)
    with no_processes_left(wf):
        r = snakemake(wf, point, target, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert out.count("stack: starting stack") == 1, out[-5000:]  # the point and the profile: one engine start
    index = json.loads((wf / target / paths.PROFILE_INDEX).read_text())
    result = json.loads((wf / point).read_text())
    assert index["identity"]["stack"] == result["identity"]["stack"]["id"]
    (row,) = index["processes"]
    assert row["role"] == "agg" and index["load"]["answered"] > 0 and index["profile"]["steps"] == 8
    assert index["profile"]["stack"] == "shared"
    text = b"".join(_trace_bytes(wf / target / f["path"]) for f in row["files"])
    # the Llama layers' operators as the engine runs them (CPU: oneDNN's packed linear; GPU: aten::mm)
    assert any(op in text for op in (b"weight_packed_linear", b"aten::mm", b"aten::linear")), row["files"]
    for op in (b"unified_attention", b"rotary_embedding", b"aten::silu", b"aten::rsqrt"):
        assert op in text, op
    # the profile is no point's figure: the point's result is the point's own, and nothing is stale
    assert result["figures"]["requests_completed"] > 0 and not (wf / target / "c2.json").exists()
    before = (wf / point).read_bytes()
    r = snakemake(wf, "-n", point, target)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    assert (wf / point).read_bytes() == before


def _one_replica(doc: dict) -> None:
    doc["name"] = "local-vllm-profile"
    doc["topology"]["aggregated"]["replicas"] = 1
    doc["concurrency"] = [2]
    doc["scenario"]["duration_s"] = 4
    doc.pop("evals", None)


def _trace_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def test_slurm_dry_run_runs_a_shared_profile_on_the_held_stack_and_sizes_an_own_one_from_it(tmp_path):
    """A profile at a concurrency no point has, on slurm-hgx02: shared (the default), a step of the
    recipe's held stack whose every plan runs nsys; own, a job of its own sized like the stack."""
    name = "gemma4-hgx02-4x-tp2-sglang"
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    _recipe(wf / "recipes", name, {"kind": "nsys", "window_s": 4, "concurrency": 3})
    r = snakemake(wf, "-n", paths.profile_dir(name, 3), profile="profiles/slurm-hgx02", timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "rule held_profile:" in r.stdout and "rule profile:" not in r.stdout, r.stdout[-3000:]
    for plan_file in (paths.profile_plan_file(name, 3), paths.plan_file(name, 3), paths.plan_file(name, 1)):
        plan = json.loads((wf / plan_file).read_text()) if (wf / plan_file).exists() else None
        if plan is None:
            continue
        engines = [p for p in plan["processes"] if p["role"] == "agg"]
        assert len(engines) == 4 and all(p["argv"][:2] == ["nsys", "profile"] for p in engines), plan_file
        assert all("--capture-range-end=repeat" in p["argv"] for p in engines)  # the engine goes on serving
    _recipe(wf / "recipes", name, {"kind": "nsys", "window_s": 4, "concurrency": 3, "stack": "own"})
    r = snakemake(wf, "-n", paths.profile_dir(name, 3), profile="profiles/slurm-hgx02", timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "rule profile:" in r.stdout and "gres=gpu:8" in r.stdout, r.stdout[-3000:]
    plan = json.loads((wf / paths.profile_plan_file(name, 3)).read_text())
    assert plan["point"] == 3 and plan["launcher"] == "slurm" and plan["stack"]["reuse"] is False
