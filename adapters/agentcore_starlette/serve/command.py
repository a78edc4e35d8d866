"""``agentcore serve``: the /v1 API under uvicorn, alone or in worker processes.

``run`` is the command (registered by ``agentcore_starlette.commands``). ``agentcore
serve --workers N`` hands uvicorn the import string
``agentcore_starlette.serve:app_from_environment`` (uvicorn's worker processes need an
import string, not an app object). Each worker opens the store named by
``AGENTCORE_DB`` with settings from the ``AGENTCORE_*`` variables, as
``agentcore serve`` does. Any process manager can use it the same way::

    AGENTCORE_DB=postgresql://... uvicorn --factory --workers 4 \\
        agentcore_starlette.serve:app_from_environment

What the workers share goes through the store: the webhook outbox (claims are leased,
so each delivery is sent by one worker), the index change log (a search in any worker
sees writes made in any other) and idempotency keys. Under ``serve --workers N`` they
share the rate-limit buckets too: in a file beside a SQLite database
(``rate_limit_backend = "host"``), else in the store; a process manager running the
factory itself sets ``AGENTCORE_RATE_LIMIT_BACKEND`` to one of those.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from agentcore import AgentCore, Settings
from agentcore.adapters import hide_passwords
from agentcore.cli import START_FAILED, USAGE_ERROR, say
from agentcore.config import (
    WORKERS_VARIABLE,
    database_url,
    export_metrics_multiprocess_dir,
    export_to_children,
    metrics_multiprocess_dir,
    usable_cpus,
    web_concurrency,
)
from agentcore_starlette.app import create_app
from agentcore_starlette.metrics import metric_files
from agentcore_starlette.serve.options import server_options


def app_from_environment() -> Starlette:
    """The /v1 app of a core on ``$AGENTCORE_DB``; its lifespan starts and stops workers.
    ``GET /metrics`` is on, as under ``agentcore serve``, unless ``AGENTCORE_METRICS=false``."""
    core = AgentCore.open(database_url())
    return create_app(core, metrics=serves_metrics(core.settings))


def serves_metrics(settings: Settings) -> bool:
    """Whether ``agentcore serve`` serves ``GET /metrics``: unless ``metrics`` is false."""
    return settings.metrics is not False


LISTEN_BACKLOG = 2048
"""Connections the listening socket queues before they are accepted (uvicorn's default)."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` as uvicorn binds one (``SO_REUSEADDR``;
    IPv6 when the host has a colon), bound and listening before the app starts, so that
    a port that is taken fails at once, in one line, before the core starts any work
    (connections that come meanwhile wait in the backlog until the app has started).

    :raises OSError: the address cannot be bound (taken, not this machine's, privileged).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # listening claims the port now: with SO_REUSEADDR another socket may bind it
        # too until one listens, and the workers listen only after their start-up
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _reason(error: OSError) -> str:
    text = error.strerror or str(error)
    return text[:1].lower() + text[1:]


DEFAULT_WORKERS_CAP = 8
"""Most processes ``serve`` starts when neither ``--workers`` nor ``WEB_CONCURRENCY``
says how many (one per usable CPU up to this)."""


def worker_count(requested: int | None, *, in_process: bool) -> int:
    """How many processes ``serve`` runs: ``requested`` (``--workers``), else
    ``$WEB_CONCURRENCY`` (``web_concurrency``), else one per usable CPU (``usable_cpus``:
    the affinity and the container's quota), at most ``DEFAULT_WORKERS_CAP``; one when
    the store lives in this process (``in_process``: SQLite ``:memory:``), which another
    process cannot open.

    :raises ValueError: ``WEB_CONCURRENCY`` is not an integer from 1 to 64, or more than
        one process was asked for on a store that lives in this process (the message
        says which, for the command's one line).
    """
    source = "--workers"
    if requested is None:
        requested = web_concurrency()
        source = WORKERS_VARIABLE
    if requested is None:
        return 1 if in_process else min(usable_cpus(), DEFAULT_WORKERS_CAP)
    if requested > 1 and in_process:
        raise ValueError(
            f"{source} {requested} needs a database file or PostgreSQL: another process"
            " cannot open an in-memory database, so each worker would have one of its own"
        )
    return requested


def run(core: AgentCore, args: argparse.Namespace) -> int:
    """Serve ``core``'s /v1 API with uvicorn until SIGTERM or SIGINT, in ``worker_count``
    processes; 0 when stopped, ``USAGE_ERROR`` (2) with one line on stderr for a worker
    count that cannot be, ``START_FAILED`` (3) when the address cannot be bound."""
    try:
        workers = worker_count(args.workers, in_process=core.store_in_process)
    except ValueError as error:
        say(str(error))
        return USAGE_ERROR
    args.workers = workers
    options = server_options(core.settings, args.log_level)
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as error:
        say(f"cannot listen on {args.host}:{args.port}: {_reason(error)}")
        return START_FAILED
    metrics = serves_metrics(core.settings)
    if workers > 1:
        # N processes behind one port must share one limit per key, as one process would
        # (a backend the operator set stays theirs)
        auto = core.settings.rate_limit_backend == "auto"
        backend = core.rate_limiter.backend_for_processes() if auto else None
        # each process keeps its own indexes, ingestion pool and connections: the
        # default budgets are the node's, shared
        shares = core.settings.settings_for_processes(workers)
        if backend is not None:
            shares["rate_limit_backend"] = backend
        known = core.settings.keywords()
        core.close()  # the store is migrated; each worker process opens its own core
        with sock:  # uvicorn's supervisor hands the bound socket to its workers
            export_to_children(args.db, known=known, **shares)
            return _serve_workers(args, sock, options, metrics=metrics)
    given = metrics_multiprocess_dir()
    if metrics and given is not None:  # the last run's files would be counted as this one's
        _remove_metric_files(given, keep=os.getpid())
    config = uvicorn.Config(
        create_app(core, metrics=metrics),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        **options,
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; this handler makes that
    # a clean exit 0 instead of death by signal or a KeyboardInterrupt traceback
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    print(_banner(args), flush=True)
    server.run(sockets=[sock])  # uvicorn handles SIGTERM/SIGINT: stops, drains, shuts down
    return 0


def _banner(args: argparse.Namespace, workers: str = "") -> str:
    """The first line ``serve`` prints: the store (never its password) and the address."""
    return (
        f"agentcore serving {hide_passwords(args.db)} on http://{args.host}:{args.port}/v1{workers}"
    )


def _serve_workers(
    args: argparse.Namespace, sock: socket.socket, options: Any, *, metrics: bool
) -> int:
    """Serve with ``args.workers`` processes on ``sock`` (the store is already migrated,
    and the workers' settings exported: ``export_to_children``); 0 when stopped,
    ``START_FAILED`` (3) when a worker failed to start.

    Each worker opens its own core on the same store from the environment; uvicorn's
    supervisor restarts a worker that dies and, on SIGTERM or SIGINT, stops every
    worker gracefully (each drains and stops its webhook worker) before returning. A
    worker whose start-up fails (its lifespan start-up raised, the store cannot be
    opened) exits with uvicorn's start-up failure status, and the supervisor then stops
    the others; ``uvicorn.run`` returns normally then, so the status is read here from
    the supervisor's processes. With metrics on, the workers share a multiprocess
    directory (``metrics_directory``).
    """
    config = uvicorn.Config(
        "agentcore_starlette.serve:app_from_environment",
        factory=True,
        workers=args.workers,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        **options,
    )
    with metrics_directory() if metrics else contextlib.nullcontext():
        print(_banner(args, f" with {args.workers} worker processes"), flush=True)
        supervisor = Multiprocess(config, sockets=[sock])
        supervisor.run()
    failed = any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes)
    return START_FAILED if failed else 0


@contextlib.contextmanager
def metrics_directory() -> Iterator[str]:
    """The directory of prometheus-client's multiprocess mode for ``serve --workers N``,
    exported to the workers it starts (``PROMETHEUS_MULTIPROC_DIR``): the operator's,
    emptied of the last run's metric files, or else a temporary one, removed afterwards.
    Each worker writes its counters there and the one scraped adds them all up."""
    given = metrics_multiprocess_dir()
    if given is not None:
        _remove_metric_files(given)
        yield given
        return
    made = tempfile.mkdtemp(prefix="agentcore-metrics-")
    export_metrics_multiprocess_dir(made)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _remove_metric_files(directory: str, *, keep: int | None = None) -> None:
    """Make ``directory`` and remove the metric files in it (prometheus-client's own,
    ``metric_files``; any other file stays, a database too), but for those of process
    ``keep`` (this one, whose core has opened its files already and keeps writing
    them)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for stale, _, pid in list(metric_files(directory)):
        if pid != keep:
            stale.unlink(missing_ok=True)
