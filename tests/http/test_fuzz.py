"""Schemathesis fuzzing of the /v1 API over a real uvicorn server, from /v1/openapi.json.

Every operation gets a bounded number of generated requests, valid (positive) and
invalid (negative) ones, with a read+write test key, and every schemathesis check
runs: no 5xx, documented status codes, content types, headers and schemas, valid
data accepted, invalid data rejected, auth not ignored, undeclared methods refused.

``AGENTCORE_FUZZ_EXAMPLES=200 python -m pytest tests/http/test_fuzz.py`` is the larger run.

What JSON Schema cannot say is fixed up in positive cases only, and nowhere else: a
webhook URL must resolve to an allowed address (the receiver here), an upload must be
a parseable file, a tool's ``required`` names must be among its ``properties``, tool
names must be unique within an agent, no string at any depth of a tool's free-form
``parameters`` (or of a Chat Completions request's free-form members) may hold a NUL
(the declared schema says so for every other string), and the last message of a Chat
Completions request is the user's to answer (its only one with a ``conversation_id``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from conftest import ServerThread
from hypothesis import HealthCheck, settings

from agentcore import AgentCore, __version__
from agentcore_starlette import create_app
from agentcore_starlette.openapi import build_openapi
from agentcore_starlette.routes import ROUTES

pytestmark = pytest.mark.slow  # schemathesis over a real server: every operation, many requests

MAX_EXAMPLES = int(os.environ.get("AGENTCORE_FUZZ_EXAMPLES", "8"))
RECEIVER = "http://127.0.0.1:9/hook"  # allowed, never called (workers are off)


class FuzzTarget:
    """The server under test and the key the fuzzer sends."""

    def __init__(self, url: str, secret: str, core: AgentCore) -> None:
        self.url = url
        self.secret = secret
        self.core = core
        self.started = time.monotonic()


def _open_core(path: Any) -> AgentCore:
    return AgentCore.open(
        path,
        rate_limit_test=1e6,
        rate_limit_live=1e6,
        webhook_allowed_networks="127.0.0.0/8",
        start_workers=False,  # subscriptions to generated URLs must not be called
    )


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    core = _open_core(tmp_path_factory.mktemp("fuzz") / "fuzz.db")
    core.create_organization("fuzz")
    secret = core.keys.create("fuzz", "test", ["read", "write"]).secret
    ws = core.workspace("fuzz", "test")
    # something to find: an agent, a document, a subscription
    ws.agents.create(name="fuzzed", role="support")
    ws.knowledge.ingest_text("seed.txt", "The warranty lasts two years. Returns take 30 days.")
    ws.webhooks.subscribe(RECEIVER, ["agent.action"], None)
    try:
        with ServerThread(create_app(core)) as server:
            yield FuzzTarget(server.url, secret, core)
    finally:
        core.close()


def _document() -> dict[str, Any]:
    """The document a core with the fuzz target's settings serves, built the same way."""
    with _open_core(":memory:") as core:
        return build_openapi(
            ROUTES,
            prefix="/v1",
            version=__version__,
            settings=core.settings,
            event_kinds=list(core.events.kinds),
            chat_models=list(core.chat_models),
            mcp=True,
        )


# Built at import time (schemathesis' lazy fixture loader does not work with pytest 9
# yet); test_served_document_is_the_fuzzed_one checks it is the served document.
DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)
# a negative case may be larger than max_body_bytes (a string past its maxLength, each
# character escaped as a surrogate pair: 12 bytes): 413 body_too_large refuses it rightly
_rejection = schema.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413"]


def _without_nul(value: Any) -> Any:
    """``value`` with NUL characters dropped from every string and key, at any depth."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def _fix_positive(case: Any) -> None:
    """Make a positive case valid in the ways JSON Schema cannot express."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return
    body = case.body
    if "url" in body and "events" in body:
        body["url"] = RECEIVER
    if "file" in body and case.media_type == "multipart/form-data":
        body["file"] = b"Plain text to index."
    messages = body.get("messages")
    if isinstance(messages, list) and "model" in body:  # Chat Completions
        # a user asks last, and the free-form members (content parts, prediction, ...)
        # hold no NUL, as every other string is declared not to
        case.body = body = _without_nul(body)
        asked = {"role": "user", "content": "Vacation days?"}
        # with a stored conversation, its turns are the history: messages has no other
        earlier = [] if "conversation_id" in body else body["messages"][:-1]
        body["messages"] = [*earlier, asked]
    tools = body.get("tools")
    if isinstance(tools, list):
        unique: dict[str, Any] = {}
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("parameters"), dict):
                tool["parameters"] = params = _without_nul(tool["parameters"])
                names = params.get("properties", {})
                if isinstance(params.get("required"), list):
                    params["required"] = [n for n in params["required"] if n in names]
            unique.setdefault(tool.get("name") if isinstance(tool, dict) else id(tool), tool)
        body["tools"] = list(unique.values())


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_openapi_document(case: Any, fuzz_target: FuzzTarget) -> None:
    _fix_positive(case)
    meta = case.meta
    if (
        meta is not None
        and not meta.generation.mode.is_positive
        and case.media_type == "multipart/form-data"
    ):
        # negative multipart bodies come out valid once sent: a non-string "file" is sent
        # as its text ("null", "1"), and coverage reuses positive files; the JSON body of
        # the same operation and tests/test_strict_requests.py cover the refusals
        return
    # the generated bearer token is random: put the real key in its place; a negative
    # case that dropped or mangled the header keeps it that way (the server must 401)
    sent = (case.headers or {}).get("Authorization", "")
    real = {"Authorization": f"Bearer {fuzz_target.secret}"}
    case.call_and_validate(
        base_url=fuzz_target.url,
        headers=real if sent.startswith("Bearer ") else None,
        timeout=30,
    )


def test_served_document_is_the_fuzzed_one(fuzz_target: FuzzTarget) -> None:
    served = httpx.get(f"{fuzz_target.url}/v1/openapi.json")
    assert served.status_code == 200
    assert served.json() == DOCUMENT


def test_openapi_document_covers_every_route() -> None:
    documented = {
        (method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item
    }
    # outside the keyed route table: the public health route and the MCP endpoint
    public = {("GET", "/v1/health"), ("POST", "/v1/mcp")}
    assert documented == {(r.method, "/v1" + r.path) for r in ROUTES} | public
