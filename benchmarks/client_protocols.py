"""What asking through OpenAI's and MCP's SDKs costs, beside agentcore's own routes.

A real ``agentcore serve`` subprocess (the CLI, default settings, access log to
/dev/null) serves a temporary SQLite file holding a small handbook and one agent. In
rounds, this process asks the same question (and searches the same query) through
each side in turn, the order rotating from request to request so all sides meet the
same machine load:

- ``chat/message (httpx)``: ``POST /v1/chat/message`` on one keep-alive ``httpx.Client``
  (the peer: the route every other chat side is compared with);
- ``chat/completions (httpx)``: ``POST /v1/chat/completions`` on the same client: what
  the OpenAI route adds on the server;
- ``chat/completions (openai SDK)``: ``openai.OpenAI(...).chat.completions.create``:
  what a user of the SDK sees (its own client work included);
- ``MCP chat_with_agent``: ``ClientSession.call_tool`` on one initialised session of
  the MCP SDK's streamable-HTTP client;
- ``knowledge/search (httpx)`` and ``MCP search_knowledge``: the same for a search.

Reported: p50 and p95 per side in milliseconds (median over rounds) and the p50 gap to
its peer (computed per round, median over rounds). Separately, per run on a freshly
started server: the first MCP request's time (``initialize``, which starts the SDK's
session manager and imports the SDK in the server) and the second's.

Run: ``python benchmarks/client_protocols.py [--requests 40] [--rounds 5] [--runs 3]``;
writes ``benchmarks/results/client_protocols.json``. Timings are wall clock on a
machine that may be shared: compare sides within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# the server's start, as http_overhead.py starts it
from http_overhead import agentcore_command, free_port, start_server, stop_server, wait_ready

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "client_protocols.json"
HANDBOOK = (
    "Employees get 25 vacation days per year. Unused days expire at the end of March of"
    " the following year. Submit receipts within thirty days through the finance portal."
    " The office is open from 8 am to 6 pm on weekdays; core hours are 10 am to 4 pm."
)
QUESTION = "How many vacation days do employees get?"
QUERY = "vacation days"


def prepare(db: Path) -> tuple[str, str]:
    """A store with the handbook and one agent; the test key and the agent's id."""
    from agentcore import AgentCore

    with AgentCore.open(db) as core:
        core.create_organization("bench")
        secret = core.keys.create("bench", "test", ["read", "write"]).secret
        ws = core.workspace("bench", "test")
        ws.knowledge.ingest_text("handbook.txt", HANDBOOK)
        agent = ws.agents.create(name="HR").id
    return secret, agent


def serve(db: Path, secret: str) -> tuple[subprocess.Popen[bytes], str]:
    """``agentcore serve`` on ``db`` (rate limits lifted), once it answers; its URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCORE_")}
    env.update(AGENTCORE_RATE_LIMIT_TEST="1000000", AGENTCORE_RATE_LIMIT_LIVE="1000000")
    server = start_server(agentcore_command(), str(db), port, env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, secret, server)
    except RuntimeError:
        server.kill()
        raise
    return server, base


async def measure(base: str, secret: str, agent: str, args: argparse.Namespace) -> dict[str, Any]:
    """The rounds: every side answers ``args.requests`` times per round, interleaved."""
    import httpx
    import httpx2
    import openai
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    auth = {"Authorization": f"Bearer {secret}"}
    http = httpx.Client(base_url=base + "/v1", headers=auth, timeout=30)
    sdk = openai.OpenAI(base_url=base + "/v1", api_key=secret, max_retries=0)
    ask = [{"role": "user", "content": QUESTION}]
    async with (
        httpx2.AsyncClient(headers=auth, timeout=30) as mcp_http,
        streamable_http_client(base + "/v1/mcp", http_client=mcp_http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def sync(call: Callable[[], Any]) -> Any:
            return call()

        def checked(response: httpx.Response) -> httpx.Response:
            response.raise_for_status()
            return response

        async def tool(name: str, arguments: dict[str, Any]) -> Any:
            result = await session.call_tool(name, arguments)
            assert not result.is_error, result
            return result

        sides: dict[str, tuple[str, Callable[[], Awaitable[Any]]]] = {
            "chat/message (httpx)": (
                "chat",
                lambda: sync(
                    lambda: checked(
                        http.post("/chat/message", json={"agentId": agent, "message": QUESTION})
                    )
                ),
            ),
            "chat/completions (httpx)": (
                "chat",
                lambda: sync(
                    lambda: checked(
                        http.post("/chat/completions", json={"model": agent, "messages": ask})
                    )
                ),
            ),
            "chat/completions (openai SDK)": (
                "chat",
                lambda: sync(lambda: sdk.chat.completions.create(model=agent, messages=ask)),  # type: ignore[arg-type]
            ),
            "MCP chat_with_agent": (
                "chat",
                lambda: tool("chat_with_agent", {"agent_id": agent, "message": QUESTION}),
            ),
            "knowledge/search (httpx)": (
                "search",
                lambda: sync(
                    lambda: checked(http.post("/knowledge/search", json={"query": QUERY}))
                ),
            ),
            "MCP search_knowledge": ("search", lambda: tool("search_knowledge", {"query": QUERY})),
        }
        names = list(sides)
        for name in names:  # warm every path once
            await sides[name][1]()
        rounds: list[dict[str, list[float]]] = []
        for _ in range(args.rounds):
            times: dict[str, list[float]] = {name: [] for name in names}
            for number in range(args.requests):
                order = names[number % len(names) :] + names[: number % len(names)]
                for name in order:
                    began = time.perf_counter()
                    await sides[name][1]()
                    times[name].append((time.perf_counter() - began) * 1000)
            rounds.append(times)
    http.close()
    sdk.close()
    return {"sides": {name: kind for name, (kind, _) in sides.items()}, "rounds": rounds}


async def cold_mcp(base: str, secret: str) -> tuple[float, float]:
    """Milliseconds of the first MCP exchange on a fresh server (initialize), and of a
    second session's."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    auth = {"Authorization": f"Bearer {secret}"}
    spent = []
    for _ in range(2):
        async with (
            httpx2.AsyncClient(headers=auth, timeout=60) as mcp_http,
            streamable_http_client(base + "/v1/mcp", http_client=mcp_http) as (read, write),
            ClientSession(read, write) as session,
        ):
            began = time.perf_counter()
            await session.initialize()
            spent.append((time.perf_counter() - began) * 1000)
    return spent[0], spent[1]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40, help="per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="fresh servers (cold MCP start)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="client-protocols-") as home:
        db = Path(home) / "bench.db"
        secret, agent = prepare(db)
        cold: list[tuple[float, float]] = []
        measured: dict[str, Any] = {}
        for run in range(args.runs):
            server, base = serve(db, secret)
            try:
                cold.append(asyncio.run(cold_mcp(base, secret)))
                if run == 0:
                    measured = asyncio.run(measure(base, secret, agent, args))
            finally:
                stop_server(server)
    sides: dict[str, str] = measured["sides"]
    rounds: list[dict[str, list[float]]] = measured["rounds"]
    peers = {"chat": "chat/message (httpx)", "search": "knowledge/search (httpx)"}
    rows = []
    for name, kind in sides.items():
        p50 = statistics.median(statistics.median(r[name]) for r in rounds)
        p95 = statistics.median(percentile(r[name], 0.95) for r in rounds)
        gap = statistics.median(
            statistics.median(r[name]) - statistics.median(r[peers[kind]]) for r in rounds
        )
        rows.append({"side": name, "p50_ms": p50, "p95_ms": p95, "p50_gap_ms": gap})
    print(f"\n{args.requests} requests per side per round, {args.rounds} rounds (median of rounds)")
    print(f"{'side':32} {'p50 ms':>8} {'p95 ms':>8} {'p50 - peer':>11}")
    for row in rows:
        print(
            f"{row['side']:32} {row['p50_ms']:8.2f} {row['p95_ms']:8.2f} {row['p50_gap_ms']:+11.2f}"
        )
    first = statistics.median(c[0] for c in cold)
    second = statistics.median(c[1] for c in cold)
    print(f"\nMCP initialize on a fresh server (median of {args.runs} runs):")
    print(f"  first exchange {first:8.1f} ms   (starts the session manager, imports the SDK)")
    print(f"  a second one   {second:8.1f} ms")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "requests": args.requests,
                "rounds": args.rounds,
                "rows": rows,
                "mcp_cold_ms": {"first": first, "second": second, "runs": cold},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
