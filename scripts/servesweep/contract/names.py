"""The names the workflow gives its own entries beside the recipes' folders, read off contract/paths:
a recipe named like one (``summary.md``, ``selection-local.json``, ``plots``) would share or shadow
it, and every later run would trip over the folder made for the recipe."""

from __future__ import annotations

import fnmatch
import functools
import inspect
import itertools
import re
from pathlib import Path

from . import paths

RECIPE_MARK, ANY_MARK = "\x01recipe\x01", "\x01any\x01"  # what a path function is given, to find its slots
SHARED_DIRS = (paths.PLANS, str(paths.RESULTS), str(paths.LOGS))  # where a recipe's folders lie beside the workflow's


def _calls(fn) -> list[str]:
    """Every path ``fn`` builds, over both values of each flag, its names marked."""
    params = list(inspect.signature(fn).parameters.values())
    flags = [p.name for p in params if p.annotation in ("bool", bool)]
    out = []
    for chosen in itertools.product((False, True), repeat=len(flags)):
        kwargs = dict(zip(flags, chosen, strict=True))
        for p in params:
            if p.name in kwargs:
                continue
            kwargs[p.name] = {"int": 1, "Path": Path(ANY_MARK)}.get(
                p.annotation, RECIPE_MARK if p.name == "recipe" else ANY_MARK
            )
        try:
            out.append(str(fn(**kwargs)))
        except (TypeError, ValueError, KeyError):
            continue
    return out


def _builds_a_path(fn) -> bool:
    """A function that names one path (not one that lists a folder or parses a name)."""
    return inspect.signature(fn).return_annotation in ("str", "Path", str, Path)


def _built_paths() -> list[str]:
    out = []
    for name, value in vars(paths).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (str, Path)):
            out.append(re.sub(r"\{recipe\}", RECIPE_MARK, str(value)))
        elif inspect.isfunction(value) and value.__module__ == paths.__name__ and _builds_a_path(value):
            out += _calls(value)
    return [re.sub(r"\{[a-z_]+\}", ANY_MARK, p) for p in out]


@functools.cache
def reserved_patterns() -> tuple[str, ...]:
    """Glob patterns of the workflow's own entries in ``.plans/``, ``results/`` and ``logs/``."""
    found = set()
    for built in _built_paths():
        parts = Path(built).parts
        if len(parts) < 2 or parts[0] not in SHARED_DIRS or RECIPE_MARK in parts[1]:
            continue  # not beside the recipes' folders, or the recipe's own slot
        found.add(parts[1].replace(ANY_MARK, "*"))
    return tuple(sorted(found))


def reserved_match(name: str) -> str | None:
    """The workflow's entry ``name`` would collide with (a pattern such as ``selection-*.json``), or None."""
    return next((p for p in reserved_patterns() if fnmatch.fnmatchcase(name, p)), None)
