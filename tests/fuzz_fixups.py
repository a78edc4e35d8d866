"""What JSON Schema cannot say about the /v1 API, for schemathesis: the fix-ups of
positive cases that ``tests/http/test_fuzz.py`` applies, and the ``schemathesis run``
command line too through ``tests/schemathesis_hooks.py`` (docs/operations.md)::

    SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH=tests schemathesis \
        --config-file tests/schemathesis.toml run http://127.0.0.1:8000/v1/openapi.json \
        --checks all -H "Authorization: Bearer $KEY"

A webhook URL must resolve to an allowed address (the receiver here), an upload must be
a parseable file, a tool's ``required`` names must be among its ``properties``, tool
names must be unique within an agent, no string at any depth of a tool's free-form
``parameters`` (or of a Chat Completions request's free-form members) may hold a NUL
(the declared schema says so for every other string), a tool's nested schemas (a
property's ``items``, ``then``, ...) must be schemas, and the last message of a Chat
Completions request is the user's to answer (its only one with a ``conversation_id``),
and no user message of it is blank; a metadata filter holds at most 64 comparisons at
all depths together; an agent's stats window does not end before it starts.
``tests/schemathesis.toml`` holds the one check that does not apply to one operation.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from agentcore.schema import MAX_FILTER_CONDITIONS

CONFIG = Path(__file__).with_name("schemathesis.toml")
RECEIVER = "http://127.0.0.1:9/hook"  # allowed, never called (workers are off)


def without_nul(value: Any) -> Any:
    """``value`` with NUL characters dropped from every string and key, at any depth."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    return value


def fix_positive(case: Any) -> None:
    """Make a positive case valid in the ways JSON Schema cannot express."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    _ordered_window(case.query)
    if not isinstance(case.body, dict):
        return
    body = case.body
    if "url" in body and "events" in body:
        body["url"] = RECEIVER
    if "file" in body and case.media_type == "multipart/form-data":
        body["file"] = b"Plain text to index."
    messages = body.get("messages")
    if isinstance(messages, list) and "model" in body:  # Chat Completions
        # a user asks last, and the free-form members (content parts, prediction, ...)
        # hold no NUL, as every other string is declared not to
        case.body = body = without_nul(body)
        asked = {"role": "user", "content": "Vacation days?"}
        # with a stored conversation, its turns are the history: messages has no other
        earlier = [] if "conversation_id" in body else body["messages"][:-1]
        # and every user message has some text (blank history is refused too)
        earlier = [m for m in earlier if not _blank_user_message(m)]
        body["messages"] = [*earlier, asked]
    # a filter holds at most MAX_FILTER_CONDITIONS comparisons at every depth together
    for holder in (body, body.get("knowledge")):
        if isinstance(holder, dict) and _comparisons(holder.get("filter")) > MAX_FILTER_CONDITIONS:
            holder["filter"] = {"type": "eq", "key": "team", "value": "fuzz"}
    tools = body.get("tools")
    if isinstance(tools, list) and "messages" in body:  # Chat Completions: tools[].function
        offered = [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        kept = {id(f) for f in _fixed_tools([t["function"] for t in offered])}
        body["tools"] = [t for t in offered if id(t["function"]) in kept]
        names = {t["function"].get("name") for t in body["tools"]}
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and (choice.get("function") or {}).get("name") not in names:
            body["tool_choice"] = "auto"  # a named choice names a tool the request offers
    elif isinstance(tools, list):
        body["tools"] = _fixed_tools(tools)


def _ordered_window(query: Any) -> None:
    """A stats window whose ``until`` is before its ``since`` (as times; a 422) is sent
    the other way round."""
    if not isinstance(query, dict) or not {"since", "until"} <= query.keys():
        return
    try:
        since, until = (
            datetime.fromisoformat(str(query[name]).upper()) for name in ("since", "until")
        )
        if until < since:
            query["since"], query["until"] = query["until"], query["since"]
    except (ValueError, TypeError):  # not times (the server refuses them), or naive and aware
        return


def _fixed_tools(tools: list[Any]) -> list[Any]:
    """Tool definitions made valid where JSON Schema cannot say so (each fixed in place):
    ``required`` among ``properties``, nested schemas that are schemas; the first of
    each name."""
    unique: dict[Any, Any] = {}
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("parameters"), dict):
            tool["parameters"] = params = without_nul(tool["parameters"])
            names = params.get("properties", {})
            if isinstance(params.get("required"), list):
                params["required"] = [n for n in params["required"] if n in names]
            if not _nested_schemas_valid(params):
                # its nested schemas (a property's "then", "items", ...) must be
                # schemas too: kept as the properties' names, each any value
                tool["parameters"] = {
                    "type": "object",
                    "properties": {name: {} for name in names},
                    "required": params.get("required", []),
                }
        unique.setdefault(tool.get("name") if isinstance(tool, dict) else id(tool), tool)
    return list(unique.values())


def _comparisons(value: Any) -> int:
    """How many comparisons a filter holds, at any depth (0 for what is not one)."""
    if not isinstance(value, dict):
        return 0
    inner = value.get("filters")
    if value.get("type") in ("and", "or") and isinstance(inner, list):
        return sum(_comparisons(item) for item in inner)
    return 1


def _blank_user_message(message: Any) -> bool:
    """Whether a Chat Completions message is the user's and holds no text but spaces."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get(part.get("type"), "")) if isinstance(part, dict) else ""
            for part in content
        )
    elif content is None:
        content = message.get("refusal") or ""
    return not str(content).strip()


def _nested_schemas_valid(params: dict[str, Any]) -> bool:
    """Whether a tool's ``parameters`` pass the server's check of its nested schemas."""
    from pydantic import ValidationError

    from agentcore.schema import ToolDefinition

    try:
        ToolDefinition.model_validate({"name": "fuzz", "parameters": params})
    except ValidationError:
        return False
    return True


def fix_negative(case: Any) -> None:
    """Make a negative multipart case say what it means: without its ``file``. Sent as
    generated it would often be valid (a non-string ``file`` is sent as its text,
    "null" or "1", and the coverage phase reuses positive files)."""
    meta = case.meta
    negative = meta is not None and not meta.generation.mode.is_positive
    if negative and case.media_type == "multipart/form-data":
        case.body = {}


def real_key(case: Any, secret: str) -> dict[str, str] | None:
    """The generated bearer token is random: the real key in its place. A negative case
    that dropped or mangled the header keeps it that way (the server must 401)."""
    sent = (case.headers or {}).get("Authorization", "")
    return {"Authorization": f"Bearer {secret}"} if sent.startswith("Bearer ") else None
