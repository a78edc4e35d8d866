"""Event -> delivery latency when the event is recorded on one node and sent by another.

Two cores share one store: node A (no workers) publishes ``agent.action`` events at a
steady pace; node B runs the delivery worker and has nothing to do until it notices
them. On PostgreSQL, node B is woken by ``LISTEN``/``NOTIFY``; on SQLite (two cores on
one file) it notices at its next poll (``IDLE_POLL``, 1 s). Same run, same receiver.

    latency = receipt time - publish-return time on node A, per event

Run ``python benchmarks/cross_node_wakeup.py [--events 20] [--interval 0.3] [--db URL]``
(without ``--db`` a throwaway pgserver is started).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from throwaway_postgres import postgres  # noqa: E402
from webhook_receiver import Receiver  # noqa: E402

from agentcore import AgentCore  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def run(url: str, events: int, interval: float) -> dict[str, Any]:
    options: dict[str, Any] = {"webhook_allowed_networks": "127.0.0.0/8"}
    with Receiver() as receiver:
        writer = AgentCore.open(url, start_workers=False, **options)
        sender = AgentCore.open(url, **options)
        try:
            ws = writer.workspace(f"bench-{time.time_ns()}", "test")
            ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
            sender.start()
            time.sleep(1.5)  # the sender is idle (waiting) when the first event comes
            published: dict[str, float] = {}
            for number in range(events):
                event = ws.publish("agent.action", {"n": number})
                published[event.id] = time.monotonic()
                time.sleep(interval)
            receiver.wait_for_ids(events, timeout=30)
            seen = receiver.requests()
        finally:
            sender.close()
            writer.close()
    first: dict[str, float] = {}
    for request in seen:
        first.setdefault(request.webhook_id, request.at)
    latencies = [(first[e] - at) * 1000 for e, at in published.items() if e in first]
    return {
        "delivered": len(first),
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "max": max(latencies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="postgresql:// URL (default: a throwaway pgserver)")
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between events")
    args = parser.parse_args()
    rows = []
    with postgres(args.db) as url, tempfile.TemporaryDirectory() as tmp:
        rows.append(
            (
                "SQLite, two cores on one file (polling)",
                run(f"{tmp}/w.db", args.events, args.interval),
            )
        )
        rows.append(("PostgreSQL, two cores (LISTEN/NOTIFY)", run(url, args.events, args.interval)))
    print(
        f"\n{args.events} events, one every {args.interval} s; {os.cpu_count()} CPUs, shared and loaded\n"
    )
    print("| store | delivered | p50 ms | p95 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['delivered']} | {r['p50']:.1f} | {r['p95']:.1f} | {r['max']:.1f} |")
    sqlite, pg = rows[0][1], rows[1][1]
    print(f"\nPostgreSQL p50 is {pg['p50'] / sqlite['p50']:.2f}x SQLite's (polling)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
