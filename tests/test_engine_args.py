"""Engine arguments parsed by the engines' own parsers before anything is submitted."""

from __future__ import annotations

import pytest
import yaml

from helpers import ROOT, copy_workflow, servesweep, snakemake

pytestmark = pytest.mark.integration  # needs the engines' venvs (make setup)
VLLM = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-vllm-cpu.yaml").read_text())
MOCKER = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())
DYN_VLLM = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-dynamo-vllm-cpu.yaml").read_text())
AFTER_VLLM = len(VLLM["engine"]["args"])  # the index of the first flag a case appends to the vLLM recipe's
CASES = {
    # id: (base recipe, extra engine args, field the error must name, words of the reason)
    "misspelled": (VLLM, ["--max-num-batch-tokens", 8192], f"engine.args[{AFTER_VLLM}]", "unrecognized arguments"),
    "wrong-type": (VLLM, ["--max-num-seqs", "many"], f"engine.args[{AFTER_VLLM}]", "invalid int value"),
    "sglang-flag": (VLLM, ["--mem-fraction-static", 0.8], f"engine.args[{AFTER_VLLM}]", "unrecognized arguments"),
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


@pytest.fixture(scope="module")
def validated(wf):
    """One `servesweep validate` of every case's recipe: one parser run per engine venv for all."""
    return servesweep("validate", *(f"recipes/args-{case}.yaml" for case in sorted(CASES)), cwd=wf, timeout=300)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_engine_flag_is_named_by_the_engines_own_parser(validated, case):
    _, extra, field, reason = CASES[case]
    r = validated
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    line = next((ln for ln in r.stderr.splitlines() if f"args-{case}.yaml: {field}:" in ln), None)
    flag = (extra or FRONTEND_ARGS.get(case))[0]
    assert line and reason in line and str(flag) in line, r.stderr


def test_the_dry_run_stops_before_anything_is_submitted(wf):
    r = snakemake(wf, "-n", "results/args-misspelled/c2.json", timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"recipes/args-misspelled.yaml: engine.args[{AFTER_VLLM}]: vllm parser: unrecognized arguments" in r.stderr
    assert not (wf / ".plans" / "args-misspelled").exists()  # nothing rendered for a job to pick up


def test_a_kind_without_a_parser_here_is_said_not_passed(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=["gemma4-livekit-2tp4-dyn-vllm-prod"])
    r = servesweep("validate", cwd=wf, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "dynamo.vllm NOT parser-checked" in r.stdout and "frontend NOT parser-checked" in r.stdout
    good = servesweep("validate", "recipes/local-agg-2x-vllm-cpu.yaml", cwd=ROOT, timeout=300)
    assert "vllm accepted by vllm 0.31.0 serve parser" in good.stdout, good.stdout + good.stderr


def test_a_production_recipe_is_checked_by_a_local_env_with_its_pinned_versions(tmp_path):
    """The image's Python is not on a laptop: a local environment with the Dynamo version the recipe
    pins parses its arguments instead, and the dry run says which; without a pin it says why none."""
    name = "gemma4-livekit-2tp4-dyn-vllm-prod"
    wf = copy_workflow(tmp_path / "wf", recipes=[name])
    src = wf / "recipes" / f"{name}.yaml"
    doc = yaml.safe_load(src.read_text())
    r = snakemake(wf, "-n", "results/summary.md", profile="profiles/slurm-hgx02", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{name}.yaml (dynamo.vllm) not parser-checked: " in r.stderr
    assert "the recipe pins no version a local environment could match" in r.stderr
    local = (ROOT / "profiles/local/engine-requirements.txt").read_text().split("ai-dynamo==")[1].split()[0]
    src.write_text(yaml.safe_dump(dict(doc, dynamo={"version": local}), sort_keys=False))
    r = snakemake(wf, "-n", "results/summary.md", profile="profiles/slurm-hgx02", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        f"{name}.yaml (dynamo.vllm) checked by ai-dynamo {local} dynamo.vllm parser in .venvs/vllm/bin/python"
        in r.stderr
    ), r.stderr[-3000:]
    bad = dict(doc, dynamo={"version": local})
    bad["engine"] = dict(doc["engine"], args=[*doc["engine"].get("args", []), "--max-num-batch-tokens", 8192])
    src.write_text(yaml.safe_dump(bad, sort_keys=False))
    r = snakemake(wf, "-n", "results/summary.md", profile="profiles/slurm-hgx02", timeout=300)
    assert r.returncode != 0 and "--max-num-batch-tokens" in r.stderr and "dynamo.vllm parser" in r.stderr


def test_a_local_environment_others_could_change_is_never_run_to_check(tmp_path):
    """The pinned-version fallback runs the workflow's own .venvs/*/bin/python: one whose folder is
    group- or world-writable (anyone could have planted it) is never run."""
    from servesweep.workflow.engine_args import _local_envs

    marker = tmp_path / "ran"
    for name, mode in (("planted", 0o777), ("own", 0o755)):
        bin_dir = tmp_path / "wf" / ".venvs" / name / "bin"
        bin_dir.mkdir(parents=True)
        exe = bin_dir / "python"
        exe.write_text(f'#!/bin/sh\necho {name} >> {marker}\necho \'{{"ai-dynamo": "0.0"}}\'\n')
        exe.chmod(0o755)
        (tmp_path / "wf" / ".venvs" / name).chmod(mode)
    envs = _local_envs(str(tmp_path / "wf"))
    assert [exe.parts[-3] for exe, _ in envs] == ["own"] and marker.read_text() == "own\n"
