"""The core's limits written into request JSON Schemas, where clients and validators
read them: the OpenAPI document's components and the MCP tools' input schemas.

The pydantic models declare what is fixed (lengths, the tool-name pattern, non-blank
text); ``declare_limits`` adds what depends on the settings and plugins of one core
(``top_k``, message and query lengths, the event kinds, the chat model names), and what
the server checks that generators cannot read (no NUL in any string, the nesting of a
tool's parameters, the messages a Chat Completions request must hold).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from agentcore.config import Settings
from agentcore.schema import NO_NUL, NON_BLANK, WEBHOOK_URL_PATTERN, tool_schema_components


def of_type(prop: dict[str, Any], kind: str) -> dict[str, Any]:
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


def _message_or_outputs(strict: dict[str, Any]) -> None:
    """A chat request holds a ``message``, or the ``tool_outputs`` and ``approvals`` of
    a conversation's waiting turn with its ``conversationId``, never both."""
    resumes = {"anyOf": [{"required": ["tool_outputs"]}, {"required": ["approvals"]}]}
    strict["oneOf"] = [
        {"required": ["message"], "not": resumes},
        {
            "required": ["conversationId"],
            "properties": {"conversationId": {"type": "string"}},
            **resumes,
            "not": {"required": ["message"]},
        },
    ]


def _declare_completion_messages(components: dict[str, Any], settings: Settings) -> None:
    """What ``split_messages`` checks of a Chat Completions request, declared: a user
    message's text is not blank; a tool message names its call (``tool_call_id``);
    ``messages`` holds a user message; with a ``conversation_id``, exactly one and no
    assistant message, or only tool messages (and the assistant's calls they answer); no
    NUL anywhere."""
    user = {"required": ["role"], "properties": {"role": {"const": "user"}}}
    tool = {"required": ["role"], "properties": {"role": {"const": "tool"}}}
    non_blank_text = {"type": "string", "pattern": NON_BLANK}

    def message(strict: dict[str, Any]) -> None:
        _no_nul_anywhere(strict)
        content = copy.deepcopy(strict["properties"]["content"])
        text = of_type(content, "string")
        text["pattern"] = NON_BLANK
        parts = of_type(content, "array")
        parts["contains"] = {
            "anyOf": [
                {"type": "object", "required": [kind], "properties": {kind: non_blank_text}}
                for kind in ("text", "refusal")
            ]
        }
        content["anyOf"] = [text, parts]  # not null
        strict["allOf"] = [
            {"if": user, "then": {"required": ["content"], "properties": {"content": content}}},
            {  # a tool message names the call it answers
                "if": tool,
                "then": {
                    "required": ["tool_call_id"],
                    "properties": {"tool_call_id": {"type": "string", "minLength": 1}},
                },
            },
        ]

    def request(strict: dict[str, Any]) -> None:
        _no_nul_anywhere(strict)
        # a user message, unless the messages resume a stored conversation's turn
        strict["else"] = {"properties": {"messages": {"contains": user}}}
        strict["if"] = {
            "required": ["conversation_id"],
            "properties": {"conversation_id": {"type": "string"}},
        }
        strict["then"] = {
            "properties": {
                "messages": {
                    "anyOf": [
                        {  # the one new user message
                            "contains": user,
                            "maxContains": 1,
                            "items": {
                                "properties": {"role": {"enum": ["system", "developer", "user"]}}
                            },
                        },
                        {  # or the outputs of the stored turn's waiting calls
                            "not": {"contains": user},
                            "contains": tool,
                        },
                    ]
                }
            }
        }

    _strictly(components["ChatCompletionMessageParam"], message)
    _strictly(components["ChatCompletionRequest"], request)


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
    if "McpServerSpec" in components:  # an agent's MCP servers: a component of its own
        _no_nul_strings(components["McpServerSpec"])
    if "ToolDefinition" in components:
        _no_nul_strings(components["ToolDefinition"])
        _declare_tool_parameters(prop("ToolDefinition", "parameters"), extra)
    if "SearchRequest" in requests:
        of_type(prop("SearchRequest", "top_k"), "integer").update(
            minimum=1, maximum=settings.max_top_k
        )
        prop("SearchRequest", "query")["maxLength"] = settings.max_query_chars
    if "ChatMessageRequest" in requests:
        prop("ChatMessageRequest", "message")["maxLength"] = settings.max_message_chars
        _no_nul_strings(components["ToolOutput"])
        _no_nul_strings(components["ToolApproval"])
        prop("ToolOutput", "output")["maxLength"] = settings.max_tool_output_chars
        _strictly(components["ChatMessageRequest"], _message_or_outputs)
    if "ChatCompletionRequest" in requests:
        _no_nul_strings(components["ChatCompletionMessageParam"])
        message = components["ChatCompletionMessageParam"]["properties"]
        of_type(message["content"], "string")["maxLength"] = settings.max_message_chars
        for part in of_type(message["content"], "array")["items"]["anyOf"]:
            for text in part["properties"].values():
                if text.get("type") == "string":
                    text["maxLength"] = settings.max_message_chars
        extra.update(tool_schema_components(TOOL_SCHEMAS))
        _no_nul_strings(components["FunctionDefinition"])
        _declare_tool_parameters(prop("FunctionDefinition", "parameters"), extra)
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
            of_type(prop(model, "model"), "string")["enum"] = sorted(chat_models)
