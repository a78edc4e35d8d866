"""/v1/agents over real HTTP: CRUD, pagination, tools validation, states, scopes, tenancy."""
# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from helpers import api, assert_problem  # noqa: F401 (api: faster fixture)

from agentcore_starlette.routes import ROUTES


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _create(api, **fields: Any) -> dict[str, Any]:
    response = api.post("/v1/agents", json=fields)
    assert response.status_code == 201, response.text
    return response.json()


# create / get ---------------------------------------------------------------


def test_create_starts_in_draft_and_get_returns_it(api) -> None:
    response = api.post(
        "/v1/agents",
        json={
            "name": "Support",
            "role": "support",
            "system_prompt": "Be kind.",
            "tools": [WEATHER],
        },
    )
    assert response.status_code == 201, response.text
    agent = response.json()
    assert re.match(r"^agt_[0-9A-Za-z]+$", agent["id"])
    assert agent["status"] == "draft"
    assert agent["role"] == "support"
    assert agent["name"] == "Support"
    assert agent["system_prompt"] == "Be kind."
    assert agent["tools"] == [{**WEATHER, "require_approval": "never"}]  # the default, said
    assert agent["created_at"] == agent["updated_at"]
    got = api.get(f"/v1/agents/{agent['id']}")
    assert got.status_code == 200
    assert got.json() == agent


def test_create_with_defaults(api) -> None:
    agent = _create(api)
    assert agent["status"] == "draft"
    assert agent["role"] == "assistant"
    assert agent["tools"] == []


def test_get_unknown_agent(api) -> None:
    assert_problem(api.get("/v1/agents/agt_doesnotexist"), 404, "resource_missing")


# list and pagination --------------------------------------------------------


def test_list_shape(api) -> None:
    empty = api.get("/v1/agents")
    assert empty.status_code == 200
    assert empty.json() == {"agents": [], "has_more": False}
    agent = _create(api, role="sales")
    body = api.get("/v1/agents").json()
    assert set(body) == {"agents", "has_more"}
    assert body["has_more"] is False
    assert len(body["agents"]) == 1
    listed = body["agents"][0]
    assert {"id", "role", "status"} <= set(listed)
    assert (listed["id"], listed["role"], listed["status"]) == (agent["id"], "sales", "draft")


def test_pagination(api) -> None:
    ids = [_create(api, name=f"a{i}")["id"] for i in range(5)]
    newest_first = list(reversed(ids))
    page1 = api.get("/v1/agents", params={"limit": 2}).json()
    assert [a["id"] for a in page1["agents"]] == newest_first[:2]
    assert page1["has_more"] is True
    page2 = api.get("/v1/agents", params={"limit": 2, "starting_after": newest_first[1]}).json()
    assert [a["id"] for a in page2["agents"]] == newest_first[2:4]
    assert page2["has_more"] is True
    page3 = api.get("/v1/agents", params={"limit": 2, "starting_after": newest_first[3]}).json()
    assert [a["id"] for a in page3["agents"]] == newest_first[4:]
    assert page3["has_more"] is False
    exact = api.get("/v1/agents", params={"limit": 5}).json()
    assert len(exact["agents"]) == 5 and exact["has_more"] is False
    assert api.get("/v1/agents", params={"limit": 100}).status_code == 200
    assert api.get("/v1/agents", params={"limit": 1}).json()["has_more"] is True


def test_bad_limit(api) -> None:
    for limit, code in [
        ("0", "limit_out_of_range"),
        ("101", "limit_out_of_range"),
        ("-1", "limit_out_of_range"),
        ("abc", "validation_error"),
        ("2.5", "validation_error"),
    ]:
        response = api.get("/v1/agents", params={"limit": limit})
        assert_problem(response, 422, code, param="limit")


def test_unknown_starting_after(api) -> None:
    _create(api)
    response = api.get("/v1/agents", params={"starting_after": "agt_nope"})
    assert_problem(response, 404, "resource_missing", param="starting_after")


def test_starting_after_from_other_org_is_unknown(api, keys) -> None:
    other = api.with_key(keys.make("globex").secret)
    foreign = _create(other)["id"]
    _create(api)
    response = api.get("/v1/agents", params={"starting_after": foreign})
    assert_problem(response, 404, "resource_missing", param="starting_after")


def test_bad_status_filter(api) -> None:
    assert_problem(
        api.get("/v1/agents", params={"status": "gone"}), 422, "validation_error", param="status"
    )


# update and tools ------------------------------------------------------------


def test_update_system_prompt_and_tools(api) -> None:
    agent = _create(api, name="n", system_prompt="old")
    response = api.patch(
        f"/v1/agents/{agent['id']}", json={"system_prompt": "new", "tools": [WEATHER]}
    )
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["system_prompt"] == "new"
    assert updated["tools"] == [{**WEATHER, "require_approval": "never"}]
    assert updated["name"] == "n"  # untouched
    assert updated["status"] == "draft"
    # as instants: a time of whole seconds is written without a fraction ('...15Z' sorts
    # after '...15.023Z' as text)
    assert instant(updated["updated_at"]) >= instant(agent["updated_at"])
    assert api.get(f"/v1/agents/{agent['id']}").json() == updated
    cleared = api.patch(f"/v1/agents/{agent['id']}", json={"tools": []}).json()
    assert cleared["tools"] == [] and cleared["system_prompt"] == "new"


def test_empty_patch_changes_nothing(api) -> None:
    agent = _create(api, system_prompt="keep")
    response = api.patch(f"/v1/agents/{agent['id']}", json={})
    assert response.status_code == 200
    assert response.json()["system_prompt"] == "keep"


BAD_TOOLS: list[tuple[Any, set[str]]] = [
    ([{**WEATHER, "name": "has space"}], {"tools.0.name"}),
    ([{**WEATHER, "name": ""}], {"tools.0.name"}),
    ([{**WEATHER, "name": "x" * 65}], {"tools.0.name"}),
    ([WEATHER, {**WEATHER, "name": "bad/name"}], {"tools.1.name"}),
    ([{**WEATHER, "parameters": {"type": "string"}}], {"tools.0.parameters"}),
    ([{**WEATHER, "parameters": {"properties": {}}}], {"tools.0.parameters"}),
    (
        [{**WEATHER, "parameters": {"type": "object", "properties": {"a": 1}}}],
        {"tools.0.parameters"},
    ),
    (  # nested schemas are checked too
        [{**WEATHER, "parameters": {"type": "object", "properties": {"a": {"type": "strng"}}}}],
        {"tools.0.parameters"},
    ),
    (
        [
            WEATHER,
            {
                **WEATHER,
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "array", "items": {"anyOf": [{"type": 3}]}}},
                },
            },
        ],
        {"tools.1.parameters"},
    ),
    (
        [{**WEATHER, "parameters": {"type": "object", "properties": {"a": {"items": "x"}}}}],
        {"tools.0.parameters"},
    ),
    (  # a type that is not a string at all (it was a 500)
        [{**WEATHER, "parameters": {"type": "object", "properties": {"a": {"type": [{}]}}}}],
        {"tools.0.parameters"},
    ),
    ([{"description": "no name"}], {"tools.0.name"}),
    ([{**WEATHER, "extra": 1}], {"tools.0.extra"}),
    ("not a list", {"tools"}),
]


def test_bad_tools_rejected_on_create_and_update(api) -> None:
    agent = _create(api)
    for tools, params in BAD_TOOLS:
        created = api.post("/v1/agents", json={"tools": tools})
        body = assert_problem(created, 422, "validation_error")
        assert body["param"] in params, (tools, body)
        patched = api.patch(f"/v1/agents/{agent['id']}", json={"tools": tools})
        body = assert_problem(patched, 422, "validation_error")
        assert body["param"] in params, (tools, body)
    assert api.get(f"/v1/agents/{agent['id']}").json()["tools"] == []
    assert [a["id"] for a in api.get("/v1/agents").json()["agents"]] == [agent["id"]]


def test_two_tools_of_one_name_conflict(api) -> None:
    """An agent's tools are keyed by name: a second of a name is a 409 naming it, a rule
    JSON Schema cannot state (a 422 would be a schema-valid request refused)."""
    agent = _create(api)
    body = assert_problem(
        api.post("/v1/agents", json={"tools": [WEATHER, WEATHER]}),
        409,
        "duplicate_tool_name",
        param="tools.1.name",
    )
    assert WEATHER["name"] in body["detail"]
    patched = api.patch(f"/v1/agents/{agent['id']}", json={"tools": [WEATHER, WEATHER]})
    assert_problem(patched, 409, "duplicate_tool_name", param="tools.1.name")
    assert api.get(f"/v1/agents/{agent['id']}").json()["tools"] == []


def test_required_may_name_a_property_properties_leaves_out(api) -> None:
    """As JSON Schema allows (the property may then hold any value)."""
    parameters = {"type": "object", "properties": {}, "required": ["city"]}
    created = api.post("/v1/agents", json={"tools": [{**WEATHER, "parameters": parameters}]})
    assert created.status_code == 201, created.text
    assert created.json()["tools"][0]["parameters"]["required"] == ["city"]


def test_a_bad_nested_tool_schema_is_named_in_the_problem(api) -> None:
    params = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "x"}}}}
    created = api.post("/v1/agents", json={"tools": [{"name": "lookup", "parameters": params}]})
    body = assert_problem(created, 422, "validation_error", param="tools.0.parameters")
    assert "'properties.a.items.type'" in body["detail"], body
    fine = {
        "type": "object",
        "properties": {
            "a": {"type": ["string", "null"]},
            "b": {"type": "array", "items": {"type": "object", "properties": {}}},
            "c": {"anyOf": [{"type": "integer"}, True], "not": {"type": "null"}},
        },
        "$defs": {"d": {"type": "number"}},
    }
    good = api.post("/v1/agents", json={"tools": [{"name": "lookup", "parameters": fine}]})
    assert good.status_code == 201, good.text


def test_patch_null_for_required_field(api) -> None:
    agent = _create(api)
    for field in ("name", "role", "system_prompt", "tools"):
        response = api.patch(f"/v1/agents/{agent['id']}", json={field: None})
        assert_problem(response, 422, "validation_error", param=field)
    assert api.get(f"/v1/agents/{agent['id']}").json() == agent


def test_patch_unknown_agent(api) -> None:
    assert_problem(api.patch("/v1/agents/agt_nope", json={"name": "x"}), 404, "resource_missing")


# states -----------------------------------------------------------------------


def test_deploy_undeploy_archive_cycle(api) -> None:
    agent_id = _create(api)["id"]
    deployed = api.post(f"/v1/agents/{agent_id}/deploy")
    assert deployed.status_code == 200, deployed.text
    assert deployed.json()["status"] == "deployed"
    assert api.get("/v1/agents").json()["agents"][0]["status"] == "deployed"
    undeployed = api.post(f"/v1/agents/{agent_id}/undeploy")
    assert undeployed.status_code == 200
    assert undeployed.json()["status"] == "draft"
    assert api.post(f"/v1/agents/{agent_id}/deploy").json()["status"] == "deployed"
    archived = api.delete(f"/v1/agents/{agent_id}")
    assert archived.status_code == 200
    assert archived.json()["status"] == "archived"
    assert api.get(f"/v1/agents/{agent_id}").json()["status"] == "archived"


def test_invalid_transitions(api) -> None:
    agent_id = _create(api)["id"]
    conflict = "invalid_state_transition"
    assert_problem(api.post(f"/v1/agents/{agent_id}/undeploy"), 409, conflict)  # draft
    api.post(f"/v1/agents/{agent_id}/deploy")
    assert_problem(api.post(f"/v1/agents/{agent_id}/deploy"), 409, conflict)  # deployed
    assert api.get(f"/v1/agents/{agent_id}").json()["status"] == "deployed"
    assert api.delete(f"/v1/agents/{agent_id}").status_code == 200
    assert_problem(api.post(f"/v1/agents/{agent_id}/deploy"), 409, conflict)
    assert_problem(api.post(f"/v1/agents/{agent_id}/undeploy"), 409, conflict)
    assert_problem(api.delete(f"/v1/agents/{agent_id}"), 409, conflict)
    assert_problem(api.patch(f"/v1/agents/{agent_id}", json={"name": "x"}), 409, "agent_archived")
    assert api.get(f"/v1/agents/{agent_id}").json()["status"] == "archived"


def test_archive_draft_and_listing(api) -> None:
    kept = _create(api, name="kept")["id"]
    gone = _create(api, name="gone")["id"]
    assert api.delete(f"/v1/agents/{gone}").json()["status"] == "archived"
    default = api.get("/v1/agents").json()
    assert [a["id"] for a in default["agents"]] == [kept]
    archived = api.get("/v1/agents", params={"status": "archived"}).json()
    assert [a["id"] for a in archived["agents"]] == [gone]
    assert archived["has_more"] is False
    drafts = api.get("/v1/agents", params={"status": "draft"}).json()
    assert [a["id"] for a in drafts["agents"]] == [kept]
    assert api.get("/v1/agents", params={"status": "deployed"}).json()["agents"] == []


# scopes -----------------------------------------------------------------------

# Valid bodies per request model; routes added later with unknown models get {}.
BODIES: dict[str, Callable[[str], dict[str, Any]]] = {
    "AgentCreate": lambda agent_id: {"name": "x"},
    "AgentUpdate": lambda agent_id: {"system_prompt": "x"},
    "ChatMessageRequest": lambda agent_id: {"agentId": agent_id, "message": "hi"},
    "SearchRequest": lambda agent_id: {"query": "hi"},
    "TextDocumentCreate": lambda agent_id: {"source": "a.txt", "text": "hello"},
    "WebhookSubscribeRequest": lambda agent_id: {
        "url": "https://example.com/hook",
        "events": ["agent.action"],
    },
}
WRITE_ROUTES = [route for route in ROUTES if route.scope == "write"]


def _path(path: str, agent_id: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        return agent_id if match.group(1) == "agent_id" else f"{match.group(1)[:3]}_unknown"

    return re.sub(r"{(\w+)}", substitute, path)


def test_write_routes_are_found() -> None:
    found = {(route.method, route.path) for route in WRITE_ROUTES}
    assert {
        ("POST", "/agents"),
        ("PATCH", "/agents/{agent_id}"),
        ("DELETE", "/agents/{agent_id}"),
        ("POST", "/agents/{agent_id}/deploy"),
        ("POST", "/agents/{agent_id}/undeploy"),
    } <= found


def test_read_key_refused_on_every_write_route(api, keys) -> None:
    writer = api  # acme/test read+write
    agent = _create(writer, system_prompt="orig")
    reader = api.with_key(keys.make("acme", "test", ("read",)).secret)
    for route in WRITE_ROUTES:
        kwargs: dict[str, Any] = {}
        if route.request is not None:
            factory = BODIES.get(route.request.__name__, lambda agent_id: {})
            kwargs["json"] = factory(agent["id"])
        path = "/v1" + _path(route.path, agent["id"])
        response = reader.request(route.method, path, **kwargs)
        assert response.status_code == 403, (route.method, path, response.text)
        body = assert_problem(response, 403, "insufficient_scope")
        assert "write" in body["detail"]
    # nothing changed
    assert writer.get(f"/v1/agents/{agent['id']}").json() == agent
    assert [a["id"] for a in writer.get("/v1/agents").json()["agents"]] == [agent["id"]]


def test_scope_checked_before_body_validation(api, keys) -> None:
    reader = api.with_key(keys.make("acme", "test", ("read",)).secret)
    response = reader.post("/v1/agents", json={"tools": "not a list", "bogus": 1})
    assert_problem(response, 403, "insufficient_scope")


def test_read_key_may_read(api, keys) -> None:
    agent = _create(api)
    reader = api.with_key(keys.make("acme", "test", ("read",)).secret)
    assert reader.get("/v1/agents").json()["agents"][0]["id"] == agent["id"]
    assert reader.get(f"/v1/agents/{agent['id']}").status_code == 200


def test_write_only_key_cannot_read(api, keys) -> None:
    agent = _create(api)
    writer = api.with_key(keys.make("acme", "test", ("write",)).secret)
    assert_problem(writer.get("/v1/agents"), 403, "insufficient_scope")
    assert_problem(writer.get(f"/v1/agents/{agent['id']}"), 403, "insufficient_scope")


# tenancy ----------------------------------------------------------------------


def test_other_workspace_gets_404(api, keys) -> None:
    agent = _create(api, system_prompt="mine")
    for org, env in [("globex", "test"), ("acme", "live"), ("globex", "live")]:
        _assert_invisible(api, api.with_key(keys.make(org, env).secret), agent)


def _assert_invisible(api, other, agent: dict[str, Any]) -> None:
    agent_id = agent["id"]
    for response in (
        other.get(f"/v1/agents/{agent_id}"),
        other.patch(f"/v1/agents/{agent_id}", json={"system_prompt": "stolen"}),
        other.post(f"/v1/agents/{agent_id}/deploy"),
        other.post(f"/v1/agents/{agent_id}/undeploy"),
        other.delete(f"/v1/agents/{agent_id}"),
    ):
        body = assert_problem(response, 404, "resource_missing")
        assert body["detail"] == f"No agent with id {'agt_missing'!r}.".replace(
            "agt_missing", agent_id
        )
    assert other.get("/v1/agents").json() == {"agents": [], "has_more": False}
    assert api.get(f"/v1/agents/{agent_id}").json() == agent
    # same 404 as an id that never existed: existence does not leak
    never = other.get("/v1/agents/agt_neverexisted").json()
    assert never["code"] == "resource_missing" and never["status"] == 404


def test_an_agent_stored_with_a_nested_tool_schema_now_refused_is_still_read(api, keys) -> None:
    # nested parameter schemas are checked since they could be wrong; an agent an older
    # version stored with one (an OpenAPI 2 "file" type) is read, listed and deleted,
    # never a 500, and a change of its tools must give a valid schema
    from agentcore.schema import STORED, Agent

    made = _create(api, name="Old", tools=[WEATHER])
    legacy = {**WEATHER, "parameters": {"type": "object", "properties": {"f": {"type": "file"}}}}
    stored = Agent.model_validate({**made, "tools": [legacy]}, context=STORED)
    core = keys.core
    scope = (core.workspace("acme").organization_id, "test")
    assert core.store.update_agent(*scope, stored, expected_status=made["status"])
    fetched = api.get(f"/v1/agents/{made['id']}")
    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["tools"][0]["parameters"] == legacy["parameters"]
    assert api.get("/v1/agents").status_code == 200
    assert_problem(
        api.post("/v1/agents", json={"name": "New", "tools": [legacy]}),
        422,
        "validation_error",
    )
    fixed = api.patch(f"/v1/agents/{made['id']}", json={"tools": [WEATHER]})
    assert fixed.status_code == 200, fixed.text
    assert api.delete(f"/v1/agents/{made['id']}").status_code == 200
