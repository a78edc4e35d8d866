"""HttpSettings: the limits and timeouts only HTTP needs, the adapter's own settings.

Declared through the core's ``agentcore_register_settings`` hook (``plugin``) under the
names they had when the core held them, so every deployment keeps setting them as it
did: ``AGENTCORE_MAX_BODY_BYTES``, a ``.env`` line, ``AgentCore.open(...,
max_body_bytes=...)``; ``create_app(core, max_body_bytes=...)`` overrides them for one
app. The limits the core checks itself (``max_upload_bytes``, the field lengths) stay
the core's ``Settings``. This module imports neither Starlette nor uvicorn: the core
loads it with the plugin, and ingestion worker processes unpickle it with the settings.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from agentcore.config import ENV_PREFIX, PluginSettings, Settings

NAMESPACE = "http"
"""The adapter's namespace among plugins' settings (``settings.plugin("http")``)."""
MiB = 1024 * 1024
_ORIGIN = re.compile(r"^https?://[^/\s?#]+$")


def check_origin(origin: str) -> str:
    """``origin`` if it is ``*`` or an origin (a scheme and a host, with a port if any,
    no path: as a browser sends it in ``Origin``), else ``ValueError``."""
    origin = origin.strip()
    if origin != "*" and not _ORIGIN.match(origin):
        raise ValueError(
            f"{origin!r} is not an origin: give a scheme and a host (and a port), with no"
            " path or trailing slash, e.g. https://app.example.com"
        )
    return origin


class HttpSettings(PluginSettings):
    """The HTTP adapter's settings; each is read from ``AGENTCORE_<NAME>`` as well.

    Named without the namespace (``env_prefix="AGENTCORE_"``): they were the core's
    settings, and deployments set them by these names. docs/operations.md lists them
    with the core's.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    max_body_bytes: int = Field(1 * MiB, ge=1, description="Largest JSON request body.")
    max_json_depth: int = Field(32, ge=2, description="Deepest nesting of a JSON body.")
    request_deadline: float = Field(60.0, gt=0, description="Seconds a request may take.")
    max_url_bytes: int = Field(
        8 * 1024, ge=256, description="Longest request target (path and query string); 414 beyond."
    )
    max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        description="Largest request header section (every name and value together); 431 beyond.",
    )
    body_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds a request body may stall (no byte arriving) before the request is"
        " answered 408 and its connection closed.",
    )
    body_deadline: float = Field(
        120.0,
        gt=0,
        description="Seconds a whole request body may take to arrive, from when the app starts"
        " reading it, however steadily it trickles; then 408 and its connection closed.",
    )
    header_timeout: float = Field(
        10.0,
        gt=0,
        description="`agentcore serve`: seconds a client has to send a request's head (request"
        " line and headers), from connecting or from the previous answer; then 408 (or, when"
        " nothing was sent, a silent close).",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="`agentcore serve`: open connections (or requests in progress) of one"
        " server process at which a new request is answered 503 instead of being served.",
    )
    max_connections_per_client: int | None = Field(
        None,
        ge=1,
        description="`agentcore serve`: open connections one client address may hold in a"
        " server process (unset: a quarter of `max_connections`); a connection past it is"
        " answered 429 and closed at once. Behind a proxy every connection comes from the"
        " proxy's address: set it to `max_connections` there.",
    )
    keep_alive_timeout: int = Field(
        5, ge=1, description="`agentcore serve`: seconds an idle keep-alive connection stays open."
    )
    mcp_enabled: bool = Field(
        True,
        description="Whether `create_app` serves the MCP endpoint `/v1/mcp` (it needs the"
        " `mcp` extra; without it the endpoint answers 404 `mcp_not_installed`).",
    )
    inline_budget: float = Field(
        0.005,
        ge=0,
        description="Seconds: a search whose recent runs in its workspace took at most this"
        " long, on an index that is loaded and current, runs on the HTTP server's event"
        " loop instead of a worker thread (the thread hop costs more than such a search),"
        " whatever else the server is running; 0 always uses a thread.",
    )
    stream_heartbeat: float = Field(
        15.0, gt=0, description="Seconds between comment heartbeats of a streamed answer."
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        [],
        description="Origins whose pages may call the routes a client token may use"
        " (comma-separated, e.g. `https://app.example.com,https://admin.example.com`;"
        " `*` for any); no other route is opened. None by default.",
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        """``a,b`` (the environment's form) as ``["a", "b"]``; each one checked."""
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            return [check_origin(str(origin)) for origin in value]
        return value

    @classmethod
    def of(cls, settings: Settings, **overrides: Any) -> HttpSettings:
        """The HTTP settings ``settings`` carry, with ``overrides`` applied and validated.

        ``AgentCore.open`` loads them with the core's (with the adapter's plugin, which
        the ``agentcore`` entry point registers); settings built in code read them from
        the environment and the ``.env`` file when first asked.

        :raises TypeError: an override names a setting of the core, which enforces it
            where the core is opened, not per app.
        :raises pydantic.ValidationError: a bad value, or a name that is no setting.
        """
        current = settings.plugin(cls)
        if not overrides:
            return current
        theirs = sorted(name for name in overrides if name in Settings.model_fields)
        if theirs:
            raise TypeError(
                f"{', '.join(theirs)}: a setting of the core, which enforces it; set it where"
                " the core is opened (AgentCore.open(..., name=value) or AGENTCORE_<NAME>)"
            )
        return cls.model_validate({**current.model_dump(), **overrides})
