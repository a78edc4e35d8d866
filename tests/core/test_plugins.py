"""pluggy hooks: documented specs, custom store plugins, per-core managers, no-starlette import."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from agentcore import AgentCore, hookimpl, hookspecs
from agentcore._plugin_manager import make_plugin_manager
from agentcore.storage.sqlite import SQLiteStore

SPECS = [
    (name, func)
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("agentcore_")
]


def test_there_are_hookspecs() -> None:
    names = {name for name, _ in SPECS}
    assert {
        "agentcore_open_store",
        "agentcore_register_embedders",
        "agentcore_register_chat_models",
        "agentcore_register_event_kinds",
        "agentcore_run_tool",
        "agentcore_startup",
        "agentcore_shutdown",
    } <= names


@pytest.mark.parametrize(("name", "func"), SPECS, ids=[n for n, _ in SPECS])
def test_every_hookspec_is_documented(name: str, func) -> None:
    assert getattr(func, "agentcore_spec", None) is not None, f"{name} is not a hookspec"
    doc = inspect.getdoc(func)
    assert doc and len(doc.splitlines()[0]) > 10, f"{name} has no summary line"
    assert "called" in doc.lower(), f"{name} does not say when it is called"
    for param in inspect.signature(func).parameters:
        assert f":param {param}:" in doc, f"{name} does not document {param}"
    returns = inspect.signature(func).return_annotation
    if returns not in (None, "None"):
        assert ":return:" in doc or "return" in doc.lower(), f"{name} does not say what it returns"


def test_the_core_is_what_lifecycle_hooks_are_typed_with(tmp_path: Path) -> None:
    """``PluginHost`` spells what the hooks get of an ``AgentCore`` (so that the hook
    specifications need not import the core): the core has all of it."""
    with AgentCore.open(tmp_path / "a.db") as core:
        assert isinstance(core, hookspecs.PluginHost)
        members = {name for name in dir(hookspecs.PluginHost) if not name.startswith("_")} - set(
            dir(object)
        )
        assert members == {"events", "runtime", "settings", "store", "workspace"}
        assert core.workspace("acme").organization == "acme"


def test_check_pending_passes_with_builtins_and_entry_points() -> None:
    pm = make_plugin_manager()
    pm.check_pending()
    assert pm.get_plugin("agentcore.plugins.sqlite_store") is not None


def test_unknown_hook_in_a_plugin_is_refused() -> None:
    import pluggy

    class Typo:
        @hookimpl
        def agentcore_open_stor(self, url, settings):  # misspelt hook
            return None

    with pytest.raises(pluggy.PluginValidationError):
        make_plugin_manager([Typo()], entry_points=False)


class MemoryStores:
    """Opens ``memory+custom://`` URLs as in-memory SQLite stores; records what it opened."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    @hookimpl
    def agentcore_open_store(self, url: str, settings):
        if not url.startswith("memory+custom://"):
            return None
        self.opened.append(url)
        store = SQLiteStore(":memory:")
        store.migrate()
        return store


def test_custom_store_plugin_is_used() -> None:
    plugin = MemoryStores()
    with AgentCore.open("memory+custom://x", plugins=[plugin]) as core:
        assert plugin.opened == ["memory+custom://x"]
        assert isinstance(core.store, SQLiteStore) and core.store.db.memory
        core.create_organization("acme")
        secret = core.keys.create("acme", "test").secret
        ws = core.authenticate(secret)
        agent = ws.agents.create(name="in memory")
        assert ws.agents.get(agent.id).name == "in memory"


def test_custom_store_plugin_passes_on_other_urls(tmp_path: Path) -> None:
    plugin = MemoryStores()
    db = tmp_path / "file.db"
    with AgentCore.open(str(db), plugins=[plugin]) as core:
        assert plugin.opened == []
        assert not core.store.db.memory
    assert db.exists()


def test_unhandled_scheme_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="No store plugin"):
        AgentCore.open("mysql://nowhere/db")


def test_an_empty_store_url_is_refused_not_a_temporary_database() -> None:
    # SQLite opens a throwaway temporary database for "": the data would be lost
    for url in ("", "  ", "sqlite:///"):
        with pytest.raises(ValueError, match="empty|No store plugin"):
            AgentCore.open(url)
    with AgentCore.open(":memory:") as core:  # the in-memory store stays allowed
        assert core.store.db.memory


def test_plugin_given_by_module_name(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "acme_kinds_plugin.py").write_text(
        "from agentcore import hookimpl\n"
        "@hookimpl\n"
        "def agentcore_register_event_kinds(register):\n"
        "    register('invoice.paid', 'An invoice was paid.')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with AgentCore.open(tmp_path / "m.db", plugins=["acme_kinds_plugin"]) as core:
        assert "invoice.paid" in core.events.kinds


def test_two_cores_have_independent_plugin_managers(tmp_path: Path) -> None:
    plugin = MemoryStores()
    with (
        AgentCore.open("memory+custom://a", plugins=[plugin]) as one,
        AgentCore.open(tmp_path / "two.db") as two,
    ):
        assert one.pm is not two.pm
        assert one.pm.is_registered(plugin)
        assert not two.pm.is_registered(plugin)
        with pytest.raises(ValueError):
            AgentCore.open("memory+custom://b")  # the plugin is not global
        assert plugin.opened == ["memory+custom://a"]


@pytest.mark.slow
def test_import_without_starlette(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['starlette'] = None\n"
        "sys.modules['uvicorn'] = None\n"
        "import agentcore, agentcore.cli\n"
        "from agentcore import AgentCore\n"
        f"core = AgentCore.open({str(tmp_path / 'n.db')!r})\n"
        "core.create_organization('acme')\n"
        "print(core.authenticate(core.keys.create('acme', 'test').secret).organization)\n"
        "core.close()\n"
        "assert not any(m == 'starlette' or m.startswith('starlette.') for m in sys.modules\n"
        "               if sys.modules[m] is not None)\n"
        "rc = agentcore.cli.main(['--db', " + repr(str(tmp_path / "n.db")) + ", 'serve'])\n"
        "print('serve', rc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["acme", "serve 2"]
    assert "server extra" in result.stderr  # serve says what to install
