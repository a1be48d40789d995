"""Style gates: ruff, snakefmt and snakemake --lint are clean."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from helpers import BIN, ROOT


def run(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_ruff_clean():
    r = run(str(BIN / "ruff"), "check", "scripts", "tests", "bench")
    assert r.returncode == 0, r.stdout
    r = run(str(BIN / "ruff"), "format", "--check", "scripts", "tests", "bench")
    assert r.returncode == 0, r.stdout


def test_snakefmt_clean():
    r = run(str(BIN / "snakefmt"), "--check", "Snakefile", *sorted(str(p) for p in (ROOT / "rules").glob("*.smk")))
    assert r.returncode == 0, r.stderr


def test_snakemake_lint_clean():
    r = run(str(BIN / "snakemake"), "--lint", "--config", "cluster=local")
    assert r.returncode == 0, r.stdout + r.stderr


def _module_name(f: Path, pkg: Path) -> str:
    """A file's module; a package (``kinds/__init__.py``) is keyed by its own name (``...render.kinds``),
    which is what ``from . import kinds`` and ``from .kinds import x`` import."""
    parts = ("servesweep", *f.relative_to(pkg).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _edges(src: str, mod: str, is_package: bool, known: set[str]) -> set[str]:
    """The ``known`` modules one module's source imports (type-only and function-local imports
    included). ``from a import b`` imports module ``a.b`` where there is one, else package ``a``;
    importing ``a.b`` runs package ``a`` first (unless ``a`` is an ancestor: it is running already)."""
    import ast

    here = mod.split(".") if is_package else mod.split(".")[:-1]  # what ``from . import`` is relative to
    deps = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names = {f"{target}.{a.name}" for a in node.names}
            deps |= (names & known) or {target}
        elif isinstance(node, ast.Import):
            deps |= {a.name for a in node.names}
    parents = {".".join(d.split(".")[:i]) for d in deps for i in range(1, d.count(".") + 1)}
    ancestors = {".".join(mod.split(".")[:i]) for i in range(1, mod.count(".") + 1)}
    return (deps | parents) - ancestors - {mod}


def _import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules it imports, among ``sources`` (module -> (source, is_package))."""
    known = set(sources)
    return {m: _edges(src, m, pkg, known) & known for m, (src, pkg) in sources.items()}


def _imports() -> dict[str, set[str]]:
    """servesweep module -> the servesweep modules it imports (relative and package imports resolved)."""
    pkg = ROOT / "scripts" / "servesweep"
    return _import_graph({_module_name(f, pkg): (f.read_text(), f.name == "__init__.py") for f in pkg.rglob("*.py")})


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated last), or None."""
    seen, stack = set(), []

    def visit(m):
        if m in stack:
            return stack[stack.index(m) :] + [m]
        if m in seen:
            return None
        stack.append(m)
        for d in sorted(graph[m]):
            if found := visit(d):
                return found
        stack.pop()
        seen.add(m)
        return None

    return next((c for m in sorted(graph) if (c := visit(m))), None)


# room -> the rooms it may not import: run reads only the plan contract; render is the pure recipe ->
# plan step (no processes, never what Snakemake asks); report reads results only
FORBIDDEN_ROOMS = {"run": {"render", "workflow"}, "render": {"run", "workflow"}, "report": {"run", "render"}}


def _room(module: str) -> str:
    return (module.split(".") + [""])[1]


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [(m, d) for m, ds in graph.items() for d in ds if _room(d) in FORBIDDEN_ROOMS.get(_room(m), ())]


def test_rooms_by_stage_import_one_way_and_without_circles():
    graph = _imports()
    assert not _upward(graph), _upward(graph)
    circle = _circle(graph)
    assert not circle, f"import circle: {' -> '.join(circle)}"


def test_the_import_lint_sees_package_type_only_and_parent_imports():
    """Planted faults: a circle closed by ``from . import pkg``, one closed by a type-only import of a
    package's submodule (which runs the package first), and a run module reaching into render."""
    by_package = {
        "servesweep.a.one": ("from . import pkg\n", False),
        "servesweep.a.pkg": ("from .inner import X\n", True),
        "servesweep.a.pkg.inner": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..one import Y\n",
            False,
        ),
    }
    assert _circle(_import_graph(by_package)) == [
        "servesweep.a.one",
        "servesweep.a.pkg",
        "servesweep.a.pkg.inner",
        "servesweep.a.one",
    ]
    by_parent = {
        "servesweep.a.one": ("from .pkg.inner import X\n", False),
        "servesweep.a.pkg": ("from .. import one\n", True),
        "servesweep.a.pkg.inner": ("", False),
    }
    assert _circle(_import_graph(by_parent)) == ["servesweep.a.one", "servesweep.a.pkg", "servesweep.a.one"]
    clean = {"servesweep.a.one": ("from .pkg import helper\n", False), "servesweep.a.pkg": ("", True)}
    assert _circle(_import_graph(clean)) is None and _import_graph(clean)["servesweep.a.one"] == {"servesweep.a.pkg"}
    upward = {"servesweep.run.x": ("from ..render import kinds\n", False), "servesweep.render.kinds": ("", True)}
    assert _upward(_import_graph(upward)) == [("servesweep.run.x", "servesweep.render.kinds")]


# a workflow folder's name where a path is built (``"results/x"``, ``/ "logs"``, ``Path(".plans")``),
# the workflow's own state folder, and a point file's name or glob (``c*.json`` also takes capacity.json)
_FOLDER = r"(results|logs|\.plans|\.snakemake/servesweep)"
SPELLED_PATH = re.compile(
    rf"""["']{_FOLDER}/|/\s*["']{_FOLDER}["']|["']{_FOLDER}["']\s*/|Path\(["']{_FOLDER}["']"""
    r"|c\{(conc|p\.conc|c)\}\.json|c\*\.json"
)


def _path_leaks(files: dict[str, str]) -> list[str]:
    """``file:line: text`` of each line (not a comment, not a docstring's first) of ``files`` (name ->
    text) that spells a workflow path."""
    return [
        f"{name}:{i}: {line.strip()}"
        for name, text in files.items()
        for i, line in enumerate(text.splitlines(), 1)
        if SPELLED_PATH.search(line) and not line.lstrip().startswith(("#", '"""'))
    ]


def _workflow_code() -> dict[str, str]:
    """The package's modules but contract/paths, the rules and the Snakefile: name -> text."""
    files = [*ROOT.glob("scripts/servesweep/**/*.py"), *ROOT.glob("rules/*.smk"), ROOT / "Snakefile"]
    return {str(f.relative_to(ROOT)): f.read_text() for f in files if f.name != "paths.py"}


def test_workflow_paths_are_spelled_in_one_module():
    """Result, plan, log and state paths come from servesweep/contract/paths.py, in the code and the rules."""
    found = _path_leaks(_workflow_code())
    assert not found, "\n".join(found)


def test_the_conda_env_pins_nothing_by_hand():
    env = (ROOT / "rules/envs/servesweep.yaml").read_text()
    assert "==" not in env and "-e ../.." in env  # pyproject.toml's pins, through the checkout


def test_every_env_knob_is_documented():
    knobs = {
        m for f in ROOT.glob("scripts/servesweep/**/*.py") for m in re.findall(r"SERVESWEEP_[A-Z_]+", f.read_text())
    }
    docs = "".join(f.read_text() for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    assert knobs and not {k for k in knobs if f"`{k}`" not in docs}


def test_no_function_over_60_lines_and_no_module_over_400():
    import ast

    long = []
    for f in sorted((ROOT / "scripts" / "servesweep").rglob("*.py")):
        src = f.read_text()
        if len(src.splitlines()) > 400:
            long.append(f"{f.relative_to(ROOT)}: {len(src.splitlines())} lines")
        for node in ast.walk(ast.parse(src)):
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > 60:
                long.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name}: {size} lines")
    assert not long, long


MODULE_MAP = ROOT / "docs" / "modules.md"


def _module_map_names() -> set[str]:
    """The backticked names in the first column of docs/modules.md's module map."""
    text = MODULE_MAP.read_text()
    table = text[text.index("| module | owns |") :].split("\n\n", 1)[0]
    first = [row.split("|")[1] for row in table.splitlines()[2:]]
    return {name for cell in first for name in re.findall(r"`([^`]+)`", cell)}


def test_the_module_map_matches_the_tree():
    """Every module of scripts/servesweep is in docs/modules.md's map (a folder entry covers its modules),
    and every name the map gives exists."""
    pkg = ROOT / "scripts" / "servesweep"
    modules = {
        p.relative_to(pkg).with_suffix("").as_posix()
        for p in pkg.rglob("*.py")
        if p.stem not in ("__init__", "__main__")
    }
    names = _module_map_names()
    folders = {n for n in names if n.endswith("/")}
    missing = sorted(m for m in modules if m not in names and not any(m.startswith(f) for f in folders))
    assert not missing, f"modules missing from docs/modules.md: {missing}"
    unknown = sorted(n for n in names - folders if n not in modules)
    unknown += sorted(f for f in folders if not (pkg / f).is_dir())
    assert not unknown, f"docs/modules.md names what does not exist: {unknown}"


def test_the_readme_is_a_door_and_its_docs_exist():
    """At most 80 lines (what it is, the two commands, what you get, where to go next), naming every doc."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 80
    docs = set(re.findall(r"`(docs/[a-z-]+\.md)`", readme))
    assert docs and all((ROOT / d).is_file() for d in docs), docs
    assert {d.name for d in (ROOT / "docs").glob("*.md")} == {Path(d).name for d in docs}


# what a file or folder name in contract/paths looks like: a path part with a suffix (``failure.json``,
# ``capacity.png``, ``node.key``, ``result.schema.yaml``), no wildcard in it
FILE_NAME = re.compile(r"[\w-][\w.-]*\.[a-z]+")


def _runtime_names(paths_source: str) -> set[str]:
    """Every file name contract/paths assigns, alone or as a part of a pattern or path."""
    import ast

    constants = [
        n.value
        for node in ast.walk(ast.parse(paths_source))
        if isinstance(node, ast.Assign)
        for n in ast.walk(node.value)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    return {part for c in constants for part in c.split("/") if FILE_NAME.fullmatch(part)}


def _strings(name: str, text: str) -> list[str]:
    """The string literals of a module, f-strings' text parts included, docstrings left out; a rule
    file (not Python) is one string, its comments left out."""
    import ast

    if not name.endswith(".py"):
        return ["\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))]
    tree = ast.parse(text)
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return [n.value for n in strings if id(n) not in docs]


def _name_leaks(names: set[str], files: dict[str, str]) -> list[str]:
    """``file: name`` for each name spelled in a string of ``files`` (as a whole path part)."""
    strings = {f: _strings(f, text) for f, text in files.items()}
    return [
        f"{f}: {name}"
        for f, found in strings.items()
        for name in sorted(names)
        if any(re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", s) for s in found)
    ]


def test_each_runtime_file_name_is_spelled_only_in_paths():
    """The names of a run dir's, a stack dir's and a results folder's files, a schema and the TLS files
    (contract/paths) are spelled nowhere else in the code: a module that needs one imports it."""
    names = _runtime_names((ROOT / "scripts/servesweep/contract/paths.py").read_text())
    expected = {"failure.json", "served.json", "keeper.lock", "capacity.json", "capacity.png", "ca.key", "hold.sh"}
    assert expected | {"result.schema.yaml", "rendered.json"} <= names, names
    found = _name_leaks(names, _workflow_code())
    assert not found, "\n".join(found)


def test_the_path_lints_catch_planted_leaks():
    """Each shape today's leaks had: a bare folder name, the point glob, the state folder, a file
    name beyond json/log/lock, and a name inside a pattern in paths."""
    planted = {
        "a.py": 'root / "results" / recipe\n',
        "b.py": 'folder.glob("c*.json")\n',
        "c.py": 'DIR = ".snakemake/servesweep/heartbeats"\n',
        "d.py": 'x = f"![plot]({recipe}/capacity.png)"\n',
        "e.py": 'key = str(d / "ca.key")\n',
        "f.py": 'checked_json(path, "result.schema.yaml")\n',
        "ok.py": "# results/ in a comment\nresult_file(recipe, conc)\n",
    }
    assert [leak.split(":")[0] for leak in _path_leaks(planted)] == ["a.py", "b.py", "c.py"]
    names = _runtime_names('A = f"results/{{recipe}}/capacity.png"\nB, C = "ca.key", "result.schema.yaml"\n')
    assert names == {"capacity.png", "ca.key", "result.schema.yaml"}
    assert _name_leaks(names, planted) == ["d.py: capacity.png", "e.py: ca.key", "f.py: result.schema.yaml"]
