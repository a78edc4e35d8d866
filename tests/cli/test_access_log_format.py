"""The access log of ``agentcore serve``: uvicorn's own formatter and line, behind the
redacting filter, written by ``DeferredStreamHandler`` after the answer it describes."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.config
from collections.abc import Iterator

import pytest

from agentcore.redact import SecretRedactingFilter
from agentcore_starlette.logs import DeferredStreamHandler
from agentcore_starlette.serve import serve_log_config

ACCESS = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'


def record(*args: object) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
    )


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The loggers ``serve_log_config`` configures, put back as they were afterwards."""
    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "agentcore")
    saved = {}
    for name in names:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.filters[:], logger.level, logger.propagate)
    yield
    for name, (handlers, filters, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.filters[:] = handlers, filters
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.mark.usefixtures("restored_logging")
def test_serve_configures_uvicorns_formatter_behind_the_redacting_filter() -> None:
    # the live line (redacted, from a real `agentcore serve`) is checked in
    # tests/core/test_secrets_in_logs.py; here: the configuration that produces it
    config = serve_log_config()
    assert config["formatters"]["access"]["()"] == "uvicorn.logging.AccessFormatter"
    assert config["formatters"]["access"]["fmt"] == ACCESS
    assert config["loggers"]["uvicorn.access"]["filters"] == ["redact_secrets"]
    access = config["handlers"]["access"]
    assert access["class"] == "agentcore_starlette.logs.DeferredStreamHandler"
    assert access["formatter"] == "access" and access["filters"] == ["redact_secrets"]
    config["formatters"]["access"]["use_colors"] = False
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    logging.config.dictConfig(config)  # it loads: every class and name resolves
    handler = logging.getLogger("uvicorn.access").handlers[0]
    out = io.StringIO()
    handler.setStream(out)  # type: ignore[attr-defined]
    key = "ak_test_" + "Q" * 38
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:9", "GET", f"/v1/x?api_key={key}", "1.1", 400
    )
    assert out.getvalue() == (
        'INFO:     127.0.0.1:9 - "GET /v1/x?api_key=[REDACTED] HTTP/1.1" 400 Bad Request\n'
    )


def test_on_a_loop_a_record_is_written_at_the_next_step() -> None:
    out = io.StringIO()
    handler = DeferredStreamHandler(out)
    handler.addFilter(SecretRedactingFilter())
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("tests.deferred")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    async def answer() -> list[str]:
        seen = []
        logger.info("first")
        logger.info("second")
        seen.append(out.getvalue())  # this step: nothing written yet
        await asyncio.sleep(0)
        seen.append(out.getvalue())
        return seen

    try:
        assert asyncio.run(answer()) == ["", "first\nsecond\n"]  # in order, one step later
        logger.info("off the loop")  # at once
        assert out.getvalue().endswith("off the loop\n")
    finally:
        logger.removeHandler(handler)
