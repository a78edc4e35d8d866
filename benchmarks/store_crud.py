"""Microseconds per call of the SQLite store's plain CRUD, and of the auth-path key lookup.

Calls the store directly (no HTTP, no services) on a temporary WAL file: insert, get
by id, update and keyset pages of keys, agents, subscriptions, conversations and
documents, plus ``find_key_by_digest`` with its per-thread cache cold (every call
after a write) and warm. To compare two versions of the code, run it once per
checkout with ``--code`` naming that checkout's root (its ``agentcore`` package is
imported instead of this one's), interleaving the runs on a loaded machine.

Prints a Markdown table (median of ``--runs``) and writes
``benchmarks/results/store_crud.json``. Run:
``python benchmarks/store_crud.py [--calls 2000] [--runs 3] [--passes 1] [--code PATH]``.
``--passes N`` times each operation's calls in N slices and keeps the fastest slice: on a
loaded machine the slowest slices measure the other processes, not the store.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "store_crud.json"


PASSES = 1  # --passes: the calls are timed in this many slices, the fastest slice counts


def timed(calls: int, fn: Callable[[int], object]) -> float:
    """Microseconds per call of ``fn(i)`` for ``i`` in ``range(calls)``: of the fastest of
    ``PASSES`` consecutive slices of the calls (each ``i`` is still called once)."""
    size = max(1, calls // PASSES)
    best = float("inf")
    for first in range(0, calls, size):
        start = time.perf_counter()
        for i in range(first, min(first + size, calls)):
            fn(i)
        best = min(best, (time.perf_counter() - start) / (min(first + size, calls) - first))
    return best * 1e6


def one_run(calls: int) -> dict[str, float]:
    from agentcore._ids import new_id, utcnow

    try:
        from agentcore.schema import Agent, ApiKey
    except ImportError:  # a peer from before models.py was named schema.py
        from agentcore.models import Agent, ApiKey
    from agentcore.storage.sqlite import SQLiteStore

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore.open(Path(tmp) / "bench.db")
        org = store.ensure_organization("bench")
        scope = (org.id, "test")
        now = utcnow()

        def key(i: int) -> ApiKey:
            return ApiKey(
                id=f"key_{i:08d}",
                organization="bench",
                environment="test",
                scopes=["read", "write"],
                prefix="ak_test_",
                last4=f"{i % 10_000:04d}",
                name=None,
                created_at=now,
            )

        out["insert_key"] = timed(calls, lambda i: store.insert_key(key(i), org.id, f"d{i}"))
        out["update_key"] = timed(calls, lambda i: store.update_key(f"key_{i:08d}", name="n"))
        cache = store.db.thread_cache("keys")
        out["find_key_by_digest (cold cache)"] = timed(
            calls, lambda i: (cache.clear(), store.find_key_by_digest(f"d{i}"))
        )
        store.find_key_by_digest("d0")
        out["find_key_by_digest (warm cache)"] = timed(
            calls, lambda i: store.find_key_by_digest("d0")
        )
        out["get_key"] = timed(calls, lambda i: store.get_key(f"key_{i:08d}"))

        agents = [
            Agent(
                id=new_id("agt"),
                name=f"agent {i}",
                role="support",
                status="draft",
                system_prompt="",
                tools=[],
                model=None,
                created_at=now,
                updated_at=now,
            )
            for i in range(calls)
        ]
        out["insert_agent"] = timed(calls, lambda i: store.insert_agent(*scope, agents[i]))
        out["get_agent"] = timed(calls, lambda i: store.get_agent(*scope, agents[i].id))
        out["list_agents (page of 10)"] = timed(
            calls,
            lambda i: store.list_agents(
                *scope, limit=10, starting_after=agents[-1 - i % 100].id, statuses=("draft",)
            ),
        )

        subs = [
            store.insert_subscription(
                *scope,
                url="https://example.com/h",
                events=["agent.action"],
                secret="s",
                description=None,
            ).public.id
            for _ in range(200)
        ]
        out["get_subscription"] = timed(
            calls, lambda i: store.get_subscription(*scope, subs[i % 200])
        )
        out["update_subscription"] = timed(
            calls, lambda i: store.update_subscription(subs[i % 200], disabled_reason=str(i))
        )

        conversation = store.create_conversation(*scope, agents[0].id)
        out["create_conversation"] = timed(
            calls, lambda i: store.create_conversation(*scope, agents[0].id)
        )
        out["conversation_agent"] = timed(
            calls, lambda i: store.conversation_agent(*scope, conversation)
        )
        out["recent_messages (10)"] = timed(
            calls, lambda i: store.recent_messages(conversation, 10)
        )
        out["list_documents (empty)"] = timed(
            calls, lambda i: store.list_documents(*scope, limit=10, starting_after=None)
        )
        store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", type=Path, default=REPO, help="root of the checkout to measure")
    parser.add_argument(
        "--passes", type=int, default=1, help="time in slices, keep the fastest (loaded hosts)"
    )
    args = parser.parse_args(argv)
    global PASSES
    PASSES = args.passes
    sys.path.insert(0, str(args.code.resolve()))
    import agentcore

    code = Path(agentcore.__file__).resolve().parents[1]
    if code != args.code.resolve():
        parser.error(f"agentcore was imported from {code}, not {args.code}")
    runs = [one_run(args.calls) for _ in range(args.runs)]
    medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    print(f"store CRUD, µs per call (median of {args.runs} × {args.calls}), code: {args.code}\n")
    print("| operation | µs |\n|---|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value:.1f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "code": str(args.code),
                "calls": args.calls,
                "runs": args.runs,
                "python": platform.python_version(),
                "us_per_call": medians,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
