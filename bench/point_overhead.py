"""Point overhead on the local stack: where a 2-replica mocker point's wall time goes,
over N points, and the driver's own peak RSS while it supervises the stack."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

from common import BIN, copy_workflow, header, stats


def sample_rss(pid: int, out: list) -> None:
    try:
        p = psutil.Process(pid)
        while p.is_running():
            out.append(p.memory_info().rss / 2**20)
            time.sleep(0.05)
    except psutil.NoSuchProcess:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5)
    a = ap.parse_args()
    header(
        "point overhead (local stack, 2 mocker replicas)",
        f"{BIN}/python bench/point_overhead.py --points {a.points} --duration {a.duration:g}",
    )
    parts = {
        k: []
        for k in (
            "start->all healthy",
            "last healthy->ready (detect+smoke)",
            "aiperf run",
            "aiperf run - duration - warm-up",
            "teardown",
            "driver outside engines+aiperf",
            "driver peak RSS MiB",
        )
    }
    with tempfile.TemporaryDirectory() as tmp:
        wf = copy_workflow(Path(tmp) / "wf", recipes=["local-agg-2x-mocker"])
        f = wf / "recipes/local-agg-2x-mocker.yaml"
        doc = yaml.safe_load(f.read_text())
        doc["scenario"]["duration_s"] = a.duration
        doc["concurrency"] = [4]
        f.write_text(yaml.safe_dump(doc))
        plan = subprocess.run(
            [sys.executable, "-m", "servesweep", "plan", str(f)], cwd=wf, capture_output=True, text=True, check=True
        ).stdout
        (wf / "plan.json").write_text(plan)
        for i in range(a.points):
            t0 = time.perf_counter()
            p = subprocess.Popen(
                [str(BIN / "servesweep"), "run-point", "plan.json", f"results/p{i}.json"],
                cwd=wf,
                stderr=subprocess.PIPE,
                text=True,
            )
            rss: list[float] = []
            th = threading.Thread(target=sample_rss, args=(p.pid, rss))
            th.start()
            err = p.communicate()[1]
            th.join()
            wall = time.perf_counter() - t0
            if p.returncode:
                raise SystemExit(err)
            res = json.loads((wf / f"results/p{i}.json").read_text())
            t = res["timings_s"]
            teardown = float(re.search(r"stopped in ([\d.]+) s", err).group(1))
            warm_and_run = t["bench"]
            parts["start->all healthy"].append(t["ready"] - t["last_health_to_ready"])
            parts["last healthy->ready (detect+smoke)"].append(t["last_health_to_ready"])
            parts["aiperf run"].append(warm_and_run)
            parts["aiperf run - duration - warm-up"].append(warm_and_run - a.duration)
            parts["teardown"].append(teardown)
            parts["driver outside engines+aiperf"].append(wall - t["ready"] - warm_and_run - teardown)
            parts["driver peak RSS MiB"].append(max(rss))
    for k, v in parts.items():
        print(f"{k:<38} {stats(v)}")
    print(
        "\n'driver outside engines+aiperf' = wall - (engine startup to ready) - aiperf run - teardown:"
        " process spawn, port lease, metric scrapes, result, interpreter start."
    )


if __name__ == "__main__":
    main()
