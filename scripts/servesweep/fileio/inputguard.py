"""Limits on input files before and after YAML builds objects from them.

Before: only regular files, at most ``MAX_BYTES``, nesting at most ``MAX_DEPTH``, at most
``MAX_NODES`` nodes and ``MAX_EXPANDED_CHARS`` characters once aliases are expanded (a 1 KB anchor
bomb expands to millions), and no alias inside what it names; checked on libyaml's event stream,
which builds nothing. After the schema: no ``.inf``/``.nan``, and no float
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
MAX_EXPANDED_CHARS = 2 * MAX_BYTES  # what the values add up to with every alias expanded
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
    """Nesting, alias-expanded size (values and characters) and self-reference, from the event stream
    (no objects built): what an alias expands to counts where it is used, as its copy would."""
    sizes: dict[str, tuple[int, int, int]] = {}  # anchor -> (nodes, characters, depth) of its subtree
    stack: list[list] = []  # open collections: [anchor, nodes, characters, depth below]
    total = [0, 0]
    for ev in yaml.parse(text, Loader=_EVENT_LOADER):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([ev.anchor, 1, 0, 1])
            if len(stack) > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            continue
        if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, *size = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, size = ev.anchor, [1, len(ev.value), 0]
        elif isinstance(ev, yaml.AliasEvent):
            if any(open_anchor == ev.anchor for open_anchor, *_ in stack):
                return f"the alias *{ev.anchor} refers to a collection that holds it (a recursive alias)"
            anchor, size = None, list(sizes.get(ev.anchor, (1, 0, 0)))
        else:
            continue
        why = _grown(stack, size, total)
        if why:
            return why
        if anchor:
            sizes[anchor] = tuple(size)
    return None


def _grown(stack: list[list], size: list[int], total: list[int]) -> str | None:
    """Add a finished node's size to its parent (or the document's total); why that is too much."""
    nodes, chars, depth = size
    if stack:
        parent = stack[-1]
        parent[1] += nodes
        parent[2] += chars
        parent[3] = max(parent[3], depth + 1)
        nodes, chars = parent[1], parent[2]
        if len(stack) + depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels once aliases are expanded"
    else:
        total[0] += nodes
        total[1] += chars
        nodes, chars = total
    if nodes > MAX_NODES:
        return f"more than {MAX_NODES} values once aliases are expanded (an alias bomb?)"
    if chars > MAX_EXPANDED_CHARS:
        return f"more than {MAX_EXPANDED_CHARS} characters of values once aliases are expanded (an alias bomb?)"
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
