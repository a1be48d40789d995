"""Limits on input files before and after YAML builds objects from them.

Before: only regular files, at most ``MAX_BYTES``, nesting at most ``MAX_DEPTH`` and at most
``MAX_NODES`` nodes once aliases are expanded (a 1 KB anchor bomb expands to millions), checked on
libyaml's event stream, which builds nothing. After the schema: no ``.inf``/``.nan``, and no float
where the schema asks for an integer (JSON Schema counts ``2.0`` as an integer; we do not).
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import yaml

from .errors import field_path

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NODES = 100_000
_EVENT_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def file_problem(path: Path) -> str | None:
    """Why ``path`` must not be read (a FIFO would block forever, a device or a huge file is no recipe;
    a symbolic link is never followed, so no file outside is read or quoted)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "file not found"
    except OSError as e:
        return f"cannot read: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link: never followed (copy the file here instead)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, device or directory is never read)"
    if st.st_size > MAX_BYTES:
        return f"{st.st_size} bytes: larger than the {MAX_BYTES}-byte limit for an input file"
    return None


def structure_problem(text: str) -> str | None:
    """Nesting and alias-expanded size, from the event stream (no objects built)."""
    sizes: dict[str, int] = {}  # anchor -> nodes of its subtree
    stack: list[list] = []  # open collections: [anchor, nodes so far]
    total = 0
    for ev in yaml.parse(text, Loader=_EVENT_LOADER):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([ev.anchor, 1])
            if len(stack) > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            continue
        if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, n = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
        elif isinstance(ev, yaml.AliasEvent):
            anchor, n = None, sizes.get(ev.anchor, 1)
        else:
            continue
        if anchor:
            sizes[anchor] = n
        if stack:
            stack[-1][1] += n
        total += n if not stack else 0
        if n > MAX_NODES or (stack and stack[-1][1] > MAX_NODES) or total > MAX_NODES:
            return f"more than {MAX_NODES} values once aliases are expanded (an alias bomb?)"
    return None


def _resolve(node: dict, root: dict) -> dict:
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            return {}
        target = root
        for part in ref[2:].split("/"):
            target = target.get(part, {})
        node = target
    return node if isinstance(node, dict) else {}


def _branches(node: dict, root: dict) -> list[dict]:
    node = _resolve(node, root)
    alts = node.get("oneOf") or node.get("anyOf")
    if not alts:
        return [node]
    return [b for alt in alts for b in _branches(alt, root)]


def _integer_only(branches: list[dict]) -> bool:
    types = set()
    for b in branches:
        t = b.get("type")
        types |= set(t) if isinstance(t, list) else ({t} if t else {"any"})
    return "integer" in types and not types & {"number", "any"}


def number_problems(doc, schema: dict) -> list[tuple[str, str]]:
    """(field, reason) for every infinite/NaN value and every float where only an integer fits."""
    out: list[tuple[str, str]] = []
    _walk(doc, [schema], schema, [], out)
    return sorted(set(out))


def _walk(value, nodes: list[dict], root: dict, path: list, out: list) -> None:
    branches = [b for n in nodes for b in _branches(n, root)]
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            out.append((field_path(path), f"{value} (YAML .inf/.nan) is not a usable number"))
        elif value.is_integer() and _integer_only(branches):
            out.append((field_path(path), f"must be a whole number written without a fraction, got {value!r}"))
        return
    if isinstance(value, dict):
        for k, v in value.items():
            subs = []
            for b in branches:
                sub = (b.get("properties") or {}).get(k)
                extra = b.get("additionalProperties")
                subs += [sub] if isinstance(sub, dict) else ([extra] if isinstance(extra, dict) else [])
            _walk(v, subs, root, [*path, k], out)
    elif isinstance(value, list):
        items = [b["items"] for b in branches if isinstance(b.get("items"), dict)]
        for i, v in enumerate(value):
            _walk(v, items, root, [*path, i], out)
