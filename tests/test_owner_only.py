"""Everything servesweep writes is owner-only, whatever the umask of whoever runs it: `validate`, a
dry run and a summary over fixture results, each started with umask 022 as a user's shell would, and
the workflow loaded in process, leave no file under .plans/, results/, logs/ or .snakemake/servesweep/
that the group or others can read, and no such folder they can list."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from servesweep.tools.samples import result_doc

from helpers import LOCAL_RECIPES, copy_workflow, servesweep, snakemake

OURS = (".plans", "results", "logs", ".snakemake/servesweep")


def _open_to_others(wf: Path) -> list[str]:
    out = []
    for top in OURS:
        for p in [wf / top, *(wf / top).rglob("*")] if (wf / top).exists() else []:
            mode = stat.S_IMODE(p.lstat().st_mode)
            if not p.is_symlink() and mode & 0o077:
                out.append(f"{p.relative_to(wf)} {oct(mode)}")
    return out


def _fixture_results(wf: Path) -> tuple[list[str], Path]:
    """Two results and a selection naming them, written owner-only as the driver writes them."""
    paths, points = [], []
    for conc in (2, 8):
        rel = f"results/{LOCAL_RECIPES[0]}/c{conc}.json"
        for d in ((wf / rel).parent.parent, (wf / rel).parent):
            d.mkdir(mode=0o700, exist_ok=True)
        (wf / rel).write_text(json.dumps(result_doc(LOCAL_RECIPES[0], conc, 0.2, 1000.0 * conc)))
        (wf / rel).chmod(0o600)
        paths.append(rel)
        points.append({"recipe": LOCAL_RECIPES[0], "concurrency": conc, "result": rel, "scenario": "chat",
                       "log_dir": f"logs/{LOCAL_RECIPES[0]}/c{conc}"})  # fmt: skip
    sel = wf / ".plans/owner-only-selection.json"
    sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": {}}))
    sel.chmod(0o600)
    return paths, sel


def test_what_validate_a_dry_run_and_a_summary_write_is_owner_only(tmp_path):
    wf = copy_workflow(tmp_path / "wf", LOCAL_RECIPES)
    before = os.umask(0o022)  # inherited by every command below, as from a user's shell
    try:
        r = servesweep("validate", cwd=wf)
        assert r.returncode == 0, r.stderr[-2000:]
        r = snakemake(wf, "-n", "results/summary.md")
        assert r.returncode == 0, r.stderr[-3000:]
        results, sel = _fixture_results(wf)
        out = "results/by-hand/summary.md"
        r = servesweep("summary", "--selection", str(sel.relative_to(wf)), "--out", out, *results, cwd=wf)
        assert r.returncode == 0, r.stderr[-2000:]
    finally:
        os.umask(before)
    assert (wf / out).exists() and list((wf / ".plans").rglob("*.json"))
    assert (wf / ".snakemake/servesweep").is_dir()
    assert stat.S_IMODE((wf / ".snakemake").stat().st_mode) == 0o700  # Snakemake's own folder, closed
    open_ = _open_to_others(wf)
    assert open_ == [], "\n".join(open_)


def test_loading_the_workflow_in_process_with_umask_022_writes_owner_only(tmp_path):
    """A library caller (a test, a notebook) keeps its umask: the plans and their folders, .plans/
    itself included, are owner-only all the same (fileio/files.private_dirs)."""
    from servesweep.workflow.entry import load_or_exit

    wf = copy_workflow(tmp_path / "wf", LOCAL_RECIPES)
    before = os.umask(0o022)
    try:
        load_or_exit(wf, "local")
    finally:
        os.umask(before)
    assert list((wf / ".plans").rglob("*.json"))
    open_ = _open_to_others(wf)
    assert open_ == [], "\n".join(open_)
