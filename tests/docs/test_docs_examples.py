"""The docs are true: every ``python`` and ``sh`` block of README.md and docs/*.md runs here.

How a page runs (``test_page``): its blocks run in order, as a reader would paste them
in a clone's root, in a fresh working directory holding ``docs/handbook.pdf`` (the
examples' five-page handbook, shipped in the repository). Python blocks share one namespace per page; ``sh`` blocks share one ``bash``
per page (``-euo pipefail``: a failing command fails the page), with the package's
``agentcore`` and ``python`` first on the PATH. A ``text`` or ``json`` block marked
``<!-- output -->`` must be what the block before it printed: line for line for
``text`` (``...`` in a line matches any text), value for value for ``json`` (the string
``"..."`` matches any value). A shell block that runs ``agentcore serve`` in the
foreground runs on its own, on a free port, until the server answers; SIGTERM must then
end it with status 0.

Placeholders the docs use for what a reader would paste from their own server, and
what they stand for here (a real ``agentcore serve`` subprocess on 127.0.0.1, set up
like the README's first command: ``agentcore init --org demo``, then the handbook
uploaded and one agent deployed with its test key):

========================  =========================================================
``localhost:8000``,       the served API's address (``127.0.0.1:<port>``); elsewhere
``127.0.0.1:8000``,       ``--port 8000`` is its port (taken: a second ``serve`` there
``--port 8000``           cannot start)
``ak_test_...``           the demo organization's test key
``ak_live_...``           its live key
``agt_...``               the id of the deployed agent "HR helper" (test environment)
``127.0.0.1:8080/v1``     a local fake OpenAI-compatible server (chat completions)
``postgresql://agentcore  a fresh database on the session's PostgreSQL server
:secret@db.internal/...`` (``tests/conftest.py``)
========================  =========================================================

A block that must not run says why on the line before it: ``<!-- not-run: reason -->``;
``test_not_run`` lists each as a skip with its reason. Only ``python`` and ``sh`` blocks
run; a block in any other language that looks like code fails ``test_block_languages``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port
from helpers import cli_env, cli_json, start_serve
from markdown_blocks import ROOT, Block, blocks_of, section
from processes import reap, spawn

from agentcore import AgentCore

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "sh"}
DISPLAY = {"text", "json", "toml"}
"""Languages of blocks that are shown, never run: output, payloads, diagrams."""

HANDBOOK = [
    "Acme employee handbook\n\n"
    "Welcome to Acme. This handbook explains how we work together, what we expect of each"
    " other and where to find help. It applies to every employee of Acme in every office."
    " Read it in your first week and keep it at hand; the people team updates it every"
    " January and announces each change in the company newsletter.\n\n"
    "Your manager is your first contact for questions about your work. The people team"
    " answers questions about contracts, pay and benefits, and the office managers look"
    " after buildings, desks and equipment. Nothing in this handbook replaces the terms of"
    " your employment contract, which always take precedence.",
    "Working hours\n\n"
    "The office is open from 8 am to 6 pm on weekdays. Core hours are 10 am to 4 pm: plan"
    " meetings inside them so that colleagues in every team can attend. Outside core hours"
    " you choose when to work, as long as your team knows how to reach you.\n\n"
    "Remote work is welcome for up to three days a week. Agree on your office days with"
    " your team, keep your calendar up to date, and make sure your home workplace is safe."
    " Equipment for working from home is ordered through the office managers.",
    "Expenses\n\n"
    "Submit receipts within thirty days through the finance portal. Travel must be booked"
    " through the travel desk, which knows the negotiated rates for trains, flights and"
    " hotels. Economy class is the rule for flights shorter than six hours.\n\n"
    "Meals while travelling are reimbursed up to the daily allowance published by the"
    " finance team. Alcohol, fines and personal purchases are never reimbursed. Ask the"
    " finance team before any single expense above five hundred euros.",
    "Vacation\n\n"
    "Employees get 25 vacation days per year. Unused days expire at the end of March of"
    " the following year, so plan your time off early and tell your manager at least two"
    " weeks ahead for anything longer than three days.\n\n"
    "Public holidays are not counted as vacation days. Part-time employees get vacation"
    " days in proportion to their working days. Sick days during a vacation are not"
    " counted as vacation when you send a doctor's note to the people team.",
    "Leaving Acme\n\n"
    "Give four weeks of notice in writing to your manager, unless your contract says"
    " otherwise. Return your laptop, badge and keys to the office managers on your last"
    " day, and hand over your open work to a colleague your manager names.\n\n"
    "The people team sends your final pay slip and your reference letter within one month"
    " of your last day. We ask everyone who leaves for an exit interview: it is optional,"
    " confidential, and the best way to tell us what we could do better.",
]
"""The pages of ``docs/handbook.pdf``, the document the examples upload and ask about
(``tests/pdfs.make_pdf(HANDBOOK)`` made it)."""
SHIPPED_HANDBOOK = ROOT / "docs" / "handbook.pdf"


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]
SERVER_PLACEHOLDERS = (
    "localhost:8000",
    "127.0.0.1:8000",
    "--port 8000",
    "ak_test_...",
    "ak_live_...",
    "agt_...",
)
OPENAI_URL = "http://127.0.0.1:8080/v1"
"""The docs' OpenAI-compatible server: a local fake stands for it."""
POSTGRES_URL = "postgresql://agentcore:secret@db.internal/agentcore"
"""The docs' PostgreSQL: a fresh database on the test session's server stands for it."""
_SERVE = re.compile(r"^\s*agentcore\b[^&|;#\n]*\bserve\b[^&|;#\n]*(#.*)?$", re.MULTILINE)


def serves(block: Block) -> bool:
    """Whether ``block`` is a shell block that runs ``agentcore serve`` in the foreground."""
    return block.lang == "sh" and _SERVE.search(block.code) is not None


def needs_server(block: Block) -> bool:
    """Whether ``block`` talks to the docs server (it holds one of its placeholders; a
    block that serves by itself gets a port of its own instead)."""
    code = block.code.replace("--port 8000", "") if serves(block) else block.code
    return block.lang in RUNNABLE and any(p in code for p in SERVER_PLACEHOLDERS)


def _page_param(page: Path) -> Any:
    blocks = [b for b in blocks_of(page) if b.lang in RUNNABLE and b.not_run is None]
    # a server, or a CLI subprocess: as the rest of the suite, marked slow
    slow = any(needs_server(b) or (b.lang == "sh" and "agentcore" in b.code) for b in blocks)
    marks = [pytest.mark.slow] if slow else []
    return pytest.param(page, id=str(page.relative_to(ROOT)), marks=marks)


# What the examples run against ------------------------------------------------------


@dataclass(frozen=True)
class DocsServer:
    """A real ``agentcore serve`` with the README's demo organization in it."""

    url: str
    test_key: str
    live_key: str
    agent_id: str


@pytest.fixture(scope="session")
def docs_server(tmp_path_factory: pytest.TempPathFactory, fake_openai: str) -> Iterator[DocsServer]:
    """``agentcore init --org demo`` and ``agentcore serve`` on a fresh SQLite file, with
    the handbook uploaded and one agent deployed (so ``agt_...`` can chat), and the fake
    OpenAI-compatible server registered as the chat model ``openai:smollm2`` (an agent
    that names it calls the tools it is offered)."""
    home = tmp_path_factory.mktemp("docs-server")
    db = home / "agentcore.db"
    keys = {
        key["environment"]: key["secret"]
        for key in cli_json("init", "--org", "demo", "--json", db=db)["keys"]
    }
    env = cli_env()
    # the examples subscribe receivers on this machine and send requests in quick bursts
    env["AGENTCORE_WEBHOOK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    env["AGENTCORE_RATE_LIMIT_TEST"] = env["AGENTCORE_RATE_LIMIT_LIVE"] = "1000"
    env["AGENTCORE_OPENAI_BASE_URL"] = fake_openai
    env["AGENTCORE_OPENAI_MODEL"] = "smollm2"
    process, url = start_serve(db, keys["test"], env=env)
    try:
        auth = {"Authorization": f"Bearer {keys['test']}"}
        with httpx.Client(base_url=url + "/v1", headers=auth, timeout=30) as http:
            pdf = {"file": ("handbook.pdf", SHIPPED_HANDBOOK.read_bytes(), "application/pdf")}
            assert http.post("/knowledge/documents", files=pdf).status_code == 201
            agent = http.post("/agents", json={"name": "HR helper", "role": "support"}).json()
            assert http.post(f"/agents/{agent['id']}/deploy").status_code == 200
        yield DocsServer(url, keys["test"], keys["live"], agent["id"])
    finally:
        reap(process)


class _FakeOpenAI(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions`` of an OpenAI-compatible server: one canned answer
    that cites the first passage it was given; offered a tool of the agent's (any but
    ``handoff_to_human``), it first calls the first one (``{"city": "Paris"}`` for a
    tool with a ``city`` parameter, else ``{}``), then answers with what it returned."""

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions", self.path
        assert not request.get("stream"), "the docs' example does not stream"
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "You get 25 vacation days a year [P1].",
        }
        tools = [
            t["function"]
            for t in request.get("tools") or []
            if t["function"]["name"] != "handoff_to_human"
        ]
        last = request["messages"][-1]
        if last["role"] == "tool":
            message["content"] = f"The tool says: {last['content']}"
        elif tools:
            wanted = tools[0].get("parameters", {}).get("properties", {})
            arguments = {"city": "Paris"} if "city" in wanted else {}
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": tools[0]["name"], "arguments": json.dumps(arguments)},
                }
            ]
        body = json.dumps(
            {
                "id": "chatcmpl-docs",
                "object": "chat.completion",
                "model": request["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                        "message": message,
                    }
                ],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[str]:
    """The base URL (``.../v1``) of a fake OpenAI-compatible server on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


# Running the blocks ----------------------------------------------------------------


@dataclass
class Substitutions:
    """What each placeholder stands for in this run."""

    pairs: list[tuple[str, str]]

    def apply(self, code: str) -> str:
        for placeholder, value in self.pairs:
            code = code.replace(placeholder, value)
        return code


def _substitutions(request: pytest.FixtureRequest, blocks: list[Block]) -> Substitutions:
    pairs: list[tuple[str, str]] = []
    if any(OPENAI_URL in b.code for b in blocks):
        pairs.append((OPENAI_URL, str(request.getfixturevalue("fake_openai"))))
    if any(POSTGRES_URL in b.code for b in blocks):
        from conftest import create_database

        server_url = str(request.getfixturevalue("postgres_server"))
        pairs.append((POSTGRES_URL, create_database(server_url, "agentcore_docs")))
    if any(needs_server(b) for b in blocks):
        server: DocsServer = request.getfixturevalue("docs_server")
        address = server.url.removeprefix("http://")
        pairs += [
            ("--port 8000", "--port " + address.rpartition(":")[2]),
            ("localhost:8000", address),
            ("127.0.0.1:8000", address),
            ("ak_test_...", server.test_key),
            ("ak_live_...", server.live_key),
            ("agt_...", server.agent_id),
        ]
    return Substitutions(pairs)


def _matches(expected: Any, actual: Any) -> bool:
    """``actual`` has ``expected``'s shape and values; the string ``"..."`` matches any
    value, and ``...`` inside a string matches any text."""
    if isinstance(expected, str) and "..." in expected:
        return expected == "..." or (
            isinstance(actual, str) and _pattern(expected).match(actual) is not None
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(_matches(value, actual[key]) for key, value in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(_matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual) and type(expected) is type(actual)


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.split("...")) + r"\Z", re.DOTALL)


def check_output(block: Block, expected: Block, printed: str) -> None:
    """``printed`` is what ``expected`` shows: line for line for ``text`` (``...`` matches
    any text), value for value for ``json``."""
    if expected.lang == "json":
        try:
            actual = json.loads(printed)
        except ValueError:
            raise AssertionError(f"{block.where} printed no JSON:\n{printed}") from None
        assert _matches(json.loads(expected.code), actual), (
            f"{block.where} printed:\n{json.dumps(actual, indent=2)}\n"
            f"but {expected.where} shows:\n{expected.code}"
        )
        return
    want = expected.code.rstrip("\n").splitlines()
    got = printed.rstrip("\n").splitlines()
    matches = len(got) == len(want) and all(
        _pattern(pattern.rstrip()).match(line.rstrip())
        for pattern, line in zip(want, got, strict=True)
    )
    assert matches, (
        f"{block.where} printed:\n{printed}\nbut {expected.where} shows:\n{expected.code}"
    )


def run_python(block: Block, code: str, namespace: dict[str, Any]) -> str:
    """Run one Python block in the page's namespace; what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, block.where, "exec"), namespace)  # noqa: S102 - the point
    return printed.getvalue()


def shell_env() -> dict[str, str]:
    """The environment of a shell block: no AGENTCORE_* of ours, this interpreter's
    ``agentcore`` and ``python`` first on the PATH."""
    env = cli_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


_END = "__docs_block_end__"
_OWN_PORT = "__own_port__"  # a serving block's port, until run_serve picks a free one


class Shell:
    """One ``bash`` for a page's shell blocks, as a reader's terminal: variables set by
    one block are seen by the next. Runs with ``-e``, so a failing command ends it."""

    def __init__(self, cwd: Path) -> None:
        self.process = spawn(
            ["bash", "--norc", "--noprofile", "-euo", "pipefail"],
            cwd=cwd,
            env=shell_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the shell ended

    def run(self, block: Block, code: str) -> str:
        """Run ``code``; what it printed (stdout and stderr together)."""
        assert self.process.stdin is not None
        # the sentinel starts a line of its own even after output without a newline
        self.process.stdin.write(f"{code}\nprintf '\\n{_END}\\n'\n")
        self.process.stdin.flush()
        printed: list[str] = []
        deadline = time.monotonic() + 120
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{block.where} ran for 120 s:\n{''.join(printed)}") from None
            if line is None:
                status = self.process.wait()
                raise AssertionError(f"{block.where} exited {status}:\n{''.join(printed)}")
            if line.rstrip("\n") == _END:
                text = "".join(printed)
                return text[:-1] if text.endswith("\n") else text  # the sentinel's newline
            printed.append(line)

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=60)
        reap(self.process)  # and anything a block left running in the background


def run_shell(block: Block, code: str, cwd: Path, shell: Shell) -> str:
    """Run one shell block in the page's shell (or, for ``serve``, on its own)."""
    if "curl " in code and shutil.which("curl") is None:
        pytest.skip(f"{block.where} needs curl, which is not installed")
    if serves(block):
        return run_serve(block, code, cwd)
    return shell.run(block, code)


def run_serve(block: Block, code: str, cwd: Path) -> str:
    """Run a block that ends in ``agentcore serve`` until its server answers, then stop
    it with SIGTERM: it must exit 0. Its ``--port 8000`` is a free port; when another
    process took that port before the server bound it, the block runs again on another."""
    assert _OWN_PORT in code, f"{block.where}: a block that serves says --port 8000"
    for _ in range(5):
        port = free_port()
        process = spawn(
            ["bash", "-euo", "pipefail", "-c", code.replace(_OWN_PORT, str(port))],
            cwd=cwd,
            env=shell_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120  # only guards a hang: starting is slow when busy
            while process.poll() is None:
                assert time.monotonic() < deadline, f"{block.where} never served port {port}"
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"http://127.0.0.1:{port}/v1/openapi.json", timeout=5).is_success:
                        break
                time.sleep(0.1)
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # bash and the server alike
            printed, _ = process.communicate(timeout=120)
            reap(process)
        if "address already in use" not in printed:
            break
    assert process.returncode == 0, f"{block.where} ended {process.returncode}:\n{printed}"
    return printed


def run_page(page: Path, request: pytest.FixtureRequest, cwd: Path) -> None:
    """Run every block of ``page`` in order, checking the outputs it shows."""
    blocks = blocks_of(page)
    runnable = [b for b in blocks if b.lang in RUNNABLE and b.not_run is None]
    substitutions = _substitutions(request, runnable)
    (cwd / "docs").mkdir()
    shutil.copy(SHIPPED_HANDBOOK, cwd / "docs" / "handbook.pdf")
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    last: tuple[Block, str] | None = None
    os.chdir(cwd)
    shell = Shell(cwd)
    try:
        for block in blocks:
            if block.output:
                assert last is not None, f"{block.where}: an output block follows no run block"
                check_output(last[0], block, last[1])
                last = None
                continue
            if block.lang not in RUNNABLE:
                continue
            if block.not_run is not None:
                last = None  # an output block after it would show nothing that ran
                continue
            code = block.code
            if serves(block):  # a server of its own: on a port of its own (run_serve)
                code = code.replace("--port 8000", f"--port {_OWN_PORT}")
            code = substitutions.apply(code)
            if block.lang == "python":
                printed = run_python(block, code, namespace)
            else:
                printed = run_shell(block, code, cwd, shell)
            last = (block, printed)
    finally:
        shell.close()
        for value in list(namespace.values()):  # cores the examples opened
            if isinstance(value, AgentCore):
                value.close()


@pytest.mark.parametrize("page", [_page_param(page) for page in PAGES])
def test_page(page: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Each page's blocks run, in order, and print what the page says they print."""
    here, environment = Path.cwd(), dict(os.environ)
    try:
        run_page(page, request, tmp_path)
    finally:  # examples may change both; the next test must not inherit that
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environment)


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, id=b.where) for b in ALL_BLOCKS if b.lang in RUNNABLE and b.not_run],
)
def test_not_run(block: Block) -> None:
    """Lists each block the docs say must not run, with the reason they give."""
    assert len(block.not_run or "") > 10, f"{block.where}: say why it does not run"
    pytest.skip(f"{block.where} not run: {block.not_run}")


def test_block_languages() -> None:
    """Every block says its language, and only ``python`` and ``sh`` blocks hold code to
    run: a ``bash`` or ``console`` block, or an indented fence this test does not read,
    would silently escape it."""
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.match(r"\s+```", line), f"{page.name}:{number}: an indented fence"
    for block in ALL_BLOCKS:
        assert block.lang in RUNNABLE | DISPLAY, f"{block.where}: language {block.lang!r}"
        if block.output:
            assert block.lang in DISPLAY, f"{block.where}: an output block is text or JSON"


def test_the_shipped_handbook_has_the_pages_the_examples_ask_about() -> None:
    """``docs/handbook.pdf`` holds ``HANDBOOK``, one page each (the outputs shown depend
    on it: page 4 is about vacation)."""
    from pypdf import PdfReader

    pages = PdfReader(SHIPPED_HANDBOOK).pages
    assert len(pages) == len(HANDBOOK)
    for page, text in zip(pages, HANDBOOK, strict=True):
        assert " ".join(page.extract_text().split()) == " ".join(text.split())


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*(?:\{#([\w-]+)\})?\s*$")


_SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\d*))?(?::(\d*))?"$', re.M)


def _included(match: re.Match[str]) -> str:
    """The lines a ``--8<-- "path:start:end"`` snippet includes (paths from the root)."""
    path, start, end = match.groups()
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    return "\n".join(lines[int(start or 1) - 1 : int(end) if end else None])


def _prose(page: Path, *, code: bool = False) -> str:
    """``page`` with its snippets included, without its fenced blocks, and without its
    inline code unless ``code`` (a link in either is only text)."""
    text = _SNIPPET.sub(_included, page.read_text(encoding="utf-8"))
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return text if code else re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path) -> set[str]:
    """The ids of ``page``'s headings, slugged as Python-Markdown's toc extension does."""
    found: set[str] = set()
    for line in _prose(page, code=True).splitlines():
        if heading := _HEADING.match(line):
            title, explicit = heading.groups()
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link's text
            slug = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
            slug = explicit or re.sub(r"[-\s]+", "-", slug)
            base, n = slug, 0
            while slug in found:  # a repeated title gets _1, _2, ...
                n += 1
                slug = f"{base}_{n}"
            found.add(slug)
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``page`` that name no file under ``root``, or a ``#anchor``
    that no heading of the Markdown page they name has."""
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.is_relative_to(root) or not linked.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in PAGES])
def test_every_link_resolves(page: Path) -> None:
    """Each relative link of README.md and docs/*.md names a file of the repository (in a
    clone: nothing outside it), and each ``#anchor`` a heading of the page it names."""
    assert not broken_links(page), f"{page.relative_to(ROOT)}: {broken_links(page)}"


def test_the_link_check_finds_broken_links(tmp_path: Path) -> None:
    """The check reads links and anchors as mkdocs does (else it could not fail)."""
    root = (tmp_path / "repo").resolve()
    (root / "docs").mkdir(parents=True)
    page = root / "docs" / "page.md"
    page.write_text(
        "## Working hours\n## The `agentcore` command\n## X {#own}\n## FAQ\n## FAQ\n"
        "[a](#working-hours) [b](page.md#faq_1) [c](https://example.com) `[d](gone.md)`\n"
        "[e](../../shared/spec.md) [f](#nope) [g](other.md)\n"
        "```text\n[h](in-a-block.md)\n```\n",
        encoding="utf-8",
    )
    assert {"working-hours", "the-agentcore-command", "own", "faq", "faq_1"} <= anchors(page)
    assert broken_links(page, root) == [
        "../../shared/spec.md: no such file in the repository",
        "#nope: no heading #nope in page.md",
        "other.md: no such file in the repository",
    ]


def test_readme_is_a_five_minute_read() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)


def test_every_setting_is_documented() -> None:
    """docs/operations.md lists each setting with its default, as JSON: every field of the
    core's ``Settings`` and of the HTTP adapter's ``HttpSettings`` (named as the core's
    are, ``AGENTCORE_<NAME>``), the adapter's marked *HTTP*; each setting a built-in
    plugin declares is there too (as its keyword, with its default) or in a table of
    docs/plugins.md that names its keyword and its variable."""
    from agentcore import Settings
    from agentcore._plugin_manager import make_plugin_manager, plugin_settings_models
    from agentcore_starlette import HttpSettings

    rows = {
        match.group(1): line
        for line in section(ROOT / "docs/operations.md", "Settings").splitlines()
        if (match := re.match(r"\| `([a-z0-9_]+)` \|", line))
    }

    def shows_default(name: str, default: object) -> None:
        shown = json.dumps(list(default) if isinstance(default, tuple) else default)
        assert f"| `{shown}`" in rows[name], f"{name}: default {shown} in docs/operations.md"

    assert not Settings.model_fields.keys() & HttpSettings.model_fields.keys()
    fields = {**Settings.model_fields, **HttpSettings.model_fields}
    for name, field in fields.items():
        assert name in rows, f"document setting {name!r} in docs/operations.md"
        shows_default(name, field.default)
        marked = "| *HTTP*: " in rows[name]
        assert marked == (name in HttpSettings.model_fields), f"{name}: *HTTP* if the adapter's"
    models = plugin_settings_models(make_plugin_manager(entry_points=False))
    plugin_fields = {
        f"{namespace}_{name}": (f"AGENTCORE_{namespace.upper()}_{name.upper()}", field)
        for namespace, model in models.items()
        for name, field in model.model_fields.items()
    }
    assert {"postgres_pool_size", "openai_model"} <= plugin_fields.keys()
    plugin_rows = [
        line
        for line in (ROOT / "docs/plugins.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `AGENTCORE_")
    ]
    for keyword, (variable, field) in plugin_fields.items():
        if keyword in rows:
            shows_default(keyword, field.default)
        else:
            assert any(f"`{variable}`" in row and f"`{keyword}`" in row for row in plugin_rows), (
                f"document plugin setting {keyword!r} ({variable}) in docs/operations.md"
                " or in its plugin's table of docs/plugins.md"
            )
    unknown = rows.keys() - fields.keys() - plugin_fields.keys()
    assert not unknown, f"documented settings that do not exist: {sorted(unknown)}"


def test_every_route_is_in_the_http_api_table() -> None:
    """docs/http-api.md lists each route of the adapter with its scope."""
    from agentcore_starlette.routes import ROUTES

    table = section(ROOT / "docs/http-api.md", "Routes")
    for route in ROUTES:
        scope = "any key" if route.scope == "any" else route.scope
        path = re.sub(r"\{\w+_id\}", "{id}", route.path)  # the docs call every id {id}
        row = f"| `{route.method} /v1{path}` | {scope} |"
        assert row in table, f"document {route.method} {route.path} in docs/http-api.md: {row}"


def test_every_error_code_is_in_the_http_api_table() -> None:
    """Each error code the source can raise is in the error code table of docs/http-api.md."""
    table = section(ROOT / "docs/http-api.md", "Problem documents")
    source = [*(ROOT / "agentcore").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]
    raised = {
        code
        for path in source
        for code in re.findall(
            r'(?:\bcode="|default_code = "|code: str = ")([a-z_]+)"',
            path.read_text(encoding="utf-8"),
        )
    }
    assert len(raised) > 50, raised  # the pattern still finds them
    missing = sorted(code for code in raised if f"`{code}`" not in table)
    assert not missing, f"document these error codes in docs/http-api.md: {missing}"
