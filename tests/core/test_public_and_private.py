"""Public and private: a ``_``-prefixed module is its package's own.

A module named ``_x`` (or any module inside a ``_x`` package) may be imported only by
modules of the package that holds it; another package reaches what it needs through
that package's face (its ``__init__`` and ``__all__``). Imports made for annotations
only count too. Every package says what it exports with a curated ``__all__``.
"""

from __future__ import annotations

import importlib
import pkgutil

import grimp

import agentcore
import agentcore_starlette


def private_owner(module: str) -> str | None:
    """The package a private module belongs to, or ``None`` for a public module."""
    parts = module.split(".")
    for at, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:at])
    return None


def reaches_into_private(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Every import of a private module by a module outside the package that owns it."""
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            owner = private_owner(imported)
            if owner is not None and module != owner and not module.startswith(owner + "."):
                found.append((module, imported))
    return found


def test_private_owner_names_the_package_that_holds_the_module() -> None:
    assert private_owner("agentcore._logs") == "agentcore"
    assert private_owner("agentcore.knowledge._search") == "agentcore.knowledge"
    assert private_owner("agentcore.knowledge.vectors._kernels") == "agentcore.knowledge.vectors"
    assert private_owner("agentcore.knowledge.service") is None
    assert private_owner("agentcore.__init__") is None


def test_the_check_finds_an_import_into_another_packages_private_module() -> None:
    graph = grimp.ImportGraph()
    for module in ("agentcore", "agentcore.chat", "agentcore.knowledge", "agentcore.knowledge._x"):
        graph.add_module(module)
    graph.add_import(importer="agentcore.knowledge", imported="agentcore.knowledge._x")
    assert reaches_into_private(graph) == []
    graph.add_import(importer="agentcore.chat", imported="agentcore.knowledge._x")
    assert reaches_into_private(graph) == [("agentcore.chat", "agentcore.knowledge._x")]


def test_no_module_imports_another_packages_private_module() -> None:
    graph = grimp.build_graph(
        "agentcore", "agentcore_starlette", exclude_type_checking_imports=False, cache_dir=None
    )
    assert any(private_owner(module) for module in graph.modules), "the core has private modules"
    assert reaches_into_private(graph) == []


def test_every_package_names_what_it_exports() -> None:
    for root in (agentcore, agentcore_starlette):
        packages = [root.__name__] + [
            info.name
            for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".")
            if info.ispkg
        ]
        for name in packages:
            package = importlib.import_module(name)
            exported = getattr(package, "__all__", None)
            assert isinstance(exported, list), f"{name} has no __all__"
            missing = [item for item in exported if not hasattr(package, item)]
            assert missing == [], f"{name}.__all__ names what it does not hold: {missing}"


def test_the_top_level_exports_no_engine_type() -> None:
    assert "VectorIndex" not in agentcore.__all__
    assert not hasattr(agentcore, "VectorIndex")
