"""The package's layers import downward only and no module imports itself back through others (issue #30).

The contract itself lives in pyproject.toml ([tool.importlinter]); this runs the real `lint-imports` against it and
asks grimp, the graph import-linter is built on, for cycles, so a new upward import fails the fast layer.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_layers_contract_is_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is not installed; `make .venv/bin/.installed` installs the test extras")
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"{len(contracts())} kept, 0 broken" in out.stdout


def strongly_connected(graph, modules):
    """Tarjan's algorithm over the module graph: the groups of modules that import each other round a loop."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(m):
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for n in graph.find_modules_directly_imported_by(m):
            if n not in modules:
                continue
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on_stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = set()
            while True:
                n = stack.pop()
                on_stack.discard(n)
                group.add(n)
                if n == m:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return groups


def test_no_import_cycles():
    graph = grimp.build_graph("specrepro", cache_dir=None)
    modules = set(graph.modules)
    assert "specrepro.analysis.report" in modules, "specrepro.analysis is not seen as part of the package"
    assert strongly_connected(graph, modules) == []


def test_cycle_finder_finds_a_known_cycle():
    """The check above can fail: a graph with a loop through three modules is reported as one group."""

    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert strongly_connected(Graph(), {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def contracts():
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def named_in(contract):
    """The modules a contract names, as full dotted names."""
    names = [m for layer in contract.get("layers", []) for m in re.split(r"[:|]", layer)] + contract.get("modules", [])
    prefixes = contract.get("containers") or [""]
    return {f"{c}.{m.strip()}" if c else m.strip() for c in prefixes for m in names}


def test_every_module_has_a_layer():
    """A module no contract names is free to import anything: the package's top-level modules and sub-packages are
    named in the first contract, and each sub-package's modules in one of its own."""
    named = set().union(*(named_in(c) for c in contracts()))
    package = ROOT / "src" / "specrepro"
    modules = {f"specrepro.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {f"specrepro.{p.parent.name}" for p in package.glob("*/__init__.py")}
    for sub in package.glob("*/__init__.py"):
        if sub.parent.name == "analysis":
            continue  # the analysis stage: one layer of its own, pure functions over tables
        inner = {f"specrepro.{sub.parent.name}.{p.stem}" for p in sub.parent.glob("*.py") if p.stem != "__init__"}
        inner |= {f"specrepro.{sub.parent.name}.{p.parent.name}" for p in sub.parent.glob("*/__init__.py")}
        modules |= inner
    assert modules - named == set(), "add these to [tool.importlinter] in pyproject.toml"


def test_the_contract_reader_sees_separators_and_containers():
    contract = {"containers": ["specrepro.core"], "layers": ["campaign", "config | arm_plan", "a : b"]}
    assert named_in(contract) == {"specrepro.core.campaign", "specrepro.core.config", "specrepro.core.arm_plan",
                                  "specrepro.core.a", "specrepro.core.b"}


# --- functions and imports ----------------------------------------------------------------------------------------

SOURCES = [ROOT / "src" / "specrepro", ROOT / "analysis", ROOT / "workflow" / "scripts"]
LONGEST_FUNCTION = 80
# The entry point: each command imports what it runs inside its own function, so `specrepro plan` and `--help`
# never load MLflow, pandas' analysis or Snakemake's API.
DEFERRING_MODULES = {ROOT / "src" / "specrepro" / "cli.py"}


def python_files():
    for root in SOURCES:
        yield from (p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts)


def long_functions(source: str, limit: int = LONGEST_FUNCTION):
    """(name, first line, lines) of every function longer than `limit` lines, nested ones counted on their own."""
    import ast

    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def deferred_imports(source: str):
    """(line, text) of every import of specrepro inside a function, with no comment saying why on it or above it."""
    import ast

    lines = source.splitlines()
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(fn):
            ours = (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("specrepro")) or \
                (isinstance(n, ast.Import) and any(a.name.startswith("specrepro") for a in n.names))
            if ours and not ("#" in lines[n.lineno - 1] or lines[n.lineno - 2].strip().startswith("#")):
                out.append((n.lineno, lines[n.lineno - 1].strip()))
    return sorted(set(out))


def test_no_function_is_longer_than_80_lines():
    found = {str(p.relative_to(ROOT)): long_functions(p.read_text()) for p in python_files()}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_length_check_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST_FUNCTION))
    assert long_functions(f"def short():\n    pass\n\n\ndef long():\n{body}\n") == [("long", 5, LONGEST_FUNCTION + 1)]


def test_function_level_imports_of_the_package_only_where_they_defer_a_heavy_import():
    """The import graph has no cycle to break (test_no_import_cycles): an import inside a function is there to keep a
    heavy import off `plan`'s path, and says so in a comment; the entry point's commands all do."""
    found = {str(p.relative_to(ROOT)): deferred_imports(p.read_text()) for p in python_files()
             if p not in DEFERRING_MODULES}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_import_check_finds_an_unexplained_deferred_import():
    source = ("def f():\n    from specrepro.core import config\n\n\n"
              "def g():\n    # deferred: MLflow is heavy\n    from specrepro.stages import tracking\n")
    assert deferred_imports(source) == [(2, "from specrepro.core import config")]


def test_the_entry_point_loads_no_heavy_library_until_a_command_asks():
    """Why cli.py's imports are deferred: importing it (what `plan` and `--help` pay first) loads none of them."""
    code = ("import sys, specrepro.cli; print(sorted(m for m in ('mlflow', 'pandas', 'scipy', 'snakemake', "
            "'matplotlib', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
