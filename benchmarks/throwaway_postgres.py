"""A PostgreSQL server for a benchmark: the ``--db`` URL given, else a throwaway pgserver."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def postgres(url: str | None) -> Iterator[str]:
    """``url``, or the URL of a pgserver started for the block (its data deleted after)."""
    if url is not None:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' RuntimeDirWarning when root
        import pgserver

        data = Path(tempfile.mkdtemp(prefix="agentcore-bench-pg-"))
        server = pgserver.get_server(data, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
