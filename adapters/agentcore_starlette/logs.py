"""uvicorn's access log line at a fraction of its cost (``agentcore serve`` uses it).

uvicorn writes one access record per request, and its ``AccessFormatter`` copies the
record twice (once for the request line, once for the level prefix) before
formatting it: about a third of the logging cost of a request, which is itself a
noticeable part of a small request's server time (``benchmarks/http_overhead.py``).
``AccessFormatter`` here writes the same line without the copies.
"""

from __future__ import annotations

import http
import logging
from typing import cast

from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

DEFAULT_FORMAT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
"""uvicorn's access format (``uvicorn.config.LOGGING_CONFIG``): the one with a fast path."""

AccessArgs = tuple[object, object, object, object, int]
"""uvicorn's access record: client address, method, path with query, HTTP version, status."""

_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}


class AccessFormatter(UvicornAccessFormatter):
    """uvicorn's ``AccessFormatter``, writing its default uncoloured line directly.

    The output is uvicorn's own, character for character; coloured output, another
    format, or a record not shaped like uvicorn's access record (client address,
    method, path with query, HTTP version, status) go through uvicorn's formatter.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        """The access line for ``record``."""
        args = record.args
        if self.use_colors or self._fmt != DEFAULT_FORMAT or not _access_args(args):
            return super().formatMessage(record)
        client_addr, method, full_path, http_version, status = cast(AccessArgs, args)
        level = record.levelname
        return (
            f"{level}:{' ' * (8 - len(level))} {client_addr} -"
            f' "{method} {full_path} HTTP/{http_version}" {status} {_PHRASES.get(status, "")}'
        )


def _access_args(args: object) -> bool:
    return isinstance(args, tuple) and len(args) == 5 and isinstance(args[4], int)
