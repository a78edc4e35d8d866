"""Keeping secrets out of logs: spot key-like values and redact them from log records.

Secrets are API keys (``ak_test_…``/``ak_live_…``), webhook signing secrets
(``whsec_…``), ``Authorization`` header values, and database passwords (in a URL's
``user:password@`` or a ``password=`` setting). ``SecretRedactingFilter`` rewrites
a log record's message and arguments before any handler formats it; ``agentcore
serve`` installs it on uvicorn's loggers, every agentcore logger carries it, and a
host app can add it to any logger (``install_log_redaction()`` does uvicorn's).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"
HIDDEN_PASSWORD = "***"
"""What a URL's password becomes (``postgresql://user:***@host/db``): still a URL."""

SECRET_PREFIXES = ("ak_test_", "ak_live_", "ct_test_", "ct_live_", "whsec_")
"""What the secrets this library mints start with."""

QUERY_SECRET_NAMES = frozenset(
    {"api_key", "apikey", "api-key", "key", "token", "access_token", "authorization", "secret"}
)
"""Query parameter names refused by the HTTP API (keys belong in ``Authorization``)."""

# a prefix, then the characters a key or a base64 secret is made of, raw or percent-encoded
_SECRET = re.compile(r"((?:ak|ct)_(?:test|live)_|whsec_)[A-Za-z0-9+/=%_-]*")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s,;\"']+")
_QUERY = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(n) for n in sorted(QUERY_SECRET_NAMES)) + r")=)[^&\s\"']*"
)
# scheme://user:password@ (a password holds no unescaped "@" or "/"), and libpq's
# password=... (a URL's query parameter or a conninfo setting, quoted or not)
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/@:\"']*:)[^\s/@\"']+@")
_PASSWORD_SETTING = re.compile(r"(?i)(\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&\"']+)")

# whether any of the three can match: one search, so text without a secret (nearly
# every log argument, e.g. the access log's method, path and status) is returned as is
_ANY = re.compile(
    r"(?:ak|ct)_(?:test|live)_|whsec_|(?i:\b(?:bearer|basic)\s)|(?i:[?&](?:"
    + "|".join(re.escape(n) for n in sorted(QUERY_SECRET_NAMES))
    + r")=)|://[^\s/@:\"']*:[^\s/@\"']+@|(?i:\bpassword\s*=)"
)

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def looks_secret(text: str) -> bool:
    """Whether ``text`` holds something shaped like a key or webhook secret."""
    return _SECRET.search(text) is not None


def redact(text: str) -> str:
    """``text`` with key-like values, bearer credentials, secret query values and
    database passwords masked."""
    if _ANY.search(text) is None:
        return text
    text = _SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _QUERY.sub(lambda m: m.group(1) + REDACTED, text)
    return hide_passwords(text)


def hide_passwords(text: str) -> str:
    """``text`` with the password of every URL (``scheme://user:***@host``) and every
    ``password=`` setting masked: what the CLI prints where it names a database."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + HIDDEN_PASSWORD + "@", text)
    return _PASSWORD_SETTING.sub(lambda m: m.group(1) + HIDDEN_PASSWORD, text)


def _redact_value(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


_DONE = "_agentcore_redacted"  # set on a record once redacted (filters sit on loggers and handlers)


class SecretRedactingFilter(logging.Filter):
    """A logging filter that masks secrets in a record's message and arguments.

    It never drops a record. Arguments are rewritten in place of formatting them, so
    formatters that read ``record.args`` directly (uvicorn's access formatter) see the
    redacted values too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always keep it."""
        if getattr(record, _DONE, False):
            return True  # already redacted by this filter on its logger; now at a handler
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_value(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {name: _redact_value(arg) for name, arg in record.args.items()}
        if record.exc_info and not record.exc_text:
            # format the traceback now, so its text (exception messages) is redacted too
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        setattr(record, _DONE, True)
        return True


_FILTER = SecretRedactingFilter()


def install_log_redaction(names: Iterable[str] = UVICORN_LOGGERS) -> None:
    """Add the redacting filter to the loggers named (default: uvicorn's); idempotent.

    A filter applies to the records logged on its own logger, so name each logger
    that emits (``uvicorn.access`` writes the request line with its query string).
    """
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, SecretRedactingFilter) for f in logger.filters):
            logger.addFilter(_FILTER)


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the redacting filter installed (agentcore's loggers)."""
    install_log_redaction([name])
    return logging.getLogger(name)
