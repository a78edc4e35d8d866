"""`agentcore serve` as users run it, with 1 and 2 worker processes, against one thread
searching in-process: issue 43's "8 HTTP clients" row.

Each server is the real command, `agentcore --db DB serve --port P --log-level warning
[--workers N]` (its uvicorn settings, its head guard, its default rate-limit backend),
on one temporary SQLite file of ~``--chunks`` chunks (``http_load.prepare``: the SQuAD
sample's paragraphs). The sets:

- ``serve``: the default, one process per usable CPU (at most 8; ``WEB_CONCURRENCY`` is
  unset for it) on one port, the rate-limit buckets in the file beside the database
  (``"auto"`` resolves to ``"host"`` for several processes);
- ``serve --workers 1``: one process (the default before one per CPU);
- ``serve --workers 2, store buckets``: two processes with
  ``AGENTCORE_RATE_LIMIT_BACKEND=store`` (what several processes used before the host
  file: a store write per request).

Rate limits are lifted (``AGENTCORE_RATE_LIMIT_TEST=1000000``), so the buckets are
taken but never refuse. ``wrk -t1 -c8`` (``--concurrency``) drives ``POST
/v1/knowledge/search`` (top 5) for ``--seconds`` per round, cut into ``--slice`` s
(4) slices that alternate between the sets and one thread of this process calling
``ws.knowledge.search`` (the same key and query), so a change in the machine's load
meets every side; each set's ratio is the median of the rounds'. Everything shares the
machine's CPUs: the servers, wrk, and the in-process side while it runs.

Run (needs the ``server`` extra and ``wrk``)::

    python benchmarks/serve_workers.py [--chunks 2000] [--runs 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import http_load  # noqa: E402  (the workspace, wrk and the in-process side)

from agentcore.config import usable_cpus  # noqa: E402
from agentcore_starlette.serve.command import DEFAULT_WORKERS_CAP  # noqa: E402

GOAL = 1.5  # issue 43: 8 clients on the default serve, x the in-process single thread
SETS: dict[str, tuple[int | None, dict[str, str]]] = {
    "serve (default)": (None, {}),
    "serve --workers 1": (1, {}),
    "serve --workers 2, store buckets": (2, {"AGENTCORE_RATE_LIMIT_BACKEND": "store"}),
}


def start(db: str, workers: int | None, env: dict[str, str], secret: str) -> tuple[Any, str]:
    """A real ``agentcore serve`` on a free port (``--workers`` unless ``None``: the
    default), once it answers ``secret``."""
    agentcore = shutil.which("agentcore", path=str(Path(sys.executable).parent))
    port = http_load.free_port()
    flags = [] if workers is None else ["--workers", str(workers)]
    environment = {**os.environ, "AGENTCORE_RATE_LIMIT_TEST": "1000000", **env}
    environment.pop("WEB_CONCURRENCY", None)
    process = subprocess.Popen(
        [agentcore or "agentcore", "--db", db, "serve", "--port", str(port)]
        + ["--log-level", "warning", *flags],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve --workers {workers} exited")
        try:
            headers = {"Authorization": f"Bearer {secret}"}
            if httpx.get(base + "/v1/auth/verify", headers=headers, timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"serve --workers {workers} did not answer in 60 s")


def stop(process: Any) -> None:
    process.terminate()  # SIGTERM: uvicorn stops its workers too
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="rounds")
    parser.add_argument("--seconds", type=int, default=12, help="seconds of load per set a round")
    parser.add_argument("--slice", type=int, default=4, help="seconds of each wrk run (slice)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not shutil.which("wrk"):
        parser.error("needs wrk (apt-get install wrk)")
    load_before = os.getloadavg()[0]
    rows: dict[str, dict[str, list[float]]] = {name: {"rps": [], "ratio": []} for name in SETS}
    in_process: list[float] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="serve_workers") as tmp:
        db = str(Path(tmp) / "bench.db")
        data = http_load.prepare(db, args.chunks)
        print(f"{data['chunks']} chunks in {data['documents']} documents", file=sys.stderr)
        body = json.dumps({"query": data["query"], "top_k": 5})
        headers = {"Authorization": f"Bearer {data['secret']}", "Content-Type": "application/json"}
        servers: dict[str, tuple[Any, str]] = {}
        try:
            for name, (workers, env) in SETS.items():
                servers[name] = start(db, workers, env, data["secret"])
            with http_load.InProcess(db, data) as searcher:
                for run in range(args.runs):
                    order = list(SETS)[run % len(SETS) :] + list(SETS)[: run % len(SETS)]
                    done: dict[str, list[float]] = {name: [] for name in SETS}
                    rates: list[float] = []
                    for _ in range(max(1, args.seconds // args.slice)):
                        for name in order:
                            base = servers[name][1]
                            measured = http_load.run_wrk(
                                base + "/v1/knowledge/search",
                                "POST",
                                headers,
                                body,
                                args.slice,
                                args.concurrency,
                            )
                            if measured["errors"] or measured["socket_errors"]:
                                raise RuntimeError(f"{name}: {measured}")
                            done[name].append(measured["rps"])
                        rates.append(searcher.rate(args.slice))
                    rate = statistics.mean(rates)
                    in_process.append(rate)
                    for name in SETS:
                        rps = statistics.mean(done[name])
                        rows[name]["rps"].append(rps)
                        rows[name]["ratio"].append(rps / rate)
                    loads.append(os.getloadavg()[0])
                    print(f"  round {run + 1}/{args.runs} done", file=sys.stderr)
        finally:
            for process, _ in servers.values():
                stop(process)
    one = statistics.median(rows["serve --workers 1"]["rps"])
    print(
        f"\n{data['chunks']:,} chunks, wrk -t1 -c{args.concurrency}, POST /v1/knowledge/search,"
        f" {args.runs} rounds of {args.seconds // args.slice} x {args.slice} s slices per set; in-process: one thread,"
        f" {statistics.median(in_process):,.0f}/s (median of rounds); load average"
        f" {load_before:.1f} before, {min(loads):.1f}-{max(loads):.1f} after the rounds;"
        f" {os.cpu_count()} CPUs; the default `serve` ran"
        f" {min(usable_cpus(), DEFAULT_WORKERS_CAP)} processes here\n"
    )
    print("| server | searches/s | × in-process | × one process | rounds (× in-process) |")
    print("|---|---:|---:|---:|---|")
    for name, row in rows.items():
        rps, ratio = statistics.median(row["rps"]), statistics.median(row["ratio"])
        each = ", ".join(f"{r:.2f}" for r in row["ratio"])
        print(f"| `{name}` | {rps:,.0f} | {ratio:.2f} | {rps / one:.2f} | {each} |")
    default = statistics.median(rows["serve (default)"]["ratio"])
    verdict = "met" if default >= GOAL else "NOT met"
    print(f"\ndefault `serve` × in-process: {default:.2f} (goal ≥ {GOAL}: {verdict})")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "chunks": data["chunks"],
                    "concurrency": args.concurrency,
                    "in_process_rps": in_process,
                    "sets": rows,
                    "load": {"before": load_before, "after_rounds": loads},
                    "cpus": os.cpu_count(),
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
