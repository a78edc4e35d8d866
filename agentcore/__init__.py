"""agentcore: an embeddable Agent Chat Service (agents, cited answers, search, webhooks)."""

from agentcore._cancellation import Cancellation
from agentcore._workspace_services import WorkspaceServices
from agentcore.chat import CallerOptions, ChatStream
from agentcore.client import AsyncClient, Client
from agentcore.config import Settings
from agentcore.core import AgentCore
from agentcore.errors import (
    AgentCoreError,
    AuthenticationError,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    UnsupportedMediaType,
    ValidationFailed,
)
from agentcore.events import Event, EventBus
from agentcore.hookspecs import hookimpl
from agentcore.workspace import Workspace

__version__ = "0.1.0"

__all__ = [
    "AgentCore",
    "AgentCoreError",
    "AsyncClient",
    "AuthenticationError",
    "CallerOptions",
    "Cancellation",
    "Cancelled",
    "ChatStream",
    "Client",
    "Conflict",
    "DeadlineExceeded",
    "Event",
    "EventBus",
    "InvalidRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "Settings",
    "UnsupportedMediaType",
    "ValidationFailed",
    "Workspace",
    "WorkspaceServices",
    "hookimpl",
]
