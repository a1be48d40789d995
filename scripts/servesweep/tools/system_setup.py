"""The system packages the local stack (and the tests) need, installed in one step.

Standard library only: `make demo`, `make test` and `.ci/run` call it with the system Python
before any venv is built, so a machine that cannot install them stops in the first seconds with
the exact command to run. Debian packages, because the cluster facts (profiles/local/cluster.yaml)
point at the paths they install: PyPI carries no maintained etcd, NATS or nginx builds.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

# executable (or, from "/", a file glob) -> the Debian package that installs it, per purpose (test needs demo's
# too); libibverbs: mooncake_master, the KV store some connectors need, links it even for TCP
DEMO = {
    "etcd": "etcd-server",
    "nats-server": "nats-server",
    "nginx": "nginx-light",
    "/usr/lib/*/libibverbs.so.1": "libibverbs1",
}
TEST = {
    **DEMO,
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "munged": "munge",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "bwrap": "bubblewrap",  # the Slurm rig's container runtime (no pyxis here)
}
PURPOSES = {"demo": DEMO, "test": TEST}
SEARCH = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def missing(tools: dict[str, str]) -> list[str]:
    """Packages whose executable is neither on PATH nor in the system directories."""

    def found(exe: str) -> bool:
        if exe.startswith("/"):
            return bool(glob.glob(exe))
        return bool(shutil.which(exe)) or any(os.access(f"{d}/{exe}", os.X_OK) for d in SEARCH)

    return sorted({pkg for exe, pkg in tools.items() if not found(exe)})


@dataclass(frozen=True)
class Decision:
    how: str  # nothing | root | sudo | impossible
    argv: tuple[tuple[str, ...], ...]  # commands to run, in order
    message: str


def decide(packages: list[str], euid: int, sudo_works: bool) -> Decision:
    """How to install ``packages``: directly as root, through passwordless sudo, or not at all."""
    if not packages:
        return Decision("nothing", (), "system packages: all present")
    install = ("apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages)
    update = ("apt-get", "update", "-qq")
    if euid == 0:
        return Decision("root", (update, install), f"installing {' '.join(packages)}")
    if sudo_works:
        return Decision("sudo", (("sudo", *update), ("sudo", *install)), f"installing {' '.join(packages)} with sudo")
    cmd = f"sudo apt-get update && sudo {' '.join(install)}"
    return Decision(
        "impossible",
        (),
        f"missing system packages: {' '.join(packages)}; not root and no passwordless sudo. Run:\n  {cmd}",
    )


def sudo_works() -> bool:
    if not shutil.which("sudo"):
        return False
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--for", dest="purpose", choices=sorted(PURPOSES), default="demo")
    ap.add_argument("--check", action="store_true", help="only say what is missing and how it would be installed")
    a = ap.parse_args(argv)
    need = missing(PURPOSES[a.purpose])
    d = decide(need, os.geteuid(), bool(need) and sudo_works())
    print(f"system-setup: {d.message}", file=sys.stderr)
    if d.how == "impossible":
        return 1
    if a.check:
        return 0
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in d.argv:
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            print(f"system-setup: failed: {' '.join(cmd)}", file=sys.stderr)
            return 1
    still = missing(PURPOSES[a.purpose])
    if still:
        print(f"system-setup: still missing after the install: {' '.join(still)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
