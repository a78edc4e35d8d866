"""The OpenAPI document: every route of the table, OpenAPI 3.1, schemas that resolve."""

from __future__ import annotations

from typing import Any

from conftest import Api

from agentcore_starlette.routes import ROUTES


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    # components/schemas, or the recursive ones generators are kept from
    # (openapi.TOOL_SCHEMAS, referenced under `if: true, then:` only)
    where, _, name = ref.rpartition("/")
    assert where in ("#/components/schemas", "#/components/x-agentcore-schemas"), ref
    schemas = document["components"][where.rsplit("/", 1)[1]]
    assert name in schemas, f"dangling $ref {ref}"
    schema: dict[str, Any] = schemas[name]
    return schema


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_every_route_is_documented(api: Api) -> None:
    response = api.get("/v1/openapi.json", key=None)
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    documented = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    expected = {(route.method, "/v1" + route.path) for route in ROUTES}
    # the one public route, and the MCP endpoint (not a route of the table)
    assert documented == expected | {("GET", "/v1/health"), ("POST", "/v1/mcp")}
    health = document["paths"]["/v1/health"]["get"]
    assert health["security"] == [] and set(health["responses"]) == {"200", "503"}
    mcp = document["paths"]["/v1/mcp"]["post"]
    assert mcp["requestBody"]["content"]["application/json"]["schema"]["required"] == [
        "jsonrpc",
        "method",
    ]
    for ref in _refs(document):
        _resolve(document, ref)


def test_operations_carry_security_errors_and_bodies(api: Api) -> None:
    document = api.get("/v1/openapi.json", key=None).json()
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    operation_ids = set()
    for route in ROUTES:
        operation = document["paths"]["/v1" + route.path][route.method.lower()]
        operation_ids.add(operation["operationId"])
        assert str(route.status_code) in operation["responses"]
        if route.error_format == "openai":  # OpenAI's envelope, and 400 for a bad field
            envelope = operation["responses"]["401"]["content"]["application/json"]
            assert _resolve(document, envelope["schema"]["$ref"])["title"] == "OpenAIErrorResponse"
            assert "422" not in operation["responses"]
        else:
            problem = operation["responses"]["401"]["content"]["application/problem+json"]
            assert _resolve(document, problem["schema"]["$ref"])["title"] == "Problem"
        if route.request is not None and route.body == "json_or_upload":
            # one media type per operation (generators): the upload here, its JSON
            # body at a path of its own
            assert list(operation["requestBody"]["content"]) == ["multipart/form-data"]
        elif route.request is not None:
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert _resolve(document, body["$ref"])["title"] == route.request.__name__
        names = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
        assert names == {part[1:-1] for part in route.path.split("/") if part.startswith("{")}
    assert len(operation_ids) == len(ROUTES)  # unique operation ids
    upload = document["paths"]["/v1/knowledge/documents"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload
    text = document["paths"]["/v1/knowledge/documents/text"]["post"]["requestBody"]["content"]
    assert list(text) == ["application/json"]


def _outside_then(node: Any, inside: bool = False) -> list[str]:
    """The refs to the generator-hidden schemas found outside any ``then``."""
    if isinstance(node, list):
        return [ref for value in node for ref in _outside_then(value, inside)]
    if not isinstance(node, dict):
        return []
    ref = node.get("$ref")
    found = [ref] if isinstance(ref, str) and "x-agentcore-schemas" in ref and not inside else []
    for key, value in node.items():
        found += _outside_then(value, inside or key == "then")
    return found


def test_what_generators_cannot_read_is_only_under_then(api: Api) -> None:
    """Recursive schemas and cross-field rules are declared where validators apply them
    (``if: true, then: ...``) and client generators skip them: openapi-python-client
    drops a model holding a recursive union, and every operation using it."""
    document = api.get("/v1/openapi.json", key=None).json()
    hidden = document["components"]["x-agentcore-schemas"]
    assert {"ToolSchema", "ToolSchemaOrBoolean", "NoNulJson"} <= set(hidden)
    visible = {**document, "components": {"schemas": document["components"]["schemas"]}}
    assert _outside_then(visible) == []
    parameters = document["components"]["schemas"]["ToolDefinition"]["properties"]["parameters"]
    assert parameters["if"] is True and parameters["then"]["required"] == ["type"]


def test_rerank_is_declared_as_the_core_can_do_it(api: Api, tmp_path: Any) -> None:
    """Without a reranker a search's ``rerank`` may only be false (true is a 400
    ``reranker_unavailable``, so fuzzers must not send it as valid); with one, either."""
    from agentcore import AgentCore, hookimpl
    from agentcore_starlette import create_app

    schema = api.get("/v1/openapi.json", key=None).json()["components"]["schemas"]
    assert schema["SearchRequest"]["properties"]["rerank"]["const"] is False
    refused = api.post("/v1/knowledge/search", json={"query": "x", "rerank": True})
    assert refused.status_code == 400 and refused.json()["code"] == "reranker_unavailable"

    class Keeps:
        name = "keeps"

        def rerank(self, query: str, documents: Any, top_n: int) -> list[tuple[int, float]]:
            return [(i, 1.0) for i in range(len(documents))][:top_n]

    class Registers:
        @hookimpl
        def agentcore_register_rerankers(self, register: Any, settings: Any) -> None:
            register(Keeps())

    with AgentCore.open(tmp_path / "r.db", plugins=[Registers()], entry_points=False) as core:
        served = Api(create_app(core), None).get("/v1/openapi.json", key=None).json()
    declared = served["components"]["schemas"]["SearchRequest"]["properties"]["rerank"]
    assert "const" not in declared and declared["type"] == "boolean"


def test_the_document_declares_that_a_tool_message_names_its_call(api: Api) -> None:
    """The server refuses a ``tool`` message without ``tool_call_id`` (400
    ``unknown_tool_call``), and the document says so, as OpenAI's does: a validator
    (schemathesis) reading it never takes such a message for a valid one."""
    from jsonschema import Draft202012Validator

    document = api.get("/v1/openapi.json", key=None).json()
    root = {
        "$ref": "#/components/schemas/ChatCompletionMessageParam",
        "components": document["components"],
    }
    validator = Draft202012Validator(root)
    valid = [
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "user", "content": "How many vacation days?"},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
    invalid = [
        {"role": "tool", "content": "42"},
        {"role": "tool", "tool_call_id": "", "content": "42"},
        {"role": "user", "content": "  "},  # the rule declared before this one still holds
    ]
    assert [validator.is_valid(message) for message in valid] == [True] * len(valid)
    assert [validator.is_valid(message) for message in invalid] == [False] * len(invalid)
