"""Engine arguments parsed by the engines' own parsers before anything is submitted."""

from __future__ import annotations

import pytest
import yaml

from helpers import ROOT, copy_workflow, servesweep, snakemake

pytestmark = pytest.mark.integration  # needs the engines' venvs (make setup)
VLLM = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-vllm-cpu.yaml").read_text())
MOCKER = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())
DYN_VLLM = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-dynamo-vllm-cpu.yaml").read_text())
CASES = {
    # id: (base recipe, extra engine args, field the error must name, words of the reason)
    "misspelled": (VLLM, ["--max-num-batch-tokens", 8192], "engine.args[9]", "unrecognized arguments"),
    "wrong-type": (VLLM, ["--max-num-seqs", "many"], "engine.args[9]", "invalid int value"),
    "sglang-flag": (VLLM, ["--mem-fraction-static", 0.8], "engine.args[9]", "unrecognized arguments"),
    "mocker-flag": (MOCKER, ["--speedup-ratoi", 2], "engine.args[6]", "unrecognized arguments"),
    "dynamo-vllm-flag": (DYN_VLLM, ["--max-num-batch-tokens", 8192], "engine.args[9]", "unrecognized arguments"),
    "frontend-type": (DYN_VLLM, [], "frontend.args[0]", "invalid float value"),
}
FRONTEND_ARGS = {"frontend-type": ["--router-temperature", "hot"]}


@pytest.fixture(scope="module")
def wf(tmp_path_factory):
    wf = copy_workflow(tmp_path_factory.mktemp("args") / "wf", recipes=[])
    for case, (base, extra, _, _) in CASES.items():
        doc = dict(base, name=f"args-{case}")
        doc["engine"] = dict(base["engine"], args=[*base["engine"]["args"], *extra])
        if case in FRONTEND_ARGS:
            doc["frontend"] = dict(base["frontend"], args=FRONTEND_ARGS[case])
        (wf / "recipes" / f"args-{case}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return wf


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_engine_flag_is_named_by_the_engines_own_parser(wf, case):
    _, extra, field, reason = CASES[case]
    r = servesweep("validate", f"recipes/args-{case}.yaml", cwd=wf, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    line = next((ln for ln in r.stderr.splitlines() if f"args-{case}.yaml: {field}:" in ln), None)
    flag = (extra or FRONTEND_ARGS.get(case))[0]
    assert line and reason in line and str(flag) in line, r.stderr


def test_the_dry_run_stops_before_anything_is_submitted(wf):
    r = snakemake(wf, "-n", "results/args-misspelled/c2.json", timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "recipes/args-misspelled.yaml: engine.args[9]: vllm parser: unrecognized arguments" in r.stderr
    assert not (wf / ".plans" / "args-misspelled").exists()  # nothing rendered for a job to pick up


def test_a_kind_without_a_parser_here_is_said_not_passed(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=["gemma4-livekit-2tp4-dyn-vllm-prod"])
    r = servesweep("validate", cwd=wf, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "dynamo.vllm NOT parser-checked" in r.stdout and "frontend NOT parser-checked" in r.stdout
    good = servesweep("validate", "recipes/local-agg-2x-vllm-cpu.yaml", cwd=ROOT, timeout=300)
    assert "vllm accepted by vllm 0.31.0 serve parser" in good.stdout, good.stdout + good.stderr
