"""Per-workspace caches beyond the vector index: memory over N tenants, with and without a budget.

A search touches more than a workspace's vector index: keyword and hybrid searches use
its BM25 index, filtered searches its document table, chat reads its sentence-count
sums. This script creates ``--tenants`` organizations through the Python API (one
document of ``--paragraphs`` SQuAD paragraphs each, the default embedder), then, for
each way of touching a workspace, opens a fresh process, touches one workspace (imports
and caches warm), notes its resident memory, touches every workspace once and notes it
again:

- ``vector``: ``search(q)``; ``hybrid``: ``search(q, mode="hybrid")``;
  ``filtered``: ``search(q, filter=...)``; ``chat terms``: ``term_stats(q)`` (what chat
  reads to weigh question words);
- ``http search``: ``POST /v1/knowledge/search`` with the tenant's own API key, through
  the Starlette app in-process (``TestClient``): what the HTTP layer keeps per tenant
  (the key cache, rate-limit buckets, run-time estimates) besides the search's caches.

Each runs with ``index_cache_bytes = --budget-mib`` MiB (``budget``) and with a budget
larger than everything (``unbounded``: every cache as it was before it was bounded).
Printed per row: RSS growth over the sweep (MiB), what each cache was charged at the end
(vector indexes, keyword indexes, document tables, sentence-count sums; MiB) and the
evictions.

Run: ``python benchmarks/tenant_caches.py [--tenants 1000] [--paragraphs 30]
[--budget-mib 32] [--data DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SQUAD = REPO / ".." / "shared" / "eval" / "squad-sample.json"
MODES = ("vector", "hybrid", "filtered", "chat terms", "http search")
UNBOUNDED = 1 << 40
QUERY = "when was the city founded"


def rss() -> int:
    """This process's resident bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def keys_file(db: Path) -> Path:
    """Where ``build`` keeps each tenant's API key, one per line."""
    return db.with_suffix(".keys")


def build(db: Path, tenants: int, paragraphs: int) -> None:
    """``tenants`` workspaces of one document each (its metadata: its tenant's parity),
    each with a read key."""
    from agentcore import AgentCore

    data = json.loads(SQUAD.read_text(encoding="utf-8"))
    texts = [p["context"] for article in data["data"] for p in article["paragraphs"]]
    keys = []
    with AgentCore.open(str(db), start_workers=False) as core:
        for n in range(tenants):
            rng = random.Random(n)
            core.workspace(f"t{n}", "test").knowledge.ingest_text(
                "handbook.txt",
                "\n\n".join(rng.sample(texts, paragraphs)),
                metadata={"even": n % 2 == 0},
            )
            keys.append(core.keys.create(f"t{n}", "test", ["read"]).secret)
    keys_file(db).write_text("\n".join(keys), encoding="utf-8")


def sweep(db: Path, tenants: int, mode: str, budget: int) -> dict[str, float]:
    """Touch every workspace once as ``mode`` does, in this (fresh) process."""
    from agentcore import AgentCore
    from agentcore.storage.sql.terms import TermTables

    keys = keys_file(db).read_text(encoding="utf-8").split("\n") if mode == "http search" else []
    client: Any = None  # the app's TestClient, for "http search"

    def touch(core: AgentCore, n: int) -> None:
        knowledge = core.workspace(f"t{n}", "test").knowledge
        if mode == "http search":
            answer = client.post(
                "/v1/knowledge/search",
                json={"query": QUERY},
                headers={"Authorization": f"Bearer {keys[n]}"},
            )
            assert answer.status_code == 200, answer.text
        elif mode == "vector":
            knowledge.search(QUERY)
        elif mode == "hybrid":
            knowledge.search(QUERY, mode="hybrid")
        elif mode == "filtered":
            knowledge.search(QUERY, filter={"type": "eq", "key": "even", "value": True})
        else:
            knowledge.term_stats(QUERY)

    with contextlib.ExitStack() as stack:
        core = stack.enter_context(
            AgentCore.open(str(db), start_workers=False, index_dir="off", index_cache_bytes=budget)
        )
        if mode == "http search":
            from starlette.testclient import TestClient

            from agentcore_starlette import create_app

            client = stack.enter_context(TestClient(create_app(core)))
        touch(core, 0)
        gc.collect()
        before = rss()
        for n in range(tenants):
            touch(core, n)
        gc.collect()
        grown = rss() - before
        store = core.store
        terms = store._term_sums.stats().bytes if isinstance(store, TermTables) else 0
        keyword, metadata = core.keywords.stats(), core.metadata.stats()
        return {
            "rss": grown / 2**20,
            "vector": (core.indexes.stats()["bytes"] or 0) / 2**20,
            "keyword": keyword.bytes / 2**20,
            "metadata": metadata.bytes / 2**20,
            "terms": terms / 2**20,
            "evictions": (core.indexes.stats()["evictions"] or 0)
            + keyword.evictions
            + metadata.evictions
            + (store._term_sums.stats().evictions if isinstance(store, TermTables) else 0),
        }


def main() -> int:
    """Build the tenants once, sweep each mode in a fresh process, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "sweep"])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--paragraphs", type=int, default=30, help="paragraphs per document")
    parser.add_argument("--budget-mib", type=int, default=32)
    parser.add_argument("--data", help="directory to keep the database in (default: temporary)")
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--touch", help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "sweep":
        print(json.dumps(sweep(Path(args.db), args.tenants, args.touch, args.budget)))
        return 0
    with tempfile.TemporaryDirectory(prefix="tenant_caches") as tmp:
        db = Path(args.data or tmp) / f"tenants-{args.tenants}-{args.paragraphs}.db"
        if not db.exists() or not keys_file(db).exists():  # a database built without keys
            db.unlink(missing_ok=True)
            build(db, args.tenants, args.paragraphs)
        budget = args.budget_mib << 20
        print(
            f"{args.tenants} tenants x 1 document of {args.paragraphs} paragraphs;"
            f" budget {args.budget_mib} MiB (index_cache_bytes); each row a fresh process\n"
        )
        print(
            "| touched by | cache | RSS growth MiB | vector MiB | keyword MiB | document"
            " tables MiB | sentence sums MiB | evictions |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for mode in MODES:
            for label, bytes_ in (("budget", budget), ("unbounded", UNBOUNDED)):
                command = [sys.executable, __file__, "sweep", "--db", str(db)]
                command += ["--tenants", str(args.tenants), "--touch", mode]
                command += ["--budget", str(bytes_)]
                done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                print(
                    f"| {mode} | {label} | {row['rss']:.1f} | {row['vector']:.1f} |"
                    f" {row['keyword']:.1f} | {row['metadata']:.1f} | {row['terms']:.1f} |"
                    f" {row['evictions']:.0f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
