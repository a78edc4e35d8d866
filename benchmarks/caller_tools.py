"""Caller-run tools over HTTP: a pause and a resume next to a tool a plugin runs.

One agent with two tools, served by a real ``uvicorn`` server (a subprocess, loopback,
no access log) on ``agentcore_starlette.create_app(core)`` over a SQLite file in a
temporary directory (``--postgres URL|throwaway``: a PostgreSQL store instead). Its chat
model is scripted and trivially cheap (no retrieval hits, no text to generate), so the
figures are the server's own cost per turn:

- **plugin tool turn**: ``POST /v1/chat/message`` asking for the time; the model calls
  ``clock``, which a plugin runs in the server (``agentcore_run_tool`` returns
  ``"12:00"``), then answers. One request.
- **caller tool: pause**: ``POST /v1/chat/message`` asking for the weather; the model
  calls ``get_weather``, which no plugin runs: the answer is ``status:
  "requires_action"`` with the ``tool_calls``.
- **caller tool: resume**: ``POST /v1/chat/message`` with ``agentId``,
  ``conversationId`` and ``tool_outputs`` (no ``message``); the model answers from the
  output: ``status: "completed"``.
- **caller tool: round trip**: pause + resume, wall time per turn (two requests).

Each turn starts a fresh conversation (no ``conversationId`` on its first message) and
runs the plugin turn and the caller round trip, their order alternating from turn to
turn so both meet the same machine load; every answer is checked. All requests go
through one keep-alive ``httpx.Client``. After ``--warmup`` turns, ``--turns`` are
timed; the table shows p50 and p95 per row and each row's ratio to the plugin tool
turn (the headline: round trip / plugin tool turn). Rate limits are lifted.

Run: ``python benchmarks/caller_tools.py [--turns 200] [--warmup 20]
[--postgres URL|throwaway] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import agentcore
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall

MODEL = "scripted"
TOOLS = [
    {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {"name": "clock"},
]
TIME_QUESTION = "What time is it?"
WEATHER_QUESTION = "Weather in Paris?"
ROWS = (
    ("plugin tool turn", 1),
    ("caller tool: pause", 1),
    ("caller tool: resume", 1),
    ("caller tool: round trip", 2),
)


# the server's plugins -------------------------------------------------------------------


class ScriptedModel:
    """Calls ``clock`` when asked for the time, else ``get_weather``; then answers from
    the tool's result."""

    name = MODEL

    def complete(self, request: ChatRequest) -> ChatResult:
        if request.steps:
            return ChatResult(text=f"It is {request.steps[-1].result}.")
        if "time" in request.message:
            return ChatResult(text="", tool_calls=[ToolCall("call_c", "clock", {})])
        return ChatResult(
            text="", tool_calls=[ToolCall("call_w", "get_weather", {"city": "Paris"})]
        )

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


class ClockTool:
    """Runs ``clock``; every other tool is not a plugin's."""

    @agentcore.hookimpl
    def agentcore_run_tool(self, workspace: Any, agent_id: str, name: str, arguments: Any) -> Any:
        return "12:00" if name == "clock" else None


# the agentcore server (``caller_tools.py serve URL PORT``) --------------------------------


def open_core(url: str) -> agentcore.AgentCore:
    return agentcore.AgentCore.open(
        url,
        plugins=[ScriptedModel(), ClockTool()],
        rate_limit_test=1e6,
        rate_limit_live=1e6,
        start_workers=False,
    )


def serve(url: str, port: int, opener: Callable[[str], agentcore.AgentCore] | None = None) -> None:
    """Serve the core ``opener`` (this benchmark's ``open_core`` by default) opens on
    ``url``, on 127.0.0.1:``port``, until stopped."""
    import uvicorn

    from agentcore_starlette import create_app

    core = (opener or open_core)(url)
    try:
        uvicorn.run(
            create_app(core), host="127.0.0.1", port=port, access_log=False, log_level="warning"
        )
    finally:
        core.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("the server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()  # uvicorn shuts down gracefully; serve() then closes the core
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@contextmanager
def store(postgres: str | None) -> Iterator[str]:
    """The store URL: a SQLite file in a temporary directory, or PostgreSQL."""
    if postgres is None:
        with tempfile.TemporaryDirectory(prefix="caller-tools-") as tmp:
            yield str(Path(tmp) / "bench.db")
        return
    from throwaway_postgres import postgres as throwaway

    with throwaway(None if postgres == "throwaway" else postgres) as url:
        yield url


def run_context(args: argparse.Namespace) -> tuple[str, tuple[float, float, float]]:
    """The store the run used, and the machine's load average now."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return ("SQLite" if args.postgres is None else "PostgreSQL"), load


def print_table(
    times: dict[str, list[float]], rows: Sequence[tuple[str, Any]], args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, float]]:
    """Print the table of ``rows`` (name, requests per turn), each against the plugin
    tool turn; the p50 and p95 of each row, by name."""
    p50 = {name: percentile(times[name], 0.5) for name, _ in rows}
    p95 = {name: percentile(times[name], 0.95) for name, _ in rows}
    base = "plugin tool turn"
    kind, load = run_context(args)
    print(
        f"\nChat turns with a tool, ms ({args.turns} turns after {args.warmup} warm-up; "
        f"{kind} store; load average {load[0]:.2f}, {os.cpu_count()} CPUs)\n"
    )
    print("| case | requests/turn | p50 ms | p95 ms | p50 / plugin turn | p95 / plugin turn |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, requests in rows:
        print(
            f"| {name} | {requests} | {p50[name]:.2f} | {p95[name]:.2f} | "
            f"{p50[name] / p50[base]:.2f} | {p95[name] / p95[base]:.2f} |"
        )
    return p50, p95


def write_results(
    args: argparse.Namespace,
    benchmark: str,
    rows: Sequence[tuple[str, Any]],
    p50: dict[str, float],
    p95: dict[str, float],
    **extra: Any,
) -> None:
    """Write the run's figures to ``--json`` (if given): the table's rows, each against
    the plugin tool turn, the machine, and ``extra``."""
    if args.json is None:
        return
    base = "plugin tool turn"
    kind, load = run_context(args)
    figures = {
        "benchmark": benchmark,
        "turns": args.turns,
        "warmup": args.warmup,
        "store": kind,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": load,
        },
        "rows": [
            {
                "case": name,
                "requests_per_turn": requests if isinstance(requests, int) else None,
                "p50_ms": p50[name],
                "p95_ms": p95[name],
                "p50_ratio": p50[name] / p50[base],
                "p95_ratio": p95[name] / p95[base],
            }
            for name, requests in rows
        ],
        **extra,
    }
    args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.json}")


# measuring --------------------------------------------------------------------------------


def chat(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/chat/message", json=body)
    if response.status_code != 200:
        raise SystemExit(f"HTTP {response.status_code}: {response.text}")
    answer: dict[str, Any] = response.json()
    return answer


def plugin_turn(client: Any, agent_id: str) -> float:
    """Milliseconds of one turn whose tool a plugin runs."""
    started = time.perf_counter()
    answer = chat(client, {"agentId": agent_id, "message": TIME_QUESTION})
    took = (time.perf_counter() - started) * 1000
    if answer.get("status") != "completed" or answer.get("response") != "It is 12:00.":
        raise SystemExit(f"unexpected plugin tool answer: {answer}")
    return took


def caller_turn(client: Any, agent_id: str) -> tuple[float, float]:
    """Milliseconds of the pause and of the resume of one turn with a caller's tool."""
    started = time.perf_counter()
    paused = chat(client, {"agentId": agent_id, "message": WEATHER_QUESTION})
    pause = (time.perf_counter() - started) * 1000
    calls = paused.get("tool_calls") or []
    if paused.get("status") != "requires_action" or [c["name"] for c in calls] != ["get_weather"]:
        raise SystemExit(f"unexpected pause: {paused}")
    body = {
        "agentId": agent_id,
        "conversationId": paused["conversationId"],
        "tool_outputs": [{"tool_call_id": calls[0]["id"], "output": "sunny"}],
    }
    started = time.perf_counter()
    resumed = chat(client, body)
    resume = (time.perf_counter() - started) * 1000
    if resumed.get("status") != "completed" or resumed.get("response") != "It is sunny.":
        raise SystemExit(f"unexpected resume: {resumed}")
    return pause, resume


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(client: Any, agent_id: str, turns: int, warmup: int) -> dict[str, list[float]]:
    """Per row, the milliseconds of each timed turn (the warm-up turns are dropped)."""
    times: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    for turn in range(warmup + turns):
        if turn % 2 == 0:
            plugin = plugin_turn(client, agent_id)
            pause, resume = caller_turn(client, agent_id)
        else:
            pause, resume = caller_turn(client, agent_id)
            plugin = plugin_turn(client, agent_id)
        if turn < warmup:
            continue
        times["plugin tool turn"].append(plugin)
        times["caller tool: pause"].append(pause)
        times["caller tool: resume"].append(resume)
        times["caller tool: round trip"].append(pause + resume)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="timed turns")
    parser.add_argument("--warmup", type=int, default=20, help="untimed turns first")
    parser.add_argument(
        "--postgres", default=None, help="a PostgreSQL URL, or 'throwaway' (default: SQLite)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.turns < 1 or args.warmup < 0:
        parser.error("--turns must be at least 1 and --warmup at least 0")

    import httpx

    with store(args.postgres) as url:
        organization = "acme" if args.postgres is None else f"acme-{uuid.uuid4().hex[:8]}"
        setup = open_core(url)
        setup.create_organization(organization)
        secret = setup.keys.create(organization, "test", ["read", "write"]).secret
        setup.close()

        port = free_port()
        me = str(Path(__file__).resolve())
        server = subprocess.Popen([sys.executable, me, "serve", url, str(port)])
        try:
            wait_for(port, server)
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {secret}"},
                timeout=60,
            ) as client:
                created = client.post(
                    "/v1/agents", json={"name": "W", "model": MODEL, "tools": TOOLS}
                )
                if created.status_code != 201:
                    raise SystemExit(f"HTTP {created.status_code}: {created.text}")
                times = measure(client, created.json()["id"], args.turns, args.warmup)
        finally:
            stop_server(server)

    p50, p95 = print_table(times, ROWS, args)
    base = "plugin tool turn"
    trip = "caller tool: round trip"
    print(
        f"\nround trip / plugin tool turn: p50 {p50[trip] / p50[base]:.2f}×, "
        f"p95 {p95[trip] / p95[base]:.2f}×"
    )
    write_results(args, "caller_tools", ROWS, p50, p95)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
