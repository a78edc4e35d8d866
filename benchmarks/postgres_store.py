"""The PostgreSQL store's calls on a chat and an ingestion path, this checkout against a peer.

Each run is a child process that imports ``agentcore`` from one checkout (this one, or
the peer revision extracted with ``git archive``) and times, on a fresh database of one
PostgreSQL server: ``insert_document`` (3 chunks of 384-d vectors and ~45 stem counts,
as ingestion writes them) into a workspace that grows to ``--docs`` documents, then
``term_counts`` with the workspace unchanged and right after another node's write,
``get_chunks`` of 5 ids, ``knowledge_state``, ``get_agent`` and ``find_key_by_digest``.
Runs alternate which version goes first. Prints the median µs per call of ``--runs``
runs and the ratio this ÷ peer. The default peer is a4b6b69, the last commit with a
separate PostgreSQL store (its per-stem ``term_counts`` rows summed by a query).

Run: ``python benchmarks/postgres_store.py [--docs 500] [--calls 300] [--runs 3]
[--peer REV] [--db URL]`` (without ``--db`` a throwaway pgserver is started).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PEER = "a4b6b69"
STEMS = [f"stem{i}" for i in range(45)]


def timed(calls: int, fn: Callable[[int], object]) -> float:
    """Microseconds per call of ``fn(i)`` for ``i`` in ``range(calls)``."""
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - start) / calls * 1e6


def one_run(code: Path, url: str, docs: int, calls: int) -> dict[str, float]:
    """Time this child's checkout on the empty database ``url``."""
    sys.path.insert(0, str(code))
    import numpy as np

    import agentcore
    from agentcore._ids import new_id, utcnow

    try:
        from agentcore.schema import Agent, ApiKey, Document
    except ImportError:  # a peer from before models.py was named schema.py
        from agentcore.models import Agent, ApiKey, Document

    assert Path(agentcore.__file__).resolve().is_relative_to(code.resolve())
    from agentcore.storage.postgres import PostgresStore

    store, other = PostgresStore.open(url), PostgresStore.open(url)
    org = store.ensure_organization("bench").id
    ws = (org, "test")
    rng = np.random.default_rng(1)

    def document() -> Document:
        return Document(
            id=new_id("doc"),
            source="a.txt",
            content_type="text/plain",
            pages=1,
            chunks=3,
            bytes=2000,
            created_at=utcnow(),
        )

    def ingest(node: Any, i: int) -> list[int]:
        vectors = rng.standard_normal((3, 384)).astype(np.float32)
        counts = {stem: 1 + (i + n) % 3 for n, stem in enumerate(STEMS)}
        chunks = [(f"Chunk {n} of document {i}.", [1], [0]) for n in range(3)]
        written = node.insert_document(
            *ws, document(), chunks, "bench", vectors, np.ones(3, bool), (60, counts)
        )
        # the chunk ids: a list from peers before WrittenDocument
        ids: list[int] = getattr(written, "chunk_ids", written)
        return ids

    out: dict[str, float] = {}
    ids = ingest(store, 0)
    out["insert_document (3 chunks, 45 stems)"] = timed(docs, lambda i: ingest(store, i + 1))
    store.term_counts(*ws, STEMS[:8])
    out["term_counts (8 stems, unchanged)"] = timed(
        calls, lambda i: store.term_counts(*ws, STEMS[:8])
    )
    after_write = []
    for i in range(calls // 3):
        ingest(other, i)
        after_write.append(timed(1, lambda i: store.term_counts(*ws, STEMS[:8])))
    out["term_counts (8 stems, after another node's write)"] = statistics.mean(after_write)
    out["get_chunks (5 ids)"] = timed(calls, lambda i: store.get_chunks(ids[:3] + ids[:2]))
    out["knowledge_state"] = timed(calls, lambda i: store.knowledge_state(*ws))
    now = utcnow()
    agent = Agent(
        id=new_id("agt"),
        name="a",
        role="support",
        status="draft",
        system_prompt="",
        tools=[],
        created_at=now,
        updated_at=now,
    )
    store.insert_agent(*ws, agent)
    out["get_agent"] = timed(calls, lambda i: store.get_agent(*ws, agent.id))
    key = ApiKey(
        id=new_id("key"),
        organization="bench",
        environment="test",
        scopes=["read"],
        prefix="ak_test_",
        last4="abcd",
        created_at=now,
    )
    store.insert_key(key, org, "digest")
    out["find_key_by_digest"] = timed(calls, lambda i: store.find_key_by_digest("digest"))
    other.close()
    store.close()
    return out


def fresh_database(server_url: str, name: str) -> str:
    """An empty database ``name`` on the server; its URL."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


def main() -> int:
    """Time this checkout and its peer, alternating, and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "run"])
    parser.add_argument("--docs", type=int, default=500, help="documents ingested per run")
    parser.add_argument("--calls", type=int, default=300, help="calls per read timing")
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is shown")
    parser.add_argument("--peer", default=DEFAULT_PEER, help="git revision to compare")
    parser.add_argument("--db", help="postgresql:// URL of a server (default: a pgserver)")
    parser.add_argument("--code", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "run":
        print(json.dumps(one_run(Path(args.code), args.db, args.docs, args.calls)))
        return 0
    sys.path.insert(0, str(REPO / "benchmarks"))
    from ingest_speed import peer_checkout
    from throwaway_postgres import postgres

    with (
        tempfile.TemporaryDirectory(prefix="postgres_store_peer") as tmp,
        postgres(args.db) as url,
    ):
        versions = {"this": REPO, "peer": peer_checkout(args.peer, Path(tmp))}
        timings: dict[str, dict[str, list[float]]] = {name: {} for name in versions}
        for number in range(args.runs):
            order = list(versions) if number % 2 == 0 else list(versions)[::-1]
            for name in order:
                database = fresh_database(url, f"bench_{name}_{number}")
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "run",
                        "--code",
                        str(versions[name]),
                        "--db",
                        database,
                        "--docs",
                        str(args.docs),
                        "--calls",
                        str(args.calls),
                    ],
                    check=True,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                answer = json.loads(done.stdout.strip().splitlines()[-1])
                for operation, value in answer.items():
                    timings[name].setdefault(operation, []).append(value)
    print(
        f"PostgreSQL store, µs per call (median of {args.runs} runs, {args.docs} documents);"
        f" peer {args.peer}; a shared, loaded machine: compare within a run\n"
    )
    print("| operation | this | peer | this ÷ peer |\n|---|---:|---:|---:|")
    for operation, values in timings["this"].items():
        this, peer = statistics.median(values), statistics.median(timings["peer"][operation])
        print(f"| {operation} | {this:.0f} | {peer:.0f} | {this / peer:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
