"""The in-process event bus: kinds, listeners, '*', unsubscribe, sinks, plugin kinds."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from agentcore import AgentCore, Event, ValidationFailed, hookimpl


@pytest.fixture
def ws(core):
    return core.workspace("acme", "test")


def test_builtin_kinds(core) -> None:
    assert {"agent.action", "agent.handoff", "agent.error"} <= set(core.events.kinds)
    assert all(isinstance(d, str) and d for d in core.events.kinds.values())


def test_listener_receives_published_event(core, ws) -> None:
    got: list[Event] = []
    core.events.subscribe("agent.action", got.append)
    published = ws.publish("agent.action", {"agent_id": "agt_1", "action": "reply"})
    assert got == [published]
    event = got[0]
    assert re.match(r"^evt_[0-9A-Za-z]+$", event.id)
    assert event.type == "agent.action"
    assert event.data == {"agent_id": "agt_1", "action": "reply"}
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$", event.timestamp), event.timestamp
    assert event.organization_id == ws.organization_id
    assert event.environment == "test"
    wire = event.payload().model_dump()
    assert wire == {
        "id": event.id,
        "type": "agent.action",
        "timestamp": event.timestamp,
        "data": {"agent_id": "agt_1", "action": "reply"},
    }


def test_events_are_scoped_and_unique(core) -> None:
    got: list[Event] = []
    core.events.subscribe("agent.handoff", got.append)
    a = core.workspace("acme", "test").publish("agent.handoff", {})
    b = core.workspace("acme", "live").publish("agent.handoff", {})
    c = core.workspace("globex", "live").publish("agent.handoff", {})
    assert [e.environment for e in got] == ["test", "live", "live"]
    assert got[0].organization_id == got[1].organization_id != got[2].organization_id
    assert len({a.id, b.id, c.id}) == 3


def test_listener_only_gets_its_kind(core, ws) -> None:
    actions: list[Event] = []
    handoffs: list[Event] = []
    core.events.subscribe("agent.action", actions.append)
    core.events.subscribe("agent.handoff", handoffs.append)
    ws.publish("agent.action", {"n": 1})
    ws.publish("agent.handoff", {"n": 2})
    ws.publish("agent.error", {"n": 3})
    assert [e.data["n"] for e in actions] == [1]
    assert [e.data["n"] for e in handoffs] == [2]


def test_star_receives_every_kind(core, ws) -> None:
    everything: list[Event] = []
    core.events.subscribe("*", everything.append)
    for kind in ("agent.action", "agent.handoff", "agent.error"):
        ws.publish(kind, {})
    assert [e.type for e in everything] == ["agent.action", "agent.handoff", "agent.error"]


def test_unsubscribe(core, ws) -> None:
    got: list[Event] = []
    star: list[Event] = []
    unsubscribe = core.events.subscribe("agent.action", got.append)
    unsubscribe_star = core.events.subscribe("*", star.append)
    ws.publish("agent.action", {})
    unsubscribe()
    unsubscribe()  # twice is harmless
    ws.publish("agent.action", {})
    assert len(got) == 1 and len(star) == 2
    unsubscribe_star()
    ws.publish("agent.action", {})
    assert len(star) == 2


def test_same_callback_for_two_kinds_unsubscribes_separately(core, ws) -> None:
    got: list[str] = []

    def callback(event: Event) -> None:
        got.append(event.type)

    off_action = core.events.subscribe("agent.action", callback)
    core.events.subscribe("agent.error", callback)
    off_action()
    ws.publish("agent.action", {})
    ws.publish("agent.error", {})
    assert got == ["agent.error"]


@pytest.mark.parametrize("kind", ["agent.explode", "action", "", "AGENT.ACTION"])
def test_unknown_kind_refused(core, ws, kind: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        core.events.subscribe(kind, lambda e: None)
    assert caught.value.code == "unknown_event_kind"
    assert caught.value.status == 422
    assert "agent.action" in caught.value.detail  # lists the known kinds
    with pytest.raises(ValidationFailed) as caught:
        ws.publish(kind, {})
    assert caught.value.code == "unknown_event_kind"


def test_failing_listener_does_not_break_publish_or_others(core, ws, caplog) -> None:
    got: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    core.events.subscribe("agent.action", broken)
    core.events.subscribe("agent.action", got.append)
    core.events.subscribe("*", got.append)
    with caplog.at_level(logging.ERROR, logger="agentcore.events"):
        event = ws.publish("agent.action", {"x": 1})
    assert got == [event, event]
    assert any("listener bug" in (r.exc_text or str(r.exc_info)) for r in caplog.records)
    assert any(event.id in r.getMessage() for r in caplog.records)


def test_sink_failure_propagates_and_listeners_are_not_called(core, ws) -> None:
    got: list[Event] = []
    core.events.subscribe("agent.action", got.append)
    stored: list[Event] = []
    core.events.add_sink(stored.append)
    ws.publish("agent.action", {"ok": True})
    assert len(stored) == 1 and len(got) == 1

    def failing(event: Event) -> None:
        raise OSError("disk full")

    core.events.add_sink(failing)
    with pytest.raises(OSError, match="disk full"):
        ws.publish("agent.action", {"ok": False})
    assert len(got) == 1  # never acknowledged to listeners without being stored


class ShippingKinds:
    @hookimpl
    def agentcore_register_event_kinds(self, register) -> None:
        register("order.shipped", "An order left the warehouse.")


def test_plugin_registers_a_kind(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "p.db", plugins=[ShippingKinds()]) as core:
        assert core.events.kinds["order.shipped"] == "An order left the warehouse."
        got: list[Event] = []
        core.events.subscribe("order.shipped", got.append)
        event = core.workspace("acme").publish("order.shipped", {"order": 7})
        assert got == [event] and event.type == "order.shipped"
    with AgentCore.open(tmp_path / "q.db") as plain:  # another core does not have it
        assert "order.shipped" not in plain.events.kinds
        with pytest.raises(ValidationFailed):
            plain.workspace("acme").publish("order.shipped", {})


@pytest.mark.parametrize("kind", ["", "nodot", "*"])
def test_bad_kind_names_refused_at_registration(core, kind: str) -> None:
    with pytest.raises(ValueError):
        core.events.register_kind(kind, "bad")
    assert kind not in core.events.kinds


def test_plugin_with_bad_kind_fails_open(tmp_path: Path) -> None:
    class Bad:
        @hookimpl
        def agentcore_register_event_kinds(self, register) -> None:
            register("nodot", "bad")

    with pytest.raises(ValueError):
        AgentCore.open(tmp_path / "bad.db", plugins=[Bad()])
