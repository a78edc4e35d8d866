"""Schemathesis fuzzing of the /v1 API over a real uvicorn server, from /v1/openapi.json.

Every operation gets a bounded number of generated requests (valid and invalid ones)
with a read+write test key; each response must not be a 5xx, must use a documented
status code and content type, and must match the documented schema (the success
model, or the problem document for errors).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from conftest import ServerThread
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agentcore import AgentCore, __version__
from agentcore_starlette import create_app
from agentcore_starlette.openapi import build_openapi
from agentcore_starlette.routes import ROUTES

pytestmark = pytest.mark.slow  # schemathesis over a real server: every operation, many requests

MAX_EXAMPLES = 15
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


class FuzzTarget:
    """The server under test and the key the fuzzer sends."""

    def __init__(self, url: str, secret: str, core: AgentCore) -> None:
        self.url = url
        self.secret = secret
        self.core = core
        self.started = time.monotonic()


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    core = AgentCore.open(
        tmp_path_factory.mktemp("fuzz") / "fuzz.db",
        rate_limit_test=1e6,
        rate_limit_live=1e6,
        webhook_allowed_networks="127.0.0.0/8",
        start_workers=False,  # subscriptions to random URLs must not be called
    )
    core.create_organization("fuzz")
    secret = core.keys.create("fuzz", "test", ["read", "write"]).secret
    ws = core.workspace("fuzz", "test")
    # something to find: an agent, a document, a subscription
    ws.agents.create(name="fuzzed", role="support")
    ws.knowledge.ingest_text("seed.txt", "The warranty lasts two years. Returns take 30 days.")
    ws.webhooks.subscribe("http://127.0.0.1:9/hook", ["agent.action"], None)
    try:
        with ServerThread(create_app(core)) as server:
            yield FuzzTarget(server.url, secret, core)
    finally:
        core.close()


# The document the server serves at /v1/openapi.json, built the same way at import time
# (schemathesis' lazy fixture loader does not work with pytest 9 yet);
# test_served_document_is_the_fuzzed_one checks that the two are identical.
DOCUMENT = build_openapi(ROUTES, prefix="/v1", version=__version__)
schema = schemathesis.openapi.from_dict(DOCUMENT)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_openapi_document(case: Any, fuzz_target: FuzzTarget) -> None:
    case.call_and_validate(
        base_url=fuzz_target.url,
        headers={"Authorization": f"Bearer {fuzz_target.secret}"},
        checks=CHECKS,
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
    assert documented == {(r.method, "/v1" + r.path) for r in ROUTES}
