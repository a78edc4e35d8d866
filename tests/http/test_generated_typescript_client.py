"""A second generator: ``@hey-api/openapi-ts`` (from the npm registry) writes a TypeScript
client from ``/v1/openapi.json``; ``typescript/check.ts``, a program written against it,
must type-check (``tsc --strict``) and then, run by node, upload a file (multipart, a
``Blob``), add a text (JSON) that the upload replaces by its ``external_id``, search and
chat against a real server on SQLite and PostgreSQL. Skipped where node or npm is not
installed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import Keys, ServerThread
from helpers import where_cited

from agentcore import AgentCore
from agentcore_starlette import create_app

pytestmark = [pytest.mark.both_stores, pytest.mark.slow]  # npm, a generator, real servers

HERE = Path(__file__).with_name("typescript")
PACKAGES = ["@hey-api/openapi-ts@0.99.0", "typescript@5.9.3"]


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``check.ts`` compiled against the client generated from a served document."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("node and npm are not installed")
    folder = tmp_path_factory.mktemp("typescript")
    with (
        AgentCore.open(str(folder / "spec.db"), start_workers=False) as core,
        ServerThread(create_app(core)) as server,
    ):
        spec = httpx.get(f"{server.url}/v1/openapi.json").json()
    (folder / "openapi.json").write_text(json.dumps(spec), encoding="utf-8")
    (folder / "package.json").write_text('{"name": "check", "private": true}', encoding="utf-8")
    _run([npm, "install", "--no-audit", "--no-fund", "--silent", *PACKAGES], folder)
    bin_ = folder / "node_modules" / ".bin"
    _run([str(bin_ / "openapi-ts"), "-i", "openapi.json", "-o", "gen"], folder)
    for name in ("check.ts", "tsconfig.json"):
        shutil.copy(HERE / name, folder / name)
    _run([str(bin_ / "tsc"), "-p", "tsconfig.json"], folder)  # strict: the types must fit
    return folder / "out" / "check.js"


def test_the_generated_typescript_client_uploads_searches_and_chats(
    program: Path, core: AgentCore, keys: Keys
) -> None:
    key = keys.make().secret
    with ServerThread(create_app(core)) as server:
        printed = _run([str(shutil.which("node")), str(program), server.url, key], program.parent)
    got = json.loads(printed)
    document = got["document"]
    assert (document["source"], document["status"]) == ("handbook.md", "ready")
    assert document["external_id"] == "hr/handbook" and document["id"] != got["replaced"]
    assert got["chunks"] == ["# Handbook\n\nEmployees get 25 vacation days per year."]
    assert "25 vacation days" in got["answer"]
    assert where_cited(got["citations"]) == [{"source": "handbook.md", "pages": [1]}]
    listed = core.workspace("acme").knowledge.list().documents
    assert [d.id for d in listed] == [document["id"]]  # the text was replaced
