"""Every test can fail: each asserts something (itself or through a helper that asserts) and none
returns early. A static read of the test modules, so a new vacuous test fails here."""

from __future__ import annotations

import ast

from helpers import ROOT

TESTS = ROOT / "tests"
# what proves by failing, besides an assert statement: pytest's raisers and failers
FAILERS = {"raises", "fail", "warns"}


def _modules() -> dict[str, ast.Module]:
    files = [*TESTS.glob("*.py"), *(TESTS / "slurm").glob("*.py")]
    return {f.relative_to(ROOT).as_posix(): ast.parse(f.read_text()) for f in files}


def _called(node: ast.AST) -> set[str]:
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def _asserts_itself(node: ast.AST) -> bool:
    """An assert, a raise (helpers raise AssertionError at a deadline) or pytest.raises/fail."""
    return any(isinstance(n, (ast.Assert, ast.Raise)) for n in ast.walk(node)) or bool(_called(node) & FAILERS)


def _asserting_functions(modules: dict[str, ast.Module]) -> set[str]:
    """Names of functions in the test tree that assert, directly or through one another (a fixpoint)."""
    funcs = {n.name: n for m in modules.values() for n in ast.walk(m) if isinstance(n, ast.FunctionDef)}
    found = {name for name, f in funcs.items() if _asserts_itself(f)}
    while True:
        more = {name for name, f in funcs.items() if name not in found and _called(f) & found}
        if not more:
            return found
        found |= more


def _own_statements(fn: ast.FunctionDef):
    """The test's own statements, not those of functions or lambdas defined inside it."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    stack = [n for n in fn.body if not isinstance(n, nested)]
    while stack:
        n = stack.pop()
        yield n
        stack += [c for c in ast.iter_child_nodes(n) if not isinstance(c, nested)]


def _tests(modules):
    for path, m in modules.items():
        for n in m.body:
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"):
                yield path, n
            if isinstance(n, ast.ClassDef):
                yield from ((path, f) for f in n.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test_"))


def test_every_test_asserts_something():
    modules = _modules()
    asserting = _asserting_functions(modules)
    silent = [
        f"{path}::{fn.name}"
        for path, fn in _tests(modules)
        if not _asserts_itself(fn) and not (_called(fn) & asserting)
    ]
    assert not silent, silent


def test_no_test_returns_early():
    early = [
        f"{path}::{fn.name} line {n.lineno}"
        for path, fn in _tests(_modules())
        for n in _own_statements(fn)
        if isinstance(n, ast.Return)
    ]
    assert not early, early


def test_the_lint_catches_a_silent_test_and_an_early_return():
    src = (
        "def helper():\n    assert True\n"
        "def test_silent():\n    x = 1\n"
        "def test_by_helper():\n    helper()\n"
        "def test_early(flag):\n    if flag:\n        return\n    assert flag\n"
        "def test_inner(flag):\n    def f():\n        return 1\n    assert f()\n"
    )
    modules = {"t.py": ast.parse(src)}
    asserting = _asserting_functions(modules)
    silent = [fn.name for _, fn in _tests(modules) if not _asserts_itself(fn) and not (_called(fn) & asserting)]
    assert silent == ["test_silent"]
    early = [fn.name for _, fn in _tests(modules) for n in _own_statements(fn) if isinstance(n, ast.Return)]
    assert early == ["test_early"]
