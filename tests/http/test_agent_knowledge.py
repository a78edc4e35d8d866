"""Per-agent knowledge over HTTP: an agent's ``knowledge.filter`` scopes its retrieval.

Two agents of one workspace, an HR one and an IT one, each scoped to its team's
documents: neither ever cites the other team's documents, even for a question only
the other team's documents answer; a change of an agent's knowledge applies from its
next message; ``null`` gives it all the workspace's knowledge back.
"""

from __future__ import annotations

from typing import Any

import helpers
import pytest
from helpers import assert_problem

from agentcore import AgentCore
from agentcore.schema import STORED, Agent

api = helpers.api  # uvicorn and ASGI, acme/test read+write key, no 429s

HR_ONLY = {"filter": {"type": "eq", "key": "team", "value": "hr"}}
IT_ONLY = {"filter": {"type": "eq", "key": "team", "value": "it"}}
DOCUMENTS = [
    ("vacation.txt", "Employees get twenty five vacation days per year.", "hr"),
    ("parental.txt", "Parental leave lasts sixteen weeks for every parent.", "hr"),
    ("laptops.txt", "Laptops are replaced every three years by the IT team.", "it"),
    ("password.txt", "Passwords are reset on the XK-4471-Q portal within one day.", "it"),
]
QUESTIONS = [
    "How many vacation days do employees get?",
    "How long does parental leave last?",
    "How often are laptops replaced?",
    "Where are passwords reset?",
]


def teams(api: Any) -> dict[str, str]:
    """The two teams' documents; their team by source."""
    for source, text, team in DOCUMENTS:
        response = api.post(
            "/v1/knowledge/documents",
            json={"source": source, "text": text, "metadata": {"team": team}},
        )
        assert response.status_code == 201, response.text
    return {source: team for source, _, team in DOCUMENTS}


def agent(api: Any, name: str, knowledge: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name}
    if knowledge is not None:
        body["knowledge"] = knowledge
    response = api.post("/v1/agents", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def cited(api: Any, agent_id: str, question: str) -> set[str]:
    response = api.post("/v1/chat/message", json={"agentId": agent_id, "message": question})
    assert response.status_code == 200, response.text
    return {citation["source"] for citation in response.json()["citations"]}


def test_an_agent_scoped_away_from_a_document_never_cites_it(api: Any) -> None:
    team_of = teams(api)
    hr, it = agent(api, "HR helper", HR_ONLY), agent(api, "IT helper", IT_ONLY)
    everyone = agent(api, "Everyone")
    assert hr["knowledge"] == HR_ONLY and everyone["knowledge"] is None
    for question in QUESTIONS:
        assert {team_of[s] for s in cited(api, hr["id"], question)} <= {"hr"}, question
        assert {team_of[s] for s in cited(api, it["id"], question)} <= {"it"}, question
    # each answers its own team's questions, and the unscoped agent all of them
    assert cited(api, hr["id"], QUESTIONS[0]) == {"vacation.txt"}
    assert cited(api, it["id"], QUESTIONS[3]) == {"password.txt"}
    assert cited(api, everyone["id"], QUESTIONS[3]) == {"password.txt"}


def test_a_change_applies_from_the_next_message(api: Any) -> None:
    teams(api)
    helper = agent(api, "Helper", HR_ONLY)
    one = f"/v1/agents/{helper['id']}"
    assert cited(api, helper["id"], QUESTIONS[2]) <= {"vacation.txt", "parental.txt"}
    patched = api.patch(one, json={"knowledge": IT_ONLY})
    assert patched.status_code == 200 and patched.json()["knowledge"] == IT_ONLY
    assert api.get(one).json()["knowledge"] == IT_ONLY
    assert cited(api, helper["id"], QUESTIONS[2]) == {"laptops.txt"}
    # other fields leave it as it is; null takes the scope away
    renamed = api.patch(one, json={"name": "Renamed"})
    assert renamed.json()["knowledge"] == IT_ONLY
    cleared = api.patch(one, json={"knowledge": None})
    assert cleared.status_code == 200 and cleared.json()["knowledge"] is None
    assert cited(api, helper["id"], QUESTIONS[0]) == {"vacation.txt"}
    # a filter that selects nothing: the agent finds nothing to cite
    api.patch(
        one, json={"knowledge": {"filter": {"type": "in", "key": "team", "value": ["legal"]}}}
    )
    assert cited(api, helper["id"], QUESTIONS[0]) == set()
    # a filter follows metadata changes: a document moved to legal is found again
    documents = api.get("/v1/knowledge/documents", params={"limit": 10}).json()["documents"]
    vacation = next(d for d in documents if d["source"] == "vacation.txt")
    api.patch(f"/v1/knowledge/documents/{vacation['id']}", json={"metadata": {"team": "legal"}})
    assert cited(api, helper["id"], QUESTIONS[0]) == {"vacation.txt"}


@pytest.mark.parametrize(
    ("knowledge", "param"),
    [
        ({"filter": {"type": "eq", "key": "team"}}, "knowledge.filter.value"),
        ({"filter": {"type": "eq", "key": "n", "value": 2**53 + 1}}, "knowledge.filter.value"),
        ({"filter": {"type": "xor", "filters": []}}, "knowledge.filter"),
        ({"filters": []}, "knowledge.filters"),
        ("hr", "knowledge"),
    ],
)
def test_a_malformed_knowledge_filter_is_a_422(api: Any, knowledge: Any, param: str) -> None:
    refused = api.post("/v1/agents", json={"name": "x", "knowledge": knowledge})
    assert_problem(refused, 422, "validation_error", param=param)
    made = agent(api, "y")
    refused = api.patch(f"/v1/agents/{made['id']}", json={"knowledge": knowledge})
    assert_problem(refused, 422, "validation_error", param=param)
    assert api.get(f"/v1/agents/{made['id']}").json()["knowledge"] is None


def test_the_python_api_and_the_client(core: AgentCore) -> None:
    ws = core.workspace("acme")
    for source, text, team in DOCUMENTS:
        ws.knowledge.ingest_text(source, text, metadata={"team": team})
    hr = ws.agents.create(name="HR", knowledge=HR_ONLY)
    assert hr.knowledge is not None and hr.knowledge.filter is not None
    assert ws.agents.get(hr.id).knowledge == hr.knowledge
    answer = ws.chat.send(hr.id, QUESTIONS[3])
    assert {c.source for c in answer.citations} <= {"vacation.txt", "parental.txt"}
    it = ws.agents.update(hr.id, knowledge=IT_ONLY)
    assert it.knowledge is not None and it.knowledge.model_dump(exclude_none=True) == IT_ONLY
    assert {c.source for c in ws.chat.send(hr.id, QUESTIONS[3]).citations} == {"password.txt"}
    assert ws.agents.update(hr.id, knowledge=None).knowledge is None


def test_an_agent_stored_by_an_older_version_with_a_large_integer_is_read(
    api: Any, keys: Any
) -> None:
    # older versions accepted any integer in a filter; such an agent must still be read
    # (a 500 on GET and on the list otherwise) though a new one is refused
    made = agent(api, "old")
    legacy = {"type": "eq", "key": "n", "value": 10**309}
    stored = Agent.model_validate({**made, "knowledge": {"filter": legacy}}, context=STORED)
    core = keys.core
    scope = (core.workspace("acme").organization_id, "test")
    assert core.store.update_agent(*scope, stored, expected_status=made["status"])
    fetched = api.get(f"/v1/agents/{made['id']}")
    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["knowledge"] == {"filter": legacy}
    listed = api.get("/v1/agents")
    assert listed.status_code == 200 and listed.json()["agents"][0]["knowledge"] == {
        "filter": legacy
    }
