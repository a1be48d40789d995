"""The render memo makes an unchanged dry run skip rendering; it must never change what a run sees:
the same fingerprints, resources and plan files as a fresh render, and a render again whenever a
recipe, the cluster facts, the code, a plan file or the memo itself changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servesweep.contract.paths import MEMO_FILE, plan_file
from servesweep.workflow import index as index_mod
from servesweep.workflow import memo as memo_mod
from servesweep.workflow.rulekit import RuleKit
from servesweep.workflow.selection import Selection
from servesweep.workflow.writer import RunFiles

from helpers import copy_workflow

RECIPE = "local-agg-2x-mocker"


def _run(wf: Path, cluster: str = "local") -> tuple[Selection, list]:
    """One dry run's render side; the points it rendered (not recalled)."""
    rendered = []
    real = index_mod.render_point

    def counting(recipe, cluster, conc, *a, **k):
        rendered.append((recipe.name, conc))
        return real(recipe, cluster, conc, *a, **k)

    index_mod.render_point = counting
    try:
        sel = Selection(wf, cluster)
        RunFiles(sel).write_plans()
    finally:
        index_mod.render_point = real
    return sel, rendered


def _answers(sel: Selection) -> dict:
    """Each point's plan fingerprint and the resources its rule asks for."""
    kit = RuleKit(sel, None, {}, sel.cluster.name, False)
    return {
        (p.recipe, p.conc): (sel.index.facts(p.recipe, p.conc).plan, kit.job_resources(p.recipe, p.conc))
        for p in sel.points
    }


@pytest.fixture
def wf(tmp_path):
    return copy_workflow(tmp_path / "wf")


def test_an_unchanged_sweep_renders_nothing_and_answers_as_a_fresh_render(wf):
    fresh, rendered = _run(wf)
    assert rendered and (wf / MEMO_FILE).exists()
    plans = {p: (wf / plan_file(*p)).read_bytes() for p in _answers(fresh)}
    again, rendered = _run(wf)
    assert rendered == []
    assert _answers(again) == _answers(fresh)
    assert {p: (wf / plan_file(*p)).read_bytes() for p in plans} == plans


def test_an_edited_recipe_renders_its_points_again_and_only_those(wf):
    _run(wf)
    path = wf / "recipes" / f"{RECIPE}.yaml"
    path.write_text(path.read_text() + "# a comment changes nothing\n")
    assert _run(wf)[1] == []
    path.write_text(path.read_text().replace("duration_s: 20", "duration_s: 21"))
    sel, rendered = _run(wf)
    assert rendered and {r for r, _ in rendered} == {RECIPE}


def test_a_changed_plan_file_is_rendered_and_written_again(wf):
    sel, _ = _run(wf)
    p = sel.points[0]
    path = wf / plan_file(p.recipe, p.conc)
    good = path.read_bytes()
    path.write_bytes(good.replace(b'"point":', b'"point": ', 1))
    _, rendered = _run(wf)
    assert (p.recipe, p.conc) in rendered and path.read_bytes() == good
    path.unlink()
    _, rendered = _run(wf)
    assert (p.recipe, p.conc) in rendered and path.read_bytes() == good


def test_a_settled_plan_file_is_trusted_by_its_stat_and_any_write_breaks_that(wf, monkeypatch):
    """Once seen with its digest, a plan file is stat'ed, not read; a write that keeps its size and
    puts its mtime back still changes its ctime, so it is read, found changed and written again."""
    monkeypatch.setattr(memo_mod, "SETTLED_NS", 0)  # files written a moment ago count as settled
    sel, _ = _run(wf)
    _run(wf)  # read once and found intact: the stat is kept
    p = next(p for p in sel.points if p.conc != sel.recipes[p.recipe].concurrency[0])
    path = wf / plan_file(p.recipe, p.conc)
    reads = []
    real = memo_mod._read
    monkeypatch.setattr(memo_mod, "_read", lambda f: reads.append(f) or real(f))
    assert _run(wf)[1] == [] and reads == []
    good, st = path.read_bytes(), path.stat()
    path.write_bytes(good.replace(b'"point":', b'"point" :', 1)[:-1])  # same size, other text
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    _, rendered = _run(wf)
    assert reads == [str(path)] and (p.recipe, p.conc) in rendered and path.read_bytes() == good


def test_sources_and_selection_are_made_again_only_when_their_inputs_or_files_changed(wf, monkeypatch):
    from servesweep.contract.paths import selection_file, source_file
    from servesweep.workflow import writer as writer_mod

    monkeypatch.setattr(memo_mod, "SETTLED_NS", 0)
    made = []
    real = writer_mod.write_if_changed
    monkeypatch.setattr(writer_mod, "write_if_changed", lambda path, text: made.append(path) or real(path, text))

    def dry_run():
        made.clear()
        files = RunFiles(Selection(wf, "local"))
        files.write_plans()
        files.write_selection()

    dry_run(), dry_run()
    source, selection = wf / source_file(RECIPE, False), wf / selection_file("local")
    good_source, good_selection = source.read_bytes(), selection.read_bytes()
    dry_run()
    assert source not in made and selection not in made  # not made again: their stats stand for them
    source.write_bytes(b"{}"), selection.unlink()
    dry_run()
    assert source in made and selection in made
    assert source.read_bytes() == good_source and selection.read_bytes() == good_selection
    path = wf / "recipes" / f"{RECIPE}.yaml"
    path.write_text(path.read_text().replace("duration_s: 20", "duration_s: 21"))
    dry_run()
    assert source in made and selection in made  # its source and the selection follow the recipe


def test_a_plan_changed_within_a_clock_tick_of_its_check_keeps_no_stat(wf, monkeypatch):
    monkeypatch.setattr(memo_mod, "SETTLED_NS", 3600 * 10**9)  # every file here is that fresh
    _run(wf)
    _run(wf)
    memo = memo_mod.RenderMemo(wf)
    assert memo.kept and all(e.get("stat") is None for points in memo.kept.values() for e in points.values())


@pytest.mark.parametrize("damage", ["junk", "checksum", "entry"])
def test_a_damaged_or_altered_memo_is_ignored(wf, damage):
    fresh, _ = _run(wf)
    memo = wf / MEMO_FILE
    fmt, check, body = memo.read_text().split("\n", 2)
    altered = body.replace('"reuse":true', '"reuse":false', 1)
    assert altered != body
    memo.write_text(
        {"junk": "{not a memo", "checksum": f"{fmt}\n{'0' * 64}\n{body}", "entry": f"{fmt}\n{check}\n{altered}"}[damage]
    )
    again, rendered = _run(wf)
    assert rendered  # nothing trusted from it
    assert _answers(again) == _answers(fresh)


def test_other_cluster_facts_or_code_make_another_key(wf, monkeypatch):
    sel = Selection(wf, "local")
    r = sel.recipes[RECIPE]
    m = sel.index.memo
    key = m.key(r, sel.cluster, None)
    assert m.key(r, sel.clusters["hcm-hgx02"], None) != key
    assert m.key(r, sel.cluster, sel.clusters["local"]) != key  # rehearsal
    monkeypatch.setattr(memo_mod, "code_digest", lambda: "another version of servesweep")
    assert memo_mod.RenderMemo(wf).key(r, sel.cluster, None) != key


def test_a_valid_recipe_is_not_checked_again_an_invalid_one_always_is(wf, monkeypatch):
    from servesweep.fileio.errors import InputError
    from servesweep.render import cluster as cluster_mod
    from servesweep.render import loading as recipe_mod

    _run(wf)
    checked = []
    real = recipe_mod._checked
    monkeypatch.setattr(recipe_mod, "_checked", lambda doc, *a: checked.append(doc["name"]) or real(doc, *a))
    _run(wf)
    assert checked == []
    path = wf / "recipes" / f"{RECIPE}.yaml"
    path.write_text(path.read_text().replace("duration_s: 20", "duration_s: -3"))
    for _ in range(2):  # a failed check is never remembered: reported on every run
        with pytest.raises(InputError) as e:
            _run(wf)
        assert "scenario.duration_s" in str(e.value) and RECIPE in checked
        checked.clear()
    facts = wf / "profiles/local/cluster.yaml"
    path.write_text(path.read_text().replace("duration_s: -3", "duration_s: 20"))
    _run(wf)
    facts.write_text(facts.read_text().replace("readiness_timeout_s: 90", "readiness_timeout_s: 91"))
    cluster_mod._load_all.cache_clear()  # a new snakemake process reads the facts again
    _run(wf)  # other cluster facts: every recipe checked again
    assert RECIPE in checked


def test_rehearsal_plans_are_recalled_after_the_selected_ones_were_saved(wf):
    """One run saves the memo after the selected plans, then renders the rehearsal ones: the second
    run must still find both (what the first save wrote never hides what the file held)."""

    def dry_run() -> list:
        rendered = []
        real = index_mod.render_point
        index_mod.render_point = lambda recipe, *a, **k: rendered.append(recipe.name) or real(recipe, *a, **k)
        try:
            files = RunFiles(Selection(wf, "local"))
            files.write_plans()
            files.write_plans(rehearsal=True)
            files.write_selection()
        finally:
            index_mod.render_point = real
        return rendered

    assert dry_run()
    assert dry_run() == []


def test_the_load_pauses_garbage_collection_and_always_restores_it(wf):
    import gc

    from servesweep.workflow.entry import load_or_exit

    assert gc.isenabled()
    seen = []
    real = Selection.__init__

    def spy(self, *a, **k):
        seen.append(gc.isenabled())
        real(self, *a, **k)

    Selection.__init__ = spy
    umask = os.umask(0o022)  # the load makes this process's outputs private: put that back after
    try:
        load_or_exit(wf, "local")
        assert seen == [False] and gc.isenabled()
        with pytest.raises(SystemExit):
            load_or_exit(wf, "no-such-cluster")
        assert gc.isenabled()
    finally:
        Selection.__init__ = real
        os.umask(umask)
