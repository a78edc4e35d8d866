"""The contract ``agentcore_starlette.serve.head_guard.HeadGuard`` has with uvicorn's private
httptools protocol: the source of every uvicorn method it overrides or relies on is
the source it was written and tested against.

The guard subclasses a private module (``docs/decisions.md`` says why it is kept), so a
uvicorn release may change what it builds on without notice. This test fails on such a
release, even one inside the pin: read the new source of the methods named in the
failure against ``serve/head_guard.py``, run ``tests/http/test_serve_limits.py``, then record
the new digests here and move the pin in ``pyproject.toml``.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import Server

from agentcore_starlette.serve.head_guard import HeadGuard

TESTED_WITH = "0.54.0"
"""The uvicorn release these digests are of (``pyproject.toml`` pins ``>=0.54,<0.55``)."""

DIGESTS = {
    # overridden: the guard calls each one and adds its own step before or after
    "HttpToolsProtocol.connection_made": "6efb565ff3d36b91",
    "HttpToolsProtocol.connection_lost": "c91a4c9bf2e29c55",
    "HttpToolsProtocol.data_received": "010a7ae59a5d3b1a",
    "HttpToolsProtocol.on_message_begin": "96d377fdc7c2baef",
    "HttpToolsProtocol.on_headers_complete": "1ea8589acfad92d8",
    "HttpToolsProtocol.on_response_complete": "64e254f28e389e76",
    # relied on: the constructor (parser callbacks bound to the instance; loop, logger,
    # cycle), the URL accumulated by on_url, the keyword arguments the server passes,
    # and when a cycle counts as answered
    "HttpToolsProtocol.__init__": "4f08999410347141",
    "HttpToolsProtocol.on_url": "37be44e962b04ca8",
    "HttpToolsProtocol.shutdown": "d7351fa33f00d430",
    "Server.startup": "2aa1d70a244bfcf2",
    "RequestResponseCycle.__init__": "4d2f220910c33c12",
    "RequestResponseCycle.send": "abdd8601b326a8da",
}

OWNERS: dict[str, Any] = {
    "HttpToolsProtocol": HttpToolsProtocol,
    "Server": Server,
    "RequestResponseCycle": RequestResponseCycle,
}


def _digest(qualified: str) -> str:
    owner, name = qualified.split(".")
    source = inspect.getsource(getattr(OWNERS[owner], name))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@pytest.mark.parametrize("qualified", sorted(DIGESTS))
def test_uvicorn_is_the_one_the_guard_was_written_for(qualified: str) -> None:
    assert _digest(qualified) == DIGESTS[qualified], (
        f"uvicorn {uvicorn.__version__} changed {qualified} (the guard was tested with"
        f" {TESTED_WITH}): review agentcore_starlette/serve/head_guard.py against its new source,"
        " run tests/http/test_serve_limits.py, then update DIGESTS and the pin"
    )


def test_the_guard_overrides_only_what_the_digests_cover() -> None:
    overridden = {
        name
        for name, value in vars(HeadGuard).items()
        if callable(value) and not name.startswith("_") and hasattr(HttpToolsProtocol, name)
    }
    covered = {name.split(".")[1] for name in DIGESTS if name.startswith("HttpToolsProtocol.")}
    assert overridden <= covered, overridden - covered
