"""Two nodes (two cores on one store) changing one agent at once: no change a caller was
told is saved is lost. Each write sets only the fields it changes, so a PATCH of
``name`` and one of ``system_prompt`` both stay, and a deploy keeps a concurrent PATCH's
name (each once wrote back every field as it had read them, undoing the other's)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentcore import AgentCore, Conflict

pytestmark = pytest.mark.both_stores

ROUNDS = 30


@pytest.fixture
def nodes(store_url: str) -> Iterator[tuple[AgentCore, AgentCore]]:
    a = AgentCore.open(store_url, start_workers=False)
    b = AgentCore.open(store_url, start_workers=False)
    a.create_organization("acme")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _at_once(*calls: Callable[[], Any]) -> list[BaseException | None]:
    """Run ``calls`` on threads released together; each one's exception, or None."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            calls[i]()
        except BaseException as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_patches_of_different_fields_both_stay(nodes: tuple[AgentCore, AgentCore]) -> None:
    a, b = (node.workspace("acme", "test") for node in nodes)
    agent = a.agents.create(name="n0", system_prompt="p0")
    for i in range(1, ROUNDS + 1):
        outcomes = _at_once(
            lambda i=i: a.agents.update(agent.id, name=f"n{i}"),
            lambda i=i: b.agents.update(agent.id, system_prompt=f"p{i}"),
        )
        assert outcomes == [None, None]
        final = a.agents.get(agent.id)
        assert (final.name, final.system_prompt) == (f"n{i}", f"p{i}")


def test_a_deploy_keeps_a_concurrent_patch(nodes: tuple[AgentCore, AgentCore]) -> None:
    a, b = (node.workspace("acme", "test") for node in nodes)
    for i in range(ROUNDS):
        agent = a.agents.create(name="old")
        patch, deploy = _at_once(
            lambda agent=agent: a.agents.update(agent.id, name="new"),
            lambda agent=agent: b.agents.deploy(agent.id),
        )
        assert deploy is None
        final = a.agents.get(agent.id)
        assert final.status == "deployed"
        # the PATCH read a draft: after the deploy it may be refused (409), never lost
        if patch is None:
            assert final.name == "new", f"round {i}: an acknowledged PATCH was undone"
        else:
            assert isinstance(patch, Conflict) and final.name == "old"


def test_a_patch_returns_the_agent_as_stored(nodes: tuple[AgentCore, AgentCore]) -> None:
    a, b = (node.workspace("acme", "test") for node in nodes)
    agent = a.agents.create(name="n0", system_prompt="p0")
    b.agents.update(agent.id, system_prompt="p1")
    returned = a.agents.update(agent.id, name="n1")
    assert (returned.name, returned.system_prompt) == ("n1", "p1")
    assert returned == a.agents.get(agent.id)
