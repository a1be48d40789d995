"""Rendered points remembered between runs, so an unchanged sweep is not rendered again.

A point's plan is a pure function of its recipe (document and file label), the cluster facts it
is rendered for (and the local ones in rehearsal) and servesweep's own code: that is the key.
What is kept per point is what the rules ask (fingerprints, resources, stack reuse) and the digest
of the plan text. An entry is used only while the plan file on disk still has that digest, so a
plan edited, removed or damaged since is rendered and written again. The file carries a checksum
of its entries: a damaged or hand-edited memo is ignored (everything is rendered, as on a first
run). It lives next to the YAML parse cache, under ``.snakemake/servesweep/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from ..encode import canonical, digest
from ..files import write_if_changed

MEMO_FILE = ".snakemake/servesweep/rendered.json"
FORMAT = "servesweep.render-memo/1"
_PACKAGE = Path(__file__).resolve().parents[1]
_SCHEMAS = _PACKAGE.parents[1] / "schemas"


def code_digest() -> str:
    """servesweep's code and schemas, by content: any edit renders every point again."""
    h = hashlib.sha256()
    for path in sorted([*_PACKAGE.rglob("*.py"), *_SCHEMAS.glob("*.yaml")]):
        h.update(str(path.relative_to(_PACKAGE.parents[1])).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def text_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RenderMemo:
    """key (recipe, clusters, code) -> {conc: entry}; read once, saved by the writer."""

    def __init__(self, root: Path):
        self.path = Path(root) / MEMO_FILE
        self.code = code_digest()
        self.kept = self._load()
        self.used: dict[str, dict] = {}
        self._cluster_digests: dict[str, str] = {}

    def _load(self) -> dict:
        """The file: its format, the sha256 of the entries' JSON, then that JSON (one line each)."""
        try:
            fmt, check, body = self.path.read_bytes().split(b"\n", 2)
            if fmt.decode() == FORMAT and check.decode() == text_digest(body):
                entries = json.loads(body)
                return entries if isinstance(entries, dict) else {}
        except (OSError, ValueError):
            pass
        return {}

    def key(self, recipe, cluster, rehearsal_cluster) -> str:
        facts = [self._facts(c) if c else None for c in (cluster, rehearsal_cluster)]
        return digest(canonical([self.code, recipe.source, recipe.doc, facts]))

    def _facts(self, cluster) -> str:
        if cluster.name not in self._cluster_digests:
            self._cluster_digests[cluster.name] = digest(canonical(dataclasses.asdict(cluster)))
        return self._cluster_digests[cluster.name]

    def recall(self, key: str, conc: int, plan_path: Path) -> dict | None:
        """The point's entry if the plan file still holds the text it was made from; else None."""
        entry = (self.kept.get(key) or {}).get(str(conc))
        if not _entry_ok(entry):
            return None
        try:
            data = plan_path.read_bytes()
        except OSError:
            return None
        if text_digest(data) != entry["text"]:
            return None
        self.used.setdefault(key, {})[str(conc)] = entry
        return entry

    def remember(self, key: str, conc: int, plan: dict, text: str) -> None:
        entry = {
            "plan": plan["fingerprints"]["plan"],
            "curve": plan["fingerprints"]["curve"],
            "resources": plan["resources"],
            "reuse": bool(plan["stack"]["reuse"]),
            "text": text_digest(text.encode()),
        }
        self.used.setdefault(key, {})[str(conc)] = entry

    def save(self) -> None:
        """Keep what this run used (the memo follows the current recipes)."""
        if self.used == self.kept:
            return
        body = canonical(self.used)
        try:
            write_if_changed(self.path, f"{FORMAT}\n{text_digest(body.encode())}\n{body}")
        except OSError:  # an unwritable memo only costs the next run its rendering
            pass


def _entry_ok(entry) -> bool:
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k), str) for k in ("plan", "curve", "text"))
        and isinstance(entry.get("resources"), dict)
        and isinstance(entry.get("reuse"), bool)
    )
