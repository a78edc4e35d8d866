"""The /v1 route table, one module per resource (the OpenAI-compatible routes are
``agentcore_starlette.openai``'s)."""

from __future__ import annotations

from agentcore_starlette.openai import routes as openai_routes
from agentcore_starlette.routes import agents, auth, chat, conversations, knowledge, webhooks
from agentcore_starlette.routing import ApiRoute

__all__ = ["ROUTES"]


ROUTES: list[ApiRoute] = [
    *auth.ROUTES,
    *agents.ROUTES,
    *knowledge.ROUTES,
    *chat.ROUTES,
    *conversations.ROUTES,
    *webhooks.ROUTES,
    *openai_routes.ROUTES,
]
