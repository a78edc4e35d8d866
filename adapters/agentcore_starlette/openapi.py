"""The OpenAPI 3.1 document, generated from the route table and the pydantic models."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from agentcore.models import Problem
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
    """The ``text/event-stream`` media type of a streamed answer: one event per
    ``event:``/``data:`` block; ``x-events`` names each event and its data's schema."""
    names = ", ".join(f"`{event.name}`" for event in route.events)
    return {
        "schema": {
            "type": "string",
            "description": f"Server-sent events ({names}); lines starting with ':' are "
            "heartbeats. Each event's `data` is one JSON document.",
        },
        "x-events": {
            event.name: {
                "description": event.description,
                "data": _schema(event.data, components, "serialization"),
            }
            for event in route.events
        },
    }


def build_openapi(routes: Sequence[ApiRoute], *, prefix: str, version: str) -> dict[str, Any]:
    """An OpenAPI 3.1 document covering every route in ``routes``."""
    components: dict[str, Any] = {}
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
                    "schema": param.schema,
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
                **{
                    status: {
                        "description": text,
                        "content": {"application/problem+json": {"schema": problem}},
                    }
                    for status, text in _ERRORS.items()
                },
            },
        }
        if route.events:
            operation["responses"][str(route.status_code)]["content"]["text/event-stream"] = (
                _event_stream(route, components)
            )
        if route.request is not None:
            content: dict[str, Any] = {
                "application/json": {"schema": _schema(route.request, components, "validation")}
            }
            if route.body == "json_or_upload":
                content["multipart/form-data"] = {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {
                            "file": {
                                "type": "string",
                                "contentMediaType": "application/octet-stream",
                            }
                        },
                    }
                }
            operation["requestBody"] = {"required": True, "content": content}
        paths.setdefault(prefix + route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Chat Service API (agentcore)",
            "version": version,
            "description": "Agents, cited answers, knowledge search, webhooks and key checks.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "ak_test_…"}
            },
        },
    }
