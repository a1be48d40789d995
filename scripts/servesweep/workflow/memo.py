"""Rendered points and valid recipes remembered between runs, so an unchanged sweep is neither
checked nor rendered again.

A point's plan is a pure function of its recipe (document and file label), the cluster facts it
is rendered for (and the local ones in rehearsal) and servesweep's own code: that is the key.
What is kept per point is what the rules ask (fingerprints, resources, stack reuse) and the digest
of the plan text. An entry is used only while the plan file on disk still has that digest, so a
plan edited, removed or damaged since is rendered and written again. Once a file has been seen with
that digest, its stat (size, mtime, ctime, inode) stands for it, as Git's index does: any write
changes its ctime, so a later run stats the file instead of reading it. A stat taken within a second
of the file's last change is not kept (a write in the same clock tick could leave it unchanged).
The memo carries a checksum of its entries: a damaged or hand-edited memo is ignored (everything is
rendered, as on a first run). It lives next to the YAML parse cache, under ``.snakemake/servesweep/``.

A recipe's checks (schema, semantics, each cluster's) are a pure function of its document, file
label, the cluster facts and the code too: a document that passed them under the same key is not
checked again (one that failed is never remembered, so its problems are reported every run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

from ..contract import paths
from ..fileio.encode import canonical, digest
from ..fileio.files import write_if_changed
from ..render import dataid

FORMAT = "servesweep.render-memo/3"
SETTLED_NS = 1_000_000_000  # a file changed this recently may change again within one timestamp tick
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
        self.path = Path(root) / paths.MEMO_FILE
        self.code = code_digest()
        self.kept, self.valid_kept, self.files_kept, digests = self._load()
        dataid.look_again()
        dataid.remember(digests)  # the data files' digests, by stat (render/dataid)
        self.used: dict[str, dict] = {}
        self.valid_used: set[str] = set()
        self.files_used: dict[str, list] = {}  # path -> [what it was written from, its stat]
        self._saved = (self.kept, self.valid_kept, self.files_kept)  # what the file holds
        self._cluster_digests: dict[str, str] = {}

    def _load(self) -> tuple[dict, set, dict, dict]:
        """The file: its format, the sha256 of the body, then the body (one line each)."""
        try:
            fmt, check, body = self.path.read_bytes().split(b"\n", 2)
            if fmt.decode() == FORMAT and check.decode() == text_digest(body):
                doc = json.loads(body)
                points, valid, files = doc["points"], doc["valid"], doc["files"]
                digests = doc.get("digests") if isinstance(doc.get("digests"), dict) else {}
                if isinstance(points, dict) and isinstance(valid, list) and isinstance(files, dict):
                    return points, {v for v in valid if isinstance(v, str)}, files, digests
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return {}, set(), {}, {}

    def recipe_key(self, label: str, doc: dict, only_cluster: str | None, clusters: dict) -> str:
        facts = [(name, self._facts(c)) for name, c in sorted(clusters.items())]
        return digest(canonical([self.code, label, doc, only_cluster, facts]))

    def known_valid(self, key: str) -> bool:
        return key in self.valid_kept

    def keep_valid(self, key: str) -> None:
        self.valid_used.add(key)

    def key(self, recipe, cluster, rehearsal_cluster, data: dict | None = None) -> str:
        """``data``: what the point reads (render/dataid), which its plan holds."""
        facts = [self._facts(c) if c else None for c in (cluster, rehearsal_cluster)]
        return digest(canonical([self.code, recipe.source, recipe.doc, facts, data]))

    def _facts(self, cluster) -> str:
        if cluster.name not in self._cluster_digests:
            self._cluster_digests[cluster.name] = digest(canonical(dataclasses.asdict(cluster)))
        return self._cluster_digests[cluster.name]

    def recall(self, key: str, conc: int, path: str, data: bytes | None = None) -> dict | None:
        """The point's entry if its plan file still holds the text it was made from; else None.
        The file is read (unless ``data`` holds it) only when its stat is not the one kept."""
        entry = (self.kept.get(key) or {}).get(str(conc))
        if not _entry_ok(entry):
            return None
        stat = file_stamp(path)
        if stat is None:
            return None
        if data is not None or entry.get("stat") != stat:
            try:
                if text_digest(data if data is not None else _read(path)) != entry["text"]:
                    return None
            except OSError:
                return None
            entry = dict(entry, stat=stat if _settled(stat) else None)
        self.used.setdefault(key, {})[str(conc)] = entry
        return entry

    def file_current(self, path: Path, made_from: str) -> bool:
        """Whether a file written from ``made_from`` (the key of what it holds) is still as written:
        then it need not be made again (its stat stands for its content, as for a plan)."""
        record, stat = self.files_kept.get(str(path)), file_stamp(path)
        if stat is None or record != [made_from, stat]:
            return False
        self.files_used[str(path)] = record
        return True

    def file_written(self, path: Path, made_from: str) -> None:
        """``path`` now holds what ``made_from`` makes (written, or found unchanged): its stat is kept
        once settled."""
        stat = file_stamp(path)
        if stat is not None and _settled(stat):
            self.files_used[str(path)] = [made_from, stat]

    def remember(self, key: str, conc: int, plan: dict, text: str) -> None:
        entry = {
            "plan": plan["fingerprints"]["plan"],
            "curve": plan["fingerprints"]["curve"],
            "server": plan["fingerprints"]["server"],
            "resources": plan["resources"],
            "reuse": bool(plan["stack"]["reuse"]),
            "text": text_digest(text.encode()),
        }
        self.used.setdefault(key, {})[str(conc)] = entry

    def save(self) -> None:
        """Keep what this run used (the memo follows the current recipes); called again after more
        was used, it writes only what changed since."""
        now = (self.used, self.valid_used, self.files_used)
        digests, new_digests = dataid.known()
        if now == self._saved and not new_digests:
            return
        body = canonical(
            {"points": self.used, "valid": sorted(self.valid_used), "files": self.files_used, "digests": digests}
        )
        try:
            write_if_changed(self.path, f"{FORMAT}\n{text_digest(body.encode())}\n{body}")
        except OSError:  # an unwritable memo only costs the next run its rendering
            return
        self._saved = ({key: dict(points) for key, points in self.used.items()}, set(now[1]), dict(now[2]))
        dataid.saved()


def file_stamp(path) -> list[int] | None:
    """What a write changes: size, mtime, ctime (no tool sets it back) and inode (a rename)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _settled(stat: list[int]) -> bool:
    """Whether a stat may stand for the file's content: its last change (ctime) is older than a clock
    tick could hide."""
    return time.time_ns() - stat[2] > SETTLED_NS


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _entry_ok(entry) -> bool:
    stat = entry.get("stat") if isinstance(entry, dict) else None
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k), str) for k in ("plan", "curve", "server", "text"))
        and isinstance(entry.get("resources"), dict)
        and isinstance(entry.get("reuse"), bool)
        and (stat is None or (isinstance(stat, list) and len(stat) == 4 and all(type(v) is int for v in stat)))
    )
