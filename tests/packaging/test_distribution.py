"""The distribution a user installs: ``python -m build`` makes the sdist and the wheel of
``agentcore-service`` (``agentcore`` on PyPI is another project), ``twine check`` passes
them, and the wheel installed with its ``server`` extra in a fresh virtualenv runs the
README's quick start (``agentcore init --org demo``, ``agentcore serve``, with its
default processes), whose server answers both doors: ``POST /v1/chat/message`` and the
MCP endpoint ``/v1/mcp``."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import cli_env, start_serve, where_cited
from markdown_blocks import ROOT
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

pytestmark = pytest.mark.slow  # a build, a virtualenv and an install: about a minute

NAME = "agentcore-service"
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "site", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*.db"
)


def _run(*argv: str | Path, cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from a copy of the source (the build writes
    ``*.egg-info`` next to it), the wheel from the sdist as ``python -m build`` does."""
    home = tmp_path_factory.mktemp("dist")
    source = home / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    _run(sys.executable, "-m", "build", "--outdir", home / "out", source, cwd=home)
    return home / "out"


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the built wheel and its ``server`` extra installed."""
    home = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", home / "venv", cwd=home)
    (wheel,) = dist.glob("*.whl")
    pip = home / "venv" / "bin" / "pip"
    # --no-compile: the quick start does not need every dependency byte-compiled first
    _run(pip, "install", "--quiet", "--no-compile", f"{wheel}[server]", cwd=home)
    return home / "venv"


def test_the_wheel_and_sdist_pass_twine_check(dist: Path) -> None:
    built = sorted(p.name for p in dist.iterdir())
    assert built == ["agentcore_service-0.1.0-py3-none-any.whl", "agentcore_service-0.1.0.tar.gz"]
    checked = _run(sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir(), cwd=dist)
    assert checked.count("PASSED") == 2, checked


def test_the_wheel_holds_both_packages_the_command_and_the_plugin(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {n.split("/")[0] for n in names} == {"agentcore", "agentcore_starlette", info}
    assert {"agentcore/py.typed", "agentcore_starlette/py.typed"} <= names
    assert f"Name: {NAME}\n" in metadata
    # the server extra brings the MCP SDK; extras name the project by its new name
    assert 'Requires-Dist: mcp<3,>=2.3; extra == "server"' in metadata
    assert "Requires-Dist: agentcore[" not in metadata
    assert "[console_scripts]\nagentcore = agentcore.cli:main" in entry_points
    assert "[agentcore]\nagentcore_starlette = agentcore_starlette.plugin" in entry_points


@pytest.fixture
def served(venv: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The README's quick start, run with the installed wheel's ``agentcore``: the base
    URL of its server and the test key ``init`` printed."""
    command = venv / "bin" / "agentcore"
    printed = _run(command, "init", "--org", "demo", "--json", cwd=tmp_path)
    key = next(k["secret"] for k in json.loads(printed)["keys"] if k["environment"] == "test")
    env = cli_env()
    env.pop("WEB_CONCURRENCY")  # serve's default: one process per usable CPU
    process, url = start_serve(tmp_path / "agentcore.db", key, env=env, command=[str(command)])
    try:
        yield url, key
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_the_installed_wheel_serves_chat_and_mcp(
    venv: Path, served: tuple[str, str], tmp_path: Path
) -> None:
    where = _run(
        venv / "bin" / "python", "-c", "import agentcore; print(agentcore.__file__)", cwd=tmp_path
    )
    assert Path(where.strip()).is_relative_to(venv), where  # not this checkout
    url, key = served
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url + "/v1", headers=auth, timeout=30) as http:
        text = {"source": "handbook.md", "text": "Employees get 25 vacation days per year."}
        assert http.post("/knowledge/documents", json=text).status_code == 201
        agent = http.post("/agents", json={"name": "HR helper", "role": "support"}).json()
        answer = http.post(
            "/chat/message", json={"agentId": agent["id"], "message": "How many vacation days?"}
        )
    assert answer.status_code == 200, answer.text
    assert "25" in answer.json()["response"]
    assert where_cited(answer.json()["citations"]) == [{"source": "handbook.md", "pages": [1]}]

    async def tools() -> list[str]:
        async with (
            create_mcp_http_client(headers=auth) as client,
            streamable_http_client(url + "/v1/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return [tool.name for tool in (await session.list_tools()).tools]

    assert "chat_with_agent" in asyncio.run(tools())
