"""PDFs that cost CPU without text, against a real ``agentcore serve`` on both stores.

Issue #36, item 1: a PDF whose 4,999 pages share one stream of 266k drawing operators
extracts to nothing, so no text budget trips, and held the only worker for an hour;
nested form XObjects did the same. Here each fails ``too_complex`` in seconds, is
never queued again, and one organization's bombs never hold every worker while
another organization's upload waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from helpers import cli_env, start_serve
from pdfs import filler, make_drawing_bomb, make_pdf, make_xobject_bomb
from processes import reap

from agentcore import AgentCore

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def keys_for(store_url: str, *organizations: str) -> list[str]:
    with AgentCore.open(store_url) as core:
        return [
            core.keys.create(core.create_organization(name).name, "test", ["read", "write"]).secret
            for name in organizations
        ]


@pytest.fixture
def serve(store_url: str) -> Iterator[Any]:
    """Starts ``agentcore serve`` on the store with ``AGENTCORE_*`` settings; kills it."""
    processes = []

    def start(key: str, **settings: str) -> str:
        env = cli_env()
        env["AGENTCORE_RATE_LIMIT_TEST"] = "1000000"
        env["AGENTCORE_INGEST_WORKERS"] = "2"  # the default on a 2-core machine
        env.update({f"AGENTCORE_{name.upper()}": value for name, value in settings.items()})
        process, url = start_serve(store_url, key, env=env)  # type: ignore[arg-type]
        processes.append(process)
        return url

    yield start
    for process in processes:
        reap(process)


def upload(url: str, key: str, name: str, data: bytes) -> tuple[int, dict[str, Any]]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as h:
        response = h.post(
            "/v1/knowledge/documents", files={"file": (name, data, "application/pdf")}
        )
    return response.status_code, response.json()


def settled(url: str, key: str, document_id: str) -> dict[str, Any]:
    """The document once it is no longer ``processing`` (a hang fails the test's timeout)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as h:
        while True:
            body: dict[str, Any] = h.get(f"/v1/knowledge/documents/{document_id}").json()
            if body["status"] != "processing":
                return body
            time.sleep(0.1)


def ended_as(url: str, key: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """The problem an upload ended with: its answer (4xx) or its failed document's."""
    if status == 202:
        document = settled(url, key, body["id"])
        assert document["status"] == "failed", document
        return dict(document["last_error"])
    return body


def no_job_left(store_url: str) -> bool:
    """Whether the store's queue is empty, leases run out or not."""
    with AgentCore.open(store_url) as core:
        return core.store.claim_ingest_job(now=time.time() + 1e6, lease_seconds=1) is None


def test_drawing_and_xobject_bombs_fail_too_complex_and_are_not_queued_again(
    serve: Any, store_url: str
) -> None:
    attacker, bystander = keys_for(store_url, "mallory", "acme")
    url = serve(attacker)
    bombs = [("draw.pdf", make_drawing_bomb(text=True)), ("forms.pdf", make_xobject_bomb())] * 2
    with ThreadPoolExecutor(len(bombs)) as pool:
        answers = list(pool.map(lambda bomb: upload(url, attacker, *bomb), bombs))
    for status, body in answers:
        assert status in (202, 413), body
        problem = ended_as(url, attacker, status, body)
        assert (problem["code"], problem["status"]) == ("too_complex", 413), problem
        assert "Page 1 " in problem["detail"]
    status, body = upload(url, bystander, "memo.pdf", make_pdf([filler(20, 1)]))
    assert status in (201, 202) and settled(url, bystander, body["id"])["status"] == "ready"
    assert no_job_left(store_url)


def test_one_organizations_bombs_never_hold_every_worker(serve: Any, store_url: str) -> None:
    attacker, bystander = keys_for(store_url, "mallory", "acme")
    url = serve(
        attacker,
        # the counts are lifted: these bombs are stopped by their first page's CPU budget
        max_pdf_page_operators="10000000",
        ingest_page_cpu_seconds="3",
        ingest_sync_max_bytes="0",  # every upload is queued: 202 at once
    )
    answers = [upload(url, attacker, f"draw{n}.pdf", make_drawing_bomb(text=True)) for n in "abcd"]
    assert [status for status, _ in answers] == [202] * 4
    # four bombs of at least 3 s of CPU each, one after another on the one worker mallory
    # may hold; acme's upload takes the worker kept for other organizations at once
    status, body = upload(url, bystander, "memo.pdf", make_pdf([filler(20, 2)]))
    assert status == 202
    assert settled(url, bystander, body["id"])["status"] == "ready"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {attacker}"}) as http:
        states = [http.get(f"/v1/knowledge/documents/{b['id']}").json() for _, b in answers]
    assert "processing" in [state["status"] for state in states]  # acme did not wait for them
    for status, body in answers:
        problem = ended_as(url, attacker, status, body)
        assert problem["code"] == "too_complex", problem
        assert "CPU time" in problem["detail"]
    assert no_job_left(store_url)
