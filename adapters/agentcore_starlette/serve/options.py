"""uvicorn's settings for the API: the HTTP limits of ``HttpSettings`` and the logging.

``agentcore serve`` runs with them, and any host serving the app with uvicorn can pass
the same::

    uvicorn.run(create_app(core), **server_options(core.settings))
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import uvicorn.config

from agentcore import Settings
from agentcore.adapters import SecretRedactingFilter
from agentcore_starlette.serve.connections import ClientShare, connections_per_client
from agentcore_starlette.serve.head_guard import HeadGuard, HeadLimits
from agentcore_starlette.settings import HttpSettings


def server_options(settings: Settings | HttpSettings, log_level: str = "info") -> dict[str, Any]:
    """uvicorn's settings for the API: the HTTP limits of ``settings`` (the core's,
    which carry the ``HttpSettings``, or those themselves) and the logging.

    - ``http``: httptools' parser with a bounded, timed head (``HeadGuard``:
      ``max_url_bytes``, ``max_header_bytes``, ``header_timeout``) and a share of the
      connections per client address (``max_connections_per_client``; one share per
      call: each server, each worker process, counts its own connections);
    - ``limit_concurrency``: ``max_connections`` (a request beyond gets uvicorn's 503);
    - ``timeout_keep_alive``: ``keep_alive_timeout``;
    - ``log_config``: ``serve_log_config(log_level)``.
    """
    http = settings if isinstance(settings, HttpSettings) else HttpSettings.of(settings)
    return {
        "http": functools.partial(
            HeadGuard,
            limits=HeadLimits.of(http),
            share=ClientShare(connections_per_client(http)),
        ),
        "limit_concurrency": http.max_connections,
        "timeout_keep_alive": http.keep_alive_timeout,
        "log_config": serve_log_config(log_level),
    }


def serve_log_config(log_level: str = "info") -> dict[str, Any]:
    """uvicorn's logging configuration, plus agentcore's loggers, all redacting secrets.

    agentcore's own records are kept from ``log_level`` up (uvicorn's level names:
    ``critical`` ... ``debug``, ``trace``); at ``debug`` and ``trace`` other libraries'
    debug records are kept too. The configuration is applied in every process that
    serves, the workers of ``serve --workers N`` included.

    The access log line holds the query string, where a careless client may put a key
    (the API refuses it, but the line is written anyway): every logger here carries
    ``SecretRedactingFilter``. agentcore's own records go to uvicorn's default handler.
    The access line is uvicorn's, made by ``access_log.AccessFormatter`` and written
    after its answer by ``access_log.DeferredStreamHandler``.
    """
    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["filters"] = {"redact_secrets": {"()": SecretRedactingFilter}}
    # the access line follows its answer onto the wire instead of preceding it, and is
    # uvicorn's line made without uvicorn's record copies
    config["handlers"]["access"]["class"] = (
        "agentcore_starlette.serve.access_log.DeferredStreamHandler"
    )
    config["formatters"]["access"]["()"] = "agentcore_starlette.serve.access_log.AccessFormatter"
    loggers: dict[str, dict[str, Any]] = config["loggers"]
    level = log_level.upper()  # uvicorn names "TRACE" a level of the logging module
    loggers["agentcore"] = {"handlers": ["default"], "level": level, "propagate": False}
    # other libraries (httpx sending webhooks, ...) reach the default handler through root
    verbose = log_level in ("debug", "trace")
    config["root"] = {"handlers": ["default"], "level": "DEBUG" if verbose else "WARNING"}
    for logger in loggers.values():
        logger["filters"] = ["redact_secrets"]
    for handler in config["handlers"].values():  # also covers records propagated to root
        handler["filters"] = ["redact_secrets"]
    return config
