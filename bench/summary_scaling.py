"""Summary scaling: build results/summary.md (+ csv, plots) from 1 000 and 10 000 synthetic results."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from servesweep.report.summary import build_summary
from servesweep.tools.samples import result_doc

from common import BIN, header


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    header("summary scaling", f"{BIN}/python bench/summary_scaling.py --sizes {a.sizes} --reps {a.reps}")
    for n in [int(x) for x in a.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            recipes, points, paths = n // 8, [], []
            for i in range(n):
                r, c = f"r{i // 8:05d}", 2 ** (i % 8)
                p = Path("results") / r / f"c{c}.json"
                p.parent.mkdir(parents=True, exist_ok=True)
                doc = result_doc(r, c, 0.05 * (1 + i % 13), 1000.0 + i, scenario=f"s{i % 4}")
                p.write_text(json.dumps(doc))
                paths.append(p)
                points.append(
                    {
                        "recipe": r,
                        "concurrency": c,
                        "result": str(p),
                        "scenario": f"s{i % 4}",
                        "log_dir": f"logs/{r}/c{c}",
                    }
                )
            sel = Path("selection.json")
            slos = {f"r{i:05d}": {"ttft_p95_s": 0.5} for i in range(recipes + 1)}
            sel.write_text(json.dumps({"cluster": "local", "points": points, "slo": slos}))
            times = []
            for _ in range(a.reps):
                t = time.perf_counter()
                build_summary(paths, sel, Path("results/summary.md"))
                times.append(time.perf_counter() - t)
            print(
                f"{n:>6} results ({recipes} recipes, 4 scenarios): median {statistics.median(times):.2f} s "
                f"(min {min(times):.2f}, max {max(times):.2f})"
            )


if __name__ == "__main__":
    main()
