"""``agentcore serve``: the /v1 API under uvicorn, with the HTTP limits set.

``run`` is the command (registered by ``agentcore_starlette.commands``);
``server_options`` are the uvicorn settings it uses, which any host serving the app
with uvicorn can pass too::

    uvicorn.run(create_app(core), **server_options(core.settings))

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

import argparse
import copy
import functools
import logging
import signal
from typing import Any

import uvicorn
import uvicorn.config
from starlette.applications import Starlette

from agentcore import AgentCore
from agentcore.config import Settings, database_url, export_to_children
from agentcore_starlette.app import create_app
from agentcore_starlette.protocol import HeadGuard, HeadLimits


def app_from_environment() -> Starlette:
    """The /v1 app of a core on ``$AGENTCORE_DB``; its lifespan starts and stops workers."""
    return create_app(AgentCore.open(database_url()))


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's settings for the API: the HTTP limits of ``settings`` and the logging.

    - ``http``: httptools' parser with a bounded, timed head (``HeadGuard``:
      ``max_url_bytes``, ``max_header_bytes``, ``header_timeout``);
    - ``limit_concurrency``: ``max_connections`` (a request beyond gets uvicorn's 503);
    - ``timeout_keep_alive``: ``keep_alive_timeout``;
    - ``log_config``: ``serve_log_config()``.
    """
    return {
        "http": functools.partial(HeadGuard, limits=HeadLimits.of(settings)),
        "limit_concurrency": settings.max_connections,
        "timeout_keep_alive": settings.keep_alive_timeout,
        "log_config": serve_log_config(),
    }


def serve_log_config() -> dict[str, Any]:
    """uvicorn's logging configuration, plus agentcore's loggers, all redacting secrets.

    The access log line holds the query string, where a careless client may put a key
    (the API refuses it, but the line is written anyway): every logger here carries
    ``SecretRedactingFilter``. agentcore's own records go to uvicorn's default handler.
    The access line is uvicorn's, made by ``logs.AccessFormatter`` and written after its
    answer by ``logs.DeferredStreamHandler``.
    """
    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["filters"] = {"redact_secrets": {"()": "agentcore.redact.SecretRedactingFilter"}}
    # the access line follows its answer onto the wire instead of preceding it, and is
    # uvicorn's line made without uvicorn's record copies
    config["handlers"]["access"]["class"] = "agentcore_starlette.logs.DeferredStreamHandler"
    config["formatters"]["access"]["()"] = "agentcore_starlette.logs.AccessFormatter"
    loggers: dict[str, dict[str, Any]] = config["loggers"]
    loggers["agentcore"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    # other libraries (httpx sending webhooks, ...) reach the default handler through root
    config["root"] = {"handlers": ["default"], "level": "WARNING"}
    for logger in loggers.values():
        logger["filters"] = ["redact_secrets"]
    for handler in config["handlers"].values():  # also covers records propagated to root
        handler["filters"] = ["redact_secrets"]
    return config


def run(core: AgentCore, args: argparse.Namespace) -> int:
    """Serve ``core``'s /v1 API with uvicorn until SIGTERM or SIGINT; 0 when stopped."""
    options = server_options(core.settings)
    if args.workers > 1:
        backend = core.settings.rate_limit_backend
        core.close()  # the store is migrated; each worker process opens its own core
        return _serve_workers(args, backend, options)
    config = uvicorn.Config(
        create_app(core),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        **options,
    )
    logging.getLogger("agentcore").setLevel(args.log_level.upper())
    if args.log_level in ("debug", "trace"):
        logging.getLogger().setLevel(logging.DEBUG)
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; this handler makes that
    # a clean exit 0 instead of death by signal or a KeyboardInterrupt traceback
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    print(f"agentcore serving {args.db} on http://{args.host}:{args.port}/v1", flush=True)
    server.run()  # uvicorn handles SIGTERM/SIGINT: stops accepting, drains, runs shutdown
    return 0


def _serve_workers(args: argparse.Namespace, rate_limit_backend: str, options: Any) -> int:
    """Serve with ``args.workers`` processes on one socket (the store is already migrated).

    Each worker opens its own core on the same store from the environment; uvicorn's
    supervisor restarts a worker that dies and, on SIGTERM or SIGINT, stops every
    worker gracefully (each drains and stops its webhook worker) before returning.
    """
    # N processes behind one port must share one limit per key, as one process would
    shared = {"rate_limit_backend": "store"} if rate_limit_backend == "auto" else {}
    export_to_children(args.db, **shared)
    print(
        f"agentcore serving {args.db} on http://{args.host}:{args.port}/v1"
        f" with {args.workers} worker processes",
        flush=True,
    )
    uvicorn.run(
        "agentcore_starlette.serve:app_from_environment",
        factory=True,
        workers=args.workers,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        **options,
    )
    return 0
