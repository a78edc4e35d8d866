"""The CLI as an operator meets it: help and defaults, bounds from the settings, a --db in a
missing folder, a busy port, progress on a terminal and in a log, a closed pipe."""

from __future__ import annotations

import argparse
import json
import os
import pty
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import CLI, cli_env, read_terminal, run_cli
from processes import reap, spawn

from agentcore import AgentCore
from agentcore._plugin_manager import make_plugin_manager
from agentcore.cli import build_parser
from agentcore.config import Settings

SCRIPT = Path(sys.executable).parent / "agentcore"


def _parsers(
    parser: argparse.ArgumentParser, name: str = "agentcore"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found += _parsers(sub, f"{name} {sub_name}")
    return found


def test_every_option_has_help_and_shows_its_default() -> None:
    parser = build_parser(make_plugin_manager())
    checked = 0
    for name, sub in _parsers(parser):
        text = " ".join(sub.format_help().split())  # lines are wrapped anywhere
        for action in sub._actions:
            if isinstance(
                action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
            ):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and len(action.help) > 8, where
            if action.option_strings and action.default not in (None, False):
                shown = str(action.default)
                assert f"default: {shown}" in text or "(default:" in action.help, (where, text)
            checked += 1
    assert checked >= 25  # init, keys *, ingest, search and serve's options
    serve = dict(_parsers(parser))["agentcore serve"].format_help()
    for default in ("127.0.0.1", "8000", "info"):
        assert default in serve, serve
    workers = " ".join(serve.split())
    assert "default: $WEB_CONCURRENCY, else one per usable CPU (at most 8)" in workers, serve


def test_top_k_is_bounded_by_the_settings() -> None:
    parser = build_parser(make_plugin_manager(), Settings.load(max_top_k=20, default_top_k=3))
    base = ["search", "--org", "acme", "--env", "test", "q"]
    assert parser.parse_args([*base, "--top-k", "20"]).top_k == 20
    assert parser.parse_args(base).top_k == 3
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--top-k", "21"])


@pytest.mark.slow
def test_top_k_past_max_top_k_is_refused_by_the_parser(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    refused = run_cli("search", "--org", "acme", "--env", "test", "--top-k", "500", "x", db=db)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--top-k must be between 1 and 100" in refused.stderr
    assert not db.exists()  # refused before the store was opened
    env = {**cli_env(), "AGENTCORE_MAX_TOP_K": "500"}
    argv = [
        *CLI,
        "--db",
        str(db),
        "search",
        "--org",
        "acme",
        "--env",
        "test",
        "--top-k",
        "500",
        "x",
    ]
    allowed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert "--top-k" not in allowed.stderr  # past the parser (no such organization yet)
    assert allowed.returncode == 1 and "No organization named 'acme'" in allowed.stderr


@pytest.mark.slow
def test_a_db_in_a_missing_folder_is_an_error_that_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "deeper" / "agentcore.db"
    for args in (("init", "--org", "acme"), ("keys", "list", "--org", "acme")):
        result = run_cli(*args, db=db)
        assert result.returncode == 2, result
        assert result.stderr == (
            f"agentcore: the folder of --db does not exist: {db.parent} (create it first)\n"
        )
        assert list(tmp_path.iterdir()) == []  # no folder, no database


@pytest.mark.slow
def test_serve_on_a_busy_port_says_so_in_one_line_and_exits_3(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            argv = [*CLI, "--db", str(db), "serve", "--port", str(port), "--workers", workers]
            result = subprocess.run(
                argv, capture_output=True, text=True, env=cli_env(), timeout=60, check=False
            )
            assert result.returncode == 3, result
            assert result.stdout == ""  # no banner, no uvicorn start-up lines
            assert result.stderr == (
                f"agentcore: cannot listen on 127.0.0.1:{port}: address already in use\n"
            )


@pytest.mark.slow
def test_an_empty_db_is_refused_in_one_line_and_makes_nothing(tmp_path: Path) -> None:
    # "" is SQLite's temporary database: init would print keys stored nowhere
    line = (
        "agentcore: --db and AGENTCORE_DB must not be empty: name a SQLite file or a"
        " postgresql:// URL (unset AGENTCORE_DB for ./agentcore.db)\n"
    )
    for args in (("init", "--org", "acme"), ("keys", "list", "--org", "acme")):
        for env_db, argv_db in (("", []), (None, ["--db", ""])):
            env = cli_env()
            if env_db is not None:
                env["AGENTCORE_DB"] = env_db
            result = subprocess.run(
                [*CLI, *argv_db, *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
                timeout=60,
                check=False,
            )
            assert (result.returncode, result.stdout, result.stderr) == (2, "", line)
    assert list(tmp_path.iterdir()) == []


def _failing_plugin(folder: Path) -> dict[str, str]:
    """An installed plugin (an entry point in ``folder``) whose ``agentcore_startup``
    raises, and the CLI environment that finds it."""
    folder.mkdir()
    (folder / "failing_startup.py").write_text(
        "import agentcore\n"
        "@agentcore.hookimpl\n"
        "def agentcore_startup(core):\n"
        "    raise RuntimeError('the model server is down')\n"
    )
    info = folder / "failing_startup-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: failing-startup\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agentcore]\nfailing = failing_startup\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_whose_start_up_fails_exits_3(tmp_path: Path, workers: str) -> None:
    """A worker whose start-up fails stops serve with 3, with one worker or several
    (uvicorn's supervisor stops the others and returns normally)."""
    from conftest import free_port

    env = _failing_plugin(tmp_path / "plugin")
    argv = [*CLI, "--db", str(tmp_path / "a.db"), "serve", "--port", str(free_port())]
    result = subprocess.run(
        [*argv, "--workers", workers],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 3, result
    assert "the model server is down" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("level", ["info", "warning"])
def test_serve_workers_keep_agentcore_records_from_the_log_level(
    tmp_path: Path, level: str
) -> None:
    """``--log-level`` applies to agentcore's records in uvicorn's workers too. An INFO
    record: an ingestion worker replaced after it grew past the recycle size."""
    from helpers import start_serve

    db = tmp_path / "log.db"
    env = {**cli_env(), "AGENTCORE_INGEST_WORKER_RECYCLE_MB": "1"}
    key = _init_key(db, env)
    log = tmp_path / "serve.err"
    process, url = start_serve(
        db, key, env=env, extra=("--workers", "2", "--log-level", level), stderr=log
    )
    try:
        text = " ".join(f"word{i} lorem ipsum dolor sit amet." for i in range(5000))
        answer = httpx.post(
            f"{url}/v1/knowledge/documents",
            json={"source": "big.md", "text": text},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        reap(process)  # and its worker processes, however the test ended
    replaced = [line for line in log.read_text().splitlines() if "grew by" in line]
    assert len(replaced) == (1 if level == "info" else 0), log.read_text()


@pytest.mark.slow
def test_keys_list_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    db = tmp_path / "pipe.db"
    assert run_cli("init", "--org", "acme", db=db).returncode == 0
    # enough keys that the JSON outgrows the pipe's buffer (made in process: 40 more
    # CLI starts would only cost time)
    with AgentCore.open(db, start_workers=False) as core:
        for _ in range(20):
            for env in ("test", "live"):
                core.keys.create("acme", env, ["read", "write"])
    command = f"'{SCRIPT}' --db '{db}' keys list --org acme --json | head -1"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert result.stdout == "[\n"
    assert result.stderr == "", result.stderr  # no BrokenPipeError traceback
    assert result.returncode == 0


def _text_files(folder: Path, count: int) -> Path:
    folder.mkdir()
    for n in range(count):
        words = " ".join(f"word{n}x{i}" for i in range(3000))
        (folder / f"note{n}.txt").write_text(f"Note {n}. {words}.", encoding="utf-8")
    return folder


@pytest.mark.slow
def test_ingest_on_a_terminal_shows_a_bar_with_rate_and_time_left(tmp_path: Path) -> None:
    folder = _text_files(tmp_path / "notes", 6)
    main, secondary = pty.openpty()
    process = spawn(
        [
            *CLI,
            "--db",
            str(tmp_path / "t.db"),
            "ingest",
            "--org",
            "a",
            "--create-org",
            "--env",
            "test",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env={**cli_env(), "COLUMNS": "120"},
    )
    os.close(secondary)
    seen = read_terminal(main, process, 240)
    try:
        assert process.wait(timeout=120) == 0
    finally:
        reap(process)  # and its ingestion workers
    text = seen.decode("utf-8", "replace")
    assert "\r" in text  # a bar redrawn in place
    assert "100%" in text and "6 file(s)" in text
    assert "/s]" in text  # tqdm's rate (B/s, kB/s, ...)
    assert "<" in text  # elapsed<remaining: the time left
    assert "Ingested 6 file(s)" in text
    assert "[1/6]" not in text  # the plain lines are for logs


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_empties_its_metrics_directory_of_metric_files_only(
    tmp_path: Path, workers: str
) -> None:
    """A database (or any file) kept in ``PROMETHEUS_MULTIPROC_DIR`` survives serve's
    start: only prometheus-client's own files of other processes go."""
    from helpers import start_serve

    db = tmp_path / "agentcore.db"
    env = {**cli_env(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    key = _init_key(db, env)
    (tmp_path / "notes.db").write_text("not a metric")
    stale = tmp_path / "counter_999999999.db"
    stale.write_bytes(b"")
    process, _ = start_serve(db, key, env=env, extra=["--workers", workers])
    try:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        reap(process)
    assert not stale.exists()
    assert (tmp_path / "notes.db").read_text() == "not a metric"
    listed = subprocess.run(
        [*CLI, "--db", str(db), "keys", "list", "--org", "acme"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr


@pytest.mark.slow
def test_serve_claims_its_port_before_its_start_up(tmp_path: Path) -> None:
    """serve listens as soon as it binds: another socket that bound the same port
    (``SO_REUSEADDR``, as a second server starting at the same time) cannot listen on
    it afterwards, so two servers never both think they serve one port."""
    from conftest import free_port

    db = tmp_path / "a.db"
    key = _init_key(db, cli_env())
    port = free_port()
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    other.bind(("127.0.0.1", port))  # another server, bound, not yet listening
    process = spawn(
        [*CLI, "--db", str(db), "serve", "--port", str(port)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("agentcore serving")  # bound
        with pytest.raises(OSError):
            other.listen()
        answered = httpx.get(
            f"http://127.0.0.1:{port}/v1/auth/verify",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert answered.status_code == 200
    finally:
        other.close()
        reap(process)


def _init_key(db: Path, env: dict[str, str]) -> str:
    """``agentcore init --org acme`` on ``db``: the secret of its test key."""
    made = subprocess.run(
        [*CLI, "--db", str(db), "init", "--org", "acme", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return str(json.loads(made.stdout)["keys"][0]["secret"])
