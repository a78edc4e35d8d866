"""The adapter as a plugin of the core, found through the ``agentcore`` entry point: it
declares the HTTP settings (``settings.HttpSettings``) and adds ``agentcore serve``
(``commands``).

The CLI and every ``AgentCore`` load it, with or without the ``server`` extra, so
neither it nor what it imports needs Starlette or uvicorn.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic_settings import BaseSettings

from agentcore.hookspecs import hookimpl
from agentcore_starlette.commands import agentcore_register_commands
from agentcore_starlette.settings import NAMESPACE, HttpSettings

__all__ = ["agentcore_register_commands", "agentcore_register_settings"]


@hookimpl
def agentcore_register_settings(register: Callable[[str, type[BaseSettings]], None]) -> None:
    """Declare ``HttpSettings``, under the names the HTTP limits had as the core's."""
    register(NAMESPACE, HttpSettings)
