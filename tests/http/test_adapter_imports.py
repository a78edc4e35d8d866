"""The adapter adapts: it imports only the core's public face (imports made for
annotations only count too).

``lint-imports`` checks it as well (``pyproject.toml``); its contract names the core's
internals one by one, and this test holds the adapter to the face itself, so a module
the core gains later is covered without a line in the contract.
"""

from __future__ import annotations
import __future__

import grimp

import agentcore.adapters

PUBLIC_FACE = {
    "agentcore",
    "agentcore.adapters",
    "agentcore.chat_models",
    "agentcore.cli",
    "agentcore.config",
    "agentcore.errors",
    "agentcore.hookspecs",
    "agentcore.schema",
}
"""What an adapter may import of the core (``agentcore.adapters`` says why each)."""


def graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        "agentcore_starlette", "agentcore", exclude_type_checking_imports=False, cache_dir=None
    )


def test_the_adapter_imports_only_the_cores_public_face() -> None:
    imports = graph()
    adapter = {m for m in imports.modules if m.split(".")[0] == "agentcore_starlette"}
    reached = {
        (module, imported)
        for module in adapter
        for imported in imports.find_modules_directly_imported_by(module)
        if imported.split(".")[0] == "agentcore"
    }
    assert reached, "the graph holds the adapter's imports of the core"
    assert sorted(pair for pair in reached if pair[1] not in PUBLIC_FACE) == []


def test_the_face_for_adapters_exports_every_name_it_holds() -> None:
    held = {
        name
        for name, value in vars(agentcore.adapters).items()
        if not name.startswith("_") and value is not __future__.annotations
    }
    assert set(agentcore.adapters.__all__) == held
