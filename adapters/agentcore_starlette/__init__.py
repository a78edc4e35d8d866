"""agentcore_starlette: the /v1 HTTP API of an AgentCore as a mountable Starlette app.

The package is also the ``agentcore`` CLI's plugin for ``serve`` (``commands``), which
the CLI and every ``AgentCore`` load with or without the ``server`` extra: importing
the package itself needs neither Starlette nor uvicorn, and its names load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcore_starlette.app import create_app, lifespan_for
    from agentcore_starlette.credentials import bearer_token
    from agentcore_starlette.routing import ApiRoute, Call
    from agentcore_starlette.settings import HttpSettings

__all__ = ["ApiRoute", "Call", "HttpSettings", "bearer_token", "create_app", "lifespan_for"]

_HOMES = {
    "ApiRoute": "agentcore_starlette.routing",
    "Call": "agentcore_starlette.routing",
    "HttpSettings": "agentcore_starlette.settings",
    "bearer_token": "agentcore_starlette.credentials",
    "create_app": "agentcore_starlette.app",
    "lifespan_for": "agentcore_starlette.app",
}


def __getattr__(name: str) -> Any:
    """The public names, imported (with Starlette) when first asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentcore_starlette' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value
