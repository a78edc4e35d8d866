"""The OpenAPI 3.1 document, generated from the route table and the pydantic models."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from agentcore.config import Settings
from agentcore.schema import (
    MAX_EXTERNAL_ID_CHARS,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_STRING_CHARS,
    NO_NUL,
    NON_BLANK,
    WEBHOOK_URL_PATTERN,
    Health,
    Problem,
    tool_schema_components,
)
from agentcore_starlette.openai_responses import OpenAIErrorResponse
from agentcore_starlette.routing import ApiRoute

REF = "#/components/schemas/{model}"
_ERRORS = {
    "400": "Malformed request",
    "401": "Missing or invalid API key",
    "403": "The key lacks the needed scope",
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


def _typed(prop: dict[str, Any], kind: str) -> dict[str, Any]:
    """The sub-schema of ``prop`` of JSON type ``kind`` (itself, or its ``anyOf`` branch)."""
    if prop.get("type") == kind:
        return prop
    return next(branch for branch in prop["anyOf"] if branch.get("type") == kind)


def _no_nul_strings(schema: dict[str, Any]) -> None:
    """Give every string of a request schema without a pattern or enum the no-NUL pattern."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if node.get("type") == "string" and not {"pattern", "enum", "const"} & set(node):
            node["pattern"] = NO_NUL
        for key in ("properties",):
            stack.extend(node.get(key, {}).values())
        for key in ("anyOf", "allOf", "oneOf"):
            stack.extend(node.get(key, []))
        if isinstance(node.get("items"), dict):
            stack.append(node["items"])


TOOL_SCHEMAS = "#/components/x-agentcore-schemas/{model}"
"""Where the recursive schemas of a tool's parameters are (``_declare_tool_parameters``)."""


def _declare_tool_parameters(parameters: dict[str, Any], extra: dict[str, Any]) -> None:
    """Declare what a tool's ``parameters`` may nest, recursively, as the core checks it
    (``tool_schema_components``). Client generators cannot read recursive unions
    (openapi-python-client drops the tool and the agent models with them), so the
    schemas live outside ``components/schemas`` (in ``extra``, which becomes
    ``components/x-agentcore-schemas``) and ``parameters`` holds them under ``if: true,
    then: ...``: a validator applies them all (``then`` always holds, since ``if`` does),
    and a generator, which ignores both keywords, reads a plain object."""
    extra.update(tool_schema_components(TOOL_SCHEMAS))
    strict: dict[str, Any] = {key: parameters.pop(key) for key in ("required", "properties")}
    nested = strict["properties"]
    nested["properties"]["propertyNames"] = {"pattern": NO_NUL}
    nested["properties"]["additionalProperties"] = {"$ref": TOOL_SCHEMAS.format(model="ToolSchema")}
    nested["required"]["items"]["pattern"] = NO_NUL
    for key, schema in extra["ToolSchema"]["properties"].items():
        nested.setdefault(key, schema)  # its other keywords: as any nested schema's
    strict["propertyNames"] = {"pattern": NO_NUL}
    strict["additionalProperties"] = {"$ref": TOOL_SCHEMAS.format(model="NoNulJson")}
    parameters.update({"type": "object", "if": True, "then": strict})


def _no_nul_anywhere(schema: Any) -> None:
    """Make every free-form member of ``schema`` JSON without NUL (``NoNulJson``), as
    the server checks every string of a request, at any depth."""
    json_value = {"$ref": TOOL_SCHEMAS.format(model="NoNulJson")}
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict) or "$ref" in node:
            continue
        if node.get("type") == "object" and node.get("additionalProperties", True) is True:
            node["additionalProperties"] = json_value
            node["propertyNames"] = {"pattern": NO_NUL}
        if node.get("type") == "array" and "items" not in node:
            node["items"] = json_value
        if node.get("type") == "string" and not {"pattern", "enum", "const"} & set(node):
            node["pattern"] = NO_NUL
        for key, value in node.items():
            if key not in ("const", "enum", "default", "examples", "pattern"):
                stack.append(value)


def _strictly(component: dict[str, Any], tighten: Callable[[dict[str, Any]], None]) -> None:
    """Declare more of what the server checks than generators can read: a copy of
    ``component`` made stricter by ``tighten`` (recursive schemas, cross-field rules)
    goes under ``if: true, then: ...``, which validators apply and generators ignore
    (as ``_declare_tool_parameters`` does)."""
    strict = copy.deepcopy({k: v for k, v in component.items() if k not in ("if", "then")})
    tighten(strict)
    component.update({"if": True, "then": strict})


def _declare_completion_messages(components: dict[str, Any], settings: Settings) -> None:
    """What ``split_messages`` checks of a Chat Completions request, declared: a user
    message's text is not blank; ``messages`` holds a user message; with a
    ``conversation_id``, exactly one and no assistant message; no NUL anywhere."""
    user = {"required": ["role"], "properties": {"role": {"const": "user"}}}
    non_blank_text = {"type": "string", "pattern": NON_BLANK}

    def message(strict: dict[str, Any]) -> None:
        _no_nul_anywhere(strict)
        content = copy.deepcopy(strict["properties"]["content"])
        text = _typed(content, "string")
        text["pattern"] = NON_BLANK
        parts = _typed(content, "array")
        parts["contains"] = {
            "anyOf": [
                {"type": "object", "required": [kind], "properties": {kind: non_blank_text}}
                for kind in ("text", "refusal")
            ]
        }
        content["anyOf"] = [text, parts]  # not null
        strict["if"] = user
        strict["then"] = {"required": ["content"], "properties": {"content": content}}

    def request(strict: dict[str, Any]) -> None:
        _no_nul_anywhere(strict)
        strict["properties"]["messages"]["contains"] = user
        strict["if"] = {
            "required": ["conversation_id"],
            "properties": {"conversation_id": {"type": "string"}},
        }
        strict["then"] = {
            "properties": {
                "messages": {
                    "contains": user,
                    "maxContains": 1,
                    "items": {"properties": {"role": {"enum": ["system", "developer", "user"]}}},
                }
            }
        }

    _strictly(components["ChatCompletionMessageParam"], message)
    _strictly(components["ChatCompletionRequest"], request)


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
            declared.update(copy.deepcopy(_typed(metadata, "object")))
            form["encoding"] = {"metadata": {"contentType": "application/json"}}


def declare_limits(
    components: dict[str, Any],
    requests: set[str],
    settings: Settings,
    *,
    event_kinds: Sequence[str] = (),
    chat_models: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> None:
    """Write into the request schemas the limits the core enforces from ``settings``
    (``extra``: where schemas that are not ``components/schemas`` go).

    The models declare what is fixed (lengths, the tool-name pattern, non-blank text);
    this adds what depends on the settings and on the plugins of one core (``top_k``,
    message and query lengths, the event kinds, the chat model names), so the document
    of a core opened with ``max_top_k=50`` says ``maximum: 50``.
    """

    def prop(model: str, field: str) -> dict[str, Any]:
        found: dict[str, Any] = components[model]["properties"][field]
        return found

    extra = {} if extra is None else extra

    for name in requests:
        _no_nul_strings(components[name])
    if "ToolDefinition" in components:
        _no_nul_strings(components["ToolDefinition"])
        _declare_tool_parameters(prop("ToolDefinition", "parameters"), extra)
    if "SearchRequest" in requests:
        _typed(prop("SearchRequest", "top_k"), "integer").update(
            minimum=1, maximum=settings.max_top_k
        )
        prop("SearchRequest", "query")["maxLength"] = settings.max_query_chars
    if "ChatMessageRequest" in requests:
        prop("ChatMessageRequest", "message")["maxLength"] = settings.max_message_chars
    if "ChatCompletionRequest" in requests:
        _no_nul_strings(components["ChatCompletionMessageParam"])
        message = components["ChatCompletionMessageParam"]["properties"]
        _typed(message["content"], "string")["maxLength"] = settings.max_message_chars
        for part in _typed(message["content"], "array")["items"]["anyOf"]:
            for text in part["properties"].values():
                if text.get("type") == "string":
                    text["maxLength"] = settings.max_message_chars
        extra.update(tool_schema_components(TOOL_SCHEMAS))
        _declare_completion_messages(components, settings)
    if "TextDocumentCreate" in requests:
        prop("TextDocumentCreate", "text")["maxLength"] = settings.max_text_chars
    if "WebhookSubscribeRequest" in requests:
        if event_kinds:
            prop("WebhookSubscribeRequest", "events")["items"] = {
                "type": "string",
                "enum": sorted(event_kinds),
            }
        prop("WebhookSubscribeRequest", "url")["pattern"] = WEBHOOK_URL_PATTERN
    for model in ("AgentCreate", "AgentUpdate"):
        if model in requests and chat_models:
            _typed(prop(model, "model"), "string")["enum"] = sorted(chat_models)


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


_MCP_REFUSALS = {
    "401": "Missing or invalid API key",
    "404": "The MCP SDK is not installed (`mcp_not_installed`)",
    "408": "The body stalled or came too slowly",
    "413": "Body too large",
    "415": "Not JSON",
    "429": "Rate limited",
    "503": "The endpoint is not running (`mcp_not_started`: served without its lifespan)",
}


def _mcp_operation(settings: Settings) -> dict[str, Any]:
    """``POST /mcp``: the MCP endpoint (JSON-RPC 2.0 over streamable HTTP)."""
    error = {
        "type": "object",
        "required": ["jsonrpc", "error"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "data": {"description": "For the API's own refusals, the problem document."},
                },
            },
        },
    }
    json_rpc_error = {"application/json": {"schema": error}}
    return {
        "post": {
            "operationId": "mcp",
            "summary": "Model Context Protocol (streamable HTTP)",
            "description": "One JSON-RPC 2.0 message per request (stateless: no"
            " `Mcp-Session-Id`), answered as JSON. Tools: `search_knowledge`, `list_agents`,"
            " `chat_with_agent`, and for write keys `ingest_document`. Point an MCP client"
            " here with the `Authorization: Bearer` header. A request the API refuses"
            " (401, 413, 429, ...) is answered with that status and a JSON-RPC error whose"
            " `data` is the problem document.",
            "tags": ["mcp"],
            "x-scope": "any",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "description": "A JSON-RPC 2.0 request or notification, at most"
                            f" {settings.max_body_bytes} bytes.",
                            "required": ["jsonrpc", "method"],
                            "properties": {
                                "jsonrpc": {"const": "2.0"},
                                "id": {
                                    "description": "A string or integer; none for a"
                                    " notification (answered 202)."
                                },
                                "method": {"type": "string"},
                                "params": {"type": ["object", "null"]},
                            },
                        }
                    }
                },
            },
            "responses": {
                "200": {
                    "description": "The JSON-RPC response (a result or a JSON-RPC error)",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "202": {"description": "A notification, accepted"},
                "400": {"description": "Not a JSON-RPC message", "content": json_rpc_error},
                "406": {"description": "`Accept` lacks application/json"},
                **{
                    status: {"description": text, "content": json_rpc_error}
                    for status, text in _MCP_REFUSALS.items()
                },
            },
        }
    }


def build_openapi(
    routes: Sequence[ApiRoute],
    *,
    prefix: str,
    version: str,
    settings: Settings | None = None,
    event_kinds: Sequence[str] = (),
    chat_models: Sequence[str] = (),
    root_path: str = "",
    mcp: bool = False,
) -> dict[str, Any]:
    """An OpenAPI 3.1 document covering every route in ``routes``.

    :param settings: the limits to declare (default: ``Settings()``'s).
    :param event_kinds: the kinds a subscription may name (the core's event bus).
    :param chat_models: the names an agent's ``model`` may take.
    :param root_path: where the app is mounted (ASGI ``root_path``): the ``servers`` URL.
    :param mcp: whether the app serves the MCP endpoint (``/mcp``).
    """
    settings = settings or Settings.model_validate({})
    components: dict[str, Any] = {}
    requests: set[str] = set()
    problem = _schema(Problem, components, "serialization")
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
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
            "responses": {
                str(route.status_code): {
                    "description": "Success",
                    "content": {
                        "application/json": {
                            "schema": _schema(route.response, components, "serialization")
                        }
                    },
                },
                **(
                    {
                        "202": {
                            "description": "Accepted: processing in the background",
                            "content": {
                                "application/json": {
                                    "schema": _schema(route.response, components, "serialization")
                                }
                            },
                        }
                    }
                    if route.accepted is not None
                    else {}
                ),
                **_error_responses(route, components, problem),
            },
        }
        if route.events:
            operation["responses"][str(route.status_code)]["content"]["text/event-stream"] = (
                _event_stream(route, components)
            )
        if route.request is not None:
            requests.add(route.request.__name__)
            content: dict[str, Any] = {
                "application/json": {"schema": _schema(route.request, components, "validation")}
            }
            if route.body == "json_or_upload":
                # one media type per operation: generators write a body of several types
                # badly (openapi-python-client#1451); its JSON body is declared at the
                # route that takes only that (POST /knowledge/documents/text)
                content = {}
                content["multipart/form-data"] = {
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
                                # its schema the JSON body's (set below)
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
                        },
                    }
                }
            operation["requestBody"] = {"required": True, "content": content}
        paths.setdefault(prefix + route.path, {})[route.method.lower()] = operation
    paths[prefix + "/health"] = _health_operation(components, problem)
    if mcp:
        paths[prefix + "/mcp"] = _mcp_operation(settings)
    extra: dict[str, Any] = {}
    declare_limits(
        components,
        requests,
        settings,
        event_kinds=event_kinds,
        chat_models=chat_models,
        extra=extra,
    )
    if "TextDocumentCreate" in components:
        _upload_metadata(paths, components["TextDocumentCreate"]["properties"]["metadata"])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Chat Service API (agentcore)",
            "version": version,
            "description": "Agents, cited answers, knowledge search, webhooks and key checks.",
        },
        "servers": [{"url": root_path or "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "x-agentcore-schemas": extra,
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "ak_test_…"}
            },
        },
    }
