"""The OpenAPI document: every route of the table, OpenAPI 3.1, schemas that resolve."""

from __future__ import annotations

from typing import Any

from conftest import Api

from agentcore_starlette.routes import ROUTES


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    assert ref.startswith("#/components/schemas/"), ref
    name = ref.rsplit("/", 1)[1]
    schemas = document["components"]["schemas"]
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
