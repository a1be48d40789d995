"""Starting and stopping the processes of a plan: locally, or with srun inside an allocation.

Runtime references in plan strings are resolved here (see engines.py), and
nowhere else. argv stays a list from recipe to exec: nothing goes through a
shell string.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..contract.plan import RUNTIME_REF, Process, without_secrets
from ..fileio.errors import plain_text
from .slurm import srun_step

REF = RUNTIME_REF
# Runs first in every srun step (a constant script; the process argv follows
# unchanged as "$@"). Slurm sets the step's CUDA_VISIBLE_DEVICES to the job's
# GPUs on that node; the plan's slice (SERVESWEEP_GPUS) indexes into that list.
STEP_SCRIPT = r"""
echo "servesweep: node=${SLURMD_NODENAME:-$(hostname)}"
if [ -n "${SERVESWEEP_GPUS:-}" ]; then
  out=
  if [ "$SERVESWEEP_GPUS" != none ]; then
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
      i=0
      for g in $(echo "$CUDA_VISIBLE_DEVICES" | tr , ' '); do
        case ",$SERVESWEEP_GPUS," in *",$i,"*) out="$out${out:+,}$g" ;; esac
        i=$((i+1))
      done
    else
      out=$SERVESWEEP_GPUS
    fi
  fi
  export CUDA_VISIBLE_DEVICES="$out"
  echo "servesweep: CUDA_VISIBLE_DEVICES=$out"
fi
exec "$@"
"""
STEP_WRAPPER = ["/bin/sh", "-c", STEP_SCRIPT, "sh"]


# The driver's variables a started process inherits; the rest of its env is the plan's. Nothing else
# passes: not the job's GPU list (CUDA_VISIBLE_DEVICES), not a system port, not a user's DYN_*/VLLM_*.
# PATH/LD_LIBRARY_PATH: a site's modules on bare metal; SLURM_JOB_ID/SLURM_JOBID/SLURM_CONF: what srun
# needs to start a step in this job (the step's own SLURM_* come from slurmstepd, not from here).
INHERITED_ENV = frozenset(
    {"PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
     "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME"}
)  # fmt: skip
INHERITED_PREFIXES = ("LC_",)
# what the launcher sets for every process, whatever the driver's env: Python writes each log line as it
# happens (a failure's log tail, the log scan and a killed step's last words depend on it)
LAUNCHER_ENV = {"PYTHONUNBUFFERED": "1"}


def inherited_env(environ) -> dict:
    """The allowlisted part of the driver's environment (credentials never among it) and the launcher's
    own settings; the plan's env comes on top."""
    keep = {k: v for k, v in environ.items() if k in INHERITED_ENV or k.startswith(INHERITED_PREFIXES)}
    return {**without_secrets(keep), **LAUNCHER_ENV}


class MissingSecret(Exception):
    pass


_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: deliver `sig` to this process when its parent dies (no orphans if the driver is killed)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


@dataclass
class Context:
    """What only the run knows: node addresses, port shift, ids, dirs."""

    node_addrs: list[str]
    node_names: list[str]
    port_shift: int
    job_id: str
    run_dir: Path
    processes: dict[str, Process]
    servesweep_python: str = sys.executable
    workdir: Path = field(default_factory=Path.cwd)
    credentials: dict = field(default_factory=dict, repr=False)  # the stack's own (run/credentials)

    @property
    def namespace(self) -> str:
        """This stack's own Dynamo namespace: concurrent stacks never see each other."""
        return re.sub(r"[^a-z0-9]+", "-", f"ss-{self.job_id}-{self.port_shift}".lower()).strip("-")

    def addr(self, proc: str) -> str:
        return self.node_addrs[self.processes[proc].node]

    def port(self, proc: str, name: str, first_rank: bool = False) -> int:
        block = self.processes[proc].ports[name]
        return block.port + (block.offset if first_rank else 0) + self.port_shift

    def resolve(self, s: str, me: str) -> str:
        simple = {
            "job_id": self.job_id,
            "run_dir": str(self.run_dir),
            "workdir": str(self.workdir),
            "namespace": self.namespace,
            "servesweep_python": self.servesweep_python,
        }

        def sub(m):
            kind, arg, name = m.group(1), m.group(2), m.group(3)
            if name:
                return simple[name]
            if kind == "addr":
                return self.addr(me if arg == "self" else arg)
            proc, _, port = arg.rpartition(".")
            return str(self.port(me if proc == "self" else proc, port, kind == "rank_port"))

        return REF.sub(sub, s)

    def argv(self, proc: Process) -> list[str]:
        return [self.resolve(a, proc.name) for a in proc.argv]

    def env(self, proc: Process, base: dict | None = None, rehearsal: bool = False) -> tuple[dict, set[str]]:
        """The process env and the names whose values are secret.

        The driver's environment passes only through the allowlist (INHERITED_ENV); the rest is the
        plan's. Values by reference are read from the driver's environment only here, at spawn
        time: they never enter a plan, a result or a log line. Credentials in the driver's
        environment reach a process only if its own env names them.
        """
        env = inherited_env(os.environ if base is None else base)
        secret = set()
        for k, v in proc.env.items():
            if isinstance(v, dict) and "from_stack" in v:
                env[k] = self.credentials[v["from_stack"]]
                secret.add(k)
            elif isinstance(v, dict):
                if v["from_env"] not in os.environ:
                    if rehearsal:  # mockers need no credentials
                        continue
                    raise MissingSecret(f"{proc.name}: env {k} needs ${v['from_env']}, which is not set")
                env[k] = os.environ[v["from_env"]]
                if v.get("secret", True):
                    secret.add(k)
            else:
                env[k] = self.resolve(v, proc.name)
        return env, secret

    def url(self, template: str | None, me: str) -> str | None:
        return self.resolve(template, me) if template else None


@dataclass
class Handle:
    name: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return plain_text("\n".join(text[-lines:]))


class LocalSpawner:
    """Each process in its own session/process group, logging to its own file."""

    kind = "local"

    def command(self, proc: Process, argv: list[str], ctx: Context) -> list[str]:
        return argv

    def start(self, name: str, argv: list[str], env: dict, log_path: Path, cwd: Path) -> Handle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab", buffering=0)
        banner = f"servesweep: process={name}\n"
        if self.kind == "local":  # srun steps print their own (STEP_SCRIPT)
            banner += "servesweep: node=local\n"
            if "CUDA_VISIBLE_DEVICES" in env:
                banner += f"servesweep: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}\n"
        log.write(banner.encode())
        try:
            p = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        finally:
            log.close()
        return Handle(name, p, log_path)


class SrunSpawner(LocalSpawner):
    """One ``srun --overlap`` step per process on the node the plan names."""

    kind = "srun"

    def __init__(self, container: dict | None):
        self.container = container

    def command(self, proc: Process, argv: list[str], ctx: Context) -> list[str]:
        host = ctx.node_names[proc.node]
        cmd = srun_step(host, proc.name)
        if self.container and self.container["runtime"] == "bwrap":
            return cmd + STEP_WRAPPER + bwrap_prefix(self.container, ctx, proc.name) + argv
        if self.container:
            # each step is its own container: the workflow dir (run dir, logs, discovery, caches) is mounted
            # at the same path, and the step starts there
            mounts = [ctx.resolve(m, proc.name) for m in self.container.get("mounts", [])]
            cmd += [f"--container-image={self.container['image']}", "--no-container-entrypoint"]
            cmd += ["--no-container-mount-home", f"--container-workdir={ctx.workdir}"]
            if mounts:
                cmd.append(f"--container-mounts={','.join(mounts)}")
        return cmd + STEP_WRAPPER + argv

    def start(self, name: str, argv: list[str], env: dict, log_path: Path, cwd: Path) -> Handle:
        env = dict(env)
        env["SERVESWEEP_GPUS"] = env.pop("CUDA_VISIBLE_DEVICES", "") or "none"  # srun drops empty values
        return super().start(name, argv, env, log_path, cwd)


def bwrap_prefix(container: dict, ctx: Context, me: str) -> list[str]:
    """The test rig's container (bubblewrap): the base read-only, a private /tmp, the declared mounts
    (the workflow dir among them) and nothing else of the host; the host's network, as under pyxis."""
    # bwrap applies these in order: the private /tmp first, so a base dir or mount under /tmp stays visible
    out = ["bwrap", "--die-with-parent", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for d in container.get("base", []):
        out += ["--ro-bind", d, d]
    for m in container.get("mounts", []):
        host, inside, *flags = ctx.resolve(m, me).split(":")
        out += ["--ro-bind" if "ro" in flags else "--bind", host, inside]
    return [*out, "--chdir", str(ctx.workdir), "--"]


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def stop_all(handles: list[Handle], grace_s: float = 5.0) -> list[str]:
    """SIGTERM every group, wait up to the grace period, then SIGKILL what is left.

    Returns the names that had to be killed. Descendants that left their process
    group are found through the process tree, so they die too.
    """
    trees = {h.name: _tree(h.pid) for h in handles}
    for h in reversed(handles):
        _signal_group(h.pid, signal.SIGTERM)
        for p in trees[h.name][1:]:
            _signal_proc(p, signal.SIGTERM)
        _signal_group(h.pid, signal.SIGCONT)  # a stopped process acts on its SIGTERM only once resumed
        for p in trees[h.name][1:]:
            _signal_proc(p, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    procs = [p for t in trees.values() for p in t]
    while time.monotonic() < deadline:
        for h in handles:
            h.poll()
        if not any(_alive(p) for p in procs):
            break
        time.sleep(0.02)
    killed = []
    for h in handles:
        alive = [p for p in trees[h.name] if _alive(p)]
        if alive:
            killed.append(h.name)
            _signal_group(h.pid, signal.SIGKILL)
            for p in alive:
                _signal_proc(p, signal.SIGKILL)
    for h in handles:
        try:
            h.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    return killed


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_proc(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
