"""A recipe's `sweep:` over its own fields: axes of values, expanded into variants, each a full recipe.

A variant is named ``<recipe>.<axis>-<label>_<axis>-<label>…`` (axes in declared order), so it is
an ordinary recipe to everything downstream: its own plans, results (``results/<variant>/``),
staleness, stack (variants with the same servers share one) and capacity search. The expansion is
pure: the base document in, the variant documents out, or every problem found."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass

from ..contract import paths
from ..fileio.errors import Problem
from .sweep_fields import field_problem, parse_field, set_field

DEFAULT_MAX_VARIANTS = 16
AXIS_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
LABEL = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class Axis:
    name: str
    field: str
    values: tuple
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Variant:
    name: str  # the full recipe name
    suffix: str  # the part after "<recipe>."
    choice: tuple[tuple[str, str], ...]  # (axis, label) in axis order
    doc: dict


@dataclass(frozen=True)
class Expansion:
    axes: tuple[Axis, ...]
    variants: tuple[Variant, ...]
    excluded: tuple[str, ...]  # suffixes an exclusion removed
    groups: tuple[tuple[str, ...], ...] = ()  # axes that move together (a linked group), each axis alone else


class SweepError(Exception):
    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.reason for p in problems))
        self.problems = problems


def label_of(value) -> str:
    """A readable, file-safe label for one axis value."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int | float):
        return str(value).replace("-", "m").replace(".", "p").replace("+", "")
    if isinstance(value, str):
        return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[:32] or "empty"
    if isinstance(value, dict):
        return "-".join(f"{re.sub(r'[^a-z0-9]', '', str(k).lower())}{label_of(v)}" for k, v in value.items())[:32]
    if isinstance(value, list):
        return "-".join(label_of(v) for v in value)[:32] or "empty"
    return "none"


def _key(value) -> str:
    return json.dumps(value, sort_keys=True)


def read_axes(sweep: dict, schema: dict | None, label: str) -> tuple[list[Axis], list[Problem]]:
    """The declared axes, each checked on its own: a field of the recipe, values, labels."""
    axes, out = [], []
    for name, spec in sweep["axes"].items():
        where = f"sweep.axes.{name}"
        if not AXIS_NAME.match(name):
            out.append(Problem(label, where, "an axis name is a lowercase letter, then up to 15 letters or digits"))
            continue
        try:
            steps = parse_field(spec["field"])
            why = field_problem(schema, steps) if schema is not None else None  # None: checked before
        except ValueError as e:
            why = str(e)
        if why:
            out.append(Problem(label, f"{where}.field", f"axis {name}: {spec['field']!r}: {why}"))
            continue
        values = list(spec["values"])
        labels = list(spec.get("labels") or [label_of(v) for v in values])
        out += _value_problems(name, values, labels, label, where)
        axes.append(Axis(name, spec["field"], tuple(values), tuple(labels)))
    return axes, out


def _value_problems(name: str, values: list, labels: list, label: str, where: str) -> list[Problem]:
    out = []
    keys = [_key(v) for v in values]
    dups = sorted({k for k in keys if keys.count(k) > 1})
    if dups:
        out.append(Problem(label, f"{where}.values", f"axis {name}: duplicate values {', '.join(dups)}"))
    if len(labels) != len(values):
        out.append(Problem(label, f"{where}.labels", f"axis {name}: {len(labels)} labels for {len(values)} values"))
    bad = [lb for lb in labels if not LABEL.match(str(lb))]
    if bad:
        reason = f"axis {name}: labels {bad} are not lowercase letters, digits and '-' (give labels: [...])"
        out.append(Problem(label, f"{where}.labels", reason))
    same = sorted({lb for lb in labels if labels.count(lb) > 1})
    if same and not dups:
        out.append(Problem(label, f"{where}.labels", f"axis {name}: two values share the label(s) {same}"))
    return out


def _groups(axes: list[Axis], links: list, label: str) -> tuple[list[list[Axis]], list[Problem]]:
    """Axes that move together (sweep.link) as one group each; every other axis a group of its own."""
    by_name, out, grouped = {a.name: a for a in axes}, [], set()
    groups = []
    for i, link in enumerate(links):
        where = f"sweep.link[{i}]"
        unknown = [n for n in link if n not in by_name]
        if unknown:
            out.append(Problem(label, where, f"no axis named {', '.join(unknown)}"))
            continue
        twice = [n for n in link if n in grouped]
        if twice:
            out.append(Problem(label, where, f"axis {', '.join(twice)} is already linked"))
            continue
        sizes = {n: len(by_name[n].values) for n in link}
        if len(set(sizes.values())) > 1:
            out.append(Problem(label, where, f"linked axes move together and need as many values each: {sizes}"))
            continue
        grouped.update(link)
        groups.append([by_name[n] for n in link])
    groups += [[a] for a in axes if a.name not in grouped]
    order = {a.name: i for i, a in enumerate(axes)}
    return sorted(groups, key=lambda g: order[g[0].name]), out


def _combos(groups: list[list[Axis]]) -> list[dict[str, int]]:
    """Every combination as axis name -> value index: the product of the groups, zip inside one."""
    choices = [[{a.name: i for a in g} for i in range(len(g[0].values))] for g in groups]
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*choices)]


def _excluded(combo: dict[str, int], rule: dict, axes: dict[str, Axis]) -> bool:
    return all(axes[n].labels[combo[n]] == str(v) or _key(axes[n].values[combo[n]]) == _key(v) for n, v in rule.items())


def _exclusion_problems(rules: list, axes: dict[str, Axis], label: str) -> list[Problem]:
    out = []
    for i, rule in enumerate(rules):
        for n, v in rule.items():
            a = axes.get(n)
            if a is None:
                out.append(Problem(label, f"sweep.exclude[{i}].{n}", f"no axis named {n}"))
            elif str(v) not in a.labels and _key(v) not in {_key(x) for x in a.values}:
                out.append(Problem(label, f"sweep.exclude[{i}].{n}", f"{v!r} is no value or label of axis {n}"))
    return out


def expand(doc: dict, schema: dict | None, label: str) -> Expansion:
    """The variants of a recipe with a sweep (names, documents); raise SweepError with every problem."""
    sweep = doc["sweep"]
    axes, out = read_axes(sweep, schema, label)
    groups, problems = _groups(axes, sweep.get("link", []), label)
    out += problems
    by_name = {a.name: a for a in axes}
    out += _exclusion_problems(sweep.get("exclude", []), by_name, label)
    if out:
        raise SweepError(out)
    combos, excluded = _combos(groups), []
    kept = []
    named = [g[0] for g in groups]  # a linked group is named by its first axis
    for combo in combos:
        suffix = "_".join(f"{a.name}-{a.labels[combo[a.name]]}" for a in axes if a in named)
        hit = [i for i, r in enumerate(sweep.get("exclude", [])) if _excluded(combo, r, by_name)]
        (excluded if hit else kept).append((suffix, combo))
    cap = sweep.get("max_variants", DEFAULT_MAX_VARIANTS)
    if len(kept) > cap:
        reason = (
            f"{len(kept)} variants ({' x '.join(str(len(g[0].values)) for g in groups)}"
            f"{f' less {len(excluded)} excluded' if excluded else ''}) exceed max_variants {cap}: "
            "raise it, link axes, exclude combinations, or use strategy: halving"
        )
        raise SweepError([Problem(label, "sweep.max_variants", reason)])
    unused = [i for i, r in enumerate(sweep.get("exclude", [])) if not any(_excluded(c, r, by_name) for c in combos)]
    if unused:
        raise SweepError([Problem(label, f"sweep.exclude[{unused[0]}]", "this exclusion matches no variant")])
    variants, out = [], []
    for suffix, combo in kept:
        try:
            variants.append(_variant(doc, axes, suffix, combo, label))
        except SweepError as e:
            out += e.problems
    if out:
        raise SweepError(out)
    return Expansion(
        tuple(axes), tuple(variants), tuple(s for s, _ in excluded), tuple(tuple(a.name for a in g) for g in groups)
    )


def _variant(doc: dict, axes: list[Axis], suffix: str, combo: dict[str, int], label: str) -> Variant:
    vdoc = json.loads(json.dumps({k: v for k, v in doc.items() if k != "sweep"}))  # a deep copy, faster
    vdoc["name"] = f"{doc['name']}.{suffix}"
    for a in axes:
        try:
            set_field(vdoc, parse_field(a.field), a.values[combo[a.name]])
        except ValueError as e:
            where = f"sweep.axes.{a.name}.field"
            raise SweepError([Problem(label, where, f"variant {suffix}, axis {a.name}: {a.field}: {e}")]) from None
    return Variant(vdoc["name"], suffix, tuple((a.name, a.labels[combo[a.name]]) for a in axes), vdoc)


def variant_problems(problems: list[Problem], variant: Variant | None, sweep: dict | None) -> list[Problem]:
    """A variant's problems, each naming the variant and the axis whose field it is in (else every axis
    value of the variant): the recipe's file and the field stay as they are."""
    if variant is None or not problems:
        return problems
    fields = {name: _prefix(spec["field"]) for name, spec in sweep["axes"].items()}
    out = []
    for p in problems:
        axes = [n for n, f in fields.items() if p.field == f or p.field.startswith((f + ".", f + "["))]
        said = ", ".join(f"{n} = {lb}" for n, lb in variant.choice if not axes or n in axes)
        axis = f"axis {said}" if axes else f"axes {said}"
        out.append(Problem(p.file, p.field, f"variant {variant.suffix} ({axis}): {p.reason}"))
    return out


def _prefix(field: str) -> str:
    """The part of an axis field a problem's field path starts with ('engine.args[--x]' -> 'engine.args')."""
    return re.sub(r"\[--[^\]]*\]", "", field)


def summary(spec: dict, expansion: Expansion) -> dict:
    """What the selection, the bill and the summary need of a sweep (JSON)."""
    variants = expansion.variants
    return {
        "recipe": variants[0].name.removesuffix(f".{variants[0].suffix}"),
        "axes": {a.name: {"field": a.field, "labels": list(a.labels)} for a in expansion.axes},
        "axis_order": [a.name for a in expansion.axes],  # as declared (the selection file sorts keys)
        "variants": {v.name: dict(v.choice) for v in variants},
        "excluded": list(expansion.excluded),
        "strategy": spec.get("strategy", "grid"),
        "halving": spec.get("halving"),
        "search": spec.get("search"),
        "groups": [_group_info(g, expansion.axes) for g in expansion.groups],
        "budget_gpu_h": spec.get("budget_gpu_h"),
    }


def _group_info(names: tuple[str, ...], axes: tuple[Axis, ...]) -> dict:
    """A group of axes as a search sees it: one parameter, ordered where its first axis's values are
    numbers (``rank``: each value's place in ascending order), else a choice among labels."""
    first = next(a for a in axes if a.name == names[0])
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in first.values)
    order = sorted(range(len(first.values)), key=lambda i: first.values[i]) if numeric else None
    return {"axes": list(names), "rank": [order.index(i) for i in range(len(order))] if order else None}


HALVING_DEFAULTS = {"keep": 0.25, "screen_share": 0.2}
MIN_SCREEN_S = 3.0  # a screen shorter than this measures start-up noise, not the setting


def screen_share(halving: dict) -> float:
    """The share of a full point's benchmark a screen runs (also in a rehearsal: render/benchmark)."""
    return halving.get("screen_share", HALVING_DEFAULTS["screen_share"])


def screen_doc(vdoc: dict, halving: dict) -> dict:
    """A variant's screen (successive halving's first round): the same servers at the target load,
    for a share of the benchmark, without capacity search or evals."""
    share = screen_share(halving)
    doc = copy.deepcopy({k: v for k, v in vdoc.items() if k not in ("capacity", "evals", "repeats")})
    doc["name"] = f"{vdoc['name']}.{paths.SCREEN}"
    doc["concurrency"] = [halving["target"]]
    scen = doc["scenario"]
    if "duration_s" in scen:
        scen["duration_s"] = round(scen["duration_s"] * share, 3)
    else:
        scen["requests"] = max(1, math.ceil(scen["requests"] * share))
    return doc


def halving_problems(doc: dict, label: str) -> list[Problem]:
    """A halving sweep needs a target load, and a screen long enough to tell settings apart."""
    spec = doc["sweep"]
    if spec.get("strategy") != "halving":
        return (
            [Problem(label, "sweep.halving", "halving settings without strategy: halving")] if "halving" in spec else []
        )
    if "halving" not in spec:
        return [Problem(label, "sweep.halving", "strategy halving needs halving: {target: <concurrency>}")]
    scen, share = doc["scenario"], screen_share(spec["halving"])
    if "duration_s" in scen and scen["duration_s"] * share < MIN_SCREEN_S:
        reason = (
            f"a screen of {scen['duration_s'] * share:g} s (scenario.duration_s {scen['duration_s']:g} x screen_share "
            f"{share:g}) is under {MIN_SCREEN_S:g} s: raise screen_share or the duration"
        )
        return [Problem(label, "sweep.halving.screen_share", reason)]
    return []


SEARCH_DEFAULTS = {"batch": 1, "seed": 0}


def search_startup(search: dict, unordered: int = 0) -> int:
    """The trials of the balanced start, before the sampler models the scores: by default a third, at
    least one, and enough to try each label of the largest unordered axis (``unordered`` labels): TPE
    rarely proposes a label it has never scored (seed 000's rehearsed scores: the grid's best layout
    found by 30 of 30 seeds this way, 25 with one random start trial; a 3 x 3 ordered space with a
    known best, 4 trials: 27 of 30 either way, 24 with half)."""
    return search.get("startup", min(search["trials"], max(1, search["trials"] // 3, unordered)))


def search_problems(doc: dict, variants: int, label: str) -> list[Problem]:
    """A model-based search needs a target among the recipe's concurrencies (a trial is scored there)
    and fewer trials than variants; a chosen trial's capacity search and evals run as it is chosen."""
    spec = doc["sweep"]
    if spec.get("strategy") != "search":
        return [Problem(label, "sweep.search", "search settings without strategy: search")] if "search" in spec else []
    if "search" not in spec:
        return [Problem(label, "sweep.search", "strategy search needs search: {target: <concurrency>, trials: N}")]
    s, where = spec["search"], "sweep.search"
    if s["target"] not in doc["concurrency"]:
        concs = doc["concurrency"]
        reason = f"target {s['target']} is not one of the recipe's concurrencies {concs}: a trial is scored there"
        return [Problem(label, f"{where}.target", reason)]
    if s["trials"] >= variants:
        reason = f"{s['trials']} trials for {variants} variants: a search tries fewer than all (use strategy: grid)"
        return [Problem(label, f"{where}.trials", reason)]
    for key in ("batch", "startup"):
        if s.get(key, 1) > s["trials"]:
            return [Problem(label, f"{where}.{key}", f"{key} {s[key]} is more than the {s['trials']} trials")]
    return []
