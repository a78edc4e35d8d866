"""No key plaintext at rest: not in the SQLite file, its WAL, nor any log line or output."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from conftest import ServerThread
from helpers import cli_json, relax_rate_limits, run_cli

from agentcore import AgentCore, AuthenticationError
from agentcore.keys import digest, generate_secret
from agentcore_starlette import create_app

pytestmark = pytest.mark.slow  # a real server and CLI processes, then scans every file and log

LOGGERS = ["", "uvicorn", "uvicorn.error", "uvicorn.access", "agentcore", "agentcore.http"]


class Collect(logging.Handler):
    """Keeps every formatted record, whatever logger it came from."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def collect():
    handler = Collect()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


def _leaks(text: str, secrets: list[str]) -> list[str]:
    found = []
    for secret in secrets:
        random_part = secret[8:40]
        if secret in text or random_part in text or random_part[:16] in text:
            found.append(secret[:12] + "…")
    return found


def test_no_plaintext_in_db_wal_or_logs(tmp_path: Path, caplog, capfd, collect) -> None:
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "rest.db"
    wal = Path(str(db) + "-wal")

    # 1. init through the real CLI
    init = cli_json("init", "--org", "acme", "--json", db=db)
    test_key, live_key = sorted(init["keys"], key=lambda k: k["environment"])[::-1]
    assert test_key["environment"] == "test" and live_key["environment"] == "live"
    issued = [k["secret"] for k in init["keys"]]

    core = AgentCore.open(db)
    try:
        relax_rate_limits(core)
        reader = core.keys.create("acme", "live", ["read"], name="reader")
        short = core.keys.create("acme", "test", ["read"], expires_in=timedelta(seconds=0.2))
        doomed = core.keys.create("acme", "test", ["read", "write"])
        rotated_from = core.keys.create("acme", "test", ["read", "write"])
        rotated_to = core.keys.rotate(rotated_from.id, grace=timedelta(hours=1))
        issued += [k.secret for k in (reader, short, doomed, rotated_from, rotated_to)]
        unknown = generate_secret("live")  # well formed, never issued
        typo = test_key["secret"][:-1] + ("A" if test_key["secret"][-1] != "A" else "B")

        app = create_app(core)
        verbose = ServerThread(app, log_level="debug", access_log=True)
        for name in LOGGERS:  # uvicorn's dictConfig just replaced its loggers' handlers
            logging.getLogger(name).addHandler(collect)
        with (
            verbose as server,
            httpx.Client(base_url=server.url, timeout=20, verify=False) as client,
        ):

            def call(method: str, path: str, secret: str | None, **kw) -> httpx.Response:
                headers = {"Authorization": f"Bearer {secret}"} if secret else {}
                headers.update(kw.pop("headers", {}))
                return client.request(method, path, headers=headers, **kw)

            # 2. valid keys over real HTTP
            for secret in (
                test_key["secret"],
                live_key["secret"],
                rotated_to.secret,
                rotated_from.secret,
                reader.secret,
            ):
                assert call("GET", "/v1/auth/verify", secret).status_code == 200
            created = call("POST", "/v1/agents", test_key["secret"], json={"name": "a"})
            assert created.status_code == 201
            agent_id = created.json()["id"]
            assert (
                call("POST", f"/v1/agents/{agent_id}/deploy", test_key["secret"]).status_code == 200
            )
            assert call("PATCH", f"/v1/agents/{agent_id}", reader.secret, json={}).status_code in {
                403,
                404,
            }
            assert call("GET", "/v1/agents", live_key["secret"]).status_code == 200
            # 3. bad keys
            assert call("GET", "/v1/auth/verify", unknown).status_code == 401
            assert call("GET", "/v1/auth/verify", typo).status_code == 401
            assert (
                call(
                    "GET",
                    "/v1/auth/verify",
                    None,
                    headers={"Authorization": f"Basic {test_key['secret']}"},
                ).status_code
                == 401
            )
            assert (
                call(
                    "GET", "/v1/auth/verify", None, headers={"Authorization": test_key["secret"]}
                ).status_code
                == 401
            )
            # 4. revoked (by the CLI, in another process) and expired keys
            assert run_cli("keys", "revoke", doomed.id, db=db).returncode == 0
            assert call("GET", "/v1/auth/verify", doomed.secret).json()["code"] == "api_key_revoked"
            time.sleep(0.3)
            assert call("GET", "/v1/auth/verify", short.secret).json()["code"] == "api_key_expired"
            # 5. rotation through the CLI
            rotated = cli_json(
                "keys", "rotate", live_key["id"], "--grace-hours", "1", "--json", db=db
            )
            issued.append(rotated["secret"])
            assert call("GET", "/v1/auth/verify", rotated["secret"]).status_code == 200
            # bodies of errors do not echo keys either
            bad = call(
                "POST",
                "/v1/agents",
                typo,
                content=b"{",
                headers={"Content-Type": "application/json"},
            )
            assert bad.status_code == 401 and typo not in bad.text
        # and the Python API refusing keys
        for secret in (unknown, typo, doomed.secret, short.secret):
            with pytest.raises(AuthenticationError):
                core.authenticate(secret)
        listed = run_cli("keys", "list", "--org", "acme", "--json", db=db)
        assert listed.returncode == 0

        # 6. read the files while the core is still open: the WAL has not been checkpointed
        assert wal.exists() and wal.stat().st_size > 0, "expected an un-checkpointed WAL"
        files = {p.name: p.read_bytes() for p in (db, wal, Path(str(db) + "-shm")) if p.exists()}
    finally:
        core.close()

    watched = issued + [unknown, typo]
    everything_at_rest = b"".join(files.values()).decode("latin-1")
    # positive control: the digests are there, so these are the right files
    assert digest(test_key["secret"]) in everything_at_rest
    assert digest(rotated["secret"]) in everything_at_rest
    for name, data in files.items():
        assert not _leaks(data.decode("latin-1"), watched), f"key plaintext in {name}"
    after_close = db.read_bytes().decode("latin-1")
    assert not _leaks(after_close, watched), "key plaintext in the checkpointed database"

    out, err = capfd.readouterr()
    logs = "\n".join(collect.lines) + caplog.text
    assert '"GET /v1/auth/verify HTTP/1.1" 401' in logs, "access log not captured"
    assert not _leaks(logs, watched), "key plaintext in a log record"
    assert not _leaks(out + err, watched), "key plaintext on stdout/stderr"
    assert not _leaks(listed.stdout + listed.stderr, watched), "key plaintext in keys list"
