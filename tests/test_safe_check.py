"""Safe to check anyone's recipe (issue #51): validation runs nothing a recipe names, reads YAML as
written, never hangs on a file an argument names, and prints user text on one escaped line."""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from servesweep.fileio.errors import InputError, Problem
from servesweep.fileio.yamlio import _load
from servesweep.render.cluster import all_clusters
from servesweep.render.loading import load_recipe
from servesweep.render.plan import render
from servesweep.render.recipe import Recipe
from servesweep.tools import argcheck
from servesweep.workflow import engine_args

from helpers import ROOT, copy_workflow

AGG = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())


def _marker_script(wf: Path) -> tuple[Path, Path]:
    """A program that leaves a marker file when run."""
    marker, script = wf / "MARKER", wf / "make-marker.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    script.chmod(0o755)
    return script, marker


def _write(wf: Path, doc: dict) -> Path:
    path = wf / "recipes" / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("python", ["make-marker.sh", "./make-marker.sh", "ABSOLUTE"])
def test_validate_and_the_snakefile_load_never_run_a_program_a_recipe_names(tmp_path, monkeypatch, capsys, python):
    from servesweep.cli import main
    from servesweep.workflow.entry import load_or_exit

    wf = copy_workflow(tmp_path / "wf", recipes=[])
    script, marker = _marker_script(wf)
    monkeypatch.setenv("PATH", f"{wf}:{os.environ['PATH']}")  # a bare name would be found on PATH
    doc = copy.deepcopy(AGG) | {"name": "evil"}
    doc["engine"]["python"] = str(script) if python == "ABSOLUTE" else python
    _write(wf, doc)
    monkeypatch.chdir(wf)
    assert main(["validate"]) == 2
    with pytest.raises(SystemExit) as e:
        load_or_exit(wf, "local")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "recipes/evil.yaml: engine.python: " in err and "not a Python cluster" in err
    assert not marker.exists() and not (wf / ".plans").exists()


def test_a_declared_interpreter_is_picked_by_name(tmp_path):
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    doc = copy.deepcopy(AGG) | {"name": "by-name"}
    doc["engine"]["python"] = "vllm"  # profiles/local/cluster.yaml: engine_pythons.vllm
    recipe = load_recipe(_write(wf, doc), "recipes/by-name.yaml")
    plan = render(recipe, all_clusters(wf / "profiles")["local"], 4)
    engines = [p for p in plan["processes"] if p["role"] == "agg"]
    assert engines and all(".venvs/vllm/bin/python" in p["argv"] for p in engines)


def test_the_parser_check_never_runs_an_undeclared_interpreter(tmp_path):
    """Even a plan that names a program (a recipe checked by other means) is never run to check it."""
    wf = copy_workflow(tmp_path / "wf", recipes=["local-agg-2x-mocker"])
    script, marker = _marker_script(wf)
    recipe = load_recipe(wf / "recipes" / "local-agg-2x-mocker.yaml", "recipes/local-agg-2x-mocker.yaml")
    plan = render(recipe, all_clusters(wf / "profiles")["local"], 4)
    checks = [dataclasses.replace(c, python=str(script)) for c in engine_args.pending(plan, recipe)]
    assert checks
    report = engine_args.check_engine_args(checks, wf)
    assert not marker.exists() and not report.problems
    assert any("never run to check" in why for why in report.skipped.values())


FAKE_PARSER = textwrap.dedent(
    """
    import argparse

    def parse_args(argv):
        parser = argparse.ArgumentParser(allow_abbrev=False)
        parser.add_argument("--version", action="version", version="fake 1.0")
        parser.add_argument("--dump-config", action="store_true")
        parser.add_argument("--config")
        args = parser.parse_args(argv)
        if args.dump_config:
            print("config: ...")
            raise SystemExit(0)
        if args.config:
            open(args.config).read()  # a parser that reads the file an argument names
        return args
    """
)


@pytest.fixture
def fake_parser(tmp_path, monkeypatch):
    (tmp_path / "fake_parser.py").write_text(FAKE_PARSER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield {"style": "parse_args", "target": "fake_parser", "dist": "fake"}
    sys.modules.pop("fake_parser", None)


@pytest.mark.parametrize("flag", ["--help", "--version", "--dump-config"])
def test_an_early_exit_refuses_its_flag(fake_parser, flag):
    answer = argcheck.check(fake_parser, ["--config", "/dev/null", flag], deadline_s=30)
    assert answer["status"] == "error", answer
    assert answer["message"].startswith(f"{flag}: the parser exited (status 0) instead of returning")


def test_a_parser_blocked_on_a_fifo_times_out_not_hangs(fake_parser, tmp_path):
    """Each check has its own deadline: a parser blocked opening a FIFO is reported, never a hang
    (the engine-args check refuses such an argument before any parser runs; this is the backstop)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    answer = argcheck.check(fake_parser, ["--config", str(fifo)], deadline_s=0.5)
    assert answer == {"status": "skipped", "message": "timed out after 0.5 s", "parser": "fake_parser"}
    assert argcheck.check(fake_parser, [], deadline_s=30)["status"] == "ok"  # the next check has its own


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_an_argument_naming_a_special_file_is_refused_before_any_parser_runs(tmp_path, monkeypatch, kind):
    import socket

    wf = copy_workflow(tmp_path / "wf", recipes=[])
    special = {"fifo": wf / "pipe0", "device": Path("/dev/null"), "socket": wf / "sock"}[kind]
    if kind == "fifo":
        os.mkfifo(special)
    if kind == "socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(special))
    doc = copy.deepcopy(AGG) | {"name": f"special-{kind}"}
    doc["engine"]["args"] = [*doc["engine"]["args"], "--extra-engine-args", str(special)]
    recipe = load_recipe(_write(wf, doc), f"recipes/special-{kind}.yaml")
    plan = render(recipe, all_clusters(wf / "profiles")["local"], 4)
    monkeypatch.setattr(engine_args, "_answers", lambda *a: pytest.fail("a parser ran"))
    try:
        checks = [c for c in engine_args.pending(plan, recipe) if c.kind != "frontend"]
        report = engine_args.check_engine_args(checks, wf)
    finally:
        if kind == "socket":
            listener.close()
    shown = [str(p) for p in report.problems]
    assert shown and all(f"recipes/special-{kind}.yaml: engine.args[6]: " in s for s in shown), shown
    assert f"names a {kind if kind != 'fifo' else 'FIFO'}" in shown[0]


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("a: 010", "010"),
        ("a: 0x1F", "0x1F"),
        ("a: 0o17", "0o17"),
        ("a: 1:30", "1:30"),
        ("a: off", "off"),
        ("a: yes", "yes"),
        ("a: on", "on"),
        ("a: NO", "NO"),
        ("a: 1_000", "1_000"),
        ("a: 2026-01-01", "2026-01-01"),
        ("a: 16", 16),
        ("a: -3", -3),
        ("a: 1.5", 1.5),
        ("a: 1e3", 1000.0),
        ("a: true", True),
        ("a: ~", None),
    ],
)
def test_yaml_is_read_as_yaml_1_2_writes_it(text, read):
    """No YAML 1.1 rereading: no octal, hex, sexagesimal or yes/no/on/off; an integer is plain decimal."""
    assert _load(text) == {"a": read}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("123: x", "a mapping key must be text, not '123' (int)"),
        ("~: x", "a mapping key must be text, not '~' (NoneType)"),
        ("? [a, b]\n: x", "a mapping key must be text, not 'a sequence' (list)"),
        ("a: &d [*d]", "the alias *d refers to a collection that holds it (a recursive alias)"),
        ("a: &d {x: [1, *d]}", "the alias *d refers to a collection that holds it (a recursive alias)"),
        ("x: &a " + "[" * 40 + "1" + "]" * 40 + "\ny: " + "[" * 30 + "*a" + "]" * 30, "nested deeper than 64 levels"),
    ],
)
def test_keys_and_aliases_are_refused_cleanly(tmp_path, text, why):
    from servesweep.fileio.yamlio import load_yaml

    (tmp_path / "r.yaml").write_text(text)
    doc, problems = load_yaml(tmp_path / "r.yaml", "r.yaml")
    assert doc is None and len(problems) == 1 and why in problems[0].reason


def test_a_problem_is_one_line_whatever_user_text_it_quotes():
    forged = "x\nservesweep: 0 problems found\x1b[2J\r\u202e"
    report = InputError([Problem(f"recipes/{forged}.yaml", forged, f"unknown key {forged}")]).report()
    assert len(report.splitlines()) == 2 and "\x1b" not in report and "\u202e" not in report
    assert "x\\nservesweep: 0 problems found\\x1b[2J\\r\\u202e" in report


def test_recipe_names_are_checked_against_every_entry_contract_paths_builds():
    from servesweep.contract import paths
    from servesweep.contract.names import reserved_match, reserved_patterns

    built = {Path(paths.selection_file("c")).name, Path(paths.missing_file("c", True)).name, paths.SUMMARY_MD.name}
    assert {"selection-*.json", "missing-*.json", "missing-rehearsal-*.json", "bill-*.json"} <= set(reserved_patterns())
    assert all(reserved_match(n.replace("-c.", "-local.")) for n in built)
    assert not any(reserved_match(n) for n in ("local-agg-2x-mocker", "selection", "plots-2", "summary"))


def _recipe(doc: dict) -> Recipe:
    return Recipe(doc["name"], f"recipes/{doc['name']}.yaml", doc)


def test_a_plan_past_the_exec_limits_is_refused_naming_the_field():
    """Every value within its own bound, together past what exec takes (E2BIG on the cluster)."""
    local = all_clusters(ROOT / "profiles")["local"]
    doc = copy.deepcopy(AGG) | {"name": "huge-env"}
    doc["env"] = {f"V{i}": "x" * 32_000 for i in range(80)}  # 80 values under the 32 KiB bound each
    with pytest.raises(InputError) as e:
        render(_recipe(doc), local, 4)
    assert "recipes/huge-env.yaml: env: process " in e.value.report() and "at most 262144 (256 KiB)" in str(e.value)
    doc = copy.deepcopy(AGG) | {"name": "huge-args"}
    doc["engine"]["args"] = [*doc["engine"]["args"], *["--x", "y" * 60_000] * 5]
    with pytest.raises(InputError) as e:
        render(_recipe(doc), local, 4)
    assert "recipes/huge-args.yaml: engine.args: process agg-0's argv (" in e.value.report()


def test_min_initial_workers_is_at_most_the_workers_that_register():
    local = all_clusters(ROOT / "profiles")["local"]
    doc = copy.deepcopy(AGG) | {"name": "waits-forever"}
    doc["frontend"]["router"]["min_initial_workers"] = 100_000_000
    with pytest.raises(InputError) as e:
        render(_recipe(doc), local, 4)
    assert (
        "recipes/waits-forever.yaml: frontend.router.min_initial_workers: 100000000 is more than the 2 workers"
        in e.value.report()
    )
    doc["frontend"]["router"]["min_initial_workers"] = 2
    render(_recipe(doc), local, 4)
