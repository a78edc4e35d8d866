"""How many processes ``agentcore serve`` runs: ``--workers``, else ``WEB_CONCURRENCY``,
else one per usable CPU (at most 8), and one on an in-memory database, which another
process cannot open. The suite runs servers with ``WEB_CONCURRENCY=1`` (conftest); these
tests unset it where they test the default."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from helpers import cli_env, run_cli, start_serve
from processes import reap

from agentcore import Settings
from agentcore.config import export_to_children, usable_cpus
from agentcore_starlette.serve.command import DEFAULT_WORKERS_CAP, worker_count


def _quota_files(
    tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None
) -> tuple[str, str, str]:
    files = (tmp_path / "cpu.max", tmp_path / "cfs_quota_us", tmp_path / "cfs_period_us")
    if v2 is not None:
        files[0].write_text(v2 + "\n")
    if v1 is not None:
        files[1].write_text(v1[0] + "\n")
        files[2].write_text(v1[1] + "\n")
    return str(files[0]), str(files[1]), str(files[2])


def test_usable_cpus_are_the_affinity_unless_a_container_quota_is_lower(tmp_path: Path) -> None:
    mine = len(os.sched_getaffinity(0))
    assert usable_cpus(_quota_files(tmp_path / "none")) == mine  # no cgroup files
    assert usable_cpus(_quota_files(tmp_path, v2="max 100000")) == mine  # no quota
    for name, (text, expected) in enumerate(
        [("50000 100000", 1), ("150000 100000", 2), ("100000 100000", 1)]
    ):
        folder = tmp_path / str(name)
        folder.mkdir()
        assert usable_cpus(_quota_files(folder, v2=text)) == min(mine, expected), text
    v1 = tmp_path / "v1"
    v1.mkdir()
    assert usable_cpus(_quota_files(v1, v1=("250000", "100000"))) == min(mine, 3)
    unlimited = tmp_path / "v1-unlimited"
    unlimited.mkdir()
    assert usable_cpus(_quota_files(unlimited, v1=("-1", "100000"))) == mine
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    assert usable_cpus(_quota_files(garbage, v2="lots")) == mine
    assert usable_cpus(_quota_files(garbage, v2="0 100000")) == mine


def test_the_worker_count_is_the_flag_then_web_concurrency_then_the_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    default = min(usable_cpus(), DEFAULT_WORKERS_CAP)
    assert worker_count(None, in_process=False) == default
    assert worker_count(None, in_process=True) == 1  # :memory: has one process
    assert worker_count(3, in_process=False) == 3
    monkeypatch.setenv("WEB_CONCURRENCY", " 5 ")
    assert worker_count(None, in_process=False) == 5
    assert worker_count(2, in_process=False) == 2  # the flag wins
    monkeypatch.setenv("WEB_CONCURRENCY", "64")
    assert worker_count(None, in_process=False) == 64
    monkeypatch.setenv("WEB_CONCURRENCY", "")
    assert worker_count(None, in_process=False) == default  # empty: unset
    monkeypatch.setenv("WEB_CONCURRENCY", "1")
    assert worker_count(None, in_process=True) == 1


@pytest.mark.parametrize("raw", ["0", "65", "-2", "two", "1.5"])
def test_a_web_concurrency_that_cannot_be_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("WEB_CONCURRENCY", raw)
    with pytest.raises(
        ValueError, match=f"WEB_CONCURRENCY must be an integer from 1 to 64, not {raw!r}"
    ):
        worker_count(None, in_process=False)


def test_several_processes_on_an_in_memory_database_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    with pytest.raises(ValueError, match="--workers 2 needs a database file or PostgreSQL"):
        worker_count(2, in_process=True)
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    with pytest.raises(ValueError, match="WEB_CONCURRENCY 3 needs a database file"):
        worker_count(None, in_process=True)


def test_serve_workers_divide_the_default_ingestion_pool() -> None:
    node = max(1, min(4, usable_cpus() // 2))
    unset = Settings()
    assert unset.ingest_pool_size == node + 1
    assert unset.ingest_pool_size_of(1) == node + 1
    for processes in (2, 3, 8, 64):
        assert unset.ingest_pool_size_of(processes) == max(1, node // processes) + 1
    assert Settings(ingest_workers=3).ingest_pool_size_of(8) == 3  # set: per process
    assert Settings(ingest_workers=0).ingest_pool_size_of(2) == 0


def _server_children(pid: int) -> list[int]:
    """The worker processes uvicorn's supervisor ``pid`` started (spawned interpreters,
    its resource tracker left out)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in argv and b"resource_tracker" not in argv:
                found.append(int(child))
    return found


def _banner(out: Path) -> str:
    return out.read_text().splitlines()[0]


@pytest.mark.slow
def test_serve_runs_one_process_per_usable_cpu_by_default(tmp_path: Path) -> None:
    db = tmp_path / "agentcore.db"
    env = cli_env()
    env.pop("WEB_CONCURRENCY")
    out = tmp_path / "out.txt"
    expected = min(usable_cpus(), DEFAULT_WORKERS_CAP)
    process, url = start_serve(db, env=env, stdout=out)
    try:
        banner = _banner(out)
        assert banner.startswith(f"agentcore serving {db} on {url}/v1"), banner
        if expected > 1:
            assert banner.endswith(f" with {expected} worker processes"), banner
            assert len(_server_children(process.pid)) == expected
        else:
            assert banner == f"agentcore serving {db} on {url}/v1"
        assert httpx.get(url + "/v1/health", timeout=30).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        reap(process)


@pytest.mark.slow
def test_web_concurrency_names_the_count_and_memory_serves_one(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    env = cli_env()
    env["WEB_CONCURRENCY"] = "2"
    process, url = start_serve(tmp_path / "a.db", env=env, stdout=out)
    try:
        assert _banner(out).endswith(" with 2 worker processes")
        assert len(_server_children(process.pid)) == 2
    finally:
        reap(process)
    env.pop("WEB_CONCURRENCY")
    process, url = start_serve(":memory:", env=env, stdout=out)
    try:
        assert _banner(out) == f"agentcore serving :memory: on {url}/v1"  # one process
        assert _server_children(process.pid) == []
    finally:
        reap(process)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("db", "extra", "variable", "line"),
    [
        (
            ":memory:",
            ["--workers", "2"],
            None,
            "--workers 2 needs a database file or PostgreSQL: another process cannot open an"
            " in-memory database, so each worker would have one of its own",
        ),
        ("a.db", [], "many", "WEB_CONCURRENCY must be an integer from 1 to 64, not 'many'"),
        ("a.db", [], "0", "WEB_CONCURRENCY must be an integer from 1 to 64, not '0'"),
    ],
)
def test_a_worker_count_that_cannot_be_exits_2_in_one_line(
    tmp_path: Path, db: str, extra: list[str], variable: str | None, line: str
) -> None:
    env = cli_env()
    env.pop("WEB_CONCURRENCY")
    if variable is not None:
        env["WEB_CONCURRENCY"] = variable
    where = db if db == ":memory:" else str(tmp_path / db)
    result = run_cli("serve", "--port", str(free_port()), *extra, db=where, env=env)
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert result.stderr == f"agentcore: {line}\n"


def test_the_workers_settings_divide_what_the_operator_left_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcore.plugins.postgres_store import PostgresSettings

    monkeypatch.delenv("AGENTCORE_POSTGRES_POOL_SIZE", raising=False)
    assert "node_shares" not in PostgresSettings.model_fields
    unset = Settings().with_plugins(postgres=PostgresSettings())
    node = unset.index_cache_budget
    for processes, pool in ((1, 10), (2, 5), (3, 3), (8, 2), (64, 2)):
        assert unset.settings_for_processes(processes) == {
            "index_cache_bytes": str(node // processes),
            "ingest_workers": str(unset.ingest_pool_size_of(processes)),
            "postgres_pool_size": str(pool),
        }
    # what the operator set holds for each process: in code, or in the environment
    given = Settings(index_cache_bytes=1000, ingest_workers=3).with_plugins(
        postgres=PostgresSettings(pool_size=7)
    )
    assert given.settings_for_processes(4) == {"index_cache_bytes": "1000", "ingest_workers": "3"}
    monkeypatch.setenv("AGENTCORE_POSTGRES_POOL_SIZE", "9")
    from_environment = Settings().with_plugins(postgres=PostgresSettings())
    assert "postgres_pool_size" not in from_environment.settings_for_processes(2)


def test_a_plugin_setting_is_exported_only_when_the_settings_declare_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentcore.plugins.postgres_store import PostgresSettings

    for name in ("AGENTCORE_DB", "AGENTCORE_POSTGRES_POOL_SIZE", "AGENTCORE_MAX_TOP_K"):
        monkeypatch.setenv(name, "1")  # recorded, so that it is as it was after the test
        monkeypatch.delenv(name)
    settings = Settings().with_plugins(postgres=PostgresSettings())
    assert {"max_top_k", "postgres_pool_size"} <= settings.keywords()
    assert "pool_size" not in settings.keywords()
    with pytest.raises(ValueError, match="postgres_pool_size"):
        export_to_children("a.db", postgres_pool_size="4")  # no settings declared it
    export_to_children("a.db", known=settings.keywords(), postgres_pool_size="4", max_top_k="9")
    assert PostgresSettings().pool_size == 4
    assert Settings().max_top_k == 9
