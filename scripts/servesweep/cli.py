"""servesweep command line: validate, plan, run-point, run-smoke, run-eval, run-profile, summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .contract.paths import CAPACITY_FILE, SMOKE_REQUESTS, SUMMARY_MD
from .fileio.errors import InputError, Problem, shown
from .fileio.files import private_outputs


def _recipe_files(files: list[str]) -> list[Path]:
    if files:
        return [Path(f) for f in files]
    return sorted(Path("recipes").glob("*.yaml"))


def cmd_validate(a) -> int:
    from .render.cluster import all_clusters
    from .render.loading import load_recipes

    clusters = all_clusters()
    if a.cluster and a.cluster not in clusters:
        raise InputError([Problem("--cluster", "cluster", f"unknown cluster {a.cluster!r}")])
    recipes, problems = load_recipes(_recipe_files(a.files), clusters, a.cluster, root=Path.cwd())
    if problems:
        raise InputError(problems)
    targets = {r.name: [c for c in r.clusters if a.cluster in (None, c)] for r in recipes}
    reports = {  # one parser run per engine venv and cluster for every recipe named
        c: _engine_arg_report([r for r in recipes if c in targets[r.name]], clusters[c])
        for c in sorted({c for cs in targets.values() for c in cs})
    }
    lines = []
    for r in recipes:
        where = ", ".join(targets[r.name]) or "none selected"
        lines.append(shown(f"ok  {r.source}  ({r.engine_kind}; clusters: {where})"))
        lines += [line for c in targets[r.name] for line in _engine_arg_lines(r.source, c, reports[c])]
    problems += [p for report in reports.values() for p in report.problems]
    if problems:
        raise InputError(problems)
    print("\n".join(lines))
    return 0


def _engine_arg_report(recipes: list, cluster):
    """What the engines' own parsers say of these recipes' argv on one cluster."""
    from .render.plan import render
    from .workflow.engine_args import check_engine_args, pending

    checks = [c for r in recipes for c in pending(render(r, cluster, r.concurrency[0]), r)]
    return check_engine_args(checks, Path.cwd())


def _engine_arg_lines(source: str, cluster: str, report) -> list[str]:
    """One recipe's lines of a cluster's report."""
    lines = [
        f"      args on {cluster}: {k} accepted by {v}" for (f, k), v in sorted(report.checked.items()) if f == source
    ]
    lines += [
        f"      args on {cluster}: {k} NOT parser-checked: {v}"
        for (f, k), v in sorted(report.skipped.items())
        if f == source
    ]
    return [shown(line) for line in lines]


def cmd_plan(a) -> int:
    from .fileio.encode import pretty
    from .fileio.files import write_if_changed
    from .render.cluster import all_clusters
    from .render.loading import load_recipes
    from .render.plan import render, render_point

    clusters = all_clusters()
    recipes, problems = load_recipes([Path(a.recipe)], clusters, a.cluster)
    if problems:
        raise InputError(problems)
    named = [r for r in recipes if a.variant in (None, r.name)]
    if len(named) != 1:  # a sweep's file holds its variants (and a halving sweep's screens)
        said = f"no variant {a.variant!r}" if a.variant else f"a sweep of {len(recipes)} variants"
        raise InputError([Problem(a.recipe, "sweep", f"{said}; name one with --variant, e.g. {recipes[0].name}")])
    (recipe,) = named
    cluster_name = a.cluster or recipe.clusters[0]
    if cluster_name not in recipe.clusters:
        raise InputError([Problem(recipe.source, "clusters", f"recipe does not run on cluster {cluster_name!r}")])
    conc = a.conc if a.conc is not None else recipe.concurrency[0]
    rehearsal = clusters["local"] if a.rehearsal else None
    if a.out:  # a probe's plan file (rules/capacity.smk): the canonical text the workflow writes
        if not recipe.has_point(conc):
            raise InputError([Problem(recipe.source, "capacity", f"concurrency {conc} is no point or probe of it")])
        write_if_changed(Path(a.out), render_point(recipe, clusters[cluster_name], conc, rehearsal)[1])
        return 0
    sys.stdout.write(pretty(render(recipe, clusters[cluster_name], conc, rehearsal)))
    return 0


def cmd_run_point(a) -> int:
    from .run.driver import run_point

    join = Path(a.join) if a.join else None
    return run_point(Path(a.plan), Path(a.result), log_dir=Path(a.log_dir) if a.log_dir else None, join=join)


def cmd_run_smoke(a) -> int:
    from .run.smoke import run_smoke

    return run_smoke(Path(a.plan), Path(a.requests), Path(a.out), Path(a.join) if a.join else None)


def cmd_run_eval(a) -> int:
    from .run.evals import run_eval

    return run_eval(Path(a.plan), Path(a.settings), Path(a.out), Path(a.join) if a.join else None)


def cmd_run_profile(a) -> int:
    from .run.profile import run_profile

    return run_profile(Path(a.plan), Path(a.settings), Path(a.out), Path(a.join) if a.join else None)


def cmd_run_held_check(a) -> int:
    from .run.stacks.held_step import run_held_check

    return run_held_check(a.check, Path(a.plan), Path(a.inputs), Path(a.out), a.partition or None, a.account or None)


def cmd_run_held_point(a) -> int:
    from .run.stacks.held_step import run_held_point

    return run_held_point(Path(a.plan), Path(a.result), a.partition or None, a.account or None)


def cmd_keep_stack(a) -> int:
    from .run.stacks.keeper import keep_stack

    return keep_stack(Path(a.plan), Path(a.dir), a.id, a.watch, a.expect, Path(a.result))


def cmd_summary(a) -> int:
    from .report.summary import build_summary

    build_summary(
        results=[Path(p) for p in dict.fromkeys(a.results)],  # a screen may come twice (rulekit.halving_results)
        selection=Path(a.selection),
        out_md=Path(a.out),
        baseline=Path(a.baseline) if a.baseline else None,
        capacities=[Path(p) for p in a.capacity],
        evals=[Path(p) for p in a.evals],
    )
    return 0


def cmd_capacity(a) -> int:
    from .contract.plan import end_search
    from .report.capacity import write_capacity

    try:
        doc = write_capacity(Path(a.settings), a.results, Path(a.out), Path(a.plot) if a.plot else None)
    finally:
        if a.curve:  # also when it fails: the search asks for no more probes either way
            end_search(Path(a.curve), a.recipe)
    print(f"capacity: {doc['recipe']} {doc['outcome']}: capacity {doc['capacity']}, lowest miss {doc['lowest_miss']}")
    return 0


def _diffcmd():
    from .workflow import diffcmd

    return diffcmd


def cmd_demo(a) -> int:
    from .tools.demo import run_demo

    return run_demo(str(Path(sys.executable).with_name("snakemake")))


def _add_run_parsers(sub) -> None:
    r = sub.add_parser("run-point", help="run one point from its plan and write its result")
    r.add_argument("plan")
    r.add_argument("result")
    r.add_argument("--log-dir")
    r.add_argument("--join", help="(internal) the held stack this point joins, as a step of its job")
    r.set_defaults(func=cmd_run_point)
    checks = (
        ("smoke", "send the API smoke's request set to a recipe's stack", cmd_run_smoke,
         ("requests", f"the request set ({SMOKE_REQUESTS})"), "paths.SMOKE"),
        ("eval", "run one of a recipe's accuracy benchmarks on its stack (aiperf)", cmd_run_eval,
         ("settings", "the recipe's evals entry, as render wrote it (paths.EVAL_SETTINGS)"), "paths.EVAL"),
        ("profile", "take an engine profile on the recipe's stack with the profiler on", cmd_run_profile,
         ("settings", "the profile's settings, as render wrote them (paths.PROFILE_SETTINGS)"), "paths.PROFILE"),
    )  # fmt: skip
    for check, text, func, (inputs, inputs_help), out in checks:
        c = sub.add_parser(f"run-{check}", help=text)
        c.add_argument("plan", help=f"a point's plan of the recipe: the stack the {check} runs on")
        c.add_argument(inputs, help=inputs_help)
        c.add_argument("out", help=f"the {check} file to write ({out})")
        c.add_argument("--join", help="(internal) the held stack it joins, as a step of its job")
        c.set_defaults(func=func)
    h = sub.add_parser("run-held-point", help="run one point on its server identity's held stack (Slurm)")
    h.add_argument("plan")
    h.add_argument("result")
    h.add_argument("--partition", default="")
    h.add_argument("--account", default="")
    h.set_defaults(func=cmd_run_held_point)
    hc = sub.add_parser("run-held-check", help="run a check (smoke, eval, profile) on its recipe's held stack (Slurm)")
    hc.add_argument("check", choices=["smoke", "eval", "profile"])
    hc.add_argument("plan")
    hc.add_argument("inputs", help="the request set (smoke), the eval's or the profile's settings file")
    hc.add_argument("out")
    hc.add_argument("--partition", default="")
    hc.add_argument("--account", default="")
    hc.set_defaults(func=cmd_run_held_check)


def _as_program(argv: list[str] | None) -> list[str] | None:
    """``argv`` as given; None, the program itself (console script, ``-m``), also makes everything it
    writes owner-only from here on (in-process callers keep their umask)."""
    if argv is None:
        private_outputs()
    return argv


def _add_render_parsers(sub) -> None:
    v = sub.add_parser("validate", help="validate recipes against the clusters they declare")
    v.add_argument("files", nargs="*", help="recipe files (default: recipes/*.yaml)")
    v.add_argument("--cluster", help="only check against this cluster")
    v.set_defaults(func=cmd_validate)
    p = sub.add_parser("plan", help="print one point's launch plan as JSON")
    p.add_argument("recipe")
    p.add_argument("--cluster")
    p.add_argument("--conc", type=int)
    p.add_argument("--rehearsal", action="store_true", help="engines replaced by the mocker, run locally")
    p.add_argument("--out", help="write the plan file (canonical JSON) instead of printing it")
    p.add_argument("--variant", help="the recipe of this name in the file (a sweep's variant)")
    p.set_defaults(func=cmd_plan)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servesweep", description="LLM-serving benchmark sweeps")
    sub = ap.add_subparsers(dest="cmd", required=True)
    _add_render_parsers(sub)
    _add_run_parsers(sub)
    k = sub.add_parser("keep-stack", help="(internal) own one curve's warm stack for the points that join it")
    k.add_argument("plan")
    k.add_argument("--dir", required=True)
    k.add_argument("--id", required=True)
    k.add_argument("--watch", type=int, required=True, help="snakemake pid: stop when it is gone")
    k.add_argument("--expect", type=int, default=1, help="points expected on this stack")
    k.add_argument("--result", required=True, help="a result path of the curve, for the pre-flight")
    k.set_defaults(func=cmd_keep_stack)
    s = sub.add_parser("summary", help=f"roll result files into {SUMMARY_MD}")
    s.add_argument("--selection", required=True, help="JSON list of the selected points")
    s.add_argument("--out", required=True)
    s.add_argument("--baseline")
    s.add_argument("--capacity", nargs="*", default=[], help=f"{CAPACITY_FILE} files for the capacity table")
    s.add_argument("--evals", nargs="*", default=[], help="eval-<benchmark>.json files for the accuracy table")
    s.add_argument("results", nargs="*")
    s.set_defaults(func=cmd_summary)
    c = sub.add_parser("capacity", help="decide a recipe's capacity at SLO from its probes' results")
    c.add_argument("--settings", required=True, help="the search's settings (.plans/capacity/<recipe>.json)")
    c.add_argument("--out", required=True)
    c.add_argument("--plot", help="also draw the probes against concurrency (PNG)")
    c.add_argument("--curve", default="", help="the curve file of the search's stack: take --recipe off its search")
    c.add_argument("--recipe", default="")
    c.add_argument("results", nargs="*")
    c.set_defaults(func=cmd_capacity)
    f = sub.add_parser("diff", help="what differs between two recipes, plans or results (exit 1: another measurement)")
    f.add_argument("a")
    f.add_argument("b")
    f.add_argument("--cluster", help="the cluster a recipe is rendered for (default: its first)")
    f.add_argument("--conc", type=int, help="the point a recipe is rendered at (default: its first)")
    f.set_defaults(func=lambda a: _diffcmd().cmd_diff(a))
    w = sub.add_parser("why", help="why each selected point would rerun, every cause in recipe terms")
    w.add_argument("recipes", nargs="*")
    w.add_argument("--cluster", default="local")
    w.set_defaults(func=lambda a: _diffcmd().cmd_why(a))
    d = sub.add_parser("demo", help="the local demo sweep with a progress line, then the HTML report")
    d.set_defaults(func=cmd_demo)
    a = ap.parse_args(_as_program(argv))
    try:
        return a.func(a)
    except InputError as e:
        print(e.report(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servesweep: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
