"""Files read back are checked before they are trusted: a truncated, list-shaped or garbage result,
capacity file or missing-points file is named and treated as absent, never a crash."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from servesweep.fileio.errors import InputError
from servesweep.fileio.files import read_json_object as _read_json
from servesweep.report.capacity import capacity_doc, load_capacities
from servesweep.report.summary import build_summary
from servesweep.tools.samples import result_doc
from servesweep.workflow import why

from helpers import copy_workflow, snakemake

GARBAGE = {"truncated": '{"schema": "servesweep.result/3", "iden', "list": "[1, 2, 3]", "empty": ""}


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good = Path("results/fast/c4.json")
    good.parent.mkdir(parents=True)
    good.write_text(json.dumps(result_doc("fast", 4, 0.2, 17000.0)))
    bad = []
    for i, text in enumerate(GARBAGE.values()):
        p = Path(f"results/fast/c{8 + i}.json")
        p.write_text(text)
        bad.append(p)
    points = [{"recipe": "fast", "concurrency": int(p.stem[1:]), "result": str(p), "scenario": "chat",
               "log_dir": f"logs/fast/{p.stem}"} for p in [good, *bad]]  # fmt: skip
    sel = Path("sel.json")
    sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": {}}))
    return good, bad, sel


def test_summary_names_unreadable_results_and_keeps_the_rest(results, capsys):
    good, bad, sel = results
    build_summary([good, *bad], sel, Path("results/summary.md"))
    md, err = Path("results/summary.md").read_text(), capsys.readouterr().err
    assert "## Unreadable results" in md and "[fast](fast/c4.json)" in md
    for p in bad:
        assert f"| {p} " in md and f"servesweep: {p}: left out of the summary" in err


def test_unreadable_results_are_moved_aside_so_they_rerun(results):
    good, bad, _ = results
    lines = why.quarantine(Path.cwd(), ["fast"])
    assert len(lines) == len(bad) and good.exists()
    for p in bad:
        assert not p.exists() and p.with_name(p.name + ".unreadable-1").exists()


def test_garbage_capacity_files_are_left_out_with_a_warning(tmp_path, capsys):
    bad = tmp_path / "capacity.json"
    for text in ("[]", "{}", '{"schema": "servesweep.capacity/1"', "null"):
        bad.write_text(text)
        assert load_capacities([bad]) == []
        assert f"{bad}: left out of the capacity table" in capsys.readouterr().err


def test_capacity_rule_names_a_garbage_probe(results):
    _, bad, _ = results
    settings = {"recipe": "fast", "bounds": {"min": 2, "max": 32, "tolerance": 1}, "slo": {"ttft_p95_s": 0.5},
                "scenario": "chat", "cluster": "local", "source": "recipes/fast.yaml"}  # fmt: skip
    with pytest.raises(InputError) as e:
        capacity_doc(settings, [str(bad[0])])
    assert f"{bad[0]}: a probe's result is unusable" in e.value.report()


@pytest.mark.parametrize("text", ["[]", "null", "{bad", '"x"'])
def test_a_missing_points_file_of_any_shape_counts_as_absent(tmp_path, text):
    p = tmp_path / "missing-local.json"
    p.write_text(text)
    assert _read_json(p) == {}


def test_a_file_where_the_results_directory_belongs_fails_the_dry_run(tmp_path):
    from helpers import copy_workflow, snakemake

    wf = copy_workflow(tmp_path / "wf", ["local-agg-2x-mocker"])
    (wf / "results").mkdir()
    (wf / "results/local-agg-2x-mocker").write_text("not a directory")
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr
    assert "results/local-agg-2x-mocker is not a writable directory (or a file is in its way)" in r.stderr


def test_a_capacity_job_takes_only_its_own_search_off_the_stack(tmp_path):
    from servesweep.contract.plan import curve_doc, end_search, read_curve

    f = tmp_path / "curve.json"
    f.write_text(json.dumps(curve_doc(4, ["b", "a"], 0, 600)))
    end_search(f, "a")
    assert read_curve(f).searching is True and json.loads(f.read_text())["searching"] == ["b"]
    end_search(f, "a")  # again (a rerun capacity job): nothing changes
    assert json.loads(f.read_text())["searching"] == ["b"]
    end_search(f, "b")
    assert read_curve(f) == (4, False, 0, 600, True, False)
    f.write_text("{")
    end_search(f, "b")  # an unreadable curve file is left to the keeper's idle timeout
    assert f.read_text() == "{"


def test_a_halving_decision_takes_its_screen_off_and_adds_the_kept_variants_points(tmp_path):
    """A screen's stack waits while its sweep is undecided; the decision takes the screen off and adds
    the points a kept variant runs in full on the same stack (none for one screened out)."""
    from servesweep.contract.plan import curve_doc, halving_decided, read_curve

    kept, out = tmp_path / "kept.json", tmp_path / "out.json"
    for f in (kept, out):
        f.write_text(json.dumps(curve_doc(1, ["cap"], 0, 600, deciding=(("v.screen",), time.time() + 600))))
        assert read_curve(f).deciding is True
    late = tmp_path / "late.json"  # past its sweep's screens' bound: the stack waits no longer
    late.write_text(json.dumps(curve_doc(1, [], 0, 600, deciding=(("v.screen",), time.time() - 1))))
    assert read_curve(late).deciding is False
    halving_decided(kept, "v.screen", 3)
    halving_decided(kept, "v.screen", 3)  # decided once: a second decision changes nothing
    assert read_curve(kept) == (4, True, 0, 600, True, False)
    halving_decided(out, "v.screen", 0)
    assert read_curve(out) == (1, True, 0, 600, True, False) and json.loads(out.read_text())["searching"] == ["cap"]
    searched = tmp_path / "searched.json"  # kept with a capacity search and an eval: both wait on this stack
    searched.write_text(json.dumps(curve_doc(1, [], 0, 600, deciding=(("v.screen",), time.time() + 600))))
    halving_decided(searched, "v.screen", 3, ["v"])
    assert json.loads(searched.read_text())["searching"] == ["v"] and read_curve(searched).expected == 4


def test_a_curve_file_is_checked_before_the_keeper_trusts_it(tmp_path):
    from servesweep.contract.plan import curve_doc, read_curve

    f = tmp_path / "curve.json"
    f.write_text(json.dumps(curve_doc(3, ["a"], 30, 600)))
    assert read_curve(f) == (3, True, 30, 600, True, False)
    f.write_text(json.dumps(curve_doc(3, [], 30, 600, canary=False)))
    assert read_curve(f).canary is False and read_curve(f).searching is False
    garbage = ['{"expected": "3"}', "[3]", '{"expected": 3, "searching": [], "x": 1}', "{", ""]
    garbage += [
        '{"expected": 3, "searching": true}',  # a search is named by its recipe
        '{"expected": 3, "searching": ["a", "a"]}',
        '{"expected": 3, "searching": [], "linger_s": -1}',
        '{"expected": 3, "searching": [], "linger_s": 1e9}',
        '{"expected": 3, "searching": [], "canary": "no"}',
        '{"expected": 3, "searching": [], "deciding": ["s", "s"]}',
    ]
    for text in garbage:
        f.write_text(text)
        assert read_curve(f) == (1, False, 0, 0, True, False), (
            text
        )  # one point, no search, no linger: the idle timeout covers it
    assert read_curve(tmp_path / "missing.json") == (1, False, 0, 0, True, False)


def test_an_unsupported_snakemake_is_named_with_what_to_do():
    from servesweep.workflow.smk import check_version

    assert check_version("9.27.1") is None and check_version("9.0.0") is None
    for other in ("8.30.0", "10.0.0", "12.1"):
        assert f"Snakemake {other} is not supported" in check_version(other) and "make setup" in check_version(other)


def test_a_dry_run_changes_no_byte_and_no_name_under_results(tmp_path):
    """A truncated result, a symlink to a file outside (not one of the recipe's points) and a stray file:
    `snakemake -n` names the first two and leaves every byte, name and link as it was."""
    wf = copy_workflow(tmp_path / "wf", ["local-agg-2x-mocker"])
    folder = wf / "results" / "local-agg-2x-mocker"
    folder.mkdir(parents=True)
    (folder / "c4.json").write_text('{"schema": "servesweep.result/3", "iden')
    secret = tmp_path / "secret.txt"
    secret.write_text("root:$6$not-for-you\n")
    (folder / "c8.json").symlink_to(secret)
    (folder / "notes.txt").write_text("mine\n")

    def snapshot():
        return {
            p.relative_to(wf).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in (wf / "results").rglob("*")
            if p.is_symlink() or p.is_file()
        }

    before = snapshot()
    r = snakemake(wf, "-n", "results/summary.md")
    assert r.returncode == 0, r.stderr[-3000:]
    assert snapshot() == before
    assert "results/local-agg-2x-mocker/c4.json: not JSON" in r.stderr
    assert "results/local-agg-2x-mocker/c8.json: a symbolic link: never followed" in r.stderr
    assert "not-for-you" not in r.stderr + r.stdout


def test_a_result_behind_a_symbolic_link_is_not_read(tmp_path):
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps(result_doc("fast", 4, 0.1, 100.0)))
    link = tmp_path / "c4.json"
    link.symlink_to(real)
    assert why.read_result(real)[0] is not None  # the same bytes are a valid result
    doc, reason = why.read_result(link)
    assert doc is None and "symbolic link" in reason


def test_a_dry_run_is_told_by_the_command_line():
    from servesweep.workflow.smk import dry_run

    class Parsed:  # Snakemake 9 at parse time: no executor chosen yet
        dryrun = False

    for argv, expected in [(["-n"], True), (["-np", "x"], True), (["--dry-run"], True), (["--cores", "4"], False),
                           (["results/summary.md", "--config", "n=1"], False), (["-j4"], False)]:  # fmt: skip
        assert dry_run(Parsed(), argv) is expected, argv
