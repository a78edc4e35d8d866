"""The core's face for its adapters: what an HTTP server (``agentcore_starlette``) or a
host's own front end needs beyond the names of ``agentcore``.

An adapter imports ``agentcore`` (``AgentCore``, ``WorkspaceServices``,
``Cancellation``, ``ChatStream``, the errors), the public modules ``agentcore.errors``,
``agentcore.schema``, ``agentcore.config``, ``agentcore.hookspecs``,
``agentcore.chat_models`` and ``agentcore.cli`` (for its commands), and this module:
never the core's storage, caches, runtime or engine, which may change shape at any
commit (``lint-imports`` holds the Starlette adapter to it). What is here is the
facts an adapter turns into answers, and the helpers that keep secrets out of its logs:

- ids: ``new_id`` (``req_...`` request ids, ``chatcmpl_...``);
- logs and URLs: ``get_logger`` (a logger that masks keys and secrets), the
  ``SecretRedactingFilter`` it uses, ``hide_passwords`` (of a store URL),
  ``looks_secret`` and ``QUERY_SECRET_NAMES`` (what must not travel in a URL);
- JSON text: ``may_decode_to_lone_surrogate`` (whether a body needs the check
  ``agentcore.errors.check_unicode`` makes);
- idempotency: ``IdempotencyKeys`` (the type of ``core.idempotency``), the
  ``StoredResult`` its claims replay and ``kept_error``, a kept failure as its error;
- the API's vocabulary: ``CHAT_STATUSES`` (the agents a key of each environment may
  chat with), ``ORDERS`` and ``Order`` (the orders of a conversation's messages);
- ``Sweeper``: bounds a per-key table whose stale entries mean nothing, as the core
  bounds its own (an adapter's per-workspace estimates).
"""

from __future__ import annotations

from agentcore._idempotency import IdempotencyKeys, kept_error
from agentcore._ids import new_id
from agentcore._logs import (
    QUERY_SECRET_NAMES,
    SecretRedactingFilter,
    get_logger,
    hide_passwords,
    looks_secret,
)
from agentcore._memory_budget import Sweeper
from agentcore._unicode import may_decode_to_lone_surrogate
from agentcore.conversations import ORDERS, Order
from agentcore.storage.records import StoredResult
from agentcore.workspace import CHAT_STATUSES

__all__ = [
    "CHAT_STATUSES",
    "ORDERS",
    "QUERY_SECRET_NAMES",
    "IdempotencyKeys",
    "Order",
    "SecretRedactingFilter",
    "StoredResult",
    "Sweeper",
    "get_logger",
    "hide_passwords",
    "kept_error",
    "looks_secret",
    "may_decode_to_lone_surrogate",
    "new_id",
]
