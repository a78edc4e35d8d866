"""The store seam stays what ``storage/base.py`` says it is: slices that split ``Store``
between them, each method documented, and each held to its contract by the
conformance suite, so that a method added to a slice cannot go untested."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import agentcore.storage.base as base
from agentcore.storage.base import KnowledgeStore, Store

TESTS = Path(__file__).resolve().parents[1]
CONFORMANCE = TESTS / "storage" / "test_store_conformance.py"

#: The slices ``Store`` is made of (``KnowledgeStore`` is four of them together).
SLICES = (
    base.KeyStore,
    base.AgentStore,
    base.DocumentStore,
    base.IndexStore,
    base.TermStore,
    base.IngestStore,
    base.WebhookStore,
    base.ConversationStore,
    base.IdempotencyStore,
    base.RateLimitStore,
)
#: What a store may also do, found with ``isinstance``.
CAPABILITIES = (
    base.VectorSearchStore,
    base.ObservableStore,
    base.BudgetedStore,
    base.ReopenableStore,
    base.EventWaiter,
    base.Checkpointing,
)

#: Methods the conformance suite does not call, with the test file that does and why.
NOT_IN_CONFORMANCE = {
    "checkpoint": ("storage/test_sqlite_checkpoints.py", "SQLite's alone (its WAL)"),
    "checkpoint_interval": ("storage/test_sqlite_checkpoints.py", "SQLite's alone (its WAL)"),
}


def own_methods(protocol: type) -> list[str]:
    """The methods (and properties) ``protocol`` declares itself."""
    return [
        name
        for name, member in vars(protocol).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    ]


def called_in(path: Path) -> set[str]:
    """The attribute names ``path`` reads off anything (``store.get_key``, ...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def test_the_slices_split_the_store_between_them() -> None:
    declared = [name for protocol in SLICES for name in own_methods(protocol)]
    assert len(declared) == len(set(declared)), "a method is declared by two slices"
    # Store is the slices and its lifecycle, nothing else
    assert set(own_methods(Store)) == {"ping", "close"}
    slices_in_store = {cls for cls in Store.__mro__ if cls in SLICES}
    assert slices_in_store == set(SLICES)
    knowledge = {cls for cls in KnowledgeStore.__mro__ if cls in SLICES}
    assert knowledge == {base.DocumentStore, base.IndexStore, base.TermStore, base.IngestStore}
    assert own_methods(KnowledgeStore) == []
    # the module's docstring names each slice and capability, for a reader of the seam
    for protocol in (*SLICES, *CAPABILITIES):
        assert f"``{protocol.__name__}``" in (base.__doc__ or ""), protocol.__name__


@pytest.mark.parametrize("protocol", [*SLICES, Store, *CAPABILITIES], ids=lambda p: p.__name__)
def test_every_method_is_documented(protocol: type) -> None:
    for name in own_methods(protocol):
        member = vars(protocol)[name]
        doc = inspect.getdoc(member.fget if isinstance(member, property) else member)
        assert doc and len(doc.split()) >= 4, f"{protocol.__name__}.{name} needs a docstring"


@pytest.mark.parametrize("protocol", [*SLICES, Store, *CAPABILITIES], ids=lambda p: p.__name__)
def test_every_method_is_exercised_by_the_conformance_suite(protocol: type) -> None:
    conformance = called_in(CONFORMANCE)
    for name in own_methods(protocol):
        if name in NOT_IN_CONFORMANCE:
            where, _ = NOT_IN_CONFORMANCE[name]
            assert name not in conformance, f"{name} is in the conformance suite now"
            assert name in called_in(TESTS / where), f"{where} does not exercise {name}"
        else:
            assert name in conformance, (
                f"{protocol.__name__}.{name}: test it in {CONFORMANCE.name}, on both stores"
            )


def test_the_exceptions_name_methods_that_exist() -> None:
    methods = {
        name for protocol in (*SLICES, Store, *CAPABILITIES) for name in own_methods(protocol)
    }
    assert set(NOT_IN_CONFORMANCE) <= methods
