"""Slow and oversized clients against ``agentcore serve``, with and without ``HeadGuard``.

The user-visible win of the one uvicorn internal ``agentcore serve`` keeps
(``agentcore_starlette.serve.head_guard.HeadGuard``, see ``docs/decisions.md``), measured
against the same app under stock uvicorn (httptools, every other setting the same:
``server_options`` with ``http="httptools"``), one server after the other in one run.
Every load is local (127.0.0.1), bounded in count and time, and stops by itself.

Scenarios, each on a fresh server process:

- ``endless URL``: one connection sends a request line that never ends, as fast as it
  can, for up to ``--push-seconds`` (at most ``--push-mb`` MB): what it sent before the
  server closed the connection (socket buffers included) and the server's peak RSS; meanwhile another client's ``GET /v1/auth/verify`` p50.
- ``stalled heads``: ``--stalled`` connections each send half a request head, then
  nothing; after ``header_timeout`` + 2 s: how many the server still holds, and
  another client's requests (p50 and how many were answered 200) during the wait.
- ``at the cap``: as many stalled connections as ``max_connections``: another client's
  requests over ``header_timeout`` + 4 s, answered 200 or 503 (uvicorn's answer past
  the cap).

Run: ``python benchmarks/slow_clients.py [--stalled 200] [--max-connections 300]
[--push-seconds 10] [--push-mb 256]``; writes ``benchmarks/results/slow_clients.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "slow_clients.json"
VARIANTS = ("stock uvicorn", "agentcore serve")


def serve(db: str, port: int, variant: str) -> None:
    """Serve ``db`` on ``port``: ``agentcore serve``'s settings, or them on stock uvicorn."""
    import uvicorn

    from agentcore import AgentCore
    from agentcore_starlette import create_app
    from agentcore_starlette.serve import server_options

    core = AgentCore.open(db)
    options = server_options(core.settings)
    if variant == "stock uvicorn":
        options["http"] = "httptools"
    options["log_config"]["handlers"]["access"]["stream"] = "ext://sys.stderr"
    uvicorn.run(create_app(core), host="127.0.0.1", port=port, access_log=False, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """One server process for one scenario."""

    def __init__(self, db: str, variant: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", db, str(self.port), variant],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Prober:
    """Another client: ``GET /v1/auth/verify`` on fresh connections, in a thread."""

    def __init__(self, port: int, secret: str) -> None:
        self.request = (
            f"GET /v1/auth/verify HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}"
            "\r\nConnection: close\r\n\r\n"
        ).encode()
        self.port = port
        self.results: list[tuple[int, float]] = []  # (status or 0, milliseconds)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def one(self) -> tuple[int, float]:
        began = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                sock.sendall(self.request)
                data = b""
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
        except OSError:
            status = 0
        return status, (time.perf_counter() - began) * 1000

    def run(self) -> None:
        while not self.stopping.is_set():
            self.results.append(self.one())
            time.sleep(0.05)

    def __enter__(self) -> Prober:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    def summary(self) -> dict[str, Any]:
        ok = [ms for status, ms in self.results if status == 200]
        return {
            "requests": len(self.results),
            "answered_200": len(ok),
            "answered_503": sum(1 for status, _ in self.results if status == 503),
            "p50_ms": round(statistics.median(ok), 2) if ok else None,
        }


def stall(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each sent half a request head."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /v1/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthori")
        held.append(sock)
    return held


def still_open(held: list[socket.socket]) -> int:
    """How many of ``held`` the server has not closed (an answer it sent is read past)."""
    open_ = 0
    for sock in held:
        sock.setblocking(False)
        try:
            while sock.recv(65536):  # an answer (a 408) may come before the end of file
                pass
        except BlockingIOError:
            open_ += 1  # nothing more to read and no end of file: still open
        except OSError:
            pass  # reset: closed
    return open_


def endless_url(server: Server, secret: str, seconds: float, limit_mb: int) -> dict[str, Any]:
    sent = 0
    peak = rss_mib(server.process.pid)
    with Prober(server.port, secret) as prober:
        time.sleep(0.5)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        piece = b"a" * 65536
        began = time.monotonic()
        try:
            sock.sendall(b"GET /v1/agents?q=")
            while time.monotonic() - began < seconds and sent < limit_mb * 1024 * 1024:
                sock.sendall(piece)
                sent += len(piece)
                if sent % (4 * 1024 * 1024) == 0:
                    peak = max(peak, rss_mib(server.process.pid))
        except OSError:
            pass  # refused: the server closed the connection
        took = time.monotonic() - began
        peak = max(peak, rss_mib(server.process.pid))
        sock.close()
    return {
        "pushed_mb": round(sent / 1024 / 1024, 1),
        "seconds": round(took, 1),
        "peak_rss_mib": round(peak, 1),
        "other_client": prober.summary(),
    }


def stalled_heads(server: Server, secret: str, count: int, wait: float) -> dict[str, Any]:
    before = rss_mib(server.process.pid)
    with Prober(server.port, secret) as prober:
        held = stall(server.port, count)
        during = rss_mib(server.process.pid)
        time.sleep(wait)
        remaining = still_open(held)
    for sock in held:
        sock.close()
    return {
        "stalled": count,
        "held_after_s": wait,
        "still_held": remaining,
        "rss_mib": [round(before, 1), round(during, 1)],
        "other_client": prober.summary(),
    }


def at_the_cap(server: Server, secret: str, count: int, wait: float) -> dict[str, Any]:
    held = stall(server.port, count)
    with Prober(server.port, secret) as prober:
        time.sleep(wait)
    remaining = still_open(held)
    for sock in held:
        sock.close()
    return {"stalled": count, "still_held": remaining, "other_client": prober.summary()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stalled", type=int, default=200, help="below --max-connections")
    parser.add_argument("--max-connections", type=int, default=300)
    parser.add_argument("--push-seconds", type=float, default=10.0)
    parser.add_argument("--push-mb", type=int, default=256)
    parser.add_argument(
        "--serve", nargs=3, metavar=("DB", "PORT", "VARIANT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve:
        db, port, variant = args.serve
        serve(db, int(port), variant)
        return 0

    from agentcore import AgentCore
    from agentcore_starlette import HttpSettings

    header_timeout = HttpSettings().header_timeout
    env = {
        **os.environ,
        "AGENTCORE_MAX_CONNECTIONS": str(args.max_connections),
        # every stalled connection comes from 127.0.0.1: let it hold the whole cap, so the
        # scenarios measure the head bounds, not the share per client address
        "AGENTCORE_MAX_CONNECTIONS_PER_CLIENT": str(args.max_connections),
        "AGENTCORE_RATE_LIMIT_TEST": "1000000",
    }
    results: dict[str, dict[str, Any]] = {variant: {} for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "slow.db")
        with AgentCore.open(db, start_workers=False) as core:
            core.create_organization("bench")
            secret = core.keys.create("bench", "test", ["read"]).secret
        for variant in VARIANTS:
            for name, scenario in (
                ("endless URL", lambda s: endless_url(s, secret, args.push_seconds, args.push_mb)),
                (
                    "stalled heads",
                    lambda s: stalled_heads(s, secret, args.stalled, header_timeout + 2),
                ),
                (
                    "at the cap",
                    lambda s: at_the_cap(s, secret, args.max_connections, header_timeout + 4),
                ),
            ):
                print(f"{variant}: {name} ...", flush=True)
                server = Server(db, variant, env)
                try:
                    results[variant][name] = scenario(server)
                finally:
                    server.stop()
                print(f"  {results[variant][name]}", flush=True)

    print()
    print(
        f"header_timeout {header_timeout:g} s, max_connections {args.max_connections};"
        f" {os.cpu_count()} CPUs shared with any other work"
    )
    print()
    print("| scenario | measure | stock uvicorn | agentcore serve |")
    print("|---|---|---:|---:|")
    rows = [
        ("endless URL", "MB sent before the server closed", lambda r: r["pushed_mb"]),
        ("endless URL", "server peak RSS MiB", lambda r: r["peak_rss_mib"]),
        ("endless URL", "other client p50 ms", lambda r: r["other_client"]["p50_ms"]),
        ("stalled heads", "held after header_timeout + 2 s", lambda r: r["still_held"]),
        ("stalled heads", "other client p50 ms", lambda r: r["other_client"]["p50_ms"]),
        (
            "at the cap",
            "other client 200 / requests",
            lambda r: f"{r['other_client']['answered_200']} / {r['other_client']['requests']}",
        ),
        ("at the cap", "held after header_timeout + 4 s", lambda r: r["still_held"]),
    ]
    for scenario, measure, get in rows:
        cells = [get(results[variant][scenario]) for variant in VARIANTS]
        print(f"| {scenario} | {measure} | {cells[0]} | {cells[1]} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "slow_clients",
                "header_timeout": header_timeout,
                "max_connections": args.max_connections,
                "results": results,
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
