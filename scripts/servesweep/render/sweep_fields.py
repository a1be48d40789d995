"""Field paths of a recipe that a sweep's axis moves: parsed, checked against the recipe schema, and
set in a document ('engine.args[--max-num-seqs]', 'frontend.router.prefill_load_scale', 'env.X')."""

from __future__ import annotations

import copy
import re

SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[[^\]]+\])*)$")
INDEX = re.compile(r"\[([^\]]+)\]")
# Fields an axis may not move: identity, the point axis itself, the sweep, and text with no effect.
NOT_SWEEPABLE = {
    "name": "a variant's name is made from its axis values",
    "clusters": "a sweep runs on its recipe's clusters; write one recipe per cluster set",
    "concurrency": "concurrency is the point axis: list the values in concurrency",
    "sweep": "a sweep cannot sweep itself",
    "description": "the description changes no plan",
}


def parse_field(path: str) -> list:
    """'engine.args[--max-num-seqs]' -> ['engine', 'args', ('flag', '--max-num-seqs')]; raise ValueError."""
    out: list = []
    for seg in path.split("."):
        m = SEGMENT.match(seg)
        if not m:
            raise ValueError(f"{path!r} is no field path (keys joined by '.', '[N]' or '[--flag]' after a list)")
        out.append(m.group(1))
        for idx in INDEX.findall(m.group(2)):
            if idx.isdigit():
                out.append(("index", int(idx)))
            elif idx.startswith("--"):
                out.append(("flag", idx))
            else:
                raise ValueError(f"{path!r}: [{idx}] is neither a list index nor a --flag")
    return out


def set_field(doc: dict, steps: list, value) -> None:
    """Set one field of ``doc`` in place; missing mappings on the way are made. Raise ValueError."""
    node = doc
    for i, step in enumerate(steps):
        last = i == len(steps) - 1
        if isinstance(step, tuple) and step[0] == "flag":
            if not isinstance(node, list):
                raise ValueError(f"[{step[1]}] needs an argument list here")
            _set_flag(node, step[1], value)
            return
        if isinstance(step, tuple):
            if not isinstance(node, list) or step[1] >= len(node):
                raise ValueError(f"[{step[1]}] is past the end of the list")
            if last:
                node[step[1]] = copy.deepcopy(value)
                return
            node = node[step[1]]
            continue
        if not isinstance(node, dict):
            raise ValueError(f"{step!r} is inside a value that is not a mapping")
        if last:
            node[step] = copy.deepcopy(value)
            return
        nxt = steps[i + 1]
        default = [] if isinstance(nxt, tuple) and nxt[0] == "flag" else {}
        node = node.setdefault(step, default)


def _set_flag(args: list, flag: str, value) -> None:
    """An argv flag's value: replaced where the flag is, appended where not; a boolean switches a
    value-less flag on (true) or off (false)."""
    at = next((i for i, a in enumerate(args) if a == flag or (isinstance(a, str) and a.startswith(flag + "="))), None)
    if isinstance(value, bool):
        if at is not None:
            del args[at]
        if value:
            args.append(flag)
        return
    if at is None:
        args.extend([flag, value])
    elif args[at] == flag:
        if at + 1 >= len(args):
            args.append(value)
        else:
            args[at + 1] = value
    else:
        args[at] = f"{flag}={value}"


def field_problem(schema: dict, steps: list) -> str | None:
    """Why a path is no field of the recipe schema (None: it is one)."""
    if steps and isinstance(steps[0], str) and steps[0] in NOT_SWEEPABLE:
        return NOT_SWEEPABLE[steps[0]]
    node = schema
    for step in steps:
        if isinstance(step, tuple) and step[0] == "flag":
            return None if schema_node(schema, node, "items") is not None else "[--flag] needs an argument list"
        key = "items" if isinstance(step, tuple) else step
        found = schema_node(schema, node, key)
        if found is None:
            return f"{step if isinstance(step, str) else '[' + str(step[1]) + ']'} is not a field here"
        node = found
    return None


def schema_node(root: dict, node: dict, key) -> dict | None:
    """The schema of ``node``'s property ``key`` ('items': of its list items), through $ref, oneOf
    and anyOf; a mapping with free keys (env) answers every key. None: no such field."""
    node = _deref(root, node)
    for branch in [node, *node.get("oneOf", ()), *node.get("anyOf", ())]:
        branch = _deref(root, branch)
        if key == "items" and isinstance(branch.get("items"), dict):
            return branch["items"]
        if key == "items":
            continue
        if key in branch.get("properties", {}):
            return branch["properties"][key]
        if isinstance(branch.get("additionalProperties"), dict):
            return branch["additionalProperties"]
    return None


def _deref(root: dict, node: dict) -> dict:
    while isinstance(node, dict) and "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node if isinstance(node, dict) else {}
