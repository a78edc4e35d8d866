"""Knowing when not to answer, over a real ``agentcore serve`` on SQLite and PostgreSQL.

The docs' handbook (``docs/handbook.pdf``) is uploaded as a user would. Asked what it
does not say (issue #41's "How many weeks of parental leave?"), the default model says
it found nothing and cites nothing, though the handbook's notice period is "four weeks"
and its last page is about leaving; an agent with ``handoff_on_no_answer`` hands the
conversation to a person instead. What the handbook does say is still answered, quoting
the sentence under a heading, not the heading. How often the gate refuses, measured,
is in ``benchmarks/abstention.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import cli_env, ready, start_serve
from processes import reap

from agentcore import AgentCore
from agentcore.plugins.extractive import NO_ANSWER

pytestmark = [pytest.mark.both_stores, pytest.mark.timeout(600)]

HANDBOOK = Path(__file__).resolve().parents[2] / "docs" / "handbook.pdf"
PARENTAL = "How many weeks of parental leave?"


def _chat(
    http: httpx.Client, agent: str, message: str, conversation: str | None = None
) -> dict[str, Any]:
    body = {"agentId": agent, "message": message}
    if conversation is not None:
        body["conversationId"] = conversation
    response = http.post("/v1/chat/message", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_question_the_handbook_does_not_answer_is_not_answered(store_url: str) -> None:
    with AgentCore.open(store_url) as core:
        org = core.create_organization("acme").name
        key = core.keys.create(org, "test", ["read", "write"]).secret
    process, url = start_serve(store_url, key, env=cli_env())  # type: ignore[arg-type]
    try:
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=auth, timeout=120) as http:
            upload = http.post(
                "/v1/knowledge/documents",
                files={"file": ("handbook.pdf", HANDBOOK.read_bytes(), "application/pdf")},
            )
            assert ready(http, upload)["pages"] == 5
            hr = http.post("/v1/agents", json={"name": "HR"}).json()["id"]
            strict = http.post(
                "/v1/agents", json={"name": "HR, strict", "handoff_on_no_answer": True}
            ).json()["id"]

            refused = _chat(http, hr, PARENTAL)
            assert (refused["response"], refused["citations"]) == (NO_ANSWER, [])
            assert refused["status"] == "completed"

            notice = _chat(http, hr, "How much notice do I give when I leave?")
            assert notice["response"].startswith("Give four weeks of notice in writing")
            assert [(c["source"], c["pages"]) for c in notice["citations"]] == [
                ("handbook.pdf", [5])
            ]
            assert notice["citations"][0]["quote"].startswith("Give four weeks")

            handed = _chat(http, strict, PARENTAL)
            assert handed["citations"] == [] and "human colleague" in handed["response"]
            later = _chat(http, strict, "Hello?", handed["conversationId"])
            assert later["status"] == "handed_off"
    finally:
        reap(process)
