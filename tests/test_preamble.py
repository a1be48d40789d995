"""What the recipe says runs: setup scripts and version pins run in each engine's own process
before it starts (run/preamble), and the versions that ran are recorded in the result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servesweep.run import preamble

from helpers import ROOT, copy_workflow, no_processes_left, snakemake, stack_logs, write_recipe

BASE = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())
SITE = """set -eu
mkdir -p "$PYTHONPATH"
printf 'print("servesweep-test: site module imported")\\n' > "$PYTHONPATH/sitecustomize.py"
echo "setup wrote $PYTHONPATH/sitecustomize.py"
printf 'Traceback (most recent call last):\\n  File "setup", line 1\\nRuntimeError: printed by the setup script\\n'
"""


def _preamble(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, preamble.__file__, "--lock-dir", str(tmp_path / "locks"), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_preamble_runs_setup_then_replaces_itself_with_the_command(tmp_path):
    (tmp_path / "s.sh").write_text("echo from-setup; echo data > made.txt\n")
    r = _preamble(tmp_path, "--setup", "s.sh", "--report", "pyyaml", "--", "cat", "made.txt")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines.index("from-setup") < lines.index("data")  # setup output first, then the command's
    versions = preamble.running_versions([r.stdout])
    assert versions == {"pyyaml": yaml.__version__}


def test_failing_setup_names_script_node_and_exit_code(tmp_path):
    (tmp_path / "bad.sh").write_text("echo trying; exit 3\n")
    r = _preamble(tmp_path, "--setup", "bad.sh", "--", "true")
    assert r.returncode == preamble.SETUP_FAILED
    assert "setup failed: bad.sh on node " in r.stdout and "exited with code 3" in r.stdout


def test_pins_name_both_versions_and_commits(tmp_path):
    pins = [{"dists": ["pyyaml"], "version": "0.0.1"}]
    r = _preamble(tmp_path, "--pins", json.dumps(pins), "--", "true")
    assert r.returncode == preamble.VERSION_MISMATCH
    assert f"pyyaml pinned 0.0.1, running {yaml.__version__}" in r.stdout
    pins = [{"dists": ["pyyaml"], "commit": "a" * 40}]
    r = _preamble(tmp_path, "--pins", json.dumps(pins), "--", "true")
    assert f"pinned to commit {'a' * 40}, running {yaml.__version__} from no recorded commit" in r.stdout
    r = _preamble(tmp_path, "--pins", json.dumps([{"dists": ["pyyaml"], "version": yaml.__version__}]), "--", "true")
    assert r.returncode == 0


def test_versions_that_differ_between_processes_are_all_recorded():
    logs = [f"{preamble.VERSIONS_LINE}{json.dumps({'vllm': v})}\nengine output" for v in ("0.32.0", "0.31.0", "0.32.0")]
    assert preamble.running_versions([*logs, "no preamble here", preamble.VERSIONS_LINE + "{bad"]) == {
        "vllm": "0.31.0, 0.32.0"
    }


@pytest.mark.integration
def test_setup_steps_and_pins_run_before_the_engine(tmp_path, reliability):
    reliability("faults", "setup step fails / pinned version differs")
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    (wf / "setup").mkdir()
    (wf / "setup/site.sh").write_text(SITE)
    (wf / "setup/fail.sh").write_text("echo half-way\nexit 3\n")

    def with_setup(script: str):
        def mutate(d):
            d["setup"] = {"post_install": script}
            d["engine"]["env"] = {"PYTHONPATH": "{run_dir}/site"}

        return mutate

    def expecting(d):  # a line the frontend never logs: the result says it is missing
        with_setup("setup/site.sh")(d)
        d["expect_log"] = {"frontend": ["servesweep-test: never logged"], "agg": ["setup wrote"]}

    write_recipe(wf, BASE, "setup-ok", mutate=expecting)
    write_recipe(wf, BASE, "setup-fails", mutate=with_setup("setup/fail.sh"))
    write_recipe(wf, BASE, "pin-wrong", mutate=lambda d: d.update(dynamo={"version": "0.0.1"}))
    targets = [f"results/{n}/c2.json" for n in ("setup-ok", "setup-fails", "pin-wrong")]
    with no_processes_left(wf):
        r = snakemake(wf, *targets, "--keep-going")
    assert r.returncode != 0
    done = json.loads((wf / targets[0]).read_text())
    logs = done["logs"]  # the setup script's traceback in each engine's log, counted beside the figures
    assert logs["tracebacks"] == 2 and set(logs["by_process"]) == {"agg-0", "agg-1"}, logs
    assert "RuntimeError: printed by the setup script" in logs["by_process"]["agg-0"]["first"]
    assert logs["missing"] == ["frontend: servesweep-test: never logged"] and not logs["clean"]
    assert logs["expected"]["agg"] == {"setup wrote": True}
    ok = done["identity"]["tools"]
    assert ok["engine"] == f"ai-dynamo {ok['running']['ai-dynamo']}"  # what the processes said they run
    log = (stack_logs(wf, targets[0]) / "agg-0.log").read_text().splitlines()
    setup_done = next(i for i, ln in enumerate(log) if ln.startswith("servesweep: setup done on node "))
    assert log.index("servesweep-test: site module imported") > setup_done  # the engine imported what setup wrote
    for name, text in [
        ("setup-fails", "setup failed: setup/fail.sh on node "),
        ("pin-wrong", "version check failed on node "),
    ]:
        reason = json.loads((wf / f"logs/{name}/c2/failure.json").read_text())["reason"]
        assert text in reason and "during startup" in reason, reason
        assert not (wf / f"results/{name}/c2.json").exists()
    reason = json.loads((wf / "logs/setup-fails/c2/failure.json").read_text())["reason"]
    assert "exited with code 3" in reason and "half-way" in reason  # exit code and log tail
    reason = json.loads((wf / "logs/pin-wrong/c2/failure.json").read_text())["reason"]
    assert f"ai-dynamo pinned 0.0.1, running {ok['running']['ai-dynamo']}" in reason
