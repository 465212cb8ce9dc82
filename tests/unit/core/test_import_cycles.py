"""No module of distdoctor imports (directly or through others) a module that imports it back.
Imports inside functions and under TYPE_CHECKING count too: a late import hides a cycle from
Python, not from the reader, who must still hold both modules in mind to follow either."""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return rel.removesuffix(".__init__")


def _imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    out: set[str] = set()
    for node in tree.body:
        for item in ast.walk(node):
            if isinstance(item, ast.Import):
                out.update(a.name for a in item.names)
            elif isinstance(item, ast.ImportFrom):
                if item.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(parts[: len(parts) - item.level + 1])
                    module = f"{base}.{item.module}" if item.module else base
                else:
                    module = item.module or ""
                # `from pkg import mod` imports pkg.mod (and pkg, whose __init__ runs first)
                out.add(module)
                out.update(f"{module}.{a.name}" for a in item.names)
    return out


def _graph() -> dict[str, set[str]]:
    modules: dict[str, str] = {}
    for root in ("distdoctor", "checks"):
        for folder, _dirs, files in os.walk(os.path.join(REPO, root)):
            for f in files:
                if f.endswith(".py"):
                    modules[_module_name(os.path.join(folder, f))] = os.path.join(folder, f)
    graph = {}
    for name, path in modules.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        imports = _imports(tree, name, path.endswith("__init__.py"))
        # a package's __init__ runs before any of its modules: not an edge back to the package
        graph[name] = {m for m in imports if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def test_no_import_cycle_counting_late_imports():
    graph = _graph()
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_late_imports():
    tree = ast.parse("from distdoctor.nccltest import lead\nif TYPE_CHECKING:\n    import distdoctor.cli\n"
                     "def f():\n    from distdoctor.logs import scan\n")
    found = _imports(tree, "distdoctor.nccltest.session", False)
    assert {"distdoctor.nccltest.lead", "distdoctor.cli", "distdoctor.logs.scan"} <= found
