"""The store's document write alone: ms per ``insert_document`` on SQLite and PostgreSQL.

No parsing, chunking or embedding: each write stores one document of ``--chunks`` chunks
(600 characters each, one page) with a random float32 vector per chunk (d = 1,024, the
default embedder's), its sentence counts, in a workspace whose index is set up, through
the store object a core opened (``core.store``), on a fresh SQLite WAL file and on a fresh
database of one PostgreSQL server. ``--complete`` times ``complete_document`` instead, a
background job's write of a ``processing`` document (stored, with its job, before the
timing) that records its ``document.ready`` event. Each run is a fresh process per code version, store
and chunk count; the runs alternate which version goes first, so with ``--peer REV``
(another version of the code, extracted with ``git archive``) both meet the same machine.

Prints, per chunk count and store, the median over ``--runs`` runs of each run's median
wall and CPU ms per write (CPU: the writing thread's, so PostgreSQL's server processes
are not counted), and this code's time ÷ the peer's.

Run: ``python benchmarks/document_write.py [--chunks 1,6,40] [--writes 1000] [--runs 3]
[--complete] [--peer REV] [--db URL]`` (without ``--db`` a throwaway pgserver is started).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STORES = ("sqlite", "postgres")
DIMENSION = 1024


def one_run(code: Path, url: str, chunks: int, writes: int, complete: bool) -> dict[str, float]:
    """``writes`` documents of ``chunks`` chunks into the empty store ``url`` with
    ``code``'s ``agentcore`` (``complete``: as background jobs completing); the median
    wall and CPU ms per write."""
    sys.path.insert(0, str(code))
    import numpy as np

    import agentcore
    from agentcore import AgentCore
    from agentcore._ids import new_id
    from agentcore.events import Event
    from agentcore.schema import Document

    assert Path(agentcore.__file__).resolve().is_relative_to(code.resolve())
    core = AgentCore.open(url, start_workers=False)
    ws = core.workspace("bench", "test")
    ws.knowledge.ingest_text("warm-up.txt", "A first document, so the workspace is indexed.")
    store, org = core.store, ws.organization_id
    embedder = store.knowledge_state(org, "test").embedder
    assert embedder is not None
    rng = np.random.default_rng(7)
    rows = [("some text " * 60, [1], [0])] * chunks
    keep = np.ones(chunks, bool)
    walls, cpus = [], []
    event_type = inspect.signature(store.complete_document).parameters["event"].annotation
    takes_event = "Callable" not in str(event_type)
    for _ in range(writes):
        vectors = rng.random((chunks, DIMENSION), dtype=np.float32)
        document = Document.model_validate(
            {
                "id": new_id("doc"),
                "source": "bench.txt",
                "content_type": "text/plain",
                "pages": 1,
                "chunks": chunks,
                "bytes": 600 * chunks,
                "created_at": "2026-01-01T00:00:00Z",
            }
        )
        counts = (5, {"text": 60})
        if complete:
            processing = document.model_copy(update={"status": "processing"})
            store.insert_processing_document(
                org, "test", processing, kind="text", filename="bench.txt",
                content_type=None, data=b"text", now=time.time(),
            )  # fmt: skip
            event = Event("document.ready", {"id": document.id}, org, "test")
        wall, cpu = time.perf_counter(), time.thread_time()
        if complete:
            # the event as a function of the stored document (an Event itself before 298d9d9,
            # which --peer may run)
            made = event if takes_event else (lambda _, e=event: e)
            store.complete_document(
                org, "test", document, rows, embedder, vectors, keep, counts, made
            )
        else:
            store.insert_document(org, "test", document, rows, embedder, vectors, keep, counts)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
    core.close()
    return {"ms": statistics.median(walls) * 1e3, "cpu ms": statistics.median(cpus) * 1e3}


def child(code: Path, url: str, chunks: int, args: argparse.Namespace) -> dict[str, float]:
    """One run in a fresh process; its JSON answer."""
    command = [sys.executable, __file__, "run", "--code", str(code), "--db", url]
    command += ["--chunks", str(chunks), "--writes", str(args.writes)]
    command += ["--complete"] if args.complete else []
    from ingest_speed import run_json

    return run_json(command)


def main() -> int:
    """Time both stores (and the peer's), alternating, and print a Markdown table."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from ingest_speed import peer_checkout
    from postgres_store import fresh_database
    from throwaway_postgres import postgres

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "run"])
    parser.add_argument("--chunks", default="1,6,40", help="chunks per document, comma-separated")
    parser.add_argument("--writes", type=int, default=1000, help="documents written per run")
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is shown")
    parser.add_argument(
        "--complete", action="store_true", help="time complete_document (a background job's)"
    )
    parser.add_argument("--peer", help="git revision to compare (default: none)")
    parser.add_argument("--db", help="postgresql:// URL of a server (default: a pgserver)")
    parser.add_argument("--code", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.chunks.split(",")]
    if args.mode == "run":
        answer = one_run(Path(args.code), args.db, sizes[0], args.writes, args.complete)
        print(json.dumps(answer))
        return 0

    with tempfile.TemporaryDirectory(prefix="document_write") as tmp, postgres(args.db) as server:
        peer = {"peer": peer_checkout(args.peer, Path(tmp))} if args.peer else {}
        versions = {"this": REPO, **peer}
        found: dict[tuple[str, str, int], list[dict[str, float]]] = {}
        for number in range(args.runs):
            order = list(versions) if number % 2 == 0 else list(versions)[::-1]
            for size in sizes:
                for store in STORES:
                    for version in order:
                        name = f"{version}_{store}_{size}_{number}"
                        if store == "sqlite":
                            url = str(Path(tmp) / f"{name}.db")
                        else:
                            url = fresh_database(server, f"write_{name}")
                        answer = child(versions[version], url, size, args)
                        found.setdefault((version, store, size), []).append(answer)

    def median(version: str, store: str, size: int, key: str) -> float:
        return statistics.median(run[key] for run in found[(version, store, size)])

    write = "complete_document" if args.complete else "insert_document"
    print(
        f"{write} alone, {args.writes} writes per run, d = {DIMENSION}; median of"
        f" {args.runs} runs' medians, ms per write (load average {os.getloadavg()[0]:.1f})\n"
    )
    peer = f" | peer {args.peer}: wall (CPU) | this ÷ peer" if args.peer else ""
    print(f"| chunks | store | this: wall (CPU){peer} |")
    print("|---:|---|---:|" + ("---:|---:|" if args.peer else ""))
    for size in sizes:
        for store in STORES:
            cells = []
            for version in versions:
                wall, cpu = (median(version, store, size, key) for key in ("ms", "cpu ms"))
                cells.append(f"{wall:.3f} ({cpu:.3f})")
            if args.peer:
                ratio = median("this", store, size, "ms") / median("peer", store, size, "ms")
                cells.append(f"{ratio:.2f}×")
            print(f"| {size} | {store} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
