"""No import cycles inside ``agentcore`` or its adapter, ``agentcore_starlette``, counting a
package's ``__init__`` as a module.

import-linter's ``acyclic_siblings`` contract (pyproject, run by ``lint-imports``)
forbids cycles between sibling modules and subpackages; it does not see a module
that imports its own package (``from agentcore import Settings`` inside
``agentcore.events``), which runs ``agentcore/__init__`` in the middle of importing
it. This test looks for any cycle in the module graph, with grimp (import-linter's
graph library). Imports under ``if TYPE_CHECKING:`` count: they never run, but an
annotation is a dependency all the same, and a cycle hidden under one is still a cycle
(``Workspace`` once imported the core it was built by, for annotations only).
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def strongly_connected(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Groups of ``package``'s modules that import each other (Tarjan, iterative)."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {
        m: sorted(t for t in graph.find_modules_directly_imported_by(m) if t in modules)
        for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if child < len(edges[node]):
                work.append((node, child + 1))
                target = edges[node][child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in edges[node]:
                    cycles.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return cycles


def test_the_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p", imported="p.a")
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p")  # p -> p.a -> p.b -> p
    graph.add_import(importer="p.c", imported="p.a")
    assert strongly_connected(graph, "p") == [["p", "p.a", "p.b"]]
    graph.remove_import(importer="p.b", imported="p")
    assert strongly_connected(graph, "p") == []


def import_graph(package: str) -> grimp.ImportGraph:
    """``package``'s import graph, counting imports made for annotations only."""
    return grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)


def test_a_cycle_under_type_checking_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "typedcycle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "value.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from typedcycle.service import Service\n"
    )
    (package / "service.py").write_text("from typedcycle.value import *\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert strongly_connected(import_graph("typedcycle"), "typedcycle") == [
        ["typedcycle.service", "typedcycle.value"]
    ]


def test_agentcore_has_no_import_cycles() -> None:
    assert strongly_connected(import_graph("agentcore"), "agentcore") == []


def test_the_adapter_has_no_import_cycles() -> None:
    graph = import_graph("agentcore_starlette")
    assert strongly_connected(graph, "agentcore_starlette") == []
