"""Loading recipes: each file parsed, a sweep expanded into its variants (render/sweep), every recipe
checked for shape (JSON Schema), meaning (render/recipe) and against its clusters; all problems of a
run collected, each naming the file, the field path and the reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..fileio.errors import InputError, Problem
from ..fileio.yamlio import ParseCache, load_yaml, schema, schema_problems
from . import kinds, sweep
from .cluster import Cluster
from .recipe import Recipe, cluster_problems, semantic_problems


def load_recipe(path: Path, label: str | None = None, cache: ParseCache | None = None) -> Recipe:
    """Load and check one recipe (cluster-independent checks); raise InputError."""
    path = Path(path)
    label = label or str(path)
    return _checked(_parsed(path, label, cache), label, path)


def _parsed(path: Path, label: str, cache: ParseCache | None) -> dict:
    doc, problems = load_yaml(path, label, cache)
    if problems:
        raise InputError(problems)
    if not isinstance(doc, dict):
        raise InputError([Problem(label, "(top level)", "a recipe is a mapping of keys to values")])
    return doc


def _checked(doc: dict, label: str, path: Path, variant: sweep.Variant | None = None) -> Recipe:
    problems = schema_problems(doc, "recipe.schema.yaml", label)
    if problems:
        raise InputError(problems)
    why = kinds.unknown(doc["engine"]["kind"])
    if why:
        raise InputError([Problem(label, "engine.kind", why)])
    recipe = Recipe(doc["name"], label, doc)
    problems = semantic_problems(recipe, None if variant else _stem(path))
    if problems:
        raise InputError(problems)
    return recipe


def _stem(path: Path) -> str:
    return path.name.removesuffix(".yaml").removesuffix(".yml")


def load_recipes(
    paths: list[Path],
    clusters: dict[str, Cluster],
    only_cluster: str | None = None,
    root: Path | None = None,
    cache: ParseCache | None = None,
    verdicts=None,
) -> tuple[list[Recipe], list[Problem]]:
    """Load every file, check names unique and clusters known (and their engine_pythons keys kinds);
    collect all problems. ``verdicts`` (workflow/memo): a document found valid before, under the same
    label, cluster facts and code, is not checked again."""
    recipes, problems, seen = [], kinds.engine_python_problems(clusters.values()), {}
    for p in paths:
        label = str(p.relative_to(root)) if root and p.is_absolute() and p.is_relative_to(root) else str(p)
        try:
            doc = _parsed(p, label, cache)
            entries = _entries(doc, label, p, (clusters, only_cluster, verdicts))
        except InputError as e:
            problems += e.problems
            continue
        for vdoc, variant, info in entries:
            found: list[Problem] = []
            r = _valid(vdoc, label, p, (variant, info), (clusters, only_cluster, verdicts), found)
            problems += sweep.variant_problems(found, variant, doc.get("sweep"))
            if r is None:
                continue
            if r.name in seen:
                problems.append(Problem(label, "name", f"recipe name {r.name!r} is already used by {seen[r.name]}"))
                continue
            seen[r.name] = label
            recipes.append(r)
    return recipes, problems


def _entries(doc: dict, label: str, path: Path, where: tuple) -> list[tuple[dict, sweep.Variant | None, dict | None]]:
    """The documents one file declares: itself, or a sweep's variants (the base checked for shape and
    its axes' fields, unless found valid before: ``where`` is (clusters, only_cluster, verdicts))."""
    if "sweep" not in doc:
        return [(doc, None, None)]
    clusters, only_cluster, verdicts = where
    key = verdicts.recipe_key(label, doc, only_cluster, clusters) if verdicts else None
    known = key is not None and verdicts.known_valid(key)
    problems = [] if known else schema_problems(doc, "recipe.schema.yaml", label)
    if not problems and doc["name"] != _stem(path):
        problems = [Problem(label, "name", f"name {doc['name']!r} must match the file name {_stem(path)!r}")]
    if problems:
        raise InputError(problems)
    try:
        expansion = sweep.expand(doc, None if known else schema("recipe.schema.yaml"), label)
    except sweep.SweepError as e:
        raise InputError(e.problems) from None
    problems = sweep.halving_problems(doc, label) + sweep.search_problems(doc, len(expansion.variants), label)
    if problems:
        raise InputError(problems)
    if key is not None:
        verdicts.keep_valid(key)
    info = sweep.summary(doc["sweep"], expansion)
    out = [(v.doc, v, info) for v in expansion.variants]
    if info["strategy"] == "halving":  # every variant's screen: the first round
        out += [(sweep.screen_doc(v.doc, info["halving"]), v, info) for v in expansion.variants]
    return out


def _valid(doc: dict, label: str, path: Path, of_sweep: tuple, where: tuple, problems: list) -> Recipe | None:
    """One recipe (or variant) checked, against its clusters too; None when it has problems.
    ``of_sweep``: (variant, sweep summary) or (None, None); ``where``: (clusters, only_cluster, verdicts)."""
    (variant, info), (clusters, only_cluster, verdicts) = of_sweep, where
    key = verdicts.recipe_key(label, doc, only_cluster, clusters) if verdicts else None
    known = key is not None and verdicts.known_valid(key)
    try:
        r = Recipe(doc["name"], label, doc) if known else _checked(doc, label, path, variant)
    except InputError as e:
        problems += e.problems
        return None
    if not known and _cluster_problems(r, clusters, only_cluster, problems):
        return None
    if key is not None:
        verdicts.keep_valid(key)
    if not variant:
        return r
    return replace(r, sweep_of=info["recipe"], choice=variant.choice, sweep=info, screen=r.name != variant.name)


def _cluster_problems(r: Recipe, clusters: dict, only_cluster: str | None, problems: list) -> bool:
    """Whether the recipe's clusters are unknown or cannot hold it (problems appended)."""
    bad = False
    for i, c in enumerate(r.clusters):
        if c not in clusters:
            known = ", ".join(sorted(clusters))
            problems.append(Problem(r.source, f"clusters[{i}]", f"unknown cluster {c!r}; known: {known}"))
            bad = True
        elif only_cluster is None or c == only_cluster:
            cp = cluster_problems(r, clusters[c])
            problems += cp
            bad = bad or bool(cp)
    return bad
