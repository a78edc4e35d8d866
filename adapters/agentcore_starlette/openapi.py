"""The OpenAPI 3.1 document, generated from the route table and the pydantic models,
and served (``OpenApiDocument``, ``GET /v1/openapi.json``)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from agentcore import __version__
from agentcore.config import Settings
from agentcore.schema import (
    MAX_EXTERNAL_ID_CHARS,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_STRING_CHARS,
    NO_NUL,
    Health,
    Problem,
)
from agentcore_starlette.declared_limits import declare_limits, of_type
from agentcore_starlette.openai.responses import OpenAIErrorResponse
from agentcore_starlette.routing import ApiRoute

REF = "#/components/schemas/{model}"
_ERRORS = {
    "400": "Malformed request",
    "401": "Missing or invalid API key",
    "403": "The key lacks the needed scope, or a client token may not use this route",
    "404": "No such object in this organization and environment",
    "409": "Conflict with the object's state",
    "413": "Body too large",
    "415": "Unsupported media type",
    "422": "Invalid field",
    "429": "Rate limited",
}


def _schema(model: type[BaseModel], components: dict[str, Any], mode: str) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault(model.__name__, schema)
    return {"$ref": REF.format(model=model.__name__)}


def _event_stream(route: ApiRoute, components: dict[str, Any]) -> dict[str, Any]:
    """The ``text/event-stream`` media type of a streamed answer. Its ``schema`` is one
    event, as Open API 3.1 reads the schema of a stream (3.2 calls it ``itemSchema``):
    ``event`` names it and ``data`` is one JSON document of that event's schema
    (``contentMediaType``/``contentSchema``); ``x-events`` lists them by name too."""
    names = ", ".join(f"`{event.name}`" for event in route.events)
    data = {event.name: _schema(event.data, components, "serialization") for event in route.events}
    one_event = {
        "type": "object",
        "description": f"One server-sent event ({names}); lines starting with ':' are "
        "heartbeats. Each event's `data` is one JSON document.",
        "required": ["event", "data"],
        "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
        "oneOf": [
            {
                "properties": {
                    "event": {"const": name},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": schema,
                    },
                }
            }
            for name, schema in data.items()
        ],
    }
    return {
        "schema": one_event,
        "x-events": {
            event.name: {"description": event.description, "data": data[event.name]}
            for event in route.events
        },
    }


def _error_responses(
    route: ApiRoute, components: dict[str, Any], problem: dict[str, Any]
) -> dict[str, Any]:
    """The failures of ``route``: problem documents, or for the OpenAI-compatible routes
    OpenAI's error envelope (an invalid field is a 400 there, not a 422)."""
    if route.error_format == "openai":
        envelope = _schema(OpenAIErrorResponse, components, "serialization")
        return {
            status: {"description": text, "content": {"application/json": {"schema": envelope}}}
            for status, text in _ERRORS.items()
            if status != "422"
        }
    return {
        status: {"description": text, "content": {"application/problem+json": {"schema": problem}}}
        for status, text in _ERRORS.items()
    }


def _upload_metadata(paths: dict[str, dict[str, Any]], metadata: dict[str, Any]) -> None:
    """The multipart upload's ``metadata`` part: the JSON body's ``metadata`` object (its
    limits included), sent as ``application/json``."""
    for operations in paths.values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            form = content.get("multipart/form-data")
            if form is None or "metadata" not in form["schema"]["properties"]:
                continue
            declared = form["schema"]["properties"]["metadata"]
            declared.update(copy.deepcopy(of_type(metadata, "object")))
            form["encoding"] = {
                "metadata": {"contentType": "application/json"},
                "access": {"contentType": "application/json"},
            }


def _query_schema(name: str, schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    if name == "limit":  # pagination: as Settings.page_size enforces it
        return {**schema, "minimum": 1, "maximum": settings.max_page_size}
    if schema.get("type") == "string" and "enum" not in schema:
        return {**schema, "pattern": NO_NUL}
    return schema


def _health_operation(components: dict[str, Any], problem: dict[str, Any]) -> dict[str, Any]:
    """``GET /health``: public (no key), for load balancers."""
    return {
        "get": {
            "operationId": "health",
            "summary": "Node health",
            "description": "200 when the store answers a cheap query and every background"
            " loop of the node (webhook delivery, index maintenance, ...) runs; 503 with"
            " a problem (code `unhealthy`) naming what failed, so a load balancer can take"
            " the node out. Needs no key and holds no tenant data.",
            "tags": ["health"],
            "security": [],
            "responses": {
                "200": {
                    "description": "Healthy",
                    "content": {
                        "application/json": {"schema": _schema(Health, components, "serialization")}
                    },
                },
                "503": {
                    "description": "Unhealthy: the store does not answer or a loop is not"
                    " running (the members of the health report are added to the problem)",
                    "content": {"application/problem+json": {"schema": problem}},
                },
            },
        }
    }


def _responses(
    route: ApiRoute, components: dict[str, Any], problem: dict[str, Any]
) -> dict[str, Any]:
    """What ``route`` answers: its success (and 202 for queued work, an event stream
    for a streamed answer) and its failures."""
    success = {"application/json": {"schema": _schema(route.response, components, "serialization")}}
    responses: dict[str, Any] = {
        str(route.status_code): {"description": "Success", "content": success}
    }
    if route.accepted is not None:
        responses["202"] = {
            "description": "Accepted: processing in the background",
            "content": {
                "application/json": {"schema": _schema(route.response, components, "serialization")}
            },
        }
    responses.update(_error_responses(route, components, problem))
    if route.events:
        success["text/event-stream"] = _event_stream(route, components)
    return responses


def _upload_form(settings: Settings) -> dict[str, Any]:
    """The ``multipart/form-data`` body of a document upload (``uploads.read_upload``)."""
    return {
        "schema": {
            "type": "object",
            "required": ["file"],
            "additionalProperties": False,
            "properties": {
                "file": {
                    "type": "string",
                    # 3.1's way, and 3.0's, which generated clients read as
                    # a file to upload (openapi-python-client's File)
                    "contentMediaType": "application/octet-stream",
                    "format": "binary",
                    "minLength": 1,
                    "description": "A PDF, Markdown or UTF-8 text file,"
                    f" at most {settings.max_upload_bytes} bytes.",
                },
                "metadata": {
                    # an object: multipart sends it as a JSON part (encoding),
                    # its schema the JSON body's (set by _upload_metadata)
                    "type": "object",
                    "description": "The document's metadata as a JSON object:"
                    f" at most {MAX_METADATA_KEYS} keys of 1-{MAX_METADATA_KEY_CHARS}"
                    " characters, each value a string of at most"
                    f" {MAX_METADATA_STRING_CHARS} characters, a number or a"
                    " boolean (as the JSON body's `metadata`).",
                },
                "external_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_EXTERNAL_ID_CHARS,
                    "pattern": NO_NUL,
                    "description": "Your own id for the document: a ready"
                    " document under it is replaced when this one is ready.",
                },
                "access": {
                    # an object: a JSON part (encoding), as the JSON body's `access`
                    "$ref": REF.format(model="DocumentAccess"),
                    "description": "Who may read it, as a JSON object"
                    " `{users, groups}` (left out: everyone in the workspace).",
                },
            },
        }
    }


def _request_body(
    route: ApiRoute, components: dict[str, Any], settings: Settings
) -> dict[str, Any]:
    """The body ``route`` takes (it has a request model)."""
    assert route.request is not None
    schema = _schema(route.request, components, "validation")  # its limits are declared
    if route.body == "json_or_upload":
        # one media type per operation: generators write a body of several types
        # badly (openapi-python-client#1451); its JSON body is declared at the
        # route that takes only that (POST /knowledge/documents/text)
        return {"required": True, "content": {"multipart/form-data": _upload_form(settings)}}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _operation(
    route: ApiRoute, components: dict[str, Any], problem: dict[str, Any], settings: Settings
) -> dict[str, Any]:
    """The OpenAPI operation of ``route``."""
    operation: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "description": (route.handler.__doc__ or "").strip(),
        "tags": [route.tag],
        "x-scope": route.scope,
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", route.path)
        ]
        + [
            {
                "name": param.name,
                "in": "query",
                "required": False,
                "schema": _query_schema(param.name, param.schema, settings),
                "description": param.description,
            }
            for param in route.query
        ],
        "responses": _responses(route, components, problem),
    }
    if route.request is not None:
        operation["requestBody"] = _request_body(route, components, settings)
    return operation


def build_openapi(
    routes: Sequence[ApiRoute],
    *,
    prefix: str,
    version: str,
    settings: Settings | None = None,
    event_kinds: Sequence[str] = (),
    chat_models: Sequence[str] = (),
    rerank: bool = True,
    root_path: str = "",
    paths: Mapping[str, dict[str, Any]] = {},  # noqa: B006 - never mutated
) -> dict[str, Any]:
    """An OpenAPI 3.1 document covering every route in ``routes``.

    :param settings: the core's settings, whose limits it declares (default:
        ``Settings()``'s).
    :param event_kinds: the kinds a subscription may name (the core's event bus).
    :param chat_models: the names an agent's ``model`` may take.
    :param rerank: whether the core has a reranker; without one, a search's ``rerank``
        is declared ``false`` only (``true`` is refused: 400 ``reranker_unavailable``).
    :param root_path: where the app is mounted (ASGI ``root_path``): the ``servers`` URL.
    :param paths: the operations of the app's other endpoints, by path under
        ``prefix`` (the MCP endpoint's: ``mcp.openapi``).
    """
    settings = settings or Settings.model_validate({})
    components: dict[str, Any] = {}
    requests = {route.request.__name__ for route in routes if route.request is not None}
    problem = _schema(Problem, components, "serialization")
    operations: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation = _operation(route, components, problem, settings)
        operations.setdefault(prefix + route.path, {})[route.method.lower()] = operation
    operations[prefix + "/health"] = _health_operation(components, problem)
    operations.update((prefix + path, operation) for path, operation in paths.items())
    extra: dict[str, Any] = {}
    declare_limits(
        components,
        requests,
        settings,
        event_kinds=event_kinds,
        chat_models=chat_models,
        extra=extra,
    )
    if not rerank and "SearchRequest" in components:
        components["SearchRequest"]["properties"]["rerank"]["const"] = False
    if "TextDocumentCreate" in components:
        _upload_metadata(operations, components["TextDocumentCreate"]["properties"]["metadata"])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Chat Service API (agentcore)",
            "version": version,
            "description": "Agents, cited answers, knowledge search, webhooks and key checks.",
        },
        "servers": [{"url": root_path or "/"}],
        "security": [{"bearerAuth": []}],
        "paths": operations,
        "components": {
            "schemas": components,
            "x-agentcore-schemas": extra,
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "ak_test_…"}
            },
        },
    }


class OpenApiDocument:
    """The document of one app (``GET /v1/openapi.json``, ``serve``), built when first
    asked for at each mount path (its ``servers`` entry differs), then served from
    memory. It declares the limits the serving core enforces (its settings, event kinds,
    chat models, and whether it can rerank).

    :param paths: the app's other operations (``build_openapi``).
    """

    def __init__(
        self,
        routes: Sequence[ApiRoute],
        settings: Settings,
        *,
        prefix: str,
        event_kinds: Sequence[str],
        chat_models: Sequence[str],
        paths: Mapping[str, dict[str, Any]],
        rerank: bool = True,
    ) -> None:
        self.routes = list(routes)
        self.rerank = rerank
        self.settings = settings
        self.prefix = prefix
        self.event_kinds = list(event_kinds)
        self.chat_models = list(chat_models)
        self.paths = dict(paths)
        self.documents: dict[str, bytes] = {}  # by mount path

    async def serve(self, request: Request) -> Response:
        """The endpoint: the document for the mount path of ``request``."""
        root_path = request.scope.get("root_path", "")
        document = self.documents.get(root_path)
        if document is None:
            document = self.documents[root_path] = json.dumps(
                build_openapi(
                    self.routes,
                    prefix=self.prefix,
                    version=__version__,
                    settings=self.settings,
                    event_kinds=self.event_kinds,
                    chat_models=self.chat_models,
                    rerank=self.rerank,
                    root_path=root_path,
                    paths=self.paths,
                )
            ).encode()
        return Response(document, media_type="application/json")
