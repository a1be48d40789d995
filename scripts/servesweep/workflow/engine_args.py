"""Engine arguments checked by each engine's own parser before anything is submitted.

Each process's rendered argv (runtime references replaced by sample values) is parsed by
``tools/argcheck.py`` inside the Python the cluster names for that engine kind. A flag the
parser rejects becomes a problem naming the recipe field that holds it. Where no parser is
importable the check is skipped and said so, per engine kind: it never passes silently.
Answers are cached by venv and argv, so a dry run pays the engine's import once.

Checking anyone's recipe is safe: only an interpreter the cluster facts declare is ever run (never
a path from a recipe), an argument naming a FIFO, device or socket is refused before any parser
runs (a parser opening it would block), and every parser run has a deadline.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..contract.plan import ENGINE_ROLES, RUNTIME_REF, command_of
from ..fileio.errors import InputError, Problem
from ..render import kinds, preamble, pythons
from ..render.cluster import all_clusters
from ..render.flags import iter_flags
from ..render.kinds.base import ArgParser
from ..render.kinds.dynamo_frontend import FRONTEND
from ..render.recipe import Recipe

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "argcheck.py"
ANSWERS_FORMAT = 2  # 2: an early exit (--help) refuses; answers of an older check are not reused
CHECK_DEADLINE_S = 90  # one argv through one parser, the engine's import included
_SAMPLES = {"addr": "127.0.0.1", "port": "20000", "rank_port": "20000", "job_id": "1"}
_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass
class ArgReport:
    problems: list[Problem] = field(default_factory=list)
    checked: dict[tuple[str, str], str] = field(default_factory=dict)  # (recipe file, kind) -> parser
    skipped: dict[tuple[str, str], str] = field(default_factory=dict)  # (recipe file, kind) -> why not

    def skip(self, c: _Check, why: str) -> None:
        self.skipped[(c.recipe.source, c.kind)] = why


def _sample(arg: str) -> str:
    return RUNTIME_REF.sub(lambda m: _SAMPLES.get(m.group(1) or m.group(3), "/tmp/servesweep-sample"), arg)


@dataclass(frozen=True)
class _Check:
    python: str  # as the plan names it
    kind: str  # engine kind, or "frontend"
    parser: ArgParser | None  # the kind's (None: it declares none, and is reported unchecked)
    argv: tuple[str, ...]  # after ``python -m module``, sampled
    role: str
    recipe: Recipe
    cluster: str = ""  # whose declared interpreters may run it

    @property
    def id(self) -> str:
        parser = self.parser.to_json() if self.parser else None
        return hashlib.sha256(json.dumps([parser, self.argv]).encode()).hexdigest()[:20]


def _parser(role: str, engine: str) -> tuple[str, ArgParser | None]:
    """(label, parser) of a frontend or engine process."""
    if role == "frontend":
        return "frontend", FRONTEND.parser
    return engine, kinds.get(engine).parser


def pending(plan: dict, recipe: Recipe) -> list[_Check]:
    """The plan's engine and frontend processes, one check per distinct argv."""
    out = {}
    for p in plan["processes"]:
        if p["role"] != "frontend" and p["role"] not in ENGINE_ROLES:
            continue
        kind, parser = _parser(p["role"], plan["engine"])
        argv = command_of(p["argv"])
        if len(argv) < 3 or argv[1] != "-m" or "{servesweep_python}" in argv[0]:
            continue  # rehearsal stand-ins are servesweep's own
        sampled = tuple(_sample(a) for a in argv[3:])
        c = _Check(argv[0], kind, parser, sampled, p["role"], recipe, plan.get("cluster", ""))
        out[(c.python, c.id)] = c
    return list(out.values())


def _python(python: str, root: Path) -> Path | None:
    if "/" not in python:
        found = shutil.which(python)
        return Path(found) if found else None
    path = Path(python) if Path(python).is_absolute() else root / python
    return path if path.exists() else None


def _cache_file(python: Path) -> Path:
    """One answer cache per venv state: reinstalling an engine starts a new one."""
    venv = python.absolute().parents[1].resolve()  # workflow copies link one .venvs: share its answers
    stamps = [str(p.stat().st_mtime_ns) for p in sorted(venv.glob("lib/python*/site-packages"))]
    key = hashlib.sha256(json.dumps([ANSWERS_FORMAT, str(venv), python.name, stamps]).encode()).hexdigest()[:24]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "servesweep" / "argcheck" / f"{key}.json"


def _answers(python: Path, checks: list[_Check], root: Path) -> dict[str, dict]:
    """check id -> parser answer: from the venv's cache, else from one run of its Python for all."""
    cache = _cache_file(python)
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    todo = {c.id: c for c in checks if c.id not in known}
    if not todo:
        return known
    fresh = _parse_run(python, todo, root)
    keep = {i: a for i, a in fresh.items() if a["status"] != "skipped"}
    if keep:
        _write_private(cache, json.dumps(known | keep))
    return known | fresh


def _parse_run(python: Path, todo: dict[str, _Check], root: Path) -> dict[str, dict]:
    """One run of ``python`` over the checks, each under its own deadline (the run's: all of theirs)."""
    checks_json = [{"id": i, "parser": c.parser.to_json(), "argv": list(c.argv)} for i, c in todo.items()]
    payload = json.dumps({"checks": checks_json, "deadline_s": CHECK_DEADLINE_S})
    try:
        out = subprocess.run(
            [str(python), str(SCRIPT)],
            input=payload,
            capture_output=True,
            text=True,
            timeout=CHECK_DEADLINE_S * (len(todo) + 1),
            cwd=root,
        )
        answers = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("[")][-1])
        return {a.pop("id"): a for a in answers}
    except subprocess.TimeoutExpired:
        reason = f"timed out (the parser run outlasted its {CHECK_DEADLINE_S} s per check)"
    except (OSError, ValueError, IndexError) as e:
        reason = f"the parser run failed ({type(e).__name__}: {str(e)[:200]})"
    return {i: {"status": "skipped", "message": reason, "parser": c.kind} for i, c in todo.items()}


def _write_private(path: Path, text: str) -> None:
    """Owner-only, whoever writes it and whatever their umask (the cache tells which flags a recipe used)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        tmp.replace(path)
    except OSError:
        pass  # an unwritable cache only costs the next dry run another parser run


def _field(c: _Check, message: str) -> str:
    """The recipe field holding the flag the parser named (its bad value's own occurrence when the
    message quotes it); else the launcher's own flag."""
    doc = c.recipe.doc
    if c.role == "frontend":
        lists = [("frontend.args", (doc.get("frontend") or {}).get("args", []))]
    else:
        lists = [("engine.args", doc["engine"].get("args", []))]
        lists += [(f"{r.field}.args", r.args) for r in c.recipe.roles() if r.name == c.role]
    for flag in _FLAG.findall(message):
        found = [(v, f"{n}[{i}]") for n, args in lists for f, v, i in iter_flags([str(a) for a in args]) if f == flag]
        named = [where for v, where in found if v is not None and f"'{v}'" in message]
        if named or found:
            return (named or [where for _, where in found])[-1]
    return "frontend" if c.role == "frontend" else "engine.kind"


def check_engine_args(checks: list[_Check], root: Path) -> ArgReport:
    """Every check, one engine-Python run per venv (none when all answers are cached). Where the
    cluster's Python is not here or has no parser (it lives in the image), a local environment with
    the versions the recipe pins parses instead, and the report says which."""
    report, by_python = ArgReport(), {}
    declared = _declared_pythons(Path(root))
    for c in checks:
        special = _special_file_problems(c, Path(root))
        if special:
            report.problems += special
        elif c.parser is None:
            report.skip(c, f"the {c.kind} kind declares no parser check")
        elif c.python not in declared.get(c.cluster, ()):
            report.skip(c, f"{c.python} is not an interpreter cluster {c.cluster!r} declares: never run to check")
        else:
            by_python.setdefault(c.python, []).append(c)
    for python, group in by_python.items():
        exe = _python(python, Path(root))
        answers = _answers(exe, group, Path(root)) if exe else {}
        for c in group:
            a = answers.get(c.id) or {"status": "skipped", "message": f"{python} is not on this host", "parser": ""}
            if a["status"] == "skipped":
                a = _with_pinned_env(c, root, f"no {c.kind} parser in {python}: {a['message']}")
            if a["status"] == "ok":
                report.checked[(c.recipe.source, c.kind)] = a["parser"]
            elif a["status"] == "skipped":
                report.skip(c, a["message"])
            else:
                report.problems.append(
                    Problem(c.recipe.source, _field(c, a["message"]), f"{c.kind} parser: {a['message']}")
                )
    return report


def _declared_pythons(root: Path) -> dict[str, frozenset[str]]:
    """Cluster name -> the interpreters its facts declare: the only ones a check runs."""
    profiles = root / "profiles"
    try:
        clusters = all_clusters(profiles if profiles.is_dir() else None)
    except InputError:
        return {}
    return {name: pythons.declared_paths(c) for name, c in clusters.items()}


def _special_file_problems(c: _Check, root: Path) -> list[Problem]:
    """An argument naming a FIFO, device or socket: refused from its kind alone (``stat`` opens
    nothing), since a parser that opened it could block the check forever."""
    out = []
    for arg in c.argv:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or "/" not in value and not (root / value).exists():
            continue
        try:
            mode = os.stat(root / value).st_mode  # an absolute value replaces root
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            continue
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        flag = _flag_before(c.argv, arg)
        message = f"{flag + ' ' if flag else ''}'{value}' names {kind}: no argument may name a special file"
        out.append(Problem(c.recipe.source, _field(c, message), f"{c.kind} args: {message}"))
    return out


def _flag_before(argv: tuple[str, ...], arg: str) -> str:
    if arg.startswith("-"):
        return arg.split("=", 1)[0]
    i = argv.index(arg)
    return argv[i - 1] if i and argv[i - 1].startswith("-") else ""


def _with_pinned_env(c: _Check, root: Path, why: str) -> dict:
    """The answer of a local environment that has exactly the versions the recipe pins, if any."""
    pins = preamble.pins(c.recipe.doc, c.recipe.engine_kind)
    wanted = {p["dists"][0]: p["version"] for p in pins if "version" in p}
    if not wanted:
        return {"status": "skipped", "message": f"{why}; the recipe pins no version a local environment could match"}
    envs = _local_envs(str(root))
    for exe, versions in envs:
        if all(versions.get(d) == v for d, v in wanted.items()):
            a = _answers(exe, [c], Path(root))[c.id]
            if a["status"] != "skipped":  # an environment with the pinned Dynamo but not this engine: next
                where = os.path.relpath(exe, root)
                return a | {"parser": f"{a['parser']} in {where} (the versions the recipe pins)"}
    listed = lambda v: ", ".join(f"{d} {x}" for d, x in sorted(v.items()))  # noqa: E731
    have = "; ".join(f"{os.path.relpath(e, root)}: {listed(v)}" for e, v in envs) or "none"
    pinned = ", ".join(f"{d} {v}" for d, v in wanted.items())
    return {"status": "skipped", "message": f"{why}; no local environment has the pinned {pinned} (local: {have})"}


@functools.lru_cache(maxsize=4)
def _local_envs(root: str) -> list[tuple[Path, dict]]:
    """The workflow's own environments (``.venvs/*``) and the versions of the pinnable packages in each."""
    code = "import importlib.metadata as m, json, sys\nout = {}\nfor d in sys.argv[1:]:\n"
    code += "    try: out[d] = m.version(d)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))"
    dists = sorted({"ai-dynamo", *kinds.distributions()})
    out = []
    for exe in sorted(Path(root).glob(".venvs/*/bin/python")):
        if not _owned(exe):
            continue
        try:
            run = subprocess.run([str(exe), "-c", code, *dists], capture_output=True, text=True, timeout=60)
            versions = json.loads(run.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            continue
        if isinstance(versions, dict) and versions:
            out.append((exe, {kinds.canonical_distribution(d): v for d, v in versions.items()}))
    return out


def _owned(exe: Path) -> bool:
    """Run only an environment its user (or root) made and no one else can change: its folder, its
    bin/ and the interpreter it resolves to, each owned by them and not group- or world-writable."""
    for path in (exe.parents[1], exe.parent, exe.resolve()):
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
            return False
    return True
