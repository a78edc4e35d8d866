"""The wire schema of the /v1 API: pydantic models (the Python API returns them too)."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    PrivateAttr,
    StrictBool,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from agentcore._unicode import find_lone_surrogate

Environment = Literal["test", "live"]
Scope = Literal["read", "write"]
AgentStatus = Literal["draft", "deployed", "archived"]
SubscriptionStatus = Literal["active", "disabled"]

HANDOFF_TOOL = "handoff_to_human"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# what str.strip() removes (str.isspace), spelt out: regex engines disagree about \s
_SPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NON_BLANK = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"
"""JSON-Schema ``pattern`` of text that must not be blank (the services refuse it)."""
NO_NUL = r"^[^\x00]*$"
"""JSON-Schema ``pattern`` of any other request string (no NUL, as ``Request`` enforces)."""
# declared, not enforced by pydantic: the services refuse blank text with their own codes
_DECLARE_NON_BLANK: dict[str, Any] = {"pattern": NON_BLANK}


def _has_nul(value: Any) -> bool:
    # iterative: a deep JSON value cannot exhaust the stack
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, BaseModel):
            stack.extend(vars(item).values())
    return False


def _whole_number(value: Any) -> Any:
    # JSON Schema counts 2.0 as an integer; 2.5, "2" and true stay errors
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_whole_number)]
"""An integer as JSON Schema reads one: ``2.0`` is taken as ``2`` (``2.5``, ``"2"`` and
``true`` are still refused by the strict request models)."""


class Request(BaseModel):
    """Base of request bodies, strictly typed.

    Unknown fields are an error, not silently dropped; values are not coerced
    (``"2"``, ``true`` or ``2.5`` for an integer are errors, as is ``false`` for a
    number); no string anywhere in the body may hold a NUL character (PostgreSQL
    cannot store one, and no text needs it) or a lone UTF-16 surrogate (no store can:
    ``agentcore._unicode``).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if _has_nul(value):
            raise ValueError("must not contain NUL (\\u0000) characters")
        found = find_lone_surrogate(value)
        if found is not None:
            raise ValueError(found.message)
        return value


# Document metadata and the filters over it (the limits are OpenAI's vector-store
# file attributes'; agentcore/knowledge/_filters.py says how filters compare) ---------

MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_STRING_CHARS = 512
MAX_EXACT_INTEGER = 2**53
"""Largest number (in magnitude) a metadata or filter value may be: float64 holds every
integer up to it exactly, so filters compare it exactly (larger ones are refused; a
bound on every number, so that JSON Schema, which calls ``1e300`` an integer, states it
as ``minimum``/``maximum``)."""
STORED: dict[str, Any] = {"stored": True}
"""Validation context of what was stored (or a server returned): what older versions
accepted is read, not refused: numbers beyond ``MAX_EXACT_INTEGER``, tools' nested
parameter schemas."""
MAX_FILTER_LIST = 100
"""Most values an ``in``/``nin`` comparison lists."""
MAX_FILTER_CONDITIONS = 64
"""Most comparisons one filter holds, at any depth."""
MAX_COMPOUND_FILTERS = 32
"""Most filters one ``and``/``or`` combines."""

_STRING_VALUE = {"type": "string", "maxLength": MAX_METADATA_STRING_CHARS, "pattern": NO_NUL}
_NUMBER_VALUE = {"type": "number", "minimum": -MAX_EXACT_INTEGER, "maximum": MAX_EXACT_INTEGER}


def _metadata_key(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_METADATA_KEY_CHARS
        or "\x00" in value
    ):
        raise ValueError(
            f"a metadata key is a string of 1-{MAX_METADATA_KEY_CHARS} characters (no NUL)"
        )
    return value


def _scalar(value: Any, info: ValidationInfo) -> str | int | float | bool:
    """A metadata (or filter) value as it is: a string of at most 512 characters without
    NUL, a number within ±2**53 or a boolean; else a ``ValueError``
    saying so."""
    if isinstance(value, bool) or _ordered_value(value, info):
        return value  # type: ignore[no-any-return]
    raise ValueError(
        f"must be a string of at most {MAX_METADATA_STRING_CHARS} characters (no NUL),"
        " a number within ±2**53 (9007199254740992) or a boolean"
    )


def _ordered(value: Any, info: ValidationInfo) -> str | int | float:
    """A value ranges compare to: as ``_scalar``, but not a boolean."""
    if not isinstance(value, bool) and _ordered_value(value, info):
        return value  # type: ignore[no-any-return]
    raise ValueError(
        f"must be a string of at most {MAX_METADATA_STRING_CHARS} characters (no NUL) or a"
        " number within ±2**53 (9007199254740992)"
    )


def _ordered_value(value: Any, info: ValidationInfo) -> bool:
    if isinstance(value, int | float):
        # beyond 2**53 float64 rounds, and filters compare numbers as float64 (a 310-digit
        # integer overflowed it); what was stored before the bound is read as it is
        if isinstance(value, float) and not math.isfinite(value):
            return False
        stored = bool(info.context and info.context.get("stored"))
        return stored or -MAX_EXACT_INTEGER <= value <= MAX_EXACT_INTEGER
    return (
        isinstance(value, str) and len(value) <= MAX_METADATA_STRING_CHARS and "\x00" not in value
    )


MetadataKey = Annotated[
    str,
    PlainValidator(_metadata_key),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": MAX_METADATA_KEY_CHARS, "pattern": NO_NUL}
    ),
]
"""A metadata key: 1-64 characters."""
MetadataValue = Annotated[
    str | int | float | bool,
    PlainValidator(_scalar),
    WithJsonSchema({"anyOf": [_STRING_VALUE, _NUMBER_VALUE, {"type": "boolean"}]}),
]
"""A metadata value: a string of at most 512 characters, a number at most 2**53 in
magnitude or a boolean."""
_METADATA_TEXT = (
    f"At most {MAX_METADATA_KEYS} keys of 1-{MAX_METADATA_KEY_CHARS} characters; each value"
    f" a string of at most {MAX_METADATA_STRING_CHARS} characters, a number at most 2**53"
    " in magnitude or a boolean."
)
Metadata = Annotated[
    dict[MetadataKey, MetadataValue],
    Field(max_length=MAX_METADATA_KEYS, description=_METADATA_TEXT),
    # spelt out: pydantic would turn the keys' pattern into patternProperties, which
    # leaves a key outside the pattern unchecked
    WithJsonSchema(
        {
            "type": "object",
            "description": _METADATA_TEXT,
            "maxProperties": MAX_METADATA_KEYS,
            "propertyNames": {
                "minLength": 1,
                "maxLength": MAX_METADATA_KEY_CHARS,
                "pattern": NO_NUL,
            },
            "additionalProperties": {"anyOf": [_STRING_VALUE, _NUMBER_VALUE, {"type": "boolean"}]},
        }
    ),
]
"""Attributes of a document, which search filters and agents' knowledge select by."""
_Ordered = Annotated[
    str | int | float,
    PlainValidator(_ordered),
    WithJsonSchema({"anyOf": [_STRING_VALUE, _NUMBER_VALUE]}),
]


class _Filter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class EqualityFilter(_Filter):
    """``key`` equals (``eq``) or does not equal (``ne``) ``value``."""

    type: Literal["eq", "ne"]
    key: MetadataKey
    value: MetadataValue


class RangeFilter(_Filter):
    """``key`` is greater than (``gt``), at least (``gte``), less than (``lt``) or at
    most (``lte``) ``value``: numbers against numbers, strings against strings."""

    type: Literal["gt", "gte", "lt", "lte"]
    key: MetadataKey
    value: _Ordered


class ListFilter(_Filter):
    """``key`` equals one of the ``value`` list (``in``), or none of it (``nin``)."""

    type: Literal["in", "nin"]
    key: MetadataKey
    value: list[MetadataValue] = Field(min_length=1, max_length=MAX_FILTER_LIST)


class CompoundFilter(_Filter):
    """All (``and``) or any (``or``) of ``filters``."""

    type: Literal["and", "or"]
    filters: list[Filter] = Field(min_length=1, max_length=MAX_COMPOUND_FILTERS)


_FILTER_KINDS = {
    **dict.fromkeys(("eq", "ne"), "equality"),
    **dict.fromkeys(("gt", "gte", "lt", "lte"), "range"),
    **dict.fromkeys(("in", "nin"), "list"),
    **dict.fromkeys(("and", "or"), "compound"),
}
FILTER_TAGS = frozenset(_FILTER_KINDS.values())
"""The names pydantic puts in an error's location for the filter kind it tried."""


def _filter_kind(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return _FILTER_KINDS.get(kind) if isinstance(kind, str) else None


def _conditions(value: Any) -> Any:
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, CompoundFilter):
            stack.extend(node.filters)
        else:
            count += 1
    if count > MAX_FILTER_CONDITIONS:
        raise ValueError(f"a filter holds at most {MAX_FILTER_CONDITIONS} comparisons")
    return value


Filter = Annotated[
    Annotated[EqualityFilter, Tag("equality")]
    | Annotated[RangeFilter, Tag("range")]
    | Annotated[ListFilter, Tag("list")]
    | Annotated[CompoundFilter, Tag("compound")],
    Discriminator(
        _filter_kind,
        custom_error_type="invalid_filter",
        custom_error_message="'type' must be one of eq, ne, gt, gte, lt, lte, in, nin, and, or",
    ),
]
"""A filter over document metadata, in OpenAI's attribute-filter shape: a comparison
``{"type": "eq", "key": ..., "value": ...}`` or a compound ``{"type": "and", "filters":
[...]}``."""
CompoundFilter.model_rebuild()
BoundedFilter = Annotated[Filter, AfterValidator(_conditions)]
"""A ``Filter`` of at most ``MAX_FILTER_CONDITIONS`` comparisons: what requests take."""


class Organization(BaseModel):
    """A tenant; owns two fully separate environments, ``test`` and ``live``."""

    id: str
    name: str
    created_at: datetime


class ApiKey(BaseModel):
    """An API key as listed: never the secret, only a display prefix and last four."""

    id: str
    organization: str
    environment: Environment
    scopes: list[Scope]
    prefix: str
    last4: str
    name: str | None = None
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    rotated_from: str | None = None


class IssuedKey(ApiKey):
    """A key just minted: the only time its ``secret`` is shown."""

    secret: str


class FunctionShape(BaseModel):
    """A function a model may call: OpenAI's function shape, JSON-Schema parameters (the
    common part of an agent's tool and of a Chat Completions request's function)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(
        ...,
        description="1-64 letters, digits, '_' or '-'.",
        json_schema_extra={"pattern": _TOOL_NAME.pattern, "not": {"const": HANDOFF_TOOL}},
    )
    description: str = Field("", max_length=1024)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="A JSON Schema of type 'object'.",
        json_schema_extra={
            "required": ["type"],
            "properties": {
                "type": {"const": "object"},
                "properties": {"type": "object", "additionalProperties": {"type": "object"}},
                "required": {"type": "array", "items": {"type": "string"}},
            },
        },
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _TOOL_NAME.match(value):
            raise ValueError("must be 1-64 characters of letters, digits, '_' or '-'")
        if value == HANDOFF_TOOL:
            raise ValueError(f"'{HANDOFF_TOOL}' is reserved for the built-in handoff tool")
        return value

    @field_validator("parameters")
    @classmethod
    def _check_parameters(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object"')
        properties = value.get("properties", {})
        if not isinstance(properties, dict) or not all(
            isinstance(v, dict) for v in properties.values()
        ):
            raise ValueError("'properties' must map names to JSON Schemas")
        required = value.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError("'required' must be a list of property names")
        # 'required' may name a property 'properties' leaves out, as JSON Schema allows
        # (its value is then any value): no rule the OpenAPI document could not declare
        if not (info.context and info.context.get("stored")):
            # nested schemas are checked since 2026-11; an agent stored before is read as
            # it is, so it can still be listed, fixed and deleted
            _check_subschemas(value, "")
        return value


ApprovalPolicy = Literal["never", "always"]
"""Whether a person must approve each call of a tool before it runs."""


class ToolDefinition(FunctionShape):
    """A function an agent may call, and whether its calls wait for approval."""

    require_approval: ApprovalPolicy = Field(
        "never",
        description="`always`: each call waits for the caller's approval (`status:"
        " requires_action`, a `tool_calls` entry of `type: approval`) before a plugin runs"
        " it; a refused call never runs. For tools a plugin runs.",
    )


_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_ONE_SCHEMA = (
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")


def _check_subschemas(schema: dict[str, Any], path: str) -> None:
    """Check ``schema``'s ``type`` and, recursively, the schemas it holds (properties,
    items, ``anyOf`` ...): each is an object or a boolean, each ``type`` a JSON Schema
    type or a list of them. ``path`` locates ``schema`` in the tool's parameters."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "type" in schema and (
        not kinds or not all(isinstance(k, str) and k in _JSON_TYPES for k in kinds)
    ):
        where = f"{path}.type" if path else "type"
        raise ValueError(
            f"'{where}' must be one of {', '.join(sorted(_JSON_TYPES))} (or a list of them)"
        )
    found: list[tuple[str, Any]] = [(k, schema[k]) for k in _ONE_SCHEMA if k in schema]
    items = schema.get("items")
    if isinstance(items, list):  # the older drafts' tuple form
        found += [(f"items.{i}", item) for i, item in enumerate(items)]
    elif "items" in schema:
        found.append(("items", items))
    for key in _SCHEMA_LISTS:
        if key in schema:
            listed = schema[key]
            if not isinstance(listed, list):
                raise ValueError(f"'{_join(path, key)}' must be a list of JSON Schemas")
            found += [(f"{key}.{i}", item) for i, item in enumerate(listed)]
    for key in _SCHEMA_MAPS:
        if key in schema:
            mapped = schema[key]
            if not isinstance(mapped, dict):
                raise ValueError(f"'{_join(path, key)}' must map names to JSON Schemas")
            found += [(f"{key}.{name}", item) for name, item in mapped.items()]
    for where, sub in found:
        if isinstance(sub, bool):
            continue
        if not isinstance(sub, dict):
            raise ValueError(f"'{_join(path, where)}' must be a JSON Schema (an object)")
        _check_subschemas(sub, _join(path, where))


def tool_schema_components(ref: str) -> dict[str, dict[str, Any]]:
    """The JSON Schemas of what ``ToolDefinition.parameters`` holds, as the OpenAPI
    document declares them (``ref``: where they are, ``{model}`` for the name): a
    ``ToolSchema`` is an object whose ``type`` is a JSON Schema type (or a list of them)
    and whose nested schemas (``properties``, ``items``, ``anyOf`` ...) are ``ToolSchema``
    objects or booleans, recursively; any other member is JSON without a NUL character
    (``NoNulJson``), as every string of a request is. The same rules as ``_check_subschemas``,
    so a generated request the document allows is one the server accepts."""
    tool, either, json_value = (ref.format(model=name) for name in _TOOL_SCHEMA_NAMES)
    no_nul_keys = {"pattern": NO_NUL}
    either_ref = {"$ref": either}
    kinds = sorted(_JSON_TYPES)
    properties: dict[str, Any] = {
        "type": {
            "anyOf": [
                {"enum": kinds},
                {"type": "array", "minItems": 1, "items": {"enum": kinds}},
            ]
        },
        "items": {"anyOf": [either_ref, {"type": "array", "items": either_ref}]},
    }
    properties.update({key: either_ref for key in _ONE_SCHEMA})
    properties.update({key: {"type": "array", "items": either_ref} for key in _SCHEMA_LISTS})
    properties.update(
        {
            key: {
                "type": "object",
                "propertyNames": no_nul_keys,
                "additionalProperties": either_ref,
            }
            for key in _SCHEMA_MAPS
        }
    )
    return {
        _TOOL_SCHEMA_NAMES[0]: {
            "type": "object",
            "description": "A JSON Schema nested in a tool's parameters.",
            "propertyNames": no_nul_keys,
            "properties": properties,
            "additionalProperties": {"$ref": json_value},
        },
        _TOOL_SCHEMA_NAMES[1]: {"anyOf": [{"type": "boolean"}, {"$ref": tool}]},
        _TOOL_SCHEMA_NAMES[2]: {
            "description": "Any JSON value without a NUL character.",
            "anyOf": [
                {"type": "string", "pattern": NO_NUL},
                {"type": ["number", "boolean", "null"]},
                {"type": "array", "items": {"$ref": json_value}},
                {
                    "type": "object",
                    "propertyNames": no_nul_keys,
                    "additionalProperties": {"$ref": json_value},
                },
            ],
        },
    }


_TOOL_SCHEMA_NAMES = ("ToolSchema", "ToolSchemaOrBoolean", "NoNulJson")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_H16 = "[0-9a-fA-F]{1,4}"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"
_IPV6 = (
    (
        "(?:(?:H:){7}H|(?:H:){1,7}:|(?:H:){1,6}:H|(?:H:){1,5}(?::H){1,2}|(?:H:){1,4}(?::H){1,3}"
        "|(?:H:){1,3}(?::H){1,4}|(?:H:){1,2}(?::H){1,5}|H:(?::H){1,6}|:(?:(?::H){1,7}|:)"
        "|(?:H:){6}V4|::(?:[fF]{4}(?::0{1,4})?:)?V4|(?:H:){1,4}:V4)"
    )
    .replace("H", _H16)
    .replace("V4", _IPV4)
)
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TOP_LABEL = "[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # a name's last label: not a number
_PORT = "(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
WEBHOOK_URL_PATTERN = (
    f"^[Hh][Tt][Tt][Pp][Ss]?://(?:(?:{_LABEL}\\.)*{_TOP_LABEL}\\.?|{_IPV4}|\\[{_IPV6}\\])"
    f"(?::{_PORT})?(?:[/?#][!-~]*)?$"
)
"""A callback URL's shape, which the OpenAPI document declares and subscribe enforces:
``http`` or ``https``; a host that is a DNS name (ASCII: an internationalised name in its
``xn--`` form; its last label not a number), an IPv4 address or a bracketed IPv6 one;
an optional port 1-65535; then printable ASCII (anything else percent-encoded). No user
name or password."""


MAX_MCP_SERVERS = 8
"""The most remote MCP servers one agent calls."""
MAX_MCP_HEADERS = 16
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
# set by the client for each request: a header of these names would break the exchange
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "accept"}
    | {"mcp-session-id", "mcp-protocol-version", "upgrade", "te", "trailer", "keep-alive"}
)
# the same, as a JSON Schema pattern (no flags there: each letter in both cases)
_RESERVED_HEADER_PATTERN = "^(?:{})$".format(
    "|".join(
        "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in name)
        for name in sorted(_RESERVED_HEADERS)
    )
)
_HEADER_VALUE = re.compile(r"^[\t -~]{0,4096}$")


class McpServerSpec(Request):
    """A remote MCP server an agent's tools come from (streamable HTTP), as given."""

    label: str = Field(
        ...,
        description="The server's name in this agent: 1-64 letters, digits, '_' or '-'"
        " (unique among the agent's servers).",
        json_schema_extra={"pattern": _TOOL_NAME.pattern},
    )
    url: str = Field(
        ...,
        min_length=1,
        max_length=2048,
        description="The server's streamable HTTP endpoint (live keys: https). Checked"
        " by the SSRF guard now and on every connection.",
        json_schema_extra={"pattern": WEBHOOK_URL_PATTERN},
    )
    headers: dict[str, str] | None = Field(
        None,
        description="Sent with every request to the server (for example its"
        " `Authorization`): secrets, sealed at rest and never shown again (an agent"
        " shows `header_names`). Left out on an update of a server of the same label"
        " and URL: the stored ones are kept; `{}` removes them.",
        json_schema_extra={
            "maxProperties": MAX_MCP_HEADERS,
            "propertyNames": {
                "pattern": _HEADER_NAME.pattern,
                "not": {"pattern": _RESERVED_HEADER_PATTERN},
            },
            "additionalProperties": {"type": "string", "pattern": _HEADER_VALUE.pattern},
        },
    )
    allowed_tools: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        None,
        max_length=128,
        description="Only these of the server's tools are offered (null: all of them).",
    )
    require_approval: ApprovalPolicy = Field(
        "always",
        description="`always` (the default, as OpenAI's): each call waits for the"
        " caller's approval (`status: requires_action`, a `tool_calls` entry of `type:"
        " approval`); a refused call is never made. `never`: calls are made at once.",
    )

    @field_validator("label")
    @classmethod
    def _check_label(cls, value: str) -> str:
        if not _TOOL_NAME.match(value):
            raise ValueError("must be 1-64 characters of letters, digits, '_' or '-'")
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_MCP_HEADERS:
            raise ValueError(f"at most {MAX_MCP_HEADERS} headers")
        for name, text in value.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"{name!r} is set by the MCP client itself")
            if not _HEADER_VALUE.match(text):
                raise ValueError(
                    f"the value of {name!r} must be at most 4096 printable ASCII characters"
                )
        return value


class McpServer(BaseModel):
    """A remote MCP server of an agent, as shown: its headers' names, never their values."""

    label: str
    url: str
    header_names: list[str] = Field(
        default_factory=list, description="The headers sent to the server (values hidden)."
    )
    allowed_tools: list[str] | None = None
    require_approval: ApprovalPolicy = "always"
    # the headers as the store keeps them (sealed when a key is configured): never shown
    _sealed_headers: str | None = PrivateAttr(None)

    @property
    def sealed_headers(self) -> str | None:
        """The headers as the store keeps them (sealed JSON), or ``None`` for none."""
        return self._sealed_headers

    def with_sealed_headers(self, sealed: str | None) -> McpServer:
        """This server, carrying ``sealed`` as its stored headers."""
        copy = self.model_copy()
        copy._sealed_headers = sealed
        return copy


class AgentKnowledge(BaseModel):
    """Which knowledge an agent answers from: the documents ``filter`` selects (by their
    metadata); no filter, every document of the workspace."""

    model_config = ConfigDict(extra="forbid", strict=True)

    filter: BoundedFilter | None = Field(
        None, description="Only documents this filter selects are retrieved for the agent."
    )
    rerank: bool = Field(
        False,
        description="Have the core's reranker order the retrieved passages (none"
        " configured: retrieved without). Left out of answers when false.",
        # absent when false, so an agent's knowledge reads as it did before reranking
        exclude_if=lambda value: value is False,
    )


class Agent(BaseModel):
    """An agent: its role, prompt, tools, model, knowledge and deployment status."""

    id: str
    role: str
    status: AgentStatus
    name: str
    system_prompt: str
    tools: list[ToolDefinition]
    model: str | None = None
    handoff_on_no_answer: bool = False
    knowledge: AgentKnowledge | None = Field(
        None, description="The knowledge the agent answers from (null: all of it)."
    )
    mcp_servers: list[McpServer] = Field(
        default_factory=list, description="Remote MCP servers the agent's tools also come from."
    )
    created_at: datetime
    updated_at: datetime


class AgentCreate(Request):
    """Body of ``POST /v1/agents``; agents start in ``draft``."""

    name: str = Field("", max_length=200)
    role: str = Field("assistant", min_length=1, max_length=64)
    system_prompt: str = Field("", max_length=32_000)
    tools: list[ToolDefinition] = Field(default_factory=list, max_length=64)
    model: str | None = Field(None, max_length=200)
    handoff_on_no_answer: bool = False
    knowledge: AgentKnowledge | None = None
    mcp_servers: list[McpServerSpec] = Field(default_factory=list, max_length=MAX_MCP_SERVERS)


NULLABLE_UPDATES = ("model", "knowledge")
"""Fields of ``AgentUpdate`` that may be set to null: back to the default chat model,
back to all of the workspace's knowledge."""


def _not_nullable_except_model(schema: dict[str, Any]) -> None:
    # the fields default to None to mean "not given", but an explicit null is refused
    # (agents.update): only `model` and `knowledge` may be null (back to their defaults)
    for name, prop in schema.get("properties", {}).items():
        if name not in NULLABLE_UPDATES and "anyOf" in prop:
            (given,) = [branch for branch in prop.pop("anyOf") if branch.get("type") != "null"]
            prop.pop("default", None)
            prop.update(given)


class AgentUpdate(Request):
    """Body of ``PATCH /v1/agents/{id}``: only the fields given change."""

    model_config = ConfigDict(json_schema_extra=_not_nullable_except_model)

    name: str | None = Field(None, max_length=200)
    role: str | None = Field(None, min_length=1, max_length=64)
    system_prompt: str | None = Field(None, max_length=32_000)
    tools: list[ToolDefinition] | None = Field(None, max_length=64)
    model: str | None = Field(None, max_length=200)
    handoff_on_no_answer: bool | None = None
    knowledge: AgentKnowledge | None = None
    mcp_servers: list[McpServerSpec] | None = Field(
        None,
        max_length=MAX_MCP_SERVERS,
        description="Replaces the agent's servers (a server's stored headers are kept when"
        " its label and URL stay and no `headers` are given).",
    )


class AgentList(BaseModel):
    """A page of agents, newest first."""

    agents: list[Agent]
    has_more: bool


MAX_EXTERNAL_ID_CHARS = 256
ExternalId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_EXTERNAL_ID_CHARS,
        description="Your own id for the document, unique in the workspace: a document"
        " already under it is replaced when this one is ready (in one transaction).",
    ),
]
"""A document's ``external_id``: 1-256 characters (no NUL, as every string)."""


def _absent_when_none(schema: dict[str, Any]) -> None:
    # a field left out of the JSON when it is None (exclude_if): declared as its type,
    # not nullable, and not required
    (given,) = [branch for branch in schema.pop("anyOf") if branch.get("type") != "null"]
    schema.pop("default", None)
    schema.update(given)


def _refuse_null(value: Any, instead: str) -> Any:
    """A field that may be left out but is never ``null`` (the document declares it so):
    ``value``, or the error that says what leaving it out does (``instead``)."""
    if value is None:
        raise ValueError(f"must not be null: leave it out {instead}")
    return value


MAX_PRINCIPALS = 256
"""The most users, and the most groups, one access list (or one end user) names."""
MAX_PRINCIPAL_CHARS = 128
"""The longest user or group id."""
Principal = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PRINCIPAL_CHARS,
        description="A user's or group's id, as you name them.",
        # declared (the Request validator refuses a NUL in any string): fuzzers and
        # generated clients then know that a NUL is no id
        json_schema_extra={"pattern": NO_NUL},
    ),
]


class DocumentAccess(Request):
    """Who may read a document: the users and groups it names (your own ids). A request
    acting for an end user (``user``, or a client token) sees the document when the list
    names that user or one of their groups; a request with no end user sees every
    document. A document without a list (``null``) is everyone's in the workspace."""

    users: list[Principal] = Field(default_factory=list, max_length=MAX_PRINCIPALS)
    groups: list[Principal] = Field(default_factory=list, max_length=MAX_PRINCIPALS)


class EndUser(Request):
    """The end user a request acts for: its search and its answers use only documents
    without an access list, or whose list names this user or one of their groups."""

    id: Principal
    groups: list[Principal] = Field(default_factory=list, max_length=MAX_PRINCIPALS)


class DocumentWarning(BaseModel):
    """Something a ready document's reader should know about its pages: ``no_text``,
    pages of images without a text layer (scanned), so nothing on them is searchable;
    ``ocr``, pages whose text was read from their images by OCR, so it may hold
    recognition errors."""

    code: Literal["no_text", "ocr"]
    pages: list[int] = Field(description="The pages concerned (1-based), in order.")
    detail: str


class Document(BaseModel):
    """A document of the knowledge core."""

    id: str
    source: str
    content_type: str
    pages: int
    chunks: int
    bytes: int
    created_at: datetime
    status: Literal["processing", "ready", "failed"] = Field(
        default="ready",
        description="processing (a background job is indexing it; not searchable yet),"
        " ready (searchable) or failed (see last_error).",
    )
    last_error: Problem | None = Field(
        default=None, description="Why indexing failed, when it did."
    )
    metadata: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="The document's attributes, which search filters select by.",
    )
    external_id: str | None = Field(
        default=None,
        description="The caller's own id for the document (a path, a URL, another"
        " system's id): unique among the workspace's ready documents; an upload under it"
        " replaces the earlier version once it is ready.",
    )
    access: DocumentAccess | None = Field(
        default=None,
        description="Who may read it, when requests act for end users (null: everyone).",
    )
    warnings: list[DocumentWarning] = Field(
        default_factory=list,
        description="What indexing found that a reader should know: scanned pages with"
        " nothing searchable (`no_text`), pages read by OCR (`ocr`); [] when none.",
    )


class DocumentList(BaseModel):
    """A page of documents, newest first."""

    documents: list[Document]
    has_more: bool


class TextDocumentCreate(Request):
    """JSON body of ``POST /v1/knowledge/documents``: text with a source name."""

    source: str = Field(..., min_length=1, max_length=255, json_schema_extra=_DECLARE_NON_BLANK)
    text: str = Field(..., min_length=1, json_schema_extra=_DECLARE_NON_BLANK)
    metadata: Metadata | None = None
    external_id: ExternalId | None = None
    access: DocumentAccess | None = Field(
        None, description="Who may read it (null or absent: everyone in the workspace)."
    )


class DocumentUpdate(Request):
    """Body of ``PATCH /v1/knowledge/documents/{id}``: the new metadata, replacing the
    old, and the new access list (each only when given; at least one of them)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    metadata: Metadata | None = Field(
        None, description="Replaces the metadata.", json_schema_extra=_absent_when_none
    )
    access: DocumentAccess | None = Field(
        None, description="Replaces the access list; null: everyone may read it."
    )

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_not_null(cls, value: Any) -> Any:
        return _refuse_null(value, "to keep the metadata")


def _omitted_if_none(description: str) -> Any:
    """A field that is ``None`` in Python and absent (never ``null``) in the JSON."""
    return Field(
        None,
        description=description,
        exclude_if=lambda value: value is None,
        json_schema_extra=_absent_when_none,
    )


SearchMode = Literal["vector", "keyword", "hybrid"]
"""How search ranks: cosine similarity, BM25 over the words, or both fused by rank."""


class SearchRequest(Request):
    """Body of ``POST /v1/knowledge/search``."""

    query: str = Field(..., min_length=1, json_schema_extra=_DECLARE_NON_BLANK)
    top_k: JsonInt | None = Field(
        None, description="How many results: default 5, at most the configured max_top_k."
    )
    min_score: float | None = Field(
        None, ge=-1.0, le=1.0, description="Drop results whose cosine score is lower."
    )
    filter: BoundedFilter | None = Field(
        None, description="Only chunks of documents whose metadata this filter selects."
    )
    mode: SearchMode | None = Field(
        None,
        description="vector (default): by cosine similarity; keyword: by BM25 over the"
        " query's words; hybrid: both, fused by reciprocal rank.",
    )
    user: EndUser | None = Field(
        None,
        description="Search for this end user: only documents they may read (`access`).",
        json_schema_extra=_absent_when_none,
    )
    rerank: bool = Field(
        False,
        description="Have the core's reranker order the top rerank_candidates (default 50)"
        " and keep its best top_k, with rerank_score; 400 reranker_unavailable without one.",
    )

    @field_validator("user", mode="before")
    @classmethod
    def _user_not_null(cls, value: Any) -> Any:
        return _refuse_null(value, "to search every document")


class SearchResult(BaseModel):
    """One ranked chunk: ``score`` is the cosine similarity to the query in every mode;
    ``rank_score`` is what the search's mode ranked by."""

    chunk: str
    score: float
    source: str
    pages: list[int]
    document_id: str
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)
    rank_score: float = Field(
        description="What the mode ranked by: the cosine similarity (vector), the BM25"
        " score (keyword) or the reciprocal-rank-fusion score (hybrid)."
    )
    rerank_score: float | None = _omitted_if_none(
        "The reranker's score, which reranked results are ordered by (absent when the"
        " search was not reranked, or its reranker failed)."
    )
    location: str | None = _omitted_if_none(
        "Where in its document the chunk starts: `Slide 3`, `Sheet Sales`, or the heading"
        " it falls under (absent when the document's format names no parts there)."
    )


class SearchResponse(BaseModel):
    """Chunks ordered by ``rank_score``, highest first (ties by the cosine, then by chunk
    id), or by ``rerank_score`` when reranked."""

    query: str
    mode: SearchMode = "vector"
    results: list[SearchResult]


class Citation(BaseModel):
    """A source document and the pages of it an answer used, with the passages it used
    from them (``quote``, and ``quotes`` when there are several)."""

    source: str
    pages: list[int]
    quote: str | None = _omitted_if_none(
        "The passage of the source the answer used, verbatim from the stored text (at most"
        " 500 characters, cut at a sentence or word end). Absent on answers stored before"
        " quotes existed."
    )
    quotes: list[str] | None = _omitted_if_none(
        "Every passage of the source the answer used (at most 5), when there is more than"
        " one; the first is `quote`."
    )
    location: str | None = _omitted_if_none(
        "The part of the source cited: `Slide 3`, `Sheet Sales`, or a heading; a source"
        " cited in several parts has a citation per part (absent for formats without"
        " named parts, and on answers stored before locations existed)."
    )


class VerifyResponse(BaseModel):
    """Result of ``GET /v1/auth/verify``."""

    status: Literal["authenticated"] = "authenticated"
    organization: str
    scope: list[Scope]
    environment: Environment
    key_id: str | None = Field(
        None, description="The id of the key presented; for a client token, the token's id."
    )
    user: EndUser | None = _omitted_if_none(
        "For a client token: the end user it acts for (absent for an API key)."
    )
    expires_at: datetime | None = _omitted_if_none(
        "For a client token: when it stops working (absent for an API key)."
    )


MAX_CLIENT_TOKEN_TTL = 86_400
"""The longest a client token lives, in seconds (a day)."""
MAX_CLIENT_TOKEN_AGENTS = 64
"""The most agents one client token may be limited to."""
AgentId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description="An agent's id.",
        json_schema_extra={"pattern": NO_NUL},
    ),
]


class ClientTokenCreate(Request):
    """Body of ``POST /v1/client_tokens``: a short-lived token for one end user."""

    user: Principal = Field(description="The end user the token acts for (your id for them).")
    groups: list[Principal] = Field(
        default_factory=list,
        max_length=MAX_PRINCIPALS,
        description="The user's groups: documents whose access list names one are theirs too.",
    )
    agents: list[AgentId] | None = Field(
        None,
        max_length=MAX_CLIENT_TOKEN_AGENTS,
        description="The only agents the token may list and chat with (absent or null: every"
        " agent the key may chat with).",
    )
    ttl_seconds: JsonInt = Field(
        3600, ge=1, le=MAX_CLIENT_TOKEN_TTL, description="Seconds until the token expires."
    )


class ClientToken(BaseModel):
    """A client token, as minted: ``token`` is shown only in this answer."""

    object: Literal["client_token"] = "client_token"
    id: str
    token: str = Field(
        description="Send it as `Authorization: Bearer <token>` from the browser or app."
        " It is shown once and stored only as a digest."
    )
    user: str
    groups: list[str]
    agents: list[str] | None = _omitted_if_none(
        "The only agents the token may use (absent: every agent the key may chat with)."
    )
    expires_at: datetime
    created_at: datetime


class ClientTokenRevoke(Request):
    """Body of ``POST /v1/client_tokens/revoke``: end every token of one end user."""

    user: Principal


class ClientTokenRevocation(BaseModel):
    """What ``POST /v1/client_tokens/revoke`` ended."""

    object: Literal["client_token_revocation"] = "client_token_revocation"
    user: str
    revoked: int = Field(description="How many of the user's unexpired tokens were ended.")


def _absent_or_non_blank(schema: dict[str, Any]) -> None:
    # an optional text that is non-blank when given, and never null
    _absent_when_none(schema)
    schema.update(_DECLARE_NON_BLANK)


MAX_TOOL_OUTPUTS = 64
"""The most tool calls one model step may leave to the caller (and outputs one resume gives)."""


class ToolOutput(Request):
    """The result of a tool call the caller ran, sent back to resume the turn."""

    tool_call_id: str = Field(
        ..., min_length=1, max_length=100, description="The `id` of the call it answers."
    )
    output: str = Field(
        ...,
        description="What the tool returned, as text (JSON is usual); passed to the model"
        " only. At most `max_tool_output_chars` characters.",
    )


class ToolApproval(Request):
    """The caller's decision on a call that waits for approval."""

    tool_call_id: str = Field(
        ..., min_length=1, max_length=100, description="The `id` of the call it decides."
    )
    approve: StrictBool = Field(description="`true`: the call runs; `false`: it never does.")
    reason: str | None = Field(
        None, max_length=1000, description="Why (told to the model when it is refused)."
    )


class ChatMessageRequest(Request):
    """Body of ``POST /v1/chat/message``: a ``message``, or the ``tool_outputs`` that
    resume a turn waiting for them (with its ``conversationId``)."""

    agentId: str = Field(..., min_length=1, max_length=100)
    message: str | None = Field(
        None,
        min_length=1,
        description="The user's message. Required unless `tool_outputs` is given.",
        json_schema_extra=_absent_or_non_blank,
    )
    conversationId: str | None = Field(None, min_length=1, max_length=100)
    tool_outputs: list[ToolOutput] | None = Field(
        None,
        min_length=1,
        max_length=MAX_TOOL_OUTPUTS,
        description="Outputs of the tool calls the turn waits for (`status: requires_action`),"
        " one for each call, all at once; with the conversation's `conversationId` and no"
        " `message`.",
        json_schema_extra=_absent_when_none,
    )
    approvals: list[ToolApproval] | None = Field(
        None,
        min_length=1,
        max_length=MAX_TOOL_OUTPUTS,
        description="Decisions on the calls that wait for approval (`type: approval`), one"
        " for each, given with the `tool_outputs` of the others (if any); with the"
        " conversation's `conversationId` and no `message`.",
        json_schema_extra=_absent_when_none,
    )
    stream: StrictBool = Field(
        False, description="Answer as server-sent events (`text/event-stream`) as it is generated."
    )
    user: EndUser | None = Field(
        None,
        description="Answer for this end user: only documents they may read (`access`) are"
        " retrieved, cited or quoted.",
        json_schema_extra=_absent_when_none,
    )

    @field_validator("message", "tool_outputs", "approvals", "user", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # absent, or given: the document declares none of them as nullable
        return _refuse_null(value, "instead")


class ChatDelta(BaseModel):
    """``data`` of a ``response.delta`` event of a streamed answer: the next piece of text."""

    delta: str


class Usage(BaseModel):
    """Tokens a chat model reported for an answer, summed over the turn's model calls
    (one per tool step)."""

    input_tokens: int = Field(ge=0, description="Tokens the model read (its prompts).")
    output_tokens: int = Field(ge=0, description="Tokens the model wrote.")

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


USAGE_ABSENT = "Absent when the chat model reports no token usage."


ChatStatus = Literal["completed", "requires_action", "handed_off"]
"""How a chat turn ended: ``completed`` (the agent answered), ``requires_action`` (the
model called tools the caller runs: the turn waits for their outputs) or ``handed_off``
(a person has the conversation: the message was kept for them and no model answered)."""


class RequestedToolCall(BaseModel):
    """A call the turn waits for: of a tool the caller runs (``function``: no plugin runs
    it), or of one that needs the caller's approval before it runs (``approval``)."""

    id: str = Field(
        description="Answer it with a `tool_outputs` entry (`function`) or an `approvals`"
        " entry (`approval`) of this `tool_call_id`."
    )
    type: Literal["function", "approval"] = "function"
    name: str = Field(description="The tool's name, as the agent's `tools` define it.")
    arguments: dict[str, Any] = Field(
        description="The arguments the model chose, parsed from its JSON: untrusted input."
    )
    server_label: str | None = _omitted_if_none(
        "The MCP server the tool is on (its `label` in the agent's `mcp_servers`); absent"
        " for a tool that is not on one."
    )


class OperatorMessageCreate(Request):
    """Body of ``POST /v1/conversations/{id}/messages``: a person's reply in the conversation."""

    content: str = Field(..., min_length=1, json_schema_extra=_DECLARE_NON_BLANK)


class ChatMessageResponse(BaseModel):
    """The agent's answer, its citations and the conversation it belongs to."""

    agentId: str
    status: ChatStatus = Field(
        default="completed",
        description="`completed`: the agent answered. `requires_action`: the model called"
        " tools the caller runs (`tool_calls`); send their `tool_outputs` to continue."
        " `handed_off`: a person has the conversation; the message was kept for them and"
        " `response` is empty.",
    )
    response: str
    citations: list[Citation]
    conversationId: str
    tool_calls: list[RequestedToolCall] | None = _omitted_if_none(
        "With `status: requires_action`: the calls waiting for their outputs."
    )
    usage: Usage | None = _omitted_if_none(
        f"Tokens the chat model used for this answer. {USAGE_ABSENT}"
    )


class EventPayload(BaseModel):
    """The wire form of an ``agentcore.events.Event``: ``{id, type, timestamp, data}``.

    The bus event (``agentcore.Event``) is the one event model; this is only its
    JSON projection without the tenancy fields, as webhooks deliver it.
    """

    id: str
    type: str
    timestamp: str
    data: dict[str, Any]


MAX_WEBHOOK_DESCRIPTION = 500
"""The longest webhook ``description`` (characters), over HTTP and in Python alike."""


class WebhookSubscribeRequest(Request):
    """Body of ``POST /v1/webhooks/subscribe``."""

    url: str = Field(..., min_length=1, max_length=2048)
    events: list[str] = Field(..., min_length=1, max_length=32)
    description: str | None = Field(None, max_length=MAX_WEBHOOK_DESCRIPTION)


class WebhookSubscription(BaseModel):
    """A webhook subscription; the secret is shown only when created or rotated."""

    id: str
    status: SubscriptionStatus
    url: str
    events: list[str]
    description: str | None = None
    disabled_reason: str | None = None
    created_at: datetime
    updated_at: datetime


class WebhookSubscriptionWithSecret(WebhookSubscription):
    """A subscription with its ``whsec_`` signing secret (shown once)."""

    secret: str


class WebhookTestSent(WebhookSubscription):
    """Answer of ``POST /v1/webhooks/{id}/test``: the subscription, plus the ping it queued.

    ``event_id`` is the ``webhook-id`` header and body ``id`` the receiver will see;
    ``delivery_id`` appears in ``GET /v1/webhooks/{id}/deliveries``.
    """

    event_id: str
    delivery_id: str


class WebhookList(BaseModel):
    """A page of webhook subscriptions, newest first."""

    webhooks: list[WebhookSubscription]
    has_more: bool


class DeliveryAttempt(BaseModel):
    """One HTTP attempt of a delivery."""

    attempted_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: float


class Delivery(BaseModel):
    """One event's delivery to one subscription, with its attempts."""

    id: str
    event_id: str
    event_type: str
    status: Literal["pending", "succeeded", "failed"]
    attempts: list[DeliveryAttempt]
    next_attempt_at: datetime | None
    created_at: datetime


class DeliveryList(BaseModel):
    """A page of deliveries, newest first."""

    deliveries: list[Delivery]
    has_more: bool


class Problem(BaseModel):
    """RFC 9457 problem details, with agentcore's ``code``, ``param`` and ``request_id``."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    param: str | None = None
    request_id: str | None = None


class Deleted(BaseModel):
    """Confirmation that an object was deleted."""

    id: str
    deleted: Literal[True] = True


class LoopState(BaseModel):
    """One background loop of a node, as ``GET /v1/health`` reports it."""

    name: str = Field(
        description="The loop (and its thread's) name, e.g. agentcore-webhook-worker."
    )
    running: bool
    failures: int = Field(description="Consecutive failed passes; 0 when the last one succeeded.")
    last_error: str | None = Field(
        None, description="The exception type of the last failure (its message is in the log)."
    )
    last_error_at: datetime | None = None


class Health(BaseModel):
    """Whether a node can do its work: its store answers and its background loops run.

    Holds no tenant data (no organization, key or object), so it needs no key.
    """

    status: Literal["ok", "unhealthy"]
    store: Literal["ok", "unavailable"]
    started: bool = Field(description="Whether the core was started (its loops run).")
    loops: list[LoopState]
    problems: list[str] = Field(description="What is wrong, one sentence each; empty when ok.")


ConversationStatus = Literal["active", "handed_off"]
"""``active``: the agent answers. ``handed_off``: a person has the conversation (the
agent handed off, or an operator replied); the user's messages are kept and announced
(``conversation.message``) and answered by no model, until the conversation is released."""


class Conversation(BaseModel):
    """A conversation: the messages of one agent's chat, kept in order."""

    id: str
    agentId: str = Field(description="The agent the conversation is with.")
    status: ConversationStatus = Field(
        default="active",
        description="`active`: the agent answers. `handed_off`: a person has it (the agent"
        " handed off, or an operator replied) until it is released; the agent stays quiet.",
    )
    created_at: datetime
    updated_at: datetime = Field(description="When its last message was added.")
    message_count: int = Field(
        ge=0, description="Messages in the conversation (user, agent and operator)."
    )
    user: str | None = Field(
        default=None,
        description="The end user it is for (the `user` it was started with), if any: a"
        " request for another user does not find it.",
    )


class ConversationList(BaseModel):
    """A page of conversations, newest first."""

    conversations: list[Conversation]
    has_more: bool


MessageRole = Literal["user", "assistant", "operator", "tool"]
"""Who wrote a message: the user, the agent (``assistant``), a person who took the
conversation over (``operator``), or a tool the caller ran (``tool``: its output)."""


Rating = Literal["up", "down"]
"""A rating of an answer: helpful (``up``) or not (``down``)."""


class FeedbackCreate(Request):
    """Body of ``POST /v1/conversations/{id}/messages/{message_id}/feedback``."""

    rating: Rating = Field(description="`up`: the answer helped; `down`: it did not.")
    reason: str | None = Field(
        None, max_length=1000, description="Why, in the user's words (at most 1,000 characters)."
    )


class Feedback(BaseModel):
    """The rating an answer was given (the latest: a second one replaces the first)."""

    rating: Rating
    reason: str | None = None
    rated_at: datetime


class Message(BaseModel):
    """One message of a conversation: the user's, the agent's answer, or an operator's."""

    id: str
    role: MessageRole
    content: str
    citations: list[Citation] = Field(
        description="For an answer, the citations its chat response carried; empty for"
        " the user's messages."
    )
    usage: Usage | None = _omitted_if_none(
        f"For an answer, the tokens the chat model used. {USAGE_ABSENT}"
    )
    tool_calls: list[RequestedToolCall] | None = _omitted_if_none(
        "For an answer that waited for the caller's tools: the calls it made."
    )
    tool_call_id: str | None = _omitted_if_none(
        "For a `tool` message: the call whose output it is."
    )
    feedback: Feedback | None = _omitted_if_none(
        "For an answer that was rated: its rating (`POST .../feedback`)."
    )
    created_at: datetime


class MessageList(BaseModel):
    """A page of a conversation's messages, oldest first (``order=desc``: newest first)."""

    messages: list[Message]
    has_more: bool


TOP_QUESTIONS = 20
"""How many questions each list of ``AgentStats`` holds at most."""


class QuestionCount(BaseModel):
    """A question users asked, as normalised, and how often."""

    text: str = Field(
        description="The question normalised: NFKC, case-folded, runs of white space made"
        " one space, trailing `. , ; : ! ?` dropped, at most 500 characters."
    )
    count: int = Field(ge=1, description="How many messages of the window asked it.")


class FeedbackCounts(BaseModel):
    """The ratings of an agent's answers."""

    up: int = Field(ge=0, description="Answers rated `up`.")
    down: int = Field(ge=0, description="Answers rated `down`.")


class AgentStats(BaseModel):
    """What an agent's conversations held in a window (``GET /v1/agents/{id}/stats``):
    every number counts the messages whose time is at or after ``since`` and before
    ``until``."""

    agent_id: str
    since: datetime | None = Field(description="The window's start, included (null: none).")
    until: datetime | None = Field(description="The window's end, excluded (null: none).")
    conversations: int = Field(
        ge=0, description="Conversations with a user message or an answer in the window."
    )
    messages: int = Field(
        ge=0,
        description="The users' messages and the agent's answers (not tool outputs, operators'"
        " replies, or a turn's pause for the caller's tools).",
    )
    answered: int = Field(
        ge=0, description="Answers that cite the knowledge (one citation or more)."
    )
    unanswered: int = Field(
        ge=0,
        description="Answers without a citation, and handoffs because the knowledge held no"
        " answer (`handoff_on_no_answer`).",
    )
    handoffs: int = Field(
        ge=0, description="Answers that handed the conversation to a person, for any reason."
    )
    feedback: FeedbackCounts = Field(description="The ratings of the answers in the window.")
    top_questions: list[QuestionCount] = Field(
        description=f"The users' messages, by normalised text: the {TOP_QUESTIONS} most"
        " asked, most first (ties by text)."
    )
    unanswered_questions: list[QuestionCount] = Field(
        description=f"The questions of the `unanswered` answers, by normalised text: the"
        f" {TOP_QUESTIONS} most frequent, most first (ties by text)."
    )
    usage: Usage = Field(
        description="The tokens of every model call of the window's turns (0 when the"
        " chat model reports none)."
    )
