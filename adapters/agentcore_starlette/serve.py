"""An app factory for multi-process servers: each worker process opens its own core.

``agentcore serve --workers N`` hands uvicorn the import string
``agentcore_starlette.serve:app_from_environment`` (uvicorn's worker processes need an
import string, not an app object). Each worker opens the store named by
``AGENTCORE_DB`` with settings from the ``AGENTCORE_*`` variables, as
``agentcore serve`` does. Any process manager can use it the same way::

    AGENTCORE_DB=postgresql://... uvicorn --factory --workers 4 \\
        agentcore_starlette.serve:app_from_environment

What the workers share goes through the store: the webhook outbox (claims are leased,
so each delivery is sent by one worker), the index change log (a search in any worker
sees writes made in any other), idempotency keys, and, with
``AGENTCORE_RATE_LIMIT_BACKEND=store``, the rate-limit buckets.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette

from agentcore import AgentCore
from agentcore_starlette.app import create_app

DEFAULT_DB = "./agentcore.db"


def app_from_environment() -> Starlette:
    """The /v1 app of a core on ``$AGENTCORE_DB``; its lifespan starts and stops workers."""
    return create_app(AgentCore.open(os.environ.get("AGENTCORE_DB", DEFAULT_DB)))
