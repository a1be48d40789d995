"""Nothing measured is lost: an earlier attempt's artifacts survive a new attempt; a null figure
never breaks the line the driver prints after writing a result; failure records carry no
terminal colour codes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from servesweep.fileio.errors import plain_text
from servesweep.run import attempts, driver

from helpers import require

ROOT = Path(__file__).resolve().parents[1]


def test_new_attempt_moves_the_earlier_one_aside(tmp_path):
    run_dir = tmp_path / "logs/r/c4"
    run_dir.mkdir(parents=True)
    (run_dir / "result.unsaved.json").write_text("{}")
    attempts.keep_earlier_attempt(run_dir)
    assert not run_dir.exists() and (tmp_path / "logs/r/c4.attempt-1/result.unsaved.json").exists()
    run_dir.mkdir()
    (run_dir / "failure.json").write_text("{}")
    attempts.keep_earlier_attempt(run_dir)
    assert (tmp_path / "logs/r/c4.attempt-2/failure.json").exists()
    assert (tmp_path / "logs/r/c4.attempt-1/result.unsaved.json").exists()


def test_empty_earlier_attempt_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "c2"
    run_dir.mkdir()
    attempts.keep_earlier_attempt(run_dir)
    assert list(tmp_path.iterdir()) == []


def test_null_figures_print_as_na():
    assert driver._num(None, 3) == "n/a" and driver._num(0.1234, 3) == "0.123"


def test_failure_record_has_no_colour_codes(tmp_path):
    attempts.record_failure(tmp_path, "process x exited:\n\x1b[2m2026\x1b[0m \x1b[31mERROR\x1b[0m boom")
    reason = json.loads((tmp_path / "failure.json").read_text())["reason"]
    assert "\x1b" not in reason and "2026 ERROR boom" in reason
    assert plain_text("\x1b]0;title\x07ok") == "ok"


def test_port_slot_locks_are_per_user_and_private(tmp_path, monkeypatch):
    from servesweep.run import slots

    monkeypatch.delenv("SERVESWEEP_PORT_LOCKS", raising=False)
    assert slots.default_lock_dir() == Path(f"/tmp/servesweep-{os.getuid()}/port-slots")
    mine = slots.private_dir(tmp_path / "servesweep-x" / "port-slots")
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700 and stat.S_IMODE(mine.parent.stat().st_mode) == 0o700
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    with pytest.raises(slots.PortsBusy, match="not private to uid"):
        slots.private_dir(open_dir)


def test_a_second_unix_user_leases_a_port_slot_on_the_same_host():
    """Root holds a slot; user 'nobody' (uid 65534) leases one too, in its own private lock directory
    (the module is stdlib only: copied where nobody may read it, run with the system Python)."""
    lacking = os.getuid() != 0 or not Path("/usr/bin/python3").exists()
    require("root", "needs root and Debian's python3" if lacking else None)
    import shutil
    import tempfile

    from servesweep.run import slots

    lease, _ = slots.lease_slot([38000], 16, 4, seed="a")
    shared = Path(tempfile.mkdtemp(prefix="servesweep-test-"))
    try:
        shared.chmod(0o755)
        shutil.copy(ROOT / "scripts/servesweep/run/slots.py", shared / "slots.py")
        code = (
            f"import sys; sys.path.insert(0, {str(shared)!r}); import slots; "
            "lease, _ = slots.lease_slot([38000], 16, 4, seed='a'); print(lease.slot, slots.default_lock_dir())"
        )
        r = subprocess.run(
            ["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=60,
            user=65534, group=65534, env={"PATH": "/usr/bin:/bin"}, cwd="/",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[1] == "/tmp/servesweep-65534/port-slots"
    finally:
        lease.release()
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree("/tmp/servesweep-65534", ignore_errors=True)
