"""The access log of ``agentcore serve``: uvicorn's own line, character for character,
from ``AccessFormatter`` (a plain ``logging.Formatter``), behind the redacting filter,
written by ``DeferredStreamHandler`` after the answer it describes."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.config
from collections.abc import Iterator
from typing import Any

import pytest
from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

from agentcore._logs import SecretRedactingFilter
from agentcore_starlette.serve.access_log import (
    DEFAULT_FORMAT,
    AccessFormatter,
    DeferredStreamHandler,
)
from agentcore_starlette.serve.options import serve_log_config


def record(*args: Any, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access", level, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
    )


CASES = [
    ("127.0.0.1:5000", "POST", "/v1/knowledge/search", "1.1", 200),
    ("10.0.0.2:1", "GET", "/v1/agents?limit=2", "1.1", 404),
    ("[::1]:80", "DELETE", "/v1/agents/agt_1", "2", 204),
    ("127.0.0.1:5000", "GET", "/v1/x", "1.0", 599),  # no phrase: uvicorn leaves it empty
    ("127.0.0.1:5000", "GET", "/v1/x", "1.1", 429),
]


@pytest.mark.parametrize("args", CASES)
@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING, logging.CRITICAL])
def test_the_line_is_uvicorns(args: tuple[Any, ...], level: int) -> None:
    ours = AccessFormatter(DEFAULT_FORMAT, use_colors=False)
    theirs = UvicornAccessFormatter(DEFAULT_FORMAT, use_colors=False)
    assert ours.format(record(*args, level=level)) == theirs.format(record(*args, level=level))


def test_colours_another_format_and_odd_records_go_through_uvicorn() -> None:
    args = CASES[0]
    coloured = AccessFormatter(DEFAULT_FORMAT, use_colors=True)
    expected = UvicornAccessFormatter(DEFAULT_FORMAT, use_colors=True).format(record(*args))
    assert coloured.format(record(*args)) == expected and "\x1b[" in expected
    other = "%(client_addr)s %(status_code)s"
    assert AccessFormatter(other, use_colors=False).format(record(*args)) == (
        UvicornAccessFormatter(other, use_colors=False).format(record(*args))
    )
    as_text = logging.LogRecord(
        "uvicorn.access", logging.INFO, "f", 1, "%s %s %s %s %s", None, None
    )
    as_text.args = (*args[:4], "200")  # a status given as text: uvicorn's int() reads it
    copy = logging.makeLogRecord(as_text.__dict__)
    plain = UvicornAccessFormatter(DEFAULT_FORMAT, use_colors=False)
    ours = AccessFormatter(DEFAULT_FORMAT, use_colors=False)
    assert ours.format(as_text) == plain.format(copy) and ours.format(as_text).endswith("200 OK")
    with pytest.raises(ValueError):  # not an access record at all: uvicorn's own error
        short = logging.LogRecord("uvicorn.access", logging.INFO, "f", 1, "%s", None, None)
        short.args = ("just one",)
        ours.format(short)


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
def test_serve_configures_it_behind_the_redacting_filter() -> None:
    # the live line (redacted, from a real `agentcore serve`) is checked in
    # tests/core/test_secrets_in_logs.py; here: the configuration that produces it
    config = serve_log_config()
    assert (
        config["formatters"]["access"]["()"]
        == "agentcore_starlette.serve.access_log.AccessFormatter"
    )
    assert config["formatters"]["access"]["fmt"] == DEFAULT_FORMAT
    assert config["loggers"]["uvicorn.access"]["filters"] == ["redact_secrets"]
    access = config["handlers"]["access"]
    assert access["class"] == "agentcore_starlette.serve.access_log.DeferredStreamHandler"
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
