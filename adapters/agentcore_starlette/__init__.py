"""agentcore_starlette: the /v1 HTTP API of an AgentCore as a mountable Starlette app."""

from agentcore_starlette.app import bearer_token, create_app, lifespan_for
from agentcore_starlette.routing import ApiRoute, Call

__all__ = ["ApiRoute", "Call", "bearer_token", "create_app", "lifespan_for"]
