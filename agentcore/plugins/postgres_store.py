"""Built-in plugin: the PostgreSQL store for ``postgresql://`` and ``postgres://`` URLs.

psycopg is imported only when such a URL is opened, so agentcore works without the
``postgres`` extra until one is.
"""

from __future__ import annotations

from agentcore.config import Settings
from agentcore.hookspecs import hookimpl
from agentcore.storage.base import Store


@hookimpl
def agentcore_open_store(url: str, settings: Settings) -> Store | None:
    """Open a PostgreSQL store when ``url`` is a ``postgresql://`` or ``postgres://`` URL."""
    if not url.startswith(("postgresql://", "postgres://")):
        return None
    try:
        from agentcore.storage.postgres import PostgresStore
    except ImportError as exc:
        raise RuntimeError(
            f"PostgreSQL URLs need the postgres extra: pip install 'agentcore-service[postgres]' ({exc})"
        ) from exc
    return PostgresStore.open(
        url,
        pool_size=settings.postgres_pool_size,
        timeout=settings.postgres_timeout,
        vector_search=settings.vector_search,
        prepared_statements=settings.postgres_prepared_statements,
    )
