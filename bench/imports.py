"""The project's import graph: packages and what each imports, package and module cycles, and
the largest modules.

    .venv/bin/python bench/imports.py

Reads the source with `ast` (nothing is imported), so it runs on any checkout. A package is the
first dotted part of a module name (`refunds`, `core`, ...); an edge A -> B means some module of A
imports B at any depth (inside functions too: a lazy import is still a dependency). Tests,
migrations and bench/ itself are left out: they sit above everything by design.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {"tests", "bench", "migrations", ".venv", "var", "static", "templates"}


def modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for every package directory at the root."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if not parts or SKIP & set(parts) or len(parts) == 1:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(path: Path) -> set[str]:
    """Absolute module names a file imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def package_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    packages = {name.split(".")[0] for name in found}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in found.items():
        source = name.split(".")[0]
        graph[source]
        for target in imported(path):
            top = target.split(".")[0]
            if top in packages and top != source:
                graph[source].add(top)
    return graph


def module_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (a name imported from a package counts for the
    submodule of that name when there is one, else for the package)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in found.items():
        graph[name]
        for target in imported(path):
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    found = modules(ROOT)
    graph = package_graph(found)
    print("packages (-> what each imports):")
    for package in sorted(graph):
        print(f"  {package:10} -> {', '.join(sorted(graph[package])) or '-'}")
    loops = cycles(graph)
    print("package cycles:", "; ".join(" <-> ".join(c) for c in loops) if loops else "none")
    module_loops = cycles(module_graph(found))
    print(
        "module cycles:",
        "; ".join(" <-> ".join(c) for c in module_loops) if module_loops else "none",
    )
    sizes = sorted(
        (
            (len(path.read_text().splitlines()), str(path.relative_to(ROOT)))
            for path in found.values()
        ),
        reverse=True,
    )
    print("largest modules (lines):")
    for lines, name in sizes[:8]:
        print(f"  {lines:5}  {name}")
    return 1 if loops or module_loops else 0


if __name__ == "__main__":
    sys.exit(main())
