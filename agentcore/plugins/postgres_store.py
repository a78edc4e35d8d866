"""Built-in plugin: the PostgreSQL store for ``postgresql://`` and ``postgres://`` URLs,
and its settings (``PostgresSettings``, namespace ``postgres``).

psycopg is imported only when such a URL is opened, so agentcore works without the
``postgres`` extra until one is.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentcore.config import PluginSettings, Settings
from agentcore.hookspecs import hookimpl
from agentcore.storage.base import Store

__all__ = ["PostgresSettings", "agentcore_open_store", "agentcore_register_settings"]


class PostgresSettings(PluginSettings):
    """Settings of the PostgreSQL store: its connection pool and statements.

    Namespace ``postgres``: ``AGENTCORE_POSTGRES_<FIELD>`` variables, or
    ``AgentCore.open(url, postgres_<field>=...)``, the names they had as core settings.
    Where search runs (``vector_search``) stays a core setting: the core picks where
    vectors are ranked, and this store is one that can rank them.
    """

    model_config = SettingsConfigDict(env_prefix="AGENTCORE_POSTGRES_")
    node_shares = {"pool_size": 2}

    pool_size: int = Field(
        10,
        ge=1,
        description="Most connections one process keeps open. Unset, `serve --workers N`"
        " divides the default among its N processes (at least 2 each), so a node"
        " opens about as many whatever N is.",
    )
    timeout: float = Field(
        5.0, gt=0, description="Seconds to wait for a connection before answering 503."
    )
    prepared_statements: bool = Field(
        True,
        description="Let psycopg prepare the statements a connection sends often. Turn"
        " off behind a pooler in transaction mode that cannot keep them per client, such"
        " as PgBouncer before 1.21.",
    )


@hookimpl
def agentcore_register_settings(register: Callable[[str, type[BaseSettings]], None]) -> None:
    """Declare ``PostgresSettings`` under the namespace ``postgres``."""
    register("postgres", PostgresSettings)


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
    postgres = settings.plugin(PostgresSettings)
    return PostgresStore.open(
        url,
        pool_size=postgres.pool_size,
        timeout=postgres.timeout,
        vector_search=settings.vector_search,
        prepared_statements=postgres.prepared_statements,
    )
