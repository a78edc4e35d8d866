"""Webhook delivery throughput and latency, end to end on one machine.

A fast local receiver (answers 200 at once, keep-alive) listens on 127.0.0.1; a core
on a temporary SQLite file runs its delivery worker; one subscription in one
workspace; the benchmark publishes N ``agent.action`` events from one thread (each
publish commits the event and its delivery before returning) while the worker
delivers them, in two modes: *burst* (back to back: measures throughput, and the
latency is mostly queueing) and *paced* (``--rate`` events a second, below capacity:
measures the real-time latency of one delivery).

    throughput = N / (last receipt - first publish)          deliveries per second
    latency    = receipt time - publish-return time, per event (webhook-id = event id)

Prints a Markdown table (median of the runs) and writes
``benchmarks/results/webhook_throughput.json``. Run:
``python benchmarks/webhook_throughput.py [--events 2000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "webhook_throughput.json"
for extra in (REPO, REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from webhook_receiver import Receiver  # noqa: E402

from agentcore import AgentCore  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def one_run(events: int, timeout: float, rate: float = 0.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, Receiver() as receiver:
        core = AgentCore.open(Path(tmp) / "bench.db", webhook_allowed_networks="127.0.0.0/8")
        try:
            ws = core.workspace("bench", "test")
            ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
            core.start()
            published: dict[str, float] = {}
            first = time.monotonic()
            for number in range(events):
                if rate:
                    time.sleep(max(0.0, first + number / rate - time.monotonic()))
                event = ws.publish("agent.action", {"n": number, "action": "reply.sent"})
                published[event.id] = time.monotonic()
            publish_done = time.monotonic()
            complete = receiver.wait_for_ids(events, timeout=timeout)
            seen = receiver.requests()
        finally:
            core.close()
    first_receipt: dict[str, float] = {}
    for request in seen:
        first_receipt.setdefault(request.webhook_id, request.at)
    latencies = [
        (first_receipt[eid] - at) * 1000 for eid, at in published.items() if eid in first_receipt
    ]
    last = max(first_receipt.values()) if first_receipt else time.monotonic()
    return {
        "events": events,
        "delivered": len(first_receipt),
        "requests": len(seen),
        "complete": complete,
        "publish_seconds": publish_done - first,
        "publish_per_second": events / (publish_done - first),
        "total_seconds": last - first,
        "deliveries_per_second": len(first_receipt) / (last - first),
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p95": percentile(latencies, 95),
        "latency_ms_max": max(latencies) if latencies else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0, help="events/s of the paced mode")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per run, at most")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    modes = {"burst": 0.0, f"paced {args.rate:g}/s": args.rate}
    runs: dict[str, list[dict[str, Any]]] = {}
    for mode, rate in modes.items():
        events = args.events if not rate else min(args.events, int(rate * 10))
        runs[mode] = []
        for number in range(1, args.runs + 1):
            result = one_run(events, args.timeout, rate)
            runs[mode].append(result)
            print(
                f"{mode} run {number}: {result['deliveries_per_second']:.0f} deliveries/s,"
                f" p50 {result['latency_ms_p50']:.1f} ms, p95 {result['latency_ms_p95']:.1f} ms"
                f" ({result['delivered']}/{result['events']} delivered)",
                file=sys.stderr,
            )
    keys = [
        "events",
        "deliveries_per_second",
        "publish_per_second",
        "latency_ms_p50",
        "latency_ms_p95",
        "latency_ms_max",
        "total_seconds",
    ]
    median = {
        mode: {key: statistics.median(run[key] for run in mode_runs) for key in keys}
        for mode, mode_runs in runs.items()
    }
    all_delivered = all(run["complete"] for mode_runs in runs.values() for run in mode_runs)
    print(f"\nWebhook delivery: 1 subscription, median of {args.runs} runs per mode\n")
    print("| metric | " + " | ".join(modes) + " |")
    print("|---|" + "---:|" * len(modes))
    labels = {
        "events": "events published",
        "deliveries_per_second": "deliveries / s (first publish → last receipt)",
        "publish_per_second": "publishes / s (event + delivery committed)",
        "latency_ms_p50": "event → delivery latency p50 (ms)",
        "latency_ms_p95": "event → delivery latency p95 (ms)",
        "latency_ms_max": "event → delivery latency max (ms)",
        "total_seconds": "wall time (s)",
    }
    for key in keys:
        cells = " | ".join(f"{median[mode][key]:.1f}" for mode in modes)
        print(f"| {labels[key]} | {cells} |")
    print(
        f"| every event delivered | {'yes' if all_delivered else 'NO'} |" + " |" * (len(modes) - 1)
    )
    report = {
        "benchmark": "webhook_throughput",
        "events": args.events,
        "runs": runs,
        "median": median,
        "all_delivered": all_delivered,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.output}", file=sys.stderr)
    return 0 if all_delivered else 1


if __name__ == "__main__":
    raise SystemExit(main())
