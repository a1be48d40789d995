"""What a point was measured from, and how two of those differ, in recipe terms.

A *source* is the recipe file's content, the cluster facts and the plan format a plan was rendered
from (``servesweep.source/1``). Render writes it next to a recipe's plans; the driver copies it
into each result, so a result can always say what it was measured with. No pandas, no render
imports: the dry run, the summary and ``servesweep diff`` all use it.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_SCHEMA = "servesweep.source/1"
# recipe fields that never change a point's measurement (docs/recipes.md, "What an edit reruns")
REPORTING_FIELDS = {"description": "descriptive", "slo": "summary only", "capacity": "capacity rule only"}
SWEEP_FIELDS = ("concurrency", "clusters", "name")  # which points exist, not how one is measured
CUT = 3  # differences shown per line before "… and N more"


@dataclass(frozen=True)
class Change:
    """One differing leaf: where (in recipe or cluster terms), before and after."""

    where: str  # "recipe" | "cluster <name>" | "plan format" | "point"
    field: str
    old: object
    new: object

    def __str__(self) -> str:
        head = self.field if self.where == "recipe" else f"{self.where}: {self.field}".rstrip(": ")
        return f"{head} {_show(self.old)} → {_show(self.new)}"


_ABSENT = object()


def _show(v) -> str:
    if v is _ABSENT:
        return "(unset)"
    if isinstance(v, str):
        return v if v and " " not in v else repr(v)
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if isinstance(v, (dict, list)):
        import json

        text = json.dumps(v, sort_keys=True)
        return text if len(text) <= 60 else text[:57] + "…"
    return str(v)


def _is_argv(v) -> bool:
    return isinstance(v, list) and any(isinstance(x, str) and x.startswith("--") for x in v)


def _flags(argv: list) -> dict:
    """--flag value... as {flag: [values]} (a bare flag has no values); leading positionals under ''."""
    out, key = {}, ""
    for tok in argv:
        tok = str(tok)
        if tok.startswith("--"):
            key, _, inline = tok.partition("=")
            out[key] = [inline] if inline else []
        else:
            out.setdefault(key, []).append(tok)
    return out


def _argv_changes(field: str, old: list, new: list) -> list[Change]:
    a, b = _flags(old), _flags(new)
    out = []
    for flag in sorted(set(a) | set(b), key=lambda f: (f not in a, f)):
        if a.get(flag) != b.get(flag):
            va = " ".join(a[flag]) if flag in a else _ABSENT
            vb = " ".join(b[flag]) if flag in b else _ABSENT
            out.append(Change("recipe", f"{field}: {flag}".rstrip(": "), va or "(set)", vb or "(set)"))
    if not out and old != new:  # same flags, other order
        out.append(Change("recipe", field, "flag order " + " ".join(map(str, old)), " ".join(map(str, new))))
    return out


def leaf_changes(old, new, where: str, prefix: str = "") -> list[Change]:
    """Every differing leaf of two documents; argv lists compared flag by flag."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{k}" if prefix else str(k)
            if k not in old or k not in new:
                out.append(Change(where, path, old.get(k, _ABSENT), new.get(k, _ABSENT)))
            else:
                out += leaf_changes(old[k], new[k], where, path)
        return out
    if old == new:
        return []
    if where == "recipe" and (_is_argv(old) or _is_argv(new)) and isinstance(old, list) and isinstance(new, list):
        return _argv_changes(prefix, old, new)
    return [Change(where, prefix, old, new)]


def _top(field: str) -> str:
    return field.split(".", 1)[0].split(":", 1)[0]


def source_changes(old: dict, new: dict) -> list[Change]:
    """What differs between two sources, in recipe and cluster terms; reporting-only and sweep-only
    recipe fields are left out (they never change a point's measurement)."""
    out = []
    if old.get("plan_schema") != new.get("plan_schema"):
        out.append(Change("plan format", "", old.get("plan_schema"), new.get("plan_schema")))
    recipe = leaf_changes(old["recipe"]["doc"], new["recipe"]["doc"], "recipe")
    out += [c for c in recipe if _top(c.field) not in REPORTING_FIELDS and _top(c.field) not in SWEEP_FIELDS]
    oc, nc = old["cluster"], new["cluster"]
    if oc["name"] != nc["name"]:
        out.append(Change("recipe", "cluster", oc["name"], nc["name"]))
    else:
        out += leaf_changes(oc["doc"], nc["doc"], f"cluster {nc['name']}")
    if old.get("rehearsal") != new.get("rehearsal"):
        out.append(Change("recipe", "rehearsal", old.get("rehearsal"), new.get("rehearsal")))
    return out + data_changes(old, new)


DATA_ROLES = {"data": "dataset", "model_data": "model"}  # the plan's keys (render/dataid)


def data_changes(old: dict, new: dict) -> list[Change]:
    """The data files that differ (where = "data"), named by path: a source that recorded none (made
    before servesweep kept the data's identity) says so once."""
    if "data" not in old or "data" not in new:
        if ("data" in old) != ("data" in new):
            return [Change("data", "identity", "(not recorded)" if "data" not in old else "recorded",
                           "(not recorded)" if "data" not in new else "recorded")]  # fmt: skip
        return []
    out = []
    for key, role in DATA_ROLES.items():
        a, b = (old["data"] or {}).get(key), (new["data"] or {}).get(key)
        if _data_id(a) != _data_id(b):
            pa, pb = ((x or {}).get("path") for x in (a, b))
            path = pb if pa in (pb, None) else f"{pa} → {pb}"
            out.append(Change("data", f"{role} {path or ''}".strip(), _data_id(a), _data_id(b)))
    return out


def _data_id(ident) -> str:
    """One input's identity as one token: version, its files, content digest or size and mtime."""
    if not isinstance(ident, dict):
        return "none"
    parts = [f"version={ident['version']}"] if ident.get("version") else []
    if ident.get("kind") == "folder":
        parts.append(f"files={ident.get('files')}")
    what = str(ident.get("id") or "")
    parts.append(what[:19] if what.startswith("sha256:") else what)
    parts.append("unreadable-here" if ident.get("kind") == "unreadable" else "")
    return ",".join(p for p in parts if p) or str(ident.get("kind"))


def reporting_changes(old: dict, new: dict) -> list[Change]:
    """Recipe fields that differ but change only the summary or the capacity rule (no point)."""
    recipe = leaf_changes(old["recipe"]["doc"], new["recipe"]["doc"], "recipe")
    return [c for c in recipe if _top(c.field) in ("slo", "capacity")]


def cut(changes: list, command: str, limit: int = CUT) -> str:
    """'a; b; c … and 4 more (COMMAND shows all)'."""
    text = "; ".join(map(str, changes[:limit]))
    more = len(changes) - limit
    return text + (f" … and {more} more ({command} shows all)" if more > 0 else "")
