"""Helpers shared by the API, CLI and secrets tests (not fixtures: plain functions)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from processes import reap, spawn

import agentcore
from agentcore import AgentCore
from agentcore._ids import new_id, utcnow
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.knowledge.vectors import Embedding, WorkspaceIndexes, segment_root
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.schema import Document
from agentcore.storage.sqlite import SQLiteStore

PROBLEM_MEMBERS = {"type", "title", "status", "detail", "code", "request_id"}
CLI = [sys.executable, "-m", "agentcore.cli"]


class Seen:
    """An observer of a core (``AgentCore.open(..., observer=seen)``): counts what its
    parts tell it, e.g. ``seen["index.reload"]`` (``agentcore.observer.Observer``)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, event: str, count: int) -> None:
        with self._lock:
            self.counts[event] += count

    def __getitem__(self, event: str) -> int:
        with self._lock:
            return self.counts[event]


def file_indexes(db: str | Path, **options: Any) -> tuple[SQLiteStore, WorkspaceIndexes]:
    """A migrated ``SQLiteStore`` on ``db`` and ``WorkspaceIndexes`` over it with its
    segment files where a core puts them (``index_dir = "auto"``) and the hashing
    embedder, as a core builds them; ``options`` go to ``WorkspaceIndexes``. Close both."""
    store = SQLiteStore.open(db)
    embedder = HashingEmbedder()
    root, identity = segment_root(str(db), "auto")
    indexes = WorkspaceIndexes(
        store,
        embedding=Embedding({embedder.name: embedder}, embedder.name),
        segments=root,
        store_identity=identity,
        **options,
    )
    return store, indexes


_SEEN: weakref.WeakKeyDictionary[AgentCore, Seen] = weakref.WeakKeyDictionary()


def open_seen(url: str | Path, **settings: Any) -> AgentCore:
    """``AgentCore.open(url, **settings)`` with a ``Seen`` observer (``seen(core)``)."""
    observer = Seen()
    core = AgentCore.open(url, observer=observer, **settings)
    _SEEN[core] = observer
    return core


def seen(core: AgentCore) -> Seen:
    """The observer of a core opened by ``open_seen``."""
    return _SEEN[core]


def index_loads(core: AgentCore) -> tuple[int, int]:
    """How many times a core opened by ``open_seen`` loaded a workspace's whole index,
    and how many change-log deltas it applied."""
    observed = seen(core)
    return observed["index.reload"], observed["index.catch_up"]


def assert_problem(
    response: httpx.Response,
    status: int,
    code: str,
    *,
    param: str | None | type[Ellipsis] = ...,  # type: ignore[valid-type]
) -> dict[str, Any]:
    """Assert an RFC 9457 problem with ``status`` and ``code`` (and ``param`` if given)."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    missing = PROBLEM_MEMBERS - set(body)
    assert not missing, f"problem lacks {missing}: {body}"
    assert body["status"] == status
    assert body["code"] == code, body
    assert body["type"].endswith(code), body
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert body["request_id"], body
    assert response.headers["request-id"] == body["request_id"]
    if param is not ...:
        assert body.get("param") == param, body
    return body


def stored_chunk_ids(
    store: Any, organization_id: str, environment: str, document_id: str
) -> list[int]:
    """The ids of a stored document's chunks, in chunk order, as the Store API reads them
    back (``iter_chunk_texts``)."""
    found = store.iter_chunk_texts(organization_id, environment)
    return next(ids for document, ids, _ in found if document == document_id)


def make_document(**fields: Any) -> Document:
    """A ready one-page text document with one chunk, for the store's write methods."""
    values: dict[str, Any] = {
        "id": new_id("doc"),
        "source": "a.txt",
        "content_type": "text/plain",
        "pages": 1,
        "chunks": 1,
        "bytes": 100,
        "created_at": utcnow(),
    }
    return Document.model_validate({**values, **fields})


def cli_env(db: Path | None = None) -> dict[str, str]:
    """The environment for a CLI subprocess (``AGENTCORE_DB`` set when ``db`` is given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
    env["PYTHONUNBUFFERED"] = "1"
    if db is not None:
        env["AGENTCORE_DB"] = str(db)
    return env


def run_cli(
    *args: str,
    db: Path | str | None = None,
    env_db: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``agentcore [--db db] args...`` in a fresh process, in ``env`` (default:
    ``cli_env(env_db)``)."""
    argv = [*CLI, *(["--db", str(db)] if db is not None else []), *args]
    environment = cli_env(env_db) if env is None else env
    return subprocess.run(
        argv, capture_output=True, text=True, env=environment, timeout=timeout, check=False
    )


def run_python(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -c script args...`` in a fresh process (the CLI's environment)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=timeout,
        check=False,
    )


def json_of_processes(script: str, *args: str, count: int, timeout: float = 60) -> list[Any]:
    """Run ``count`` processes of ``python -c script args...`` at once (the CLI's
    environment); the JSON each printed, once all succeeded."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args], env=cli_env(), stdout=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    printed = [p.communicate(timeout=timeout)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes), [p.returncode for p in processes]
    return [json.loads(out) for out in printed]


def read_terminal(fd: int, process: subprocess.Popen[Any], bound: float) -> bytes:
    """What ``process`` wrote to a pseudo-terminal until it ended or closed it: read from
    ``fd``, the terminal's other end, which is closed afterwards. ``bound`` seconds only
    guard a hang: the reading ends with the command."""
    seen = b""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal's other end closed: the command ended
                break
            if not chunk:
                break
            seen += chunk
        elif process.poll() is not None:
            break
    os.close(fd)
    return seen


def cli_json(*args: str, db: Path | None = None, env_db: Path | None = None) -> Any:
    """Run the CLI, assert exit 0 and no stderr traceback, and parse stdout as JSON."""
    result = run_cli(*args, db=db, env_db=env_db)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


# Chat-model doubles (the chat and citation tests) --------------------------------


class Recorder:
    """A chat model plugin that records requests and answers from a script."""

    def __init__(self, name: str, answer: Callable[[ChatRequest], ChatResult]) -> None:
        self.name = name
        self.answer = answer
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        return self.answer(request)

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


def open_with(store: Any, *plugins: object, **settings: Any) -> AgentCore:
    """A core on ``store`` (a SQLite path or a PostgreSQL URL) with ``plugins`` and the
    rate limits lifted, so a test may send requests in bursts."""
    return AgentCore.open(
        store, plugins=list(plugins), rate_limit_test=1e6, rate_limit_live=1e6, **settings
    )


def core_with(tmp_path: Any, *plugins: object, **settings: Any) -> AgentCore:
    return open_with(tmp_path / "chat.db", *plugins, **settings)


# A faster ``api`` fixture -----------------------------------------------------------
# conftest's Api builds a default httpx.Client per request over uvicorn, which loads the
# CA bundle (~70 ms each, plain http needs none). This one is the same in every other
# respect (a fresh connection per request, same interface); modules opt in with
# ``from helpers import api``.


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (a zombie has ended; Linux ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition: Callable[[], object], limit: float = 60.0) -> Any:
    """Poll ``condition`` until it is truthy (``limit`` only guards a hang)."""
    give_up = time.monotonic() + limit
    while not (value := condition()):
        assert time.monotonic() < give_up, "condition not met in time"
        time.sleep(0.05)
    return value


def delivery_counts(store: Any) -> dict[str, int]:
    """How many webhook deliveries ``store`` (a SQL store) holds in each status."""
    with store.db.read() as conn:
        rows = conn.execute(
            "SELECT status, COUNT(*) AS n FROM webhook_deliveries GROUP BY status"
        ).fetchall()
    return {row["status"]: int(row["n"]) for row in rows}


import pytest  # noqa: E402
from conftest import Api as _Api  # noqa: E402
from conftest import ServerThread  # noqa: E402


class FastApi(_Api):
    """conftest's ``Api`` without loading TLS certificates for plain-http requests."""

    def request(
        self, method: str, path: str, *, key: str | None | bool = True, **kwargs: Any
    ) -> httpx.Response:
        if self.base_url is None:
            return super().request(method, path, key=key, **kwargs)
        headers = dict(kwargs.pop("headers", {}) or {})
        secret = self.key if key is True else key
        if secret:
            headers.setdefault("Authorization", f"Bearer {secret}")
        with httpx.Client(base_url=self.base_url, timeout=30, verify=False) as client:
            return client.request(method, path, headers=headers, **kwargs)

    def with_key(self, key: str | None) -> FastApi:
        return FastApi(self.app, self.base_url, key)


def relax_rate_limits(core: Any) -> None:
    """Per-key limits high enough that a test's quick loop of requests is never a 429."""
    from agentcore._rate_limits import RateLimiter

    settings = core.settings.model_copy(update={"rate_limit_test": 1e6, "rate_limit_live": 1e6})
    core.rate_limiter = RateLimiter(settings)


# the uvicorn variant is marked slow: `-m "not slow"` runs the same tests over ASGI only
@pytest.fixture(params=[pytest.param("uvicorn", marks=pytest.mark.slow), "asgi"])
def api(request: pytest.FixtureRequest, app: Any, keys: Any) -> Any:
    """conftest's ``api`` (uvicorn and ASGI, acme/test read+write key), faster, no 429s."""
    relax_rate_limits(keys.core)
    key = keys.make().secret
    if request.param == "asgi":
        yield FastApi(app, None, key)
        return
    with ServerThread(app) as server:
        yield FastApi(app, server.url, key)


def start_serve(
    db: Path | str,
    key: str | None = None,
    *,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
    stdout: Path | int | None = subprocess.DEVNULL,
    stderr: Path | int | None = subprocess.DEVNULL,
    command: Sequence[str] = CLI,
) -> tuple[subprocess.Popen[str], str]:
    """A real ``agentcore --db db serve`` once it answers, and its base URL.

    It answers ``key``'s ``GET /v1/auth/verify`` with 200 (without ``key``: answers
    ``GET /v1/health`` at all, and still runs). The port is free when picked,
    but another process may take it before the server binds: then this server exits
    and another port is tried, so a test never talks to another test's server (whose
    answer to our key would be a 401). ``env`` defaults to ``cli_env()``; ``extra`` are
    more ``serve`` options; ``stdout`` and ``stderr`` a file (written afresh by each try)
    or what ``Popen`` takes; ``command`` the CLI. The process leads a process group of
    its own: the caller stops it with ``processes.reap``, which also ends what it started.
    """
    from conftest import free_port

    def stream(target: Path | int | None) -> Any:
        return target.open("w") if isinstance(target, Path) else target

    for _ in range(5):
        port = free_port()
        out, err = stream(stdout), stream(stderr)
        try:
            process = spawn(
                [*command, "--db", str(db), "serve", "--port", str(port), *extra],
                stdout=out,
                stderr=err,
                text=True,
                env=cli_env() if env is None else env,
            )
        finally:  # the child has its own copies
            for opened in (out, err):
                if hasattr(opened, "close"):
                    opened.close()
        url = f"http://127.0.0.1:{port}"
        give_up = time.monotonic() + 120  # only guards a hang: starting is slow when busy
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        path, ready = ("/v1/health", {200, 503}) if key is None else ("/v1/auth/verify", {200})
        with httpx.Client(base_url=url, headers=headers) as client:
            while process.poll() is None and time.monotonic() < give_up:
                try:
                    if client.get(path, timeout=5).status_code in ready and process.poll() is None:
                        return process, url
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        hung = process.poll() is None
        reap(process)  # and what it may have started
        assert not hung, f"agentcore serve did not answer in 120 s at {url}"
        # it ended: the port was taken; another one is tried
    raise AssertionError("agentcore serve never answered our key on a port of its own")


SEARCH_TOPICS = [  # one fact each, for the search tests
    "Cats purr when they are content and sometimes when they are hurt.",
    "The lighthouse keeper logs every ship that passes the northern cape.",
    "Sourdough bread rises slowly because wild yeast ferments the dough.",
    "Glaciers carve valleys as they creep downhill over thousands of years.",
    "The committee approved the refund policy for damaged shipments.",
    "Violins are tuned in fifths, starting from the G below middle C.",
    "Bees communicate the direction of flowers with a waggle dance.",
    "Invoices are due thirty days after the goods were delivered.",
    "Volcanic soil is fertile, which is why vineyards grow on slopes of old volcanoes.",
    "The warranty covers defects in materials for two years after purchase.",
]
SEARCH_QUERIES = [  # SEARCH_TOPICS[i]'s question at i
    "why do cats purr",
    "who records passing ships",
    "how does sourdough rise",
    "how are valleys formed by ice",
    "refund for damaged goods",
    "how is a violin tuned",
    "how do bees find flowers",
    "when are invoices due",
    "why grow grapes on volcanoes",
    "how long is the warranty",
]


def where_cited(citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Citations as ``[{source, pages}]``, their quotes left out (tests of where an
    answer's sources are; tests/knowledge/test_citations.py checks the quotes)."""
    return [{"source": c["source"], "pages": c["pages"]} for c in citations]


def summed_rows(monkeypatch: Any) -> list[int]:
    """A list that records each document row a store's term sums add (``1``) or take
    out (``-1``) from now on: empty when sums were read back rather than summed."""
    from agentcore.storage.sql import terms

    applied: list[int] = []
    add = terms.TermSums.add

    def counting(self: Any, sentences: int, packed: str, sign: int) -> None:
        applied.append(sign)
        add(self, sentences, packed, sign)

    monkeypatch.setattr(terms.TermSums, "add", counting)
    return applied


def ready(http: httpx.Client, response: httpx.Response) -> dict[str, Any]:
    """The document an upload made, once it is no longer processing (a 202 is waited
    for, up to ten minutes)."""
    assert response.status_code in (201, 202), response.text
    body: dict[str, Any] = response.json()
    give_up = time.monotonic() + 600
    while body["status"] == "processing" and time.monotonic() < give_up:
        time.sleep(0.1)
        body = http.get(f"/v1/knowledge/documents/{body['id']}").json()
    assert body["status"] == "ready", body
    return body
