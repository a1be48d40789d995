"""Runs first in every engine and frontend process, in that process's own container and Python,
then replaces itself with the process (same pid, same env): the recipe's setup script, a pinned
Dynamo install, the version check, and one line with the versions that will run.

Standalone (standard library only): the driver copies this file into the run dir, which every
container mounts. Recipe values arrive as argv items, never through a shell string. Setup and
installs are serialized per node (a flock in the run dir): co-located processes never race on
a shared cache or a host path; each process still runs them, as each srun step under pyxis is
its own container and what one step installs is gone in the next.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.metadata as metadata
import json
import os
import socket
import subprocess
import sys

MARK = "servesweep:"
VERSIONS_LINE = f"{MARK} versions "  # the driver reads the versions that ran from this line
SETUP_FAILED = 70  # exit codes the driver's failure message explains
VERSION_MISMATCH = 71
INSTALL_FAILED = 72


def _node() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _say(text: str) -> None:
    print(f"{MARK} {text}", flush=True)


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _pins(text: str) -> list[dict]:
    """``[{dists, version, install}]``: the first of ``dists`` that is installed must be ``version``;
    with ``install`` (pip requirement specs), install them first when it is not."""
    return json.loads(text) if text else []


def _running(dists: list[str]) -> str | None:
    return next((v for v in map(_installed, dists) if v), None)


def _commit(dists: list[str]) -> str | None:
    """The commit a distribution was installed from (PEP 610 direct_url.json), if it says."""
    for d in dists:
        try:
            info = json.loads(metadata.distribution(d).read_text("direct_url.json") or "{}")
        except (metadata.PackageNotFoundError, ValueError):
            continue
        commit = (info.get("vcs_info") or {}).get("commit_id")
        if commit:
            return commit
    return None


def _pin_problem(pin: dict) -> str | None:
    have = _running(pin["dists"])
    if "commit" in pin:
        commit = _commit(pin["dists"])
        if commit == pin["commit"]:
            return None
        found = f"{have} from {'commit ' + commit if commit else 'no recorded commit'}" if have else "not installed"
        return f"{pin['dists'][0]} pinned to commit {pin['commit']}, running {found}"
    if have == pin["version"]:
        return None
    return f"{pin['dists'][0]} pinned {pin['version']}, {'running ' + have if have else 'not installed'}"


def _step(what: str, argv: list[str], code: int) -> None:
    _say(f"{what} on node {_node()}: {' '.join(argv)}")
    rc = subprocess.call(argv, stdin=subprocess.DEVNULL)
    if rc != 0:
        which = argv[-1] if what == "setup" else " ".join(argv)
        _say(f"{what} failed: {which} on node {_node()} exited with code {rc}")
        sys.exit(code)
    _say(f"{what} done on node {_node()}")


def _prepare(args) -> None:
    for script in args.setup:
        _step("setup", ["bash", script], SETUP_FAILED)
    for pin in _pins(args.pins):
        if pin.get("install") and _running(pin["dists"]) != pin["version"]:
            pip = [sys.executable, "-m", "pip", "install", "--no-cache-dir", *pin["install"]]
            _step("install", pip, INSTALL_FAILED)


def _check(args) -> None:
    versions = {d: v for d in args.report if (v := _installed(d))}
    print(VERSIONS_LINE + json.dumps(versions, sort_keys=True), flush=True)
    for pin in _pins(args.pins):
        problem = _pin_problem(pin)
        if problem:
            _say(f"version check failed on node {_node()}: {problem} in {sys.executable}")
            sys.exit(VERSION_MISMATCH)


def running_versions(logs: list[str]) -> dict[str, str]:
    """Package -> the version the processes reported (``a, b`` when they differ), from their logs."""
    seen: dict[str, set] = {}
    for text in logs:
        lines = [ln for ln in text.splitlines() if ln.startswith(VERSIONS_LINE)]
        try:
            doc = json.loads(lines[-1][len(VERSIONS_LINE) :]) if lines else {}
        except ValueError:
            continue
        for dist, version in doc.items() if isinstance(doc, dict) else ():
            seen.setdefault(str(dist), set()).add(str(version))
    return {d: ", ".join(sorted(v)) for d, v in sorted(seen.items())}


def main(argv: list[str]) -> None:
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="preamble")
    p.add_argument("--lock-dir", required=True, help="one lock file per node: setup and installs one at a time")
    p.add_argument("--setup", action="append", default=[])
    p.add_argument("--pins", default="")
    p.add_argument("--report", action="append", default=[])
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    if args.setup or any(p.get("install") for p in _pins(args.pins)):
        os.makedirs(args.lock_dir, exist_ok=True)
        with open(os.path.join(args.lock_dir, f"{_node()}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _prepare(args)
    _check(args)
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
