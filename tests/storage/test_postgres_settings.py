"""The PostgreSQL store's settings are its plugin's (``PostgresSettings``, namespace
``postgres``), under the names they had as core settings: the keywords
``postgres_pool_size``, ``postgres_timeout`` and ``postgres_prepared_statements``, the
variables ``AGENTCORE_POSTGRES_*``, and the same lines of a ``.env`` file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentcore import AgentCore, Settings
from agentcore.plugins.postgres_store import PostgresSettings

NAMES = ("postgres_pool_size", "postgres_timeout", "postgres_prepared_statements")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No AGENTCORE_* settings in the environment (the test run's own variables stay),
    and a working directory without a .env file."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith("AGENTCORE_") and not upper.startswith(
            ("AGENTCORE_TEST_", "AGENTCORE_RUN")
        ):
            monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield


def open_sqlite(tmp_path: Path, **kwargs: object) -> AgentCore:
    return AgentCore.open(str(tmp_path / "core.db"), entry_points=False, **kwargs)


def test_they_are_the_plugins_not_the_cores() -> None:
    assert not set(NAMES) & set(Settings.model_fields)
    assert "vector_search" in Settings.model_fields  # the core picks where search runs
    assert PostgresSettings() == PostgresSettings(
        pool_size=10, timeout=5.0, prepared_statements=True
    )  # the defaults they had


def test_keywords_variables_and_dotenv_keep_their_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_sqlite(tmp_path) as core:
        assert core.settings.plugin(PostgresSettings) == PostgresSettings()
        assert core.settings.plugin("postgres") == PostgresSettings()
    keywords = dict(postgres_pool_size=3, postgres_timeout=2.5, postgres_prepared_statements=False)
    with open_sqlite(tmp_path, **keywords) as core:
        chosen = core.settings.plugin(PostgresSettings)
        assert (chosen.pool_size, chosen.timeout, chosen.prepared_statements) == (3, 2.5, False)
    Path(".env").write_text("AGENTCORE_POSTGRES_TIMEOUT=7.5\n")
    monkeypatch.setenv("AGENTCORE_POSTGRES_POOL_SIZE", "4")
    monkeypatch.setenv("agentcore_postgres_prepared_statements", "false")  # any case
    with open_sqlite(tmp_path) as core:
        read = core.settings.plugin(PostgresSettings)
        assert (read.pool_size, read.timeout, read.prepared_statements) == (4, 7.5, False)
    with open_sqlite(tmp_path, postgres_pool_size=6) as core:  # a keyword wins
        assert core.settings.plugin(PostgresSettings).pool_size == 6


def test_a_bad_value_stops_open_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError) as info:
        open_sqlite(tmp_path, postgres_pool_size=0)
    assert "postgres_pool_size" in str(info.value) and "plugin 'postgres'" in str(info.value)
    monkeypatch.setenv("AGENTCORE_POSTGRES_TIMEOUT", "soon")
    with pytest.raises(ValidationError, match="postgres_timeout"):
        open_sqlite(tmp_path)
    assert not (tmp_path / "core.db").exists()  # refused before the store opened


@pytest.mark.slow
def test_the_store_is_opened_with_them(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCore.open(
        postgres_url,
        start_workers=False,
        postgres_pool_size=3,
        postgres_timeout=2.5,
        postgres_prepared_statements=False,
    ) as core:
        db = core.store.db  # type: ignore[attr-defined]
        assert (db.pool.max_size, db.timeout, db.prepared_statements) == (3, 2.5, False)
    monkeypatch.setenv("AGENTCORE_POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("AGENTCORE_POSTGRES_TIMEOUT", "4")
    with AgentCore.open(postgres_url, start_workers=False, vector_search="pgvector") as core:
        db = core.store.db  # type: ignore[attr-defined]
        assert (db.pool.max_size, db.timeout, db.prepared_statements) == (2, 4.0, True)
        assert core.store.vector_search == "pgvector"  # type: ignore[attr-defined]
