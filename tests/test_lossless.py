"""Nothing measured is lost: an earlier attempt's artifacts survive a new attempt; a null figure
never breaks the line the driver prints after writing a result; failure records carry no
terminal colour codes."""

from __future__ import annotations

import json

from servesweep.errors import plain_text
from servesweep.run import driver


def test_new_attempt_moves_the_earlier_one_aside(tmp_path):
    run_dir = tmp_path / "logs/r/c4"
    run_dir.mkdir(parents=True)
    (run_dir / "result.unsaved.json").write_text("{}")
    driver._keep_earlier_attempt(run_dir)
    assert not run_dir.exists() and (tmp_path / "logs/r/c4.attempt-1/result.unsaved.json").exists()
    run_dir.mkdir()
    (run_dir / "failure.json").write_text("{}")
    driver._keep_earlier_attempt(run_dir)
    assert (tmp_path / "logs/r/c4.attempt-2/failure.json").exists()
    assert (tmp_path / "logs/r/c4.attempt-1/result.unsaved.json").exists()


def test_empty_earlier_attempt_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "c2"
    run_dir.mkdir()
    driver._keep_earlier_attempt(run_dir)
    assert list(tmp_path.iterdir()) == []


def test_null_figures_print_as_na():
    assert driver._num(None, 3) == "n/a" and driver._num(0.1234, 3) == "0.123"


def test_failure_record_has_no_colour_codes(tmp_path):
    driver._record_failure(tmp_path, "process x exited:\n\x1b[2m2026\x1b[0m \x1b[31mERROR\x1b[0m boom")
    reason = json.loads((tmp_path / "failure.json").read_text())["reason"]
    assert "\x1b" not in reason and "2026 ERROR boom" in reason
    assert plain_text("\x1b]0;title\x07ok") == "ok"
