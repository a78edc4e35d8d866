"""What the command line did in a new user's first hour, and does now: ``ingest`` refuses
an unknown organization (``--create-org`` makes it), names each file it skipped and
exits 1 when nothing was ingested, replaces a file ingested again with ``--replace``;
``agents create|list|deploy`` and ``chat`` try an agent without curl (the answer
streamed on a terminal). Each runs the real console script in a fresh process."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import CLI, cli_env, run_cli

pytestmark = pytest.mark.slow  # each test runs the console script in a fresh process

FACT = "Employees get 25 vacation days per year."


def ok(db: Path, *args: str) -> str:
    done = run_cli(*args, db=db)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout


def documents(db: Path, query: str = "vacation days per year") -> list[str]:
    found = json.loads(ok(db, "search", "--org", "demo", "--env", "test", query, "--json"))
    return [result["chunk"] for result in found["results"]]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "agentcore.db"
    ok(path, "init", "--org", "demo")
    return path


def test_ingest_refuses_an_unknown_organization_unless_told_to_create_it(
    db: Path, tmp_path: Path
) -> None:
    note = tmp_path / "note.md"
    note.write_text(FACT, encoding="utf-8")
    refused = run_cli("ingest", "--org", "nosuch", "--env", "test", str(note), db=db)
    assert refused.returncode == 1
    assert "No organization named 'nosuch'" in refused.stderr
    assert "--create-org" in refused.stderr and "agentcore init --org nosuch" in refused.stderr
    assert run_cli("search", "--org", "nosuch", "--env", "test", "x", db=db).returncode == 1

    ok(db, "ingest", "--org", "nosuch", "--create-org", "--env", "test", str(note))
    found = ok(db, "search", "--org", "nosuch", "--env", "test", "vacation", "--json")
    assert json.loads(found)["results"][0]["chunk"] == FACT


def test_ingest_lists_what_it_skipped_and_fails_when_nothing_was_ingested(
    db: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "mixed"
    (folder / "img").mkdir(parents=True)
    (folder / "img" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "Makefile").write_text("all:\n", encoding="utf-8")
    done = run_cli("ingest", "--org", "demo", "--env", "test", str(folder), db=db)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"agentcore: skipped {folder / 'Makefile'}: not a format agentcore reads (no suffix)",
        f"agentcore: skipped {folder / 'img' / 'logo.png'}: not a format agentcore reads (.png)",
        "Ingested 0 file(s), 0 chunk(s); 0 failed; 2 skipped (not a format agentcore reads).",
        "agentcore: nothing was ingested",
    ]
    (folder / "note.md").write_text(FACT, encoding="utf-8")
    done = run_cli("ingest", "--org", "demo", "--env", "test", str(folder), db=db)
    assert done.returncode == 0, done.stderr  # skipped files alone do not fail it
    assert "1 file(s), 1 chunk(s); 0 failed; 2 skipped" in done.stderr


def test_ingest_replace_keeps_one_document_per_file(db: Path, tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    note = folder / "leave.md"
    note.write_text(FACT, encoding="utf-8")
    ok(db, "ingest", "--org", "demo", "--env", "test", "--replace", str(folder))
    note.write_text("Employees get 30 vacation days per year.", encoding="utf-8")
    ok(db, "ingest", "--org", "demo", "--env", "test", "--replace", str(note))
    assert documents(db) == ["Employees get 30 vacation days per year."]
    # without --replace a file ingested again is a second document, as before
    ok(db, "ingest", "--org", "demo", "--env", "test", str(note))
    assert len(documents(db)) == 2


def test_agents_create_list_deploy_and_chat(db: Path, tmp_path: Path) -> None:
    note = tmp_path / "handbook.md"
    note.write_text(FACT, encoding="utf-8")
    ok(db, "ingest", "--org", "demo", "--env", "test", str(note))
    made = json.loads(
        ok(db, "agents", "create", "--org", "demo", "--env", "test", "--name", "HR", "--json")
    )
    assert (made["name"], made["status"]) == ("HR", "draft")
    listed = ok(db, "agents", "list", "--org", "demo", "--env", "test")
    assert listed.split() == [made["id"], "draft", "assistant", "HR"]
    deployed = ok(db, "agents", "deploy", "--org", "demo", "--env", "test", made["id"])
    assert deployed.split()[:2] == [made["id"], "deployed"]
    live = ok(db, "agents", "list", "--org", "demo", "--env", "live", "--json")
    assert json.loads(live) == []  # the live environment is its own

    done = run_cli(
        "chat", "--org", "demo", "--env", "test", made["id"], "How many vacation days?", db=db
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [FACT, "  [handbook.md, p. 1]"]
    conversation = done.stderr.split("conversation ")[1].split()[0]
    again = json.loads(
        ok(
            db,
            *("chat", "--org", "demo", "--env", "test", "--json"),
            *("--conversation", conversation, made["id"], "And the vacation days again?"),
        )
    )
    assert again["conversationId"] == conversation and again["citations"][0]["pages"] == [1]

    missing = run_cli("chat", "--org", "demo", "--env", "test", "agt_nope", "Hi?", db=db)
    assert missing.returncode == 1 and "agt_nope" in missing.stderr

    # a conversation handed to a person: the message is kept, and the CLI says why no
    # agent answered
    asked = ("chat", "--org", "demo", "--env", "test", made["id"])
    handed = run_cli(*asked, "I want to talk to a human", db=db)
    person = handed.stderr.split("conversation ")[1].split()[0]
    waiting = run_cli(*asked, "--conversation", person, "Hello?", db=db)
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout == "\n" and "a person has this conversation" in waiting.stderr


class HeldModel:
    """An OpenAI-compatible server on 127.0.0.1 whose streamed answer stops after its
    first words until ``release`` is set: text seen before that was streamed."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.streamed: list[bool] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.streamed.append(bool(body.get("stream")))
                if not body.get("stream"):
                    message = {"role": "assistant", "content": "You get 25 days [P1]."}
                    answer = json.dumps({"choices": [{"message": message}]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for number, text in enumerate(["You get ", "25 days [P1]."]):
                    if number:
                        model.release.wait(60)
                    delta = {"choices": [{"index": 0, "delta": {"content": text}}]}
                    self.wfile.write(f"data: {json.dumps(delta)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def held() -> Iterator[HeldModel]:
    model = HeldModel()
    yield model
    model.close()


def test_chat_streams_the_answer_on_a_terminal(db: Path, tmp_path: Path, held: HeldModel) -> None:
    """On a terminal the first words show while the model is still writing (the server
    holds the rest until the test has seen them); in a pipe the answer comes whole."""
    note = tmp_path / "handbook.md"
    note.write_text(FACT, encoding="utf-8")
    ok(db, "ingest", "--org", "demo", "--env", "test", str(note))
    env = {**cli_env(), "AGENTCORE_OPENAI_BASE_URL": held.url, "AGENTCORE_OPENAI_MODEL": "tiny"}
    made = subprocess.run(
        [*CLI, "--db", str(db), "agents", "create", "--org", "demo", "--env", "test", "--json"]
        + ["--model", "openai:tiny"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    argv = [*CLI, "--db", str(db), "chat", "--org", "demo", "--env", "test"]
    argv += [json.loads(made.stdout)["id"], "How many vacation days?"]
    main, secondary = pty.openpty()
    with subprocess.Popen(argv, stdout=secondary, stderr=subprocess.PIPE, env=env) as process:
        os.close(secondary)
        shown = b""
        while b"You get" not in shown:  # the first delta, while the model holds the rest
            piece = os.read(main, 4096)
            assert piece, "the command ended before it showed anything"
            shown += piece
        assert b"25 days" not in shown
        held.release.set()
        while True:
            try:
                piece = os.read(main, 4096)
            except OSError:  # the terminal closed: the command ended
                break
            if not piece:
                break
            shown += piece
        assert process.wait(timeout=60) == 0
    os.close(main)
    assert shown.decode().replace("\r\n", "\n").splitlines() == [
        "You get 25 days.",
        "  [handbook.md, p. 1]",
    ]
    piped = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    assert piped.stdout.splitlines() == ["You get 25 days.", "  [handbook.md, p. 1]"]
    assert held.streamed == [True, False]
