"""The system-setup step's decision (root, sudo, neither) without installing anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from servesweep.tools import system_setup as ss

ROOT = Path(__file__).resolve().parents[1]


def test_nothing_missing_installs_nothing():
    d = ss.decide([], euid=1000, sudo_works=False)
    assert d.how == "nothing" and d.argv == ()


def test_root_installs_directly():
    d = ss.decide(["etcd-server", "nginx-light"], euid=0, sudo_works=False)
    assert d.how == "root"
    assert d.argv[0][0] == "apt-get" and d.argv[-1][-2:] == ("etcd-server", "nginx-light")


def test_user_with_sudo_installs_through_sudo():
    d = ss.decide(["nats-server"], euid=1000, sudo_works=True)
    assert d.how == "sudo" and all(cmd[0] == "sudo" for cmd in d.argv)


def test_user_without_sudo_gets_the_exact_command():
    d = ss.decide(["etcd-server", "nats-server"], euid=1000, sudo_works=False)
    assert d.how == "impossible" and d.argv == ()
    assert "apt-get install -y -qq --no-install-recommends etcd-server nats-server" in d.message


def test_missing_finds_absent_executables_only(monkeypatch):
    monkeypatch.setattr(ss, "SEARCH", ())
    monkeypatch.setenv("PATH", "/nonexistent")
    assert ss.missing({"etcd": "etcd-server", "nginx": "nginx-light"}) == ["etcd-server", "nginx-light"]
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert ss.missing({Path(sys.executable).name: "python3"}) == []


def test_runs_with_the_system_python_alone(tmp_path):
    """Standard library only: it runs before any venv exists; its exit says whether setup is possible."""
    script = ROOT / "scripts/servesweep/tools/system_setup.py"
    r = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "--for", "demo", "--check"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    need = ss.missing(ss.PURPOSES["demo"])
    expected = ss.decide(need, os.geteuid(), bool(need) and ss.sudo_works())
    assert r.returncode == (1 if expected.how == "impossible" else 0), r.stderr
    assert r.stderr == f"system-setup: {expected.message}\n"


def test_check_installs_nothing_even_when_packages_are_missing(tmp_path, monkeypatch, capsys):
    """--check with every tool missing: says what it would install and runs no command at all."""
    ran = tmp_path / "ran"
    for tool in ("apt-get", "sudo"):
        fake = tmp_path / tool
        fake.write_text(f"#!/bin/sh\necho {tool} >> {ran}\n")
        fake.chmod(0o755)
    monkeypatch.setattr(ss, "SEARCH", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ss, "sudo_works", lambda: True)  # even where it could install
    assert ss.main(["--for", "test", "--check"]) == 0
    assert "installing " in capsys.readouterr().err and not ran.exists()
