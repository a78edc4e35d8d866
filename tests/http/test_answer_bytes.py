"""A JSON answer's body is the model's JSON, byte for byte, over a real HTTP server.

The adapter sends the serializer's bytes (``__pydantic_serializer__.to_json``) rather
than ``model_dump_json()`` encoded back from a str: the same bytes, one copy fewer.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from conftest import ServerThread

from agentcore import AgentCore
from agentcore_starlette import create_app

TEXT = (
    "The red pump in hall four is serviced every spring by the night shift.\n\n"
    "Zürich's café orders arrive on Tuesdays — «fragile» crates go to dock 7.\n\n"
    "Quantum flux capacitors are kept in the basement next to the zebras."
)


def test_search_and_verify_answers_are_the_models_json_bytes(tmp_path: Path) -> None:
    core = AgentCore.open(tmp_path / "bytes.db", rate_limit_test=1e6, start_workers=False)
    try:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test", ["read", "write"]).secret
        ws = core.authenticate(secret)
        ws.knowledge.ingest_text("notes.md", TEXT)
        expected = ws.knowledge.search("café crates at the dock", top_k=3)
        assert expected.results  # non-ASCII text in the answer
        auth = {"Authorization": f"Bearer {secret}"}
        with ServerThread(create_app(core)) as server, httpx.Client(base_url=server.url) as client:
            found = client.post(
                "/v1/knowledge/search",
                json={"query": "café crates at the dock", "top_k": 3},
                headers=auth,
            )
            verified = client.get("/v1/auth/verify", headers=auth)
        assert found.status_code == 200, found.text
        assert found.content == expected.model_dump_json().encode()
        assert found.headers["content-type"] == "application/json"
        assert int(found.headers["content-length"]) == len(found.content)
        assert verified.status_code == 200
        assert verified.content == ws.verify().model_dump_json().encode()
    finally:
        core.close()
