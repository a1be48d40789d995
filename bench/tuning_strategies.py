"""Grid against successive halving and the model-based search, each run for real in a workflow copy
of its own (each one snakemake run: halving's kept variants run on the stacks their screens started;
the search chooses each trial once the last is in); prints each one's GPU-hours (from the results:
GPUs x (benchmark + the startup of the stack the point started)), its verdict line, and its share of
the grid's GPU-hours.

``--space local``: a space with a known answer, the mocker's sequence slots per replica x its
speed-up ratio at c8 (the fastest engine with enough slots for every user holds the SLO with the
most throughput). ``--space seed``: seed 000's tuning sweep (recipes/gemma4-livekit-tune-c150.yaml,
12 variants) as its rehearsal on this machine (mockers in the production layout, durations and
concurrency capped; the mockers take the prefill chunk, which at that load never binds: its ranking
there is the layout, then noise).
``--window``: the rehearsal's benchmark window (the local cluster's ``rehearsal.max_duration_s``);
a screen runs its share of it. The seed's last line prices the trials each strategy ran as the
cluster would bill them (its plans: GPUs x (startup bound per stack and run + each point's time))."""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from servesweep.contract.paths import plan_file, point_files

from common import copy_workflow, header, snakemake


@dataclass(frozen=True)
class Space:
    recipe: str
    summary: str  # the target, whose Tuning section names the winner
    config: tuple[str, ...]
    halving: dict
    trials: int  # the search's (under half the variants)

    @property
    def results(self) -> str:
        return str(Path(self.summary).parent)


SPACES = {
    "local": Space(
        "local-tune-mocker", "results/summary.md", (), {"target": 8, "keep": 0.2, "screen_share": 0.1}, trials=4
    ),
    "seed": Space(
        "gemma4-livekit-tune-c150",
        "results/rehearsal/summary.md",
        ("--config", "cluster=hcm-hgx02", "rehearsal=1", "recipes=gemma4-livekit-tune-c150"),
        {"target": 150, "keep": 0.25, "screen_share": 0.25},
        trials=5,
    ),
}


def _write(wf: Path, space: Space, strategy: str, a: argparse.Namespace) -> None:
    f = wf / "recipes" / f"{space.recipe}.yaml"
    doc = yaml.safe_load(f.read_text())
    if space.recipe == SPACES["local"].recipe:
        doc["scenario"]["duration_s"] = a.duration
        doc["sweep"] = {
            "axes": {
                "seqs": {"field": "engine.args[--max-num-seqs]", "values": [1, 2, 4]},
                "speed": {"field": "engine.args[--speedup-ratio]", "values": [0.5, 1, 2]},
            },
        }
    if strategy == "halving":
        given = {"screen_share": a.screen_share, "keep": a.keep}
        doc["sweep"] |= {"strategy": "halving", "halving": space.halving | {k: v for k, v in given.items() if v}}
    if strategy == "search":
        search = {"target": space.halving["target"], "trials": a.trials or space.trials, "seed": a.seed}
        doc["sweep"] |= {"strategy": "search", "search": search}
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    if a.window:
        c = wf / "profiles" / "local" / "cluster.yaml"
        cluster = yaml.safe_load(c.read_text())
        cluster["rehearsal"]["max_duration_s"] = a.window
        c.write_text(yaml.safe_dump(cluster, sort_keys=False))


def trials(wf: Path, space: Space) -> list[tuple[str, int, dict]]:
    """(variant or screen, concurrency, result) of every point of the sweep on disk."""
    found = point_files(wf / space.results, every_recipe=True)
    return [
        (p.parent.name, conc, json.loads(p.read_text()))
        for conc, p in found
        if p.parent.name.startswith(f"{space.recipe}.")
    ]


def gpu_hours(wf: Path, space: Space) -> tuple[float, int]:
    """(GPU-hours of every result of the sweep, its number of points)."""
    total, n = 0.0, 0
    for _name, _conc, doc in trials(wf, space):
        stack = doc["identity"]["stack"]
        start = stack["startup_s"] if stack["position"] == 1 else 0.0
        total += doc["identity"]["topology"]["gpus"] * (doc["timings_s"]["bench"] + start) / 3600
        n += 1
    return total, n


def cluster_hours(wf: Path, space: Space) -> float:
    """GPU-hours the cluster would bill for the trials the rehearsal ran: every trial's point time,
    and one startup (its bound) per server identity (a kept variant runs on its screen's stack)."""
    total, started = 0.0, set()
    for name, conc, doc in trials(wf, space):
        plan = json.loads((wf / plan_file(name, conc)).read_text())
        res, gpus, server = plan["resources"], doc["identity"]["topology"]["gpus"], plan["fingerprints"]["server"]
        total += gpus * (res["point_s"] + (res["startup_s"] if server not in started else 0)) / 3600
        started.add(server)
    return total


def stacks_started(wf: Path, space: Space) -> int:
    """Stacks the sweep's points ran on (one per server configuration when each started once)."""
    return len({doc["identity"]["stack"]["id"] for _name, _conc, doc in trials(wf, space)})


def verdict(wf: Path, space: Space) -> str:
    text = (wf / space.summary).read_text()
    m = re.search(r"\*\*(Best[^*]*|Tied[^*]*)\*\*", text.split(f"## Tuning `{space.recipe}`", 1)[1])
    return m.group(1) if m else "(no verdict)"


def run(wf: Path, space: Space) -> float:
    t = time.monotonic()
    r = snakemake(wf, space.summary, *space.config, timeout=3600)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--space", choices=sorted(SPACES), default="local")
    ap.add_argument("--duration", type=float, default=30.0, help="local: the full benchmark (s); a screen is 1/10")
    ap.add_argument("--window", type=float, help="seed: the rehearsal's benchmark window (s)")
    ap.add_argument("--screen-share", type=float, help="halving's screen_share (default: the space's)")
    ap.add_argument("--keep", type=float, help="halving's keep (default: the space's)")
    ap.add_argument("--trials", type=int, help="the search's trials (default: the space's)")
    ap.add_argument("--seed", type=int, default=0, help="the search's seed")
    again = "one named twice runs twice (grid,grid: the grid's own spread)"
    ap.add_argument("--strategies", default="grid,halving,search", help=f"which to run, the grid first; {again}")
    a = ap.parse_args()
    space = SPACES[a.space]
    used = {"duration"} if a.space == "local" else {"window"}
    opts = {k: v for k, v in vars(a).items() if v and k in used | {"screen_share", "keep", "trials", "seed"}}
    given = " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in opts.items())
    header(f"tuning strategies on {a.space}: {a.strategies}",
           f"python bench/tuning_strategies.py --space {a.space} {given}")  # fmt: skip
    tmp = Path(tempfile.mkdtemp())
    out, billed = {}, {}
    strategies = a.strategies.split(",")
    for i, strategy in enumerate(strategies):
        run_name = strategy if strategy not in strategies[:i] else f"{strategy}#{strategies[: i + 1].count(strategy)}"
        wf = copy_workflow(tmp / run_name.replace("#", "-"), [space.recipe])
        _write(wf, space, strategy, a)
        wall = run(wf, space)
        hours, points = gpu_hours(wf, space)
        out[run_name] = hours
        billed[run_name] = cluster_hours(wf, space) if space.config else 0.0
        print(f"{run_name:8s} {points:2d} points on {stacks_started(wf, space)} stacks, {hours:.4f} GPU-h, "
              f"wall {wall:.0f} s: {verdict(wf, space)}")  # fmt: skip
    for strategy in (s for s in out if s != "grid" and "grid" in out):
        print(f"{strategy} / grid GPU-hours: {out[strategy] / out['grid']:.0%} (bound 50 %)")
        if space.config:
            print(f"as the cluster bills these trials: grid {billed['grid']:.1f} GPU-h, {strategy} "
                  f"{billed[strategy]:.1f} GPU-h: {billed[strategy] / billed['grid']:.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
