"""Streaming latency: time to the first delta over HTTP next to the model's own first token.

Two models, each measured two ways:

- **model**: the chat model called directly in this process (``model.stream(request)``
  with the passages the pipeline would retrieve) until its first delta: what the model
  itself needs;
- **HTTP**: ``POST /v1/chat/message`` with ``"stream": true`` to a real ``uvicorn``
  server (a subprocess, loopback) until the first ``response.delta`` event has been
  read by an httpx + httpx-sse client (a kept-alive connection): what a user waits for.

For comparison, the last column is the time to the whole answer of the same request
without streaming. ``added = HTTP − model`` is what agentcore puts on top: auth, rate limit, body
parsing, retrieval, the conversation row, the guarded model call, SSE framing.
Target: at most 20 ms at p50.

The models: ``extractive`` (the built-in default; streams sentence by sentence) and
``openai:fake``, the built-in OpenAI-compatible provider talking to a local fake server
in another subprocess that streams chat-completion chunks with a configurable time to
first token (``--first-token-ms``) and gap between tokens.

Each run sends ``--requests`` questions per model and way (the order of the four is
rotated per run); the table shows the median over ``--runs`` of each run's p50 (and
p90). Writes ``benchmarks/results/stream_latency.json``. Run:
``python benchmarks/stream_latency.py [--runs 5] [--requests 30] [--first-token-ms 50]``.
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "stream_latency.json"
TARGET_ADDED_MS = 20.0

TEXT = """\
Employees get 25 vacation days per year. Unused vacation days expire at the end of March.
The office opens at 9 am on weekdays and closes at 6 pm. Parking in the garage is free
for staff with a badge. The cafeteria serves lunch from noon until 2 pm. Remote work is
allowed up to three days a week with the manager's approval. Expense reports are due
within 30 days of the purchase. New laptops are issued every three years. The fire drill
takes place on the first Monday of each quarter. Visitors must sign in at the reception.
"""
QUESTIONS = [
    "How many vacation days do employees get?",
    "When do unused vacation days expire?",
    "When does the office open?",
    "Is parking free for staff?",
    "When does the cafeteria serve lunch?",
    "How many days of remote work are allowed?",
    "When are expense reports due?",
    "How often are new laptops issued?",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# the fake OpenAI-compatible server (``stream_latency.py fake PORT FIRST_MS GAP_MS N``) --


def fake(port: int, first_ms: float, gap_ms: float, tokens: int) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def send_piece(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            words = [f"word{n} " for n in range(tokens - 1)] + ["end [P1]."]
            if not body.get("stream"):  # the whole answer once it is generated
                time.sleep((first_ms + gap_ms * (tokens - 1)) / 1000)
                message = {"role": "assistant", "content": "".join(words)}
                answer = json.dumps({"choices": [{"message": message}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                time.sleep(first_ms / 1000)
                for n in range(tokens):
                    if n:
                        time.sleep(gap_ms / 1000)
                    chunk = {"choices": [{"index": 0, "delta": {"content": words[n]}}]}
                    self.send_piece(f"data: {json.dumps(chunk)}\n\n".encode())
                self.send_piece(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # kept-alive connections reset when the clients exit

    server = Server(("127.0.0.1", port), Handler)
    server.serve_forever()


# the agentcore server (``stream_latency.py serve DB PORT``) ---------------------------


def serve(db: str, port: int) -> None:
    import uvicorn

    from agentcore import AgentCore
    from agentcore_starlette import create_app

    core = AgentCore.open(db, start_workers=False)
    uvicorn.run(
        create_app(core), host="127.0.0.1", port=port, access_log=False, log_level="warning"
    )


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


# measuring ----------------------------------------------------------------------------


def http_first_delta(client: Any, agent_id: str, question: str) -> float:
    """Seconds until the first ``response.delta`` event has been read (then drained)."""
    from httpx_sse import connect_sse

    body = {"agentId": agent_id, "message": question, "stream": True}
    started = time.perf_counter()
    first = None
    with connect_sse(client, "POST", "/v1/chat/message", json=body) as source:
        if source.response.status_code != 200:
            raise SystemExit(f"HTTP {source.response.status_code}: {source.response.read()!r}")
        for event in source.iter_sse():
            if event.event == "response.delta" and first is None:
                first = time.perf_counter() - started
            if event.event == "error":
                raise SystemExit(f"error event: {event.data}")
    assert first is not None, "no delta"
    return first


def http_whole_answer(client: Any, agent_id: str, question: str) -> float:
    """Seconds until the non-streaming answer has been read, for comparison."""
    started = time.perf_counter()
    response = client.post("/v1/chat/message", json={"agentId": agent_id, "message": question})
    if response.status_code != 200:
        raise SystemExit(f"HTTP {response.status_code}: {response.text}")
    return time.perf_counter() - started


def model_first_delta(model: Any, request: Any) -> float:
    """Seconds until ``model.stream(request)`` yields its first delta (then drained)."""
    started = time.perf_counter()
    first = None
    for item in model.stream(request):
        if first is None and isinstance(item, str):
            first = time.perf_counter() - started
    assert first is not None, "no delta"
    return first


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--first-token-ms", type=float, default=50.0)
    parser.add_argument("--token-gap-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=20)
    args = parser.parse_args()

    import httpx

    from agentcore import AgentCore
    from agentcore.chat import HANDOFF_SPEC
    from agentcore.chat_models import ChatRequest, Passage
    from agentcore.plugins.extractive import ExtractiveModel
    from agentcore.plugins.openai_compat import OpenAIChatModel

    tmp = Path(tempfile.mkdtemp(prefix="stream-latency-"))
    db = tmp / "bench.db"
    fake_port, server_port = free_port(), free_port()
    fake_url = f"http://127.0.0.1:{fake_port}/v1"
    env = {
        **os.environ,
        "AGENTCORE_OPENAI_BASE_URL": fake_url,
        "AGENTCORE_OPENAI_MODEL": "fake",
        "AGENTCORE_RATE_LIMIT_TEST": "1000000",
    }
    core = AgentCore.open(db, openai_base_url=fake_url, openai_model="fake")
    core.create_organization("bench")
    key = core.keys.create("bench", "test", ["read", "write"]).secret
    ws = core.workspace("bench", "test")
    ws.knowledge.ingest_text("handbook.txt", TEXT)
    agents = {
        "extractive": ws.agents.create(name="Extractive").id,
        "openai:fake": ws.agents.create(name="Fake LLM", model="openai:fake").id,
    }
    # the requests the pipeline builds, for calling the models directly
    requests: dict[str, Any] = {}
    for question in QUESTIONS:
        passages = [
            Passage(f"P{n}", chunk.text, chunk.source, chunk.pages, score, chunk.document_id)
            for n, (chunk, score) in enumerate(ws.knowledge.retrieve(question, 5), 1)
        ]
        requests[question] = (passages, question)
    core.close()

    def request_for(question: str, tools: bool) -> Any:
        passages, message = requests[question]
        return ChatRequest(
            system_prompt="",
            message=message,
            passages=passages,
            tools=[HANDOFF_SPEC] if tools else [],
            timeout=30.0,
        )

    me = str(Path(__file__).resolve())
    args_fake = [str(fake_port), str(args.first_token_ms), str(args.token_gap_ms), str(args.tokens)]
    processes = [
        subprocess.Popen([sys.executable, me, "fake", *args_fake]),
        subprocess.Popen([sys.executable, me, "serve", str(db), str(server_port)], env=env),
    ]
    try:
        wait_for(fake_port)
        wait_for(server_port)
        extractive = ExtractiveModel()
        llm = OpenAIChatModel("openai:fake", fake_url, None, "fake", timeout=30)
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{server_port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
            verify=False,
        )
        cases: dict[tuple[str, str], Callable[[str], float]] = {
            ("extractive", "model"): lambda q: model_first_delta(extractive, request_for(q, False)),
            ("extractive", "HTTP"): lambda q: http_first_delta(client, agents["extractive"], q),
            ("openai:fake", "model"): lambda q: model_first_delta(llm, request_for(q, True)),
            ("openai:fake", "HTTP"): lambda q: http_first_delta(client, agents["openai:fake"], q),
            ("extractive", "plain"): lambda q: http_whole_answer(client, agents["extractive"], q),
            ("openai:fake", "plain"): lambda q: http_whole_answer(client, agents["openai:fake"], q),
        }
        for case in cases.values():  # warm up: imports, connections, the index cache
            for question in QUESTIONS[:3]:
                case(question)
        per_run: dict[tuple[str, str], list[tuple[float, float]]] = {c: [] for c in cases}
        order = list(cases)
        for run in range(args.runs):
            rotated = order[run % len(order) :] + order[: run % len(order)]
            for case in rotated:
                times = [
                    cases[case](QUESTIONS[n % len(QUESTIONS)]) * 1000 for n in range(args.requests)
                ]
                per_run[case].append((percentile(times, 0.5), percentile(times, 0.9)))
        client.close()
        llm.close()
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)

    rows = []
    for model_name in agents:
        model_p50 = statistics.median(p50 for p50, _ in per_run[(model_name, "model")])
        model_p90 = statistics.median(p90 for _, p90 in per_run[(model_name, "model")])
        http_p50 = statistics.median(p50 for p50, _ in per_run[(model_name, "HTTP")])
        http_p90 = statistics.median(p90 for _, p90 in per_run[(model_name, "HTTP")])
        plain_p50 = statistics.median(p50 for p50, _ in per_run[(model_name, "plain")])
        rows.append(
            {
                "model": model_name,
                "http_whole_answer_p50_ms": plain_p50,
                "model_first_delta_p50_ms": model_p50,
                "model_first_delta_p90_ms": model_p90,
                "http_first_delta_p50_ms": http_p50,
                "http_first_delta_p90_ms": http_p90,
                "added_p50_ms": http_p50 - model_p50,
                "added_runs_ms": [
                    h[0] - m[0]
                    for h, m in zip(
                        per_run[(model_name, "HTTP")], per_run[(model_name, "model")], strict=True
                    )
                ],
            }
        )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    print(
        f"\nTime to first delta, ms (median over {args.runs} runs of each run's p50/p90; "
        f"{args.requests} requests per run; fake LLM first token {args.first_token_ms:g} ms; "
        f"load average {load[0]:.2f}, {os.cpu_count()} CPUs)\n"
    )
    print(
        "| model | model p50 | model p90 | HTTP p50 | HTTP p90 | added p50 | target "
        "| whole answer, not streamed, p50 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        ok = "met" if row["added_p50_ms"] <= TARGET_ADDED_MS else "missed"
        print(
            f"| {row['model']} | {row['model_first_delta_p50_ms']:.2f} | "
            f"{row['model_first_delta_p90_ms']:.2f} | {row['http_first_delta_p50_ms']:.2f} | "
            f"{row['http_first_delta_p90_ms']:.2f} | {row['added_p50_ms']:.2f} | "
            f"≤ {TARGET_ADDED_MS:g} ms {ok} | {row['http_whole_answer_p50_ms']:.2f} |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "args": vars(args),
                "machine": {
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "load_average": load,
                },
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fake":
        fake(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
