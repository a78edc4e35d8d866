"""The /v1 route table, one module per resource."""

from __future__ import annotations

from agentcore_starlette.routes import (
    agents,
    auth,
    chat,
    conversations,
    knowledge,
    openai,
    webhooks,
)
from agentcore_starlette.routing import ApiRoute

ROUTES: list[ApiRoute] = [
    *auth.ROUTES,
    *agents.ROUTES,
    *knowledge.ROUTES,
    *chat.ROUTES,
    *conversations.ROUTES,
    *webhooks.ROUTES,
    *openai.ROUTES,
]
