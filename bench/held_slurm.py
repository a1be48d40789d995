"""Held stacks on the Slurm rig (tests/slurm/cluster.py): what waiting points cost the submitting
host, and the dry-run bill against what the run then spent.

One recipe of N points on one held stack (the mocker rig recipe), run twice:
1. the first run, sampling this host's processes every 0.2 s: the points' `run-held-point`
   processes (one sleeping per waiting point) and their steps' `srun` clients (one per stack),
   with their RSS (on the rig the nodes are namespaces of this host: the stacks' own `srun`s,
   launched inside the allocation without --jobid, are not counted);
2. a dry run of the same points forced (`--forceall`): the bill, its expected figure taken from the
   first run's results (startup, each point's benchmark, idle per point);
3. the forced run itself, then the summary's "Bill against spend" for it.
Needs root and Debian's slurmctld/slurmd (as the Slurm tests do)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from common import BIN, ROOT, copy_workflow, header

sys.path.insert(0, str(ROOT / "tests"))
from slurm.cluster import SlurmCluster, available  # noqa: E402

RIG = ROOT / "tests" / "slurm"
NAME = "bench-held"


def _workflow(dest: Path, points: int, duration: int) -> tuple[Path, list[str]]:
    wf = copy_workflow(dest, recipes=[])
    shutil.copytree(RIG / "profile", wf / "profiles" / "slurm-test")
    shutil.copytree(RIG / "recipes", wf / "recipes", dirs_exist_ok=True)
    concs = list(range(2, 2 + points))
    text = (RIG / "recipes" / "slurm-agg-2x.yaml").read_text().replace("name: slurm-agg-2x", f"name: {NAME}")
    text = text.replace("concurrency: [4, 8]", f"concurrency: {concs}").replace(
        "duration_s: 6", f"duration_s: {duration}"
    )
    (wf / "recipes" / f"{NAME}.yaml").write_text(text)
    return wf, [f"results/{NAME}/c{c}.json" for c in concs]


def sm(wf: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "snakemake"), "--profile", "profiles/slurm-test", *args]
    cmd += ["--config", "cluster=slurm-test", f"recipes={NAME}"]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(cmd, cwd=wf, capture_output=True, text=True, timeout=1800, env=env)


class Sampler(threading.Thread):
    """Peak count and RSS of this host's waiting-point processes while the run lasts."""

    def __init__(self, wf: Path):
        super().__init__(daemon=True)
        self.wf, self.stop, self.peak = str(wf), threading.Event(), {"run-held-point": (0, 0.0), "srun": (0, 0.0)}

    def run(self) -> None:
        while not self.stop.wait(0.2):
            seen = {k: [] for k in self.peak}
            for p in psutil.process_iter(["cmdline", "memory_info"]):
                line = " ".join(p.info["cmdline"] or ())
                kind = "run-held-point" if "run-held-point" in line and "bash" not in line else None
                step = line.startswith("srun ") and "--jobid=" in line and "servesweep" in line  # a point's step
                kind = kind or ("srun" if step else None)
                if kind and p.info["memory_info"]:
                    seen[kind].append(p.info["memory_info"].rss / 2**20)
            for k, rss in seen.items():
                n, total = self.peak[k]
                self.peak[k] = (max(n, len(rss)), max(total, sum(rss)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--points", type=int, default=6)
    ap.add_argument("--duration", type=int, default=6, help="each point's benchmark seconds")
    a = ap.parse_args()
    if why := available():
        sys.exit(f"no Slurm rig here: {why}")
    header("held stacks on the Slurm rig", f"python bench/held_slurm.py --points {a.points} --duration {a.duration}")
    with SlurmCluster(nodes=3), tempfile.TemporaryDirectory() as tmp:
        wf, targets = _workflow(Path(tmp) / "wf", a.points, a.duration)
        sampler = Sampler(wf)
        sampler.start()
        t = time.monotonic()
        first = sm(wf, *targets)
        sampler.stop.set()
        sampler.join()
        if first.returncode:
            sys.exit(f"first run failed:\n{first.stderr[-3000:]}")
        print(f"first run: {a.points} points on one held stack in {time.monotonic() - t:.0f} s")
        for kind, (n, rss) in sampler.peak.items():
            print(f"  peak {kind} processes on this host: {n} (together {rss:.0f} MiB RSS)")
        dry = sm(wf, "-n", "--forceall", *targets)
        bill = [ln for ln in dry.stderr.splitlines() if "GPU-h" in ln]
        print("dry-run bill of the forced rerun:\n  " + "\n  ".join(bill))
        second = sm(wf, "--forceall", *targets)
        if second.returncode:
            sys.exit(f"forced run failed:\n{second.stderr[-3000:]}")
        summary = sm(wf, "results/summary.md")
        text = (wf / "results/summary.md").read_text() if summary.returncode == 0 else summary.stderr[-2000:]
        section = text.split("## Bill against spend")[-1].split("##")[0].strip()
        print(f"after the forced run, the summary's bill against spend:\n  {section}")
        m = re.search(r"\((\d+)% of the bill\)", section)
        if m:
            print(f"spent / billed: {int(m.group(1)) / 100:.2f}")


if __name__ == "__main__":
    main()
