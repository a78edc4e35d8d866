"""Schemathesis fuzzing of the /v1 API over a real uvicorn server, from /v1/openapi.json.

Every operation gets a bounded number of generated requests, valid (positive) and
invalid (negative) ones, with a read+write test key, and every schemathesis check
runs: no 5xx, documented status codes, content types, headers and schemas, valid
data accepted, invalid data rejected, auth not ignored, undeclared methods refused.

``AGENTCORE_FUZZ_EXAMPLES=200 python -m pytest tests/http/test_fuzz.py`` is the larger run.

The stateful phase runs sequences of linked calls (an id one answer gives is used by
the next call) with the same checks. What JSON Schema cannot say is fixed up in
positive cases only, and nowhere else (``tests/fuzz_fixups.py``, Chat Completions
requests included); the one check that does not apply to one operation is configured
in ``tests/schemathesis.toml``.
"""

from __future__ import annotations

import copy
import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
import schemathesis.specs.openapi.negative as _negative
from conftest import ServerThread, create_database
from fuzz_fixups import CONFIG, RECEIVER, fix_negative, fix_positive, real_key
from hypothesis import HealthCheck, settings
from schemathesis.core.errors import InvalidSchema

from agentcore import AgentCore, __version__
from agentcore_starlette import HttpSettings, create_app
from agentcore_starlette.mcp import openapi as mcp_openapi
from agentcore_starlette.openapi import build_openapi
from agentcore_starlette.routes import ROUTES

pytestmark = pytest.mark.slow  # schemathesis over a real server: every operation, many requests

MAX_EXAMPLES = int(os.environ.get("AGENTCORE_FUZZ_EXAMPLES", "8"))
# The suite fuzzes the same cases on every run, so a run passes or fails for the code
# alone (random cases found something new in one run of three and broke the next);
# AGENTCORE_FUZZ_RANDOM=1 draws new cases each run, for a fuzzing campaign.
DERANDOMIZE = os.environ.get("AGENTCORE_FUZZ_RANDOM", "") != "1"


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


def seeded_workspace(core: AgentCore, organization: str) -> str:
    """Create ``organization`` with something to find in its test workspace (an agent,
    a document, a subscription); a read+write test key's secret for it."""
    core.create_organization(organization)
    ws = core.workspace(organization, "test")
    ws.agents.create(name="fuzzed", role="support")
    ws.knowledge.ingest_text("seed.txt", "The warranty lasts two years. Returns take 30 days.")
    ws.webhooks.subscribe(RECEIVER, ["agent.action"], None)
    return core.keys.create(organization, "test", ["read", "write"]).secret


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fuzz_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FuzzTarget]:
    """The API served over each store (a database of its own on the session's
    PostgreSQL server, as the store conformance suite has)."""
    if request.param == "postgres":
        url = create_database(request.getfixturevalue("postgres_server"), "agentcore_fuzz")
    else:
        url = str(tmp_path_factory.mktemp("fuzz") / "fuzz.db")
    core = _open_core(url)
    secret = seeded_workspace(core, "fuzz")
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
            rerank=bool(core.rerankers),
            paths={"/mcp": mcp_openapi.path_item(HttpSettings.of(core.settings))},
        )


# Built at import time (schemathesis' lazy fixture loader does not work with pytest 9
# yet); test_served_document_is_the_fuzzed_one checks it is the served document.
# schemathesis gets a copy: its stateful phase writes the links it infers into the
# document it was given, which would then differ from the served one.
DOCUMENT = _document()
# Without the coverage phase (every boundary of every keyword: thousands of requests for
# an agent's tool schemas, computed while collecting, in every xdist worker): the plain
# command of test_schemathesis_plain.py runs it, with every check, on both stores.
_CONFIG = schemathesis.Config.from_path(CONFIG)
_CONFIG.projects.default.phases.coverage.enabled = False
schema = schemathesis.openapi.from_dict(copy.deepcopy(DOCUMENT), config=_CONFIG)

# schemathesis 4.32 declines a negative mutation it cannot draw from (UnsupportedSchema),
# but one whose array demands an element no value can be ("Cannot generate an array with
# 1 demanded elements", seen once for Chat Completions' messages, in one xdist worker
# and not in another) escapes as InvalidSchema and fails the case before a request is
# sent. A mutation schemathesis made and cannot draw is declined like the others.
_negative.DECLINED = (*_negative.DECLINED, InvalidSchema)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=DERANDOMIZE,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_openapi_document(case: Any, fuzz_target: FuzzTarget) -> None:
    fix_positive(case)
    fix_negative(case)
    case.call_and_validate(
        base_url=fuzz_target.url, headers=real_key(case, fuzz_target.secret), timeout=30
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


# the stateful phase ---------------------------------------------------------------------

STATEFUL_EXAMPLES = int(os.environ.get("AGENTCORE_FUZZ_STATEFUL_EXAMPLES", "10"))


def test_api_conforms_in_sequences_of_calls(fuzz_target: FuzzTarget) -> None:
    """schemathesis' stateful phase: sequences of calls linked by the ids one answer
    gives the next (create, read, update, delete, chat in a conversation), every check
    on every answer, as ``schemathesis run --phases stateful`` does."""

    scenarios = itertools.count()

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Each scenario in an organization of its own, seeded alike: hypothesis
            # replays a scenario to shrink it, and its rules depend on earlier answers
            # (a link is followed only if its call succeeded), so the same calls must
            # meet the same state (else FlakyStrategyDefinition, or valid data refused
            # because an earlier scenario's agent or document is in the way).
            self.secret = seeded_workspace(fuzz_target.core, f"fuzz-{next(scenarios)}")

        def before_call(self, case: Any) -> None:
            fix_positive(case)
            fix_negative(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {
                "base_url": fuzz_target.url,
                "headers": real_key(case, self.secret),
                "timeout": 30,
            }

    Workflow.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=10,
            derandomize=DERANDOMIZE,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
