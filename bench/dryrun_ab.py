"""Dry-run A/B between two checkouts: the same generated sweep (each tree's own generator, so each
has its own recipes and code), dry run by each tree in turn, with the "shaped" baseline (every
directive of our rules, no servesweep code) of the after tree. Medians; the spreads are printed,
as this VM varies ±15 % between identical runs. Make a tree with `git worktree add DIR COMMIT`
and link `.venvs` and `.cache` into it."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

import yaml


def _generator(tree: str):
    sys.path.insert(0, f"{tree}/bench")
    spec = importlib.util.spec_from_file_location(f"dryrun_{abs(hash(tree))}", f"{tree}/bench/dryrun_scaling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.path.pop(0)
    for name in [m for m in sys.modules if m == "common" or m.startswith("servesweep")]:
        del sys.modules[name]
    return mod


def _drop_evals(wf: Path) -> None:
    for f in (wf / "recipes").glob("gen-*.yaml"):
        doc = yaml.safe_load(f.read_text())
        if doc.pop("evals", None) is not None:
            f.write_text(yaml.safe_dump(doc, sort_keys=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--recipes", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-evals", action="store_true", help="drop the recipes' evals (the targets before #39)")
    a = ap.parse_args()
    tmp, dirs, gen = Path(tempfile.mkdtemp()), {}, None
    for name, tree in (("before", a.before), ("after", a.after)):
        gen = _generator(tree)
        wf, _bare, shaped = gen.make_sweep(tmp / name, a.recipes)
        if a.no_evals:
            _drop_evals(wf)
        dirs[name] = wf
    dirs["shaped"] = shaped
    times: dict[str, list[float]] = {k: [] for k in dirs}
    for warmup in (True, *([False] * a.rounds)):
        for k, d in dirs.items():
            profile = dirs["after"] / "profiles/local"
            cmd = [str(gen.BIN / "snakemake"), "results/summary.md", "-n", "--profile", str(profile)]
            wall, _rss, _ = gen.timed_child(cmd, d, gen.ENV)
            if not warmup:
                times[k].append(wall)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{a.recipes} recipes, {a.rounds} rounds{' (no evals)' if a.no_evals else ''}")
    for k, v in times.items():
        print(f"  {k:>7}: median {med[k]:.2f} s ({min(v):.2f}-{max(v):.2f})")
    print(f"  before/shaped {med['before'] / med['shaped']:.2f}, after/shaped {med['after'] / med['shaped']:.2f}")


if __name__ == "__main__":
    main()
