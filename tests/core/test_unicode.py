"""Lone UTF-16 surrogates through the Python API: a ``ValidationFailed`` naming the
argument, before anything reaches the store (which could not write it), on both stores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from agentcore import AgentCore
from agentcore._unicode import find_lone_surrogate, lone_surrogate
from agentcore.chat_models import ChatTurn
from agentcore.errors import ValidationFailed
from agentcore.schema import AgentCreate

pytestmark = pytest.mark.both_stores

LONE = "\ud800"


def test_find_lone_surrogate_names_the_first_one_in_document_order() -> None:
    value = {"a": "fine", "b": [1, {"c": "x" + LONE}], "d": "\udfff"}
    found = find_lone_surrogate(value, prefix=("body",))
    assert found is not None
    assert (found.param, found.in_key, found.code_point) == ("body.b.1.c", False, 0xD800)
    key = find_lone_surrogate({"ok": 1, "meta": {"k" + LONE: "v"}})
    assert key is not None and (key.param, key.in_key) == ("meta", True)
    assert "a key holds" in key.message and LONE not in key.message
    top = find_lone_surrogate({LONE: 1})
    assert top is not None and top.param is None and "a field name" in top.message


def test_pairs_and_other_text_are_not_lone_surrogates() -> None:
    assert lone_surrogate("smile \U0001f600, café, \x00") is None
    assert find_lone_surrogate({"k": ["\U0001f600", 1.5, None, True]}) is None
    assert lone_surrogate("a\udc00") == 0xDC00


@pytest.fixture
def ws(core: AgentCore) -> Any:
    return core.workspace("acme", "test")


CALLS: list[tuple[str, Callable[[Any], object], str]] = [
    (
        "metadata value",
        lambda ws: ws.knowledge.ingest_text("a.txt", "hello", metadata={"k": LONE}),
        "metadata.k",
    ),
    (
        "metadata key",
        lambda ws: ws.knowledge.ingest_text("a.txt", "hello", metadata={"k" + LONE: "v"}),
        "metadata",
    ),
    ("text", lambda ws: ws.knowledge.ingest_text("a.txt", "hello " + LONE), "text"),
    ("source", lambda ws: ws.knowledge.ingest_text("a" + LONE + ".txt", "hello"), "source"),
    (
        "file name",
        lambda ws: ws.knowledge.ingest_file(b"hello", filename="a" + LONE + ".txt"),
        "filename",
    ),
    ("query", lambda ws: ws.knowledge.search("vacation " + LONE), "query"),
    ("queries", lambda ws: ws.knowledge.search_many(["fine", LONE]), "queries.1"),
    (
        "filter",
        lambda ws: ws.knowledge.search("q", filter={"type": "eq", "key": "k", "value": LONE}),
        "filter.value",
    ),
    (
        "webhook url",
        lambda ws: ws.webhooks.subscribe("http://127.0.0.1:9/" + LONE, ["agent.action"]),
        "url",
    ),
    (
        "webhook description",
        lambda ws: ws.webhooks.subscribe("http://127.0.0.1:9/h", ["agent.action"], LONE),
        "description",
    ),
]


@pytest.mark.parametrize(("what", "call", "param"), CALLS, ids=[c[0] for c in CALLS])
def test_each_argument_is_refused_naming_it(ws: Any, what: str, call: Any, param: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        call(ws)
    assert (refused.value.code, refused.value.param) == ("validation_error", param)
    assert "lone UTF-16 surrogate (U+D800)" in refused.value.detail
    assert ws.knowledge.list().documents == []
    assert ws.webhooks.list().webhooks == []


def test_a_documents_new_metadata_is_checked(ws: Any) -> None:
    document = ws.knowledge.ingest_text("a.txt", "hello", metadata={"k": "v"})
    with pytest.raises(ValidationFailed) as refused:
        ws.knowledge.update(document.id, metadata={"k": "x" + LONE})
    assert refused.value.param == "metadata.k"
    assert ws.knowledge.get(document.id).metadata == {"k": "v"}


def test_chat_says_what_is_wrong_with_the_message_not_with_event_data(ws: Any) -> None:
    agent = ws.agents.create(name="helper").id
    for kwargs, param in [
        ({"message": "hi " + LONE}, "message"),
        ({"message": "hi", "conversation_id": "conv_" + LONE}, "conversationId"),
        (
            {"message": "hi", "history": [ChatTurn("user", "ok"), ChatTurn("assistant", LONE)]},
            "history.1.content",
        ),
    ]:
        with pytest.raises(ValidationFailed) as refused:
            ws.chat.send(agent, **kwargs)
        assert (refused.value.code, refused.value.param) == ("validation_error", param)
    assert ws.conversations.list().conversations == []


def test_agents_refuse_it_anywhere_in_a_field(ws: Any) -> None:
    tool = {"name": "t", "description": "d", "parameters": {"type": "object", "title": LONE}}
    with pytest.raises(ValidationError, match="lone UTF-16 surrogate") as refused:
        ws.agents.create(name="n", tools=[tool])
    assert refused.value.errors()[0]["loc"] == ("tools",)
    with pytest.raises(ValidationError) as refused:  # pydantic's own check of a plain str
        AgentCreate(name="n", role="r" + LONE)
    assert refused.value.errors()[0]["loc"] == ("role",)
    assert ws.agents.list().agents == []


def test_event_data_names_the_path_to_the_string(core: AgentCore) -> None:
    organization = core.create_organization("acme")
    with pytest.raises(ValidationFailed) as refused:
        core.events.publish(
            "agent.action",
            {"action": "x", "detail": {"items": ["ok", LONE]}},
            organization_id=organization.id,
            environment="test",
        )
    assert refused.value.code == "invalid_event_data"
    assert refused.value.param == "data.detail.items.1"
    assert "Unicode text" in refused.value.detail and LONE not in refused.value.detail
