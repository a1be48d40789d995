"""What a point reads is part of its identity (render/dataid): by content, a stat-keyed digest cache,
unreadable data standing as its declared version, and `servesweep diff` saying "same plan, different data"."""

from __future__ import annotations

import os

from servesweep.render import dataid
from servesweep.workflow.diffcmd import Measured, diff_lines


def test_files_and_folders_are_known_by_content_and_a_changed_file_changes_the_identity(tmp_path, monkeypatch):
    monkeypatch.setattr(dataid, "SETTLED_NS", -(10**12))  # every file settled: its digest kept under its stat
    dataid.look_again()
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"a": 1}\n')
    first = dataid.identity(str(trace))
    assert first["kind"] == "file" and first["id"].startswith("sha256:") and first["version"] is None
    kept, new = dataid.known()
    assert new and len(kept) == 1
    dataid.look_again()
    os.utime(trace, (2, 2))  # touched, same bytes: the same identity
    assert dataid.identity(str(trace))["id"] == first["id"]
    dataid.look_again()
    trace.write_text('{"a": 2}\n')  # edited in place
    assert dataid.identity(str(trace))["id"] != first["id"]
    folder = tmp_path / "w"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.json").write_text("{}")
    (folder / "sub" / "b.json").write_text("[]")
    dataid.look_again()
    one = dataid.identity(str(folder))
    assert one["kind"] == "folder" and one["files"] == 2
    (folder / "sub" / "b.json").write_text("[1]")
    dataid.look_again()
    assert dataid.identity(str(folder))["id"] != one["id"]


def test_data_this_host_cannot_read_stands_as_its_declared_version(tmp_path):
    dataid.look_again()
    ident = dataid.identity(str(tmp_path / "lustre" / "trace.jsonl"), "v1.1-warm")
    assert ident == {"path": str(tmp_path / "lustre" / "trace.jsonl"), "version": "v1.1-warm", "kind": "unreadable"}
    public = dataid.dataset_identity({"kind": "public", "name": "semianalysis_cc_traces_weka_062126", "hf_repo": "x/y"})
    assert public["kind"] == "public" and public["version"] == "semianalysis_cc_traces_weka_062126"
    assert dataid.dataset_identity({"kind": "synthetic", "isl": 1, "osl": 1}) is None


def test_diff_of_two_results_that_differ_only_in_their_data_says_same_plan_different_data():
    src = {
        "recipe": {"doc": {"name": "r", "concurrency": [4]}},
        "cluster": {"name": "local", "doc": {}},
        "data": {
            "data": {"path": "recipes/traces/t.jsonl", "version": None, "kind": "file", "id": "sha256:" + "a" * 64},
            "model_data": {"path": "m", "version": None, "kind": "folder", "files": 5, "id": "sha256:" + "b" * 64},
        },
    }
    edited = {**src, "data": {**src["data"], "data": {**src["data"]["data"], "id": "sha256:" + "c" * 64}}}
    lines, same = diff_lines(Measured("a.json", src, "f1", 4), Measured("b.json", edited, "f2", 4))
    assert not same
    assert lines == [
        "data: dataset recipes/traces/t.jsonl sha256:aaaaaaaaaaaa → sha256:cccccccccccc",
        "same plan, different data: not the same measurement",
    ]
