"""The adapter's commands for the ``agentcore`` CLI: ``serve``, through the
``agentcore_register_commands`` hook (which the adapter's plugin, ``plugin``, offers).

The CLI loads it on every run, with or without the ``server`` extra, so it imports
neither Starlette nor uvicorn: the server is imported when ``serve`` runs, and
without the extra ``serve`` says what to install and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from agentcore import AgentCore
from agentcore.cli import USAGE_ERROR, Command, int_in
from agentcore.hookspecs import hookimpl

NEEDS_EXTRA = "agentcore serve needs the server extra: pip install 'agentcore-service[server]'"


@hookimpl
def agentcore_register_commands(
    register: Callable[[str, Command, str], argparse.ArgumentParser],
) -> None:
    """Add ``agentcore serve [--host] [--port] [--log-level] [--workers]``."""
    parser = register("serve", serve, "serve the /v1 API (and GET /metrics)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on: this machine only by default; 0.0.0.0 (or ::) for"
        " every interface, e.g. behind a load balancer or in a container",
    )
    parser.add_argument(
        "--port", type=int_in("--port", 1, 65535), default=8000, help="the TCP port, 1 to 65535"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="the least severe log records written (warning silences the access log)",
    )
    parser.add_argument(
        "--workers",
        type=int_in("--workers", 1, 64),
        default=None,
        help="worker processes sharing the port and the store, 1 to 64; default:"
        " $WEB_CONCURRENCY, else one per usable CPU (at most 8), one for an in-memory"
        " database",
    )


def serve(core: AgentCore, args: argparse.Namespace) -> int:
    """Serve the /v1 API with uvicorn until SIGTERM or SIGINT."""
    try:
        from agentcore_starlette.serve import run
    except ImportError:
        print(NEEDS_EXTRA, file=sys.stderr)
        return USAGE_ERROR
    return run(core, args)
