"""A real Slurm cluster on this machine: Debian's slurmctld + one slurmd per fake node.

Each node lives in its own network namespace on a private bridge (its own
address and port space), with 8 fake GPUs (GRES files pointing at /dev/null).
Each node also has its own mount namespace with a private tmpfs over Dynamo's
default file-discovery directory (``$TMPDIR/dynamo_store_kv``): the nodes share
one filesystem as cluster nodes share NFS/Lustre, but a process that fell back to
file discovery could never meet a process on another node through it, as on a real
cluster (inotify does not see other clients' writes). Only what this harness
started is stopped, by pid (and the processes inside its namespaces).
Usable as a context manager, or from the shell: ``python tests/slurm/cluster.py up|down``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BRIDGE = "ssbr0"
NET = "10.99.0"
STATE = Path(os.environ.get("SERVESWEEP_SLURM_DIR", "/tmp/servesweep-slurm"))
ETC = Path("/etc/slurm")
GPUS = 8
PRIVATE_DIRS = ("/tmp/dynamo_store_kv",)  # node-private, like a node-local disk


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kw)


class SlurmCluster:
    def __init__(self, nodes: int = 3, state: Path = STATE):
        self.n = nodes
        self.d = state
        self.names = [f"n{i + 1}" for i in range(nodes)]
        self.host = socket.gethostname().split(".")[0]
        self.started_munge = False
        self.munge_pid: int | None = None

    # -- config -------------------------------------------------------------
    def write_config(self) -> None:
        d = self.d
        for sub in ("state", "run", "log", "gpus", *(f"spool/{n}" for n in self.names)):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for g in range(GPUS):
            link = d / "gpus" / f"gpu{g}"
            if not link.exists():
                link.symlink_to("/dev/null")
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={n} NodeAddr={NET}.{11 + i} CPUs=2 RealMemory=4000 "
            f"Gres=gpu:{GPUS} State=UNKNOWN"
            for i, n in enumerate(self.names)
        )
        (d / "slurm.conf").write_text(
            f"""ClusterName=servesweep-test
SlurmctldHost={self.host}({NET}.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire + 1 s to run again: 120 s by default, 20 s here (docs/tests.md)
AuthInfo=cred_expire=20
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
MinJobAge=300
ReturnToService=2
MessageTimeout=3
KillWait=5
InactiveLimit=0
OverTimeLimit=0
StateSaveLocation={d}/state
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdSpoolDir={d}/spool/%n
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmdLogFile={d}/log/slurmd-%n.log
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )
        (d / "gres.conf").write_text(
            "AutoDetect=off\n" + "".join(f"NodeName={n} Name=gpu File={d}/gpus/gpu[0-{GPUS - 1}]\n" for n in self.names)
        )
        ETC.mkdir(parents=True, exist_ok=True)
        for f in ("slurm.conf", "gres.conf"):
            target = ETC / f
            if target.exists() and not target.is_symlink():
                target.rename(ETC / f"{f}.servesweep-backup")
            if target.is_symlink():
                target.unlink()
            target.symlink_to(d / f)

    # -- network ------------------------------------------------------------
    def net_up(self) -> None:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for i, n in enumerate(self.names):
            ns, veth = f"ss{n}", f"ssv{n}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
            sh("ip", "link", "set", f"{veth}p", "netns", ns)
            sh("ip", "link", "set", veth, "master", BRIDGE, "up")
            sh("ip", "-n", ns, "addr", "add", f"{NET}.{11 + i}/24", "dev", f"{veth}p")
            sh("ip", "-n", ns, "link", "set", f"{veth}p", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def net_down(self) -> None:
        for n in self.names:
            sh("ip", "netns", "del", f"ss{n}", check=False)
            sh("ip", "link", "del", f"ssv{n}", check=False)
        sh("ip", "link", "del", BRIDGE, check=False)

    # -- daemons ------------------------------------------------------------
    @staticmethod
    def munge_works() -> bool:
        cred = sh("munge", "-n", check=False)
        return cred.returncode == 0 and sh("unmunge", input=cred.stdout, check=False).returncode == 0

    def munge_up(self) -> None:
        if self.munge_works():
            return
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            sh("mungekey", "--create", "--force", f"--keyfile={key}")
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        os.chmod("/run/munge", 0o755)  # munged needs x for all, whatever the test process's umask
        shutil.chown("/run/munge", "munge", "munge")
        sh("runuser", "-u", "munge", "--", "/usr/sbin/munged")
        self.started_munge = True
        pidfile = Path("/run/munge/munged.pid")
        if pidfile.exists():
            self.munge_pid = int(pidfile.read_text().split()[0])
        deadline = time.monotonic() + 10
        while not self.munge_works():
            if time.monotonic() > deadline:
                raise RuntimeError("munged does not answer")
            time.sleep(0.1)

    def up(self, timeout: float = 30) -> SlurmCluster:
        self.down(quiet=True)
        self.write_config()
        self.net_up()
        self.munge_up()
        sh("/usr/sbin/slurmctld")
        for n in self.names:
            private = " && ".join(f"mkdir -p {d} && mount -t tmpfs -o size=64m ss-{n} {d}" for d in PRIVATE_DIRS)
            sh(
                "nsenter", f"--net=/run/netns/ss{n}", "unshare", "--mount", "--propagation", "private",
                "/bin/sh", "-c", f"{private} && exec /usr/sbin/slurmd -N {n}",
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = sh("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
            states = dict(zip(out[::2], out[1::2], strict=False))
            if len(states) == self.n and all(s == "idle" for s in states.values()):
                return self
            time.sleep(0.3)
        raise RuntimeError(f"slurm nodes not idle after {timeout}s: {states}; see {self.d}/log")

    def _pids(self) -> list[int]:
        pids = []
        for f in (self.d / "run").glob("*.pid"):
            try:
                pids.append(int(f.read_text().split()[0]))
            except (ValueError, OSError, IndexError):
                pass
        return pids

    def _namespace_pids(self) -> list[int]:
        """Every process inside this harness's node namespaces (slurmd, job steps, stacks)."""
        pids = []
        for n in self.names:
            out = sh("ip", "netns", "pids", f"ss{n}", check=False).stdout.split()
            pids += [int(p) for p in out if p.isdigit()]
        return pids

    def down(self, quiet: bool = False) -> None:
        if shutil.which("scancel") and (ETC / "slurm.conf").exists() and (self.d / "run").exists():
            sh("scancel", "--full", "-u", "root", check=False, timeout=15)
        pids = self._pids() + self._namespace_pids()  # read first: slurmctld removes its pid file on exit
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids + self._namespace_pids():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.started_munge and self.munge_pid:
            try:
                os.kill(self.munge_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _wait_dead(self.munge_pid)
        self.net_down()
        for f in ("slurm.conf", "gres.conf"):
            t = ETC / f
            if t.is_symlink():
                t.unlink()
            backup = ETC / f"{f}.servesweep-backup"
            if backup.exists():
                backup.rename(t)
        shutil.rmtree(self.d / "state", ignore_errors=True)

    def __enter__(self):
        self._host_lock()
        try:
            return self.up()
        except BaseException:
            self._release()
            raise

    def __exit__(self, *exc):
        try:
            self.down()
        finally:
            self._release()

    # /etc/slurm, the bridge and the node namespaces are host-wide: a second suite on this host (or a
    # second user) waits for the first's test cluster to be gone instead of tearing it down.
    LOCK = Path("/run/lock/servesweep-slurm-test-cluster.lock")

    def _host_lock(self, timeout: float = 1800) -> None:
        self.LOCK.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another Slurm test cluster held {self.LOCK} for {timeout:.0f} s") from None
                time.sleep(1)

    def _release(self) -> None:
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            os.close(fd)
            self._lock_fd = None


def _wait_dead(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def available() -> str | None:
    """Why a real Slurm cannot be brought up here, or None if it can."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("slurmctld", "slurmd", "sinfo", "munged", "ip", "nsenter"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (apt-get install slurmctld slurmd slurm-client munge)"
    return None


if __name__ == "__main__":
    c = SlurmCluster()
    if sys.argv[1:] == ["up"]:
        c.up()
        print(sh("sinfo", "-N").stdout)
    else:
        c.down()
