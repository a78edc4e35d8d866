"""The httpx client against a real server: same models, same error classes."""

from __future__ import annotations

import pytest
from conftest import Keys, ServerThread

from agentcore import AgentCore, Client, Conflict, NotFound, PermissionDenied, ValidationFailed
from agentcore_starlette import create_app


@pytest.mark.slow
def test_client_round_trip(core: AgentCore, keys: Keys) -> None:
    secret = keys.make().secret
    with ServerThread(create_app(core)) as server, Client(server.url, secret) as client:
        assert client.verify().organization == "acme"
        agent = client.create_agent(name="Helper", role="support")
        assert client.deploy_agent(agent.id).status == "deployed"
        assert [a.id for a in client.list_agents().agents] == [agent.id]
        document = client.add_text("facts.txt", "The office cat is named Pixel and likes tuna.")
        hits = client.search("What is the cat called?", top_k=1)
        assert hits.results[0].document_id == document.id
        answer = client.chat(agent.id, "What is the office cat called?")
        assert "Pixel" in answer.response
        assert [c.source for c in answer.citations] == ["facts.txt"]
        conversation = client.get_conversation(answer.conversationId)
        assert conversation.message_count == 2
        assert [c.id for c in client.list_conversations().conversations] == [conversation.id]
        messages = client.list_messages(conversation.id).messages
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[1].citations == answer.citations and messages[1].usage is None
        assert client.delete_conversation(conversation.id).deleted is True
        with pytest.raises(NotFound):
            client.get_conversation(conversation.id)
        assert client.delete_document(document.id).deleted is True


@pytest.mark.slow
def test_client_raises_the_core_errors(core: AgentCore, keys: Keys) -> None:
    write = keys.make().secret
    read = keys.make(scopes=("read",)).secret
    with ServerThread(create_app(core)) as server:
        with Client(server.url, write) as client:
            agent = client.create_agent(name="A")
            with pytest.raises(Conflict) as conflict:
                client.undeploy_agent(agent.id)
            assert conflict.value.code == "invalid_state_transition"
            with pytest.raises(NotFound):
                client.get_agent("agt_missing")
            with pytest.raises(ValidationFailed) as invalid:
                client.search("x", top_k=0)
            assert invalid.value.param == "top_k"
        with Client(server.url, read) as client, pytest.raises(PermissionDenied):
            client.create_agent(name="B")
