"""Ingestion on PostgreSQL against SQLite: docs/s through ``ws.knowledge.ingest_text``, one run.

The workload is ``ingest_speed.py``'s cold pass (its corpus: SQuAD paragraphs and
shuffles of their words, one chunk each, the default embedder, one document per call,
a warm index, one search at the end inside the timing), on a fresh SQLite WAL file and
on a fresh database of one PostgreSQL server, each run a fresh process. Every run
times both stores (alternating which goes first), so the ratio compares like with
like on a shared machine. With ``--peer REV`` the same is timed for another version of
the code (extracted with ``git archive``) in the same invocation. ``--statements``
also counts, in one extra PostgreSQL run of this checkout, the statements sent per
document (by wrapping psycopg's cursor: benchmark only). ``--synchronous-commit off``
sets that on the benchmark's own PostgreSQL sessions, to see what the commit's WAL
flush costs (a diagnosis: the store never changes it). ``--sqlite-synchronous full``
sets SQLite's ``synchronous`` to ``FULL`` (its WAL synced at every commit, as
PostgreSQL's default syncs its WAL; the store's own ``NORMAL`` syncs only at
checkpoints, so a power cut may undo the last commits): the two at equal durability,
again a diagnosis made by wrapping the store's connect (benchmark only). ``--clients N`` ingests from N
threads at once, each its own share of the documents, as N uploading clients would (one
core, one process: the stores' concurrency, not more CPU); with ``--tenants`` each
into its own organization, as a node serving many tenants gets them (one workspace's
writes queue on its version row on PostgreSQL, and on the workspace's lock in-process).

``--paragraphs N`` makes each document N of those texts, one after the other (40
gives documents of about 28 KB and 40 chunks, the size issue 24 measured with).

Prints the median docs/s of ``--runs`` runs per store and version and PostgreSQL's
time ÷ SQLite's, and the benchmark process's CPU time per document (less sensitive to
other work on a shared machine than the wall clock; PostgreSQL's own processes are not
counted).

Run: ``python benchmarks/postgres_ingest.py [--docs 300] [--runs 3] [--peer REV]
[--statements] [--synchronous-commit off] [--sqlite-synchronous full] [--clients N [--tenants]] [--paragraphs N] [--workspaces N]
[--db URL]``
(without ``--db`` a throwaway pgserver is started).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from squad_corpus import corpus  # standard library only: safe before choosing a checkout

REPO = Path(__file__).resolve().parents[1]
STORES = ("sqlite", "postgres")


def count_statements() -> dict[str, int]:
    """Count the statements psycopg sends from here on (an ``executemany`` row is one).
    Benchmark only."""
    import psycopg

    counts = {"statements": 0}
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["statements"] += 1
        return execute(self, *args, **kwargs)

    def counted_executemany(self: Any, query: Any, params: Any, **kwargs: Any) -> Any:
        rows = list(params)
        counts["statements"] += len(rows)
        return executemany(self, query, rows, **kwargs)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]
    return counts


def sync_sqlite_commits() -> None:
    """Make the SQLite store's connections sync the WAL at every commit (``synchronous
    = FULL``) from here on. Benchmark only."""
    from agentcore.storage.sqlite.connection import Database

    connect = Database._connect

    def full(self: Any) -> Any:
        conn = connect(self)
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    Database._connect = full  # type: ignore[method-assign]


def one_run(
    code: Path,
    url: str,
    texts: list[str],
    statements: bool,
    clients: int = 1,
    tenants: bool = False,
    sqlite_full: bool = False,
    workspaces: int = 0,
) -> dict[str, float]:
    """Ingest ``texts`` into the empty store ``url`` with ``code``'s ``agentcore``, from
    ``clients`` threads at once (each its own share of ``texts``; with ``tenants`` each
    into its own organization's workspace, else all into one). With ``workspaces`` N,
    one client spreads them over N organizations' workspaces in turn, each new (no
    document, no index loaded) when the timing starts, as issue 24 measured."""
    sys.path.insert(0, str(code))
    import agentcore
    from agentcore import AgentCore

    assert Path(agentcore.__file__).resolve().is_relative_to(code.resolve())
    counts = count_statements() if statements else None
    if sqlite_full:
        sync_sqlite_commits()
    core = AgentCore.open(url, start_workers=False)
    if workspaces:
        spaces = [core.workspace(f"bench-{n}", "test").knowledge for n in range(workspaces)]
    else:
        spaces = [
            core.workspace(f"bench-{client}" if tenants else "bench", "test").knowledge
            for client in range(clients if tenants else 1)
        ]
        for knowledge in spaces:
            knowledge.ingest_text("warm-up.txt", "A first document, so the index is cached.")
            knowledge.search("first document")  # the index is now loaded, as in a server
    before = dict(counts) if counts is not None else {}
    started, cpu = time.perf_counter(), time.process_time()

    def ingest(first: int) -> None:
        knowledge = spaces[first % len(spaces)]
        for number in range(first, len(texts), clients):
            if workspaces:
                knowledge = spaces[number % workspaces]
            knowledge.ingest_text(f"doc-{number}.txt", texts[number])

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(ingest, range(clients)))  # re-raises a client's error
    for knowledge in [] if workspaces else spaces:  # rows the indexes held back, timed
        knowledge.search(texts[-1][:100], top_k=1)  # (new workspaces' are not loaded)
    out = {
        "docs/s": len(texts) / (time.perf_counter() - started),
        "cpu ms/doc": (time.process_time() - cpu) * 1e3 / len(texts),
    }
    if counts is not None:
        for name, value in counts.items():
            out[f"{name} per document"] = (value - before[name]) / len(texts)
    core.close()
    return out


def documents(texts: list[str], paragraphs: int) -> list[str]:
    """``texts`` joined ``paragraphs`` at a time, as blank-line separated paragraphs."""
    return [
        "\n\n".join(texts[start : start + paragraphs]) for start in range(0, len(texts), paragraphs)
    ]


def child(code: Path, url: str, args: argparse.Namespace, statements: bool) -> dict[str, float]:
    """One run in a fresh process; its JSON answer."""
    command = [sys.executable, __file__, "run", "--code", str(code), "--db", url]
    command += ["--squad", args.squad, "--docs", str(args.docs), "--clients", str(args.clients)]
    command += ["--tenants"] if args.tenants else []
    command += ["--paragraphs", str(args.paragraphs), "--workspaces", str(args.workspaces)]
    command += ["--sqlite-synchronous", args.sqlite_synchronous]
    from ingest_speed import run_json

    return run_json([*command, *(["--statements"] if statements else [])])


def main() -> int:
    """Time both stores (and the peer's), alternating, and print a Markdown table."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from ingest_speed import default_squad, peer_checkout
    from postgres_store import fresh_database
    from throwaway_postgres import postgres

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "run"])
    parser.add_argument("--squad", default=str(default_squad()), help="SQuAD-format JSON file")
    parser.add_argument("--docs", type=int, default=300, help="documents per run")
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is shown")
    parser.add_argument("--peer", help="git revision to compare (default: none)")
    parser.add_argument("--statements", action="store_true", help="count statements too")
    parser.add_argument(
        "--synchronous-commit",
        choices=["on", "off"],
        help="set on the benchmark's PostgreSQL sessions (a diagnosis: the WAL flush's share)",
    )
    parser.add_argument(
        "--sqlite-synchronous",
        choices=["normal", "full"],
        default="normal",
        help="SQLite's synchronous setting (full: equal durability with PostgreSQL; a diagnosis)",
    )
    parser.add_argument("--clients", type=int, default=1, help="threads ingesting at once")
    parser.add_argument(
        "--tenants", action="store_true", help="each client into its own organization"
    )
    parser.add_argument("--paragraphs", type=int, default=1, help="texts joined into each document")
    parser.add_argument(
        "--workspaces",
        type=int,
        default=0,
        help="one client spreads the documents over N new workspaces in turn (issue 24's shape)",
    )
    parser.add_argument("--db", help="postgresql:// URL of a server (default: a pgserver)")
    parser.add_argument("--code", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "run":
        texts = documents(corpus(Path(args.squad), args.docs * args.paragraphs), args.paragraphs)
        answer = one_run(
            Path(args.code),
            args.db,
            texts,
            args.statements,
            args.clients,
            args.tenants,
            args.sqlite_synchronous == "full",
            args.workspaces,
        )
        print(json.dumps(answer))
        return 0

    with (
        tempfile.TemporaryDirectory(prefix="postgres_ingest") as tmp,
        postgres(args.db) as server,
    ):
        versions = {"this": REPO}
        if args.peer:
            (Path(tmp) / "peer").mkdir()
            versions["peer"] = peer_checkout(args.peer, Path(tmp) / "peer")
        runs: list[tuple[str, str]] = [(v, s) for v in versions for s in STORES]
        speeds: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        for number in range(args.runs):
            for version, store in runs if number % 2 == 0 else runs[::-1]:
                if store == "sqlite":
                    url = str(Path(tmp) / f"{version}-{number}.db")
                else:
                    url = fresh_database(server, f"ingest_{version}_{number}")
                    if args.synchronous_commit:
                        joint = "&" if "?" in url else "?"
                        url += f"{joint}options=-csynchronous_commit%3D{args.synchronous_commit}"
                answer = child(versions[version], url, args, False)
                speeds[(version, store)].append(answer["docs/s"])
                cpu[(version, store)].append(answer["cpu ms/doc"])
        counted = {}
        if args.statements:
            url = fresh_database(server, "ingest_statements")
            counted = child(REPO, url, args, True)

    load = os.getloadavg()[0]
    print(
        f"ingest_text, one document per call from {args.clients} client thread(s)"
        f"{' (each its own tenant)' if args.tenants else ''},"
        f" {args.docs} docs of {args.paragraphs} paragraph(s), default embedder,"
        + (
            f" spread over {args.workspaces} new workspaces in turn;"
            if args.workspaces
            else " warm index;"
        )
        + f" SQLite synchronous = {args.sqlite_synchronous.upper()}; median of"
        f" {args.runs} runs (load average {load:.1f})\n"
    )
    print("| code | SQLite docs/s | PostgreSQL docs/s | PostgreSQL time ÷ SQLite's |")
    print("|---|---:|---:|---:|")
    for version in versions:
        label = "this" if version == "this" else f"peer {args.peer}"
        sqlite = statistics.median(speeds[(version, "sqlite")])
        pg = statistics.median(speeds[(version, "postgres")])
        print(f"| {label} | {sqlite:,.1f} | {pg:,.1f} | {sqlite / pg:.2f}× |")
    print(
        "\nThe benchmark process's CPU per document (embedding, index, the store's client"
        " side; PostgreSQL's server processes not included), median ms:\n"
    )
    print("| code | SQLite | PostgreSQL |")
    print("|---|---:|---:|")
    for version in versions:
        label = "this" if version == "this" else f"peer {args.peer}"
        sqlite, pg = (statistics.median(cpu[(version, store)]) for store in STORES)
        print(f"| {label} | {sqlite:.3f} | {pg:.3f} |")
    for version, store in runs:
        values = ", ".join(f"{v:.1f}" for v in speeds[(version, store)])
        print(f"\n{version} {store} runs: {values}", end="")
    print()
    for name, value in counted.items():
        if name.endswith("per document"):
            print(f"\nPostgreSQL, this checkout: {value:.1f} {name}", end="")
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
