"""``redact`` skips text that cannot hold a secret; the result never differs from
applying every pattern, and a record is redacted once however many filters see it."""

from __future__ import annotations

import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from agentcore import _logs as module
from agentcore._logs import REDACTED, SecretRedactingFilter, redact

FRAGMENTS = [
    "ak_test_",
    "ak_live_",
    "AK_TEST_",
    "whsec_",
    "Bearer ",
    "bearer\t",
    "BASIC ",
    "basic",
    "?api_key=",
    "&TOKEN=",
    "?key=",
    "&secret",
    "?",
    "&",
    "=",
    " ",
    "/v1/search",
    "abcXYZ019",
    "%2F",
    "ak_",
    "_",
    "-",
    '"',
    "postgresql://",
    "u:",
    ":",
    "pw",
    "@",
    "/",
    "password=",
    "PASSWORD =",
    "'",
]


def every_pattern(text: str) -> str:
    """``redact`` without its shortcut: every substitution, always."""
    text = module._SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    text = module._BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = module._QUERY.sub(lambda m: m.group(1) + REDACTED, text)
    return module.hide_passwords(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
def test_the_shortcut_never_changes_the_result(text: str) -> None:
    assert redact(text) == every_pattern(text)


@given(st.text(max_size=80))
def test_the_shortcut_on_arbitrary_text(text: str) -> None:
    assert redact(text) == every_pattern(text)


def test_plain_text_is_returned_as_is() -> None:
    line = '127.0.0.1:5000 - "POST /v1/knowledge/search HTTP/1.1" 200'
    assert redact(line) is line
    assert redact("GET /v1/agents?limit=5") == "GET /v1/agents?limit=5"
    assert redact("GET /v1/agents?token=abc") == f"GET /v1/agents?token={REDACTED}"


def test_a_record_seen_by_two_filters_is_redacted_once(monkeypatch) -> None:
    secret = "ak_test_" + "A" * 38
    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return redact(text)

    monkeypatch.setattr(module, "redact", counting)
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "%s %s", None, None)
    record.args = ("GET", f"/v1/agents?api_key={secret}")
    assert SecretRedactingFilter().filter(record)  # the logger's filter
    assert len(calls) == 3  # the message and both arguments
    redacted = record.getMessage()
    assert secret not in redacted and REDACTED in redacted
    assert SecretRedactingFilter().filter(record)  # the handler's filter: nothing to do
    assert len(calls) == 3
    assert record.getMessage() == redacted
