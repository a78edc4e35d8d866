"""How the OpenAPI document declares ``/v1/mcp``: one JSON-RPC message per request, and
the refusals it shares with the REST API."""

from __future__ import annotations

from typing import Any

from agentcore_starlette.settings import HttpSettings

_REFUSALS = {
    "401": "Missing or invalid API key",
    "404": "The MCP SDK is not installed (`mcp_not_installed`)",
    "408": "The body stalled or came too slowly",
    "413": "Body too large",
    "415": "Not JSON",
    "429": "Rate limited",
    "503": "The endpoint is not running (`mcp_not_started`: served without its lifespan)",
}


def path_item(http: HttpSettings) -> dict[str, Any]:
    """The OpenAPI path item of ``/mcp``: ``POST`` (JSON-RPC 2.0 over streamable HTTP), which
    the app's OpenAPI document lists with the REST routes' (``build_openapi(paths=)``)."""
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
                            f" {http.max_body_bytes} bytes.",
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
                    for status, text in _REFUSALS.items()
                },
            },
        }
    }
