"""Dry run of a 64-variant x 8-concurrency sweep against the same 512 points written as 64 separate
recipes: `snakemake -n results/summary.md --profile local` in two workflow copies, taken in turn
(rounds interleaved, one warm-up round each), medians and spreads. The sweep must cost at most 1.2x
the separate recipes (docs/performance.md)."""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from pathlib import Path

import yaml

from common import BIN, ROOT, copy_workflow, header, timed_child

CONCS = [1, 2, 4, 8, 16, 32, 64, 128]
SEQS = [16, 32, 64, 128, 256, 512, 1024, 2048]
BLOCKS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]


def _base() -> dict:
    doc = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    doc.pop("evals", None)
    doc["concurrency"] = CONCS
    return doc


def make_pair(root: Path) -> tuple[Path, Path]:
    """(a workflow with one 64-variant sweep, one with the same 64 configurations as recipes)."""
    swept = copy_workflow(root / "swept", recipes=[])
    doc = _base()
    doc["name"] = "gen-sweep"
    doc["sweep"] = {
        "axes": {
            "seqs": {"field": "engine.args[--max-num-seqs]", "values": SEQS},
            "blocks": {"field": "engine.args[--num-gpu-blocks-override]", "values": BLOCKS},
        },
        "max_variants": 64,
    }
    (swept / "recipes/gen-sweep.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    separate = copy_workflow(root / "separate", recipes=[])
    for s in SEQS:
        for b in BLOCKS:
            one = copy.deepcopy(_base())
            one["name"] = f"gen-seqs-{s}-blocks-{b}"
            args = one["engine"]["args"]
            args[args.index("--num-gpu-blocks-override") + 1] = b
            args += ["--max-num-seqs", s]
            (separate / f"recipes/{one['name']}.yaml").write_text(yaml.safe_dump(one, sort_keys=False))
    return swept, separate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    header("sweep dry run vs separate recipes (64 x 8 points)", f"python bench/sweep_dryrun.py --rounds {a.rounds}")
    swept, separate = make_pair(Path(tempfile.mkdtemp()))
    times: dict[str, list[float]] = {"sweep": [], "separate": []}
    for warmup in (True, *([False] * a.rounds)):
        for name, wf in (("sweep", swept), ("separate", separate)):
            cmd = [str(BIN / "snakemake"), "results/summary.md", "-n", "--profile", "profiles/local"]
            wall, _rss, _result = timed_child(cmd, wf, None)  # exits naming the command if it fails
            if not warmup:
                times[name].append(wall)
    for name, xs in times.items():
        print(f"{name:9s} median {statistics.median(xs):.2f} s  (min {min(xs):.2f}, max {max(xs):.2f})")
    ratio = statistics.median(times["sweep"]) / statistics.median(times["separate"])
    print(f"sweep / separate: {ratio:.2f} (bound 1.20)")


if __name__ == "__main__":
    main()
