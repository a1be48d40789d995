"""What makes the dry run cheap must not change what it checks: the YAML parse cache and the
write-if-changed plan files."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from servesweep.fileio import yamlio
from servesweep.fileio.files import write_if_changed
from servesweep.fileio.yamlio import ParseCache, load_yaml

TEXT = "name: a\nconcurrency: [1, 2]\nenv: {K: v}\n"


def _no_parsing(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("parsed although cached")

    monkeypatch.setattr(yamlio.yaml, "load", fail)


def test_unchanged_text_is_not_parsed_again_and_equals_a_parse(tmp_path, monkeypatch):
    cache_file, recipe = tmp_path / "cache.json", tmp_path / "r.yaml"
    recipe.write_text(TEXT)
    first = ParseCache(cache_file)
    doc, problems = load_yaml(recipe, cache=first)
    first.save()
    assert not problems and doc == yaml.safe_load(TEXT)
    doc["env"]["K"] = "changed by a caller"  # must not reach the cache
    expected = yaml.safe_load(TEXT)
    _no_parsing(monkeypatch)
    again, _ = load_yaml(recipe, cache=ParseCache(cache_file))
    assert again == expected


def test_an_edited_text_is_parsed(tmp_path):
    cache_file, recipe = tmp_path / "cache.json", tmp_path / "r.yaml"
    recipe.write_text(TEXT)
    c = ParseCache(cache_file)
    load_yaml(recipe, cache=c)
    c.save()
    recipe.write_text(TEXT.replace("[1, 2]", "[4]"))
    c = ParseCache(cache_file)
    doc, _ = load_yaml(recipe, cache=c)
    c.save()
    assert doc["concurrency"] == [4]
    assert len(ParseCache(cache_file).kept) == 1  # the old text's entry is dropped


def test_a_poisoned_cache_entry_never_overrides_the_recipe_file(tmp_path):
    """An entry whose document was altered (a flag added by hand) fails its checksum and the file is
    parsed again."""
    cache_file, recipe = tmp_path / "cache.json", tmp_path / "r.yaml"
    recipe.write_text(TEXT)
    c = ParseCache(cache_file)
    load_yaml(recipe, cache=c)
    c.save()
    cache_file.write_text(cache_file.read_text().replace('"concurrency":[1,2]', '"concurrency":[1,2,999]'))
    assert "999" in cache_file.read_text()
    doc, _ = load_yaml(recipe, cache=ParseCache(cache_file))
    assert doc == yaml.safe_load(TEXT)


@pytest.mark.parametrize("junk", [b"", b"{not json", b'{"format": "other", "docs": {}}', b"[1]"])
def test_a_damaged_cache_is_ignored(tmp_path, junk):
    cache_file, recipe = tmp_path / "cache.json", tmp_path / "r.yaml"
    cache_file.write_bytes(junk)
    recipe.write_text(TEXT)
    doc, problems = load_yaml(recipe, cache=ParseCache(cache_file))
    assert doc == yaml.safe_load(TEXT) and not problems


def test_errors_are_never_cached_and_odd_types_are_not_kept(tmp_path):
    cache_file, recipe = tmp_path / "cache.json", tmp_path / "r.yaml"
    for _ in range(2):
        recipe.write_text("name: a\nname: b\n")
        c = ParseCache(cache_file)
        doc, problems = load_yaml(recipe, cache=c)
        c.save()
        assert doc is None and "duplicate key 'name'" in problems[0].reason
    recipe.write_text("when: 2026-12-01\n1: int key\n")
    c = ParseCache(cache_file)
    doc, problems = load_yaml(recipe, cache=c)
    assert doc is None and "a mapping key must be text, not '1' (int)" in problems[0].reason
    assert not c.used  # a refused text is never kept
    recipe.write_text("when: 2026-12-01\n")
    doc, _ = load_yaml(recipe, cache=c)
    assert doc == {"when": "2026-12-01"}  # dates stay text: the schema names their field


def test_a_cache_parsed_by_another_reading_of_yaml_is_not_used(tmp_path):
    """The cache names the loader's semantics: an entry a YAML 1.1 parse kept (`010` as 8) is ignored."""
    import hashlib
    import json

    cache_file, recipe = tmp_path / "cache.json", tmp_path / "r.yaml"
    text = "concurrency: [010]\n"
    recipe.write_text(text)
    key = hashlib.sha256(text.encode()).hexdigest()
    old_doc = {"concurrency": [8]}
    check = ParseCache._check(key, json.dumps(old_doc, separators=(",", ":")))
    old_format = f"servesweep.yaml-cache/2 pyyaml {yaml.__version__}"
    cache_file.write_text(json.dumps({"format": old_format, "docs": {key: [check, old_doc]}}))
    doc, _ = load_yaml(recipe, cache=ParseCache(cache_file))
    assert doc == {"concurrency": ["010"]} and ParseCache.FORMAT != old_format


def test_caches_are_owner_only_whatever_the_umask(tmp_path):
    """The parse cache and the engine-argument answers: 0600 files (folders 0700), written by a
    process whose umask is 022, as `validate` runs."""
    from servesweep.workflow.engine_args import _write_private

    before = os.umask(0o022)
    try:
        c = ParseCache(tmp_path / "a" / "recipes-parsed.json")
        (tmp_path / "r.yaml").write_text(TEXT)
        load_yaml(tmp_path / "r.yaml", cache=c)
        c.save()
        answers = tmp_path / "cache" / "servesweep" / "argcheck" / "k.json"
        _write_private(answers, "{}")
    finally:
        os.umask(before)
    for f in (tmp_path / "a" / "recipes-parsed.json", answers):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE(answers.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


def test_a_leftover_folder_where_a_file_goes_is_moved_aside(tmp_path):
    """A folder a recipe once named `selection-local.json` made never fails a later write."""
    target = tmp_path / ".plans" / "selection-local.json"
    (target / "c1.json").parent.mkdir(parents=True)
    (target / "c1.json").write_text("{}")
    assert write_if_changed(target, "[]\n") and target.read_text() == "[]\n"
    kept = [p for p in target.parent.iterdir() if p.name.startswith(".selection-local.json.leftover")]
    assert len(kept) == 1 and (kept[0] / "c1.json").read_text() == "{}"


def test_write_if_changed_is_atomic_private_and_skips_equal_content(tmp_path):
    before = _umask()
    p = tmp_path / "d" / "plan.json"
    assert write_if_changed(p, "{}\n") is True
    assert stat.S_IMODE(p.stat().st_mode) == 0o600  # private where it is written, whatever the umask
    assert _umask() == before  # and the process's umask untouched
    mtime = p.stat().st_mtime_ns
    assert write_if_changed(p, "{}\n") is False and p.stat().st_mtime_ns == mtime
    assert write_if_changed(p, '{"a":1}\n') is True and p.read_text() == '{"a":1}\n'
    assert [x.name for x in p.parent.iterdir()] == ["plan.json"]  # no temp file left


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_an_unwritable_cache_only_costs_time(tmp_path):
    (tmp_path / "not-a-dir").write_text("")  # even root cannot create a directory under a file
    (tmp_path / "r.yaml").write_text(TEXT)
    c = ParseCache(tmp_path / "not-a-dir" / "sub" / "cache.json")
    doc, problems = load_yaml(tmp_path / "r.yaml", cache=c)
    c.save()
    assert doc == yaml.safe_load(TEXT) and not problems


def test_loading_the_workflow_in_process_leaves_the_umask_alone(tmp_path):
    """A test process that loads the workflow (plans written, memo saved) keeps its umask: daemons a
    later test starts (munged's /run/munge) must not inherit an owner-only one by accident."""
    from servesweep.workflow.entry import load_or_exit

    from helpers import LOCAL_RECIPES, copy_workflow

    wf = copy_workflow(tmp_path / "wf", LOCAL_RECIPES)
    before = _umask()
    load_or_exit(wf, "local")
    assert _umask() == before
    plans = list((wf / ".plans").rglob("*.json"))
    assert plans and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in plans)
