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


def _imports() -> dict[str, set[str]]:
    """servesweep module -> the servesweep modules it imports (relative imports resolved)."""
    import ast

    pkg = ROOT / "scripts" / "servesweep"
    graph = {}
    for f in pkg.rglob("*.py"):
        mod = ".".join(("servesweep", *f.relative_to(pkg).with_suffix("").parts))
        parts = mod.split(".") if f.name != "__init__.py" else mod.split(".")[:-1] + ["__init__"]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = parts[: len(parts) - node.level] if node.level else []
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = [f"{target}.{a.name}" for a in node.names]
                deps |= {n for n in [target, *names] if n.startswith("servesweep")}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("servesweep")}
        graph[mod] = deps
    known = set(graph)
    return {m: {d for d in ds if d in known and d != m} for m, ds in graph.items()}


def test_rooms_by_stage_import_one_way_and_without_circles():
    graph = _imports()
    upward = [(m, d) for m, ds in graph.items() for d in ds if m.startswith("servesweep.run") and ".render." in d]
    assert not upward, upward  # run reads only the plan contract
    assert not [(m, d) for m, ds in graph.items() for d in ds if ".render." in m and ".run." in d]
    assert not [(m, d) for m, ds in graph.items() for d in ds if ".report." in m and (".run." in d or ".render." in d)]
    # render is the pure recipe -> plan step: it never reaches for what Snakemake asks (workflow/)
    assert not [(m, d) for m, ds in graph.items() for d in ds if ".render." in m and ".workflow." in d]
    assert not [(m, d) for m, ds in graph.items() for d in ds if m.startswith("servesweep.run") and ".workflow." in d]
    seen, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError(f"import circle: {' -> '.join(stack[stack.index(m) :] + [m])}")
        if m in seen:
            return
        stack.append(m)
        for d in sorted(graph[m]):
            visit(d)
        stack.pop()
        seen.add(m)

    for m in sorted(graph):
        visit(m)


def test_workflow_paths_are_spelled_in_one_module():
    """Result, plan, log and curve paths come from servesweep/contract/paths.py, in the code and in the rules."""
    spelled = re.compile(r"""["'](results|logs|\.plans)/|c\{(conc|p\.conc|c)\}\.json""")
    files = [*ROOT.glob("scripts/servesweep/**/*.py"), *ROOT.glob("rules/*.smk"), ROOT / "Snakefile"]
    found = [
        f"{f.relative_to(ROOT)}:{i}: {line.strip()}"
        for f in files
        if f.name != "paths.py"
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if spelled.search(line) and not line.lstrip().startswith(("#", '"""'))
    ]
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


def _module_map_names() -> set[str]:
    """The backticked names in the first column of the README's module map."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| module | owns |") :].split("\n\n", 1)[0]
    first = [row.split("|")[1] for row in table.splitlines()[2:]]
    return {name for cell in first for name in re.findall(r"`([^`]+)`", cell)}


def test_the_readme_module_map_matches_the_tree():
    """Every module of scripts/servesweep is in the README's map (a folder entry covers its modules),
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
    assert not missing, f"modules missing from the README's map: {missing}"
    unknown = sorted(n for n in names - folders if n not in modules)
    unknown += sorted(f for f in folders if not (pkg / f).is_dir())
    assert not unknown, f"the README's map names what does not exist: {unknown}"


def test_the_readme_stays_short_and_its_docs_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    docs = set(re.findall(r"`(docs/[a-z-]+\.md)`", readme))
    assert docs and all((ROOT / d).is_file() for d in docs), docs
    assert {d.name for d in (ROOT / "docs").glob("*.md")} == {Path(d).name for d in docs}


def test_each_runtime_file_name_is_spelled_only_in_paths():
    """The names of a run dir's, a stack dir's and a results folder's files (contract/paths) are
    spelled nowhere else in the code: a module that needs one imports it."""
    import ast

    tree = ast.parse((ROOT / "scripts/servesweep/contract/paths.py").read_text())
    names = {
        n.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for n in ast.walk(node.value)
        if isinstance(n, ast.Constant) and re.fullmatch(r"[\w.-]+\.(json|log|lock)", str(n.value))
    }
    assert {"failure.json", "driver.log", "served.json", "keeper.lock", "current.json"} <= names, names
    found = [
        f"{f.relative_to(ROOT)}: {name}"
        for f in ROOT.glob("scripts/servesweep/**/*.py")
        if f.name != "paths.py"
        for name in names
        if re.search(rf"""["'/]{re.escape(name)}["']""", f.read_text())
    ]
    assert not found, "\n".join(found)
