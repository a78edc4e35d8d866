"""HTTP overhead of search: ``POST /v1/knowledge/search`` p50 minus in-process search p50.

For each workspace size, one temporary SQLite file holds one workspace; a real
``agentcore serve`` subprocess (the CLI, default settings, access log on, output to
/dev/null) serves it on 127.0.0.1, and this process opens its own core on the same
file. Then, in rounds, the same queries (SQuAD questions, cycled) are answered:

- ``in-process``: ``ws.knowledge.search(query, top_k=5)`` in this process;
- ``httpx``: sequential ``POST /v1/knowledge/search`` requests on one keep-alive
  ``httpx.Client`` connection (the issue's figure);
- ``http.client``: the same requests on one keep-alive stdlib ``http.client``
  connection (a lighter client: shows how much of the gap the client itself costs).

Each round runs every side once (their order rotates between rounds), so each
difference compares numbers taken seconds apart. Reported per size: p50 and p95 of
each side (median over rounds) and the overhead, ``HTTP p50 - in-process p50``
computed per round, median over rounds. Rate limits are lifted
(``AGENTCORE_RATE_LIMIT_TEST=1000000``); everything else is the CLI's default.

Sizes: up to ``--real-max`` chunks are made by the real ingestion path from the
SQuAD sample's paragraphs; larger workspaces get chunk texts cut from the same
paragraphs with random unit vectors written straight to the store (search cost
depends on rows × dimension, not on what the vectors mean).

Run: ``python benchmarks/http_overhead.py [--sizes 2000 50000] [--requests 400]
[--runs 5]``; writes ``benchmarks/results/http_overhead.json``.
``--profile`` also samples the server with ``py-spy`` (if installed) during one
extra HTTP block and prints its top functions.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shutil
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
RESULTS = REPO / "benchmarks" / "results" / "http_overhead.json"
# next to the repository (../shared), or next to the folder of git worktrees
SQUAD = next(
    (
        path
        for path in (REPO.parent / "shared", REPO.parent.parent / "shared")
        if (path / "eval" / "squad-sample.json").exists()
    ),
    REPO.parent / "shared",
) / "eval" / "squad-sample.json"
TARGET_MS = 1.0
TOP_K = 5


# data ---------------------------------------------------------------------------------


def squad() -> tuple[list[str], list[str]]:
    """The SQuAD sample's paragraphs and questions (generated text without the file)."""
    if SQUAD.exists():
        data = json.loads(SQUAD.read_text())
        contexts = [p["context"] for article in data["data"] for p in article["paragraphs"]]
        questions = [
            qa["question"]
            for article in data["data"]
            for p in article["paragraphs"]
            for qa in p["qas"]
        ]
        if contexts and questions:
            return contexts, questions
    rng = random.Random(7)
    words = "agent answer cite page source policy refund warranty invoice account".split()
    contexts = [
        " ".join(rng.choice(words) for _ in range(rng.randint(60, 120))).capitalize() + "."
        for _ in range(500)
    ]
    questions = [" ".join(rng.choice(words) for _ in range(8)) + "?" for _ in range(200)]
    return contexts, questions


def prepare(db: str, chunks: int, real_max: int) -> dict[str, Any]:
    """Organization, a read key and ~``chunks`` chunks in its test workspace."""
    import numpy as np

    from agentcore import AgentCore
    from agentcore.ids import new_id, utcnow
    from agentcore.models import Document

    contexts, _ = squad()
    rng = random.Random(11)
    started = time.perf_counter()
    with AgentCore.open(db, start_workers=False) as core:
        core.create_organization("bench")
        secret = core.keys.create("bench", "test", ["read"]).secret
        ws = core.workspace("bench", "test")
        target = core.settings.chunk_target_chars
        made = documents = 0
        if chunks <= real_max:
            how = "ingested (hashing-v1 vectors)"
            while made < chunks:
                body, size = [], 0
                while size < 40 * target:  # ~40 chunks per document
                    body.append(f"Section {documents}.{len(body)}: {rng.choice(contexts)}")
                    size += len(body[-1]) + 2
                made += ws.knowledge.ingest_text(f"doc-{documents}.txt", "\n\n".join(body)).chunks
                documents += 1
        else:
            how = "synthetic (random unit vectors, SQuAD texts)"
            embedder = core.index_cache.embedder()
            vectors_rng = np.random.default_rng(5)
            per_document = 1000
            while made < chunks:
                count = min(per_document, chunks - made)
                texts = []
                for number in range(count):
                    text = rng.choice(contexts)
                    start = rng.randrange(max(1, len(text) - target))
                    texts.append(f"Section {documents}.{number}: {text[start : start + target]}")
                vectors = vectors_rng.standard_normal((count, embedder.dimension), np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                document = Document(
                    id=new_id("doc"),
                    source=f"doc-{documents}.txt",
                    content_type="text/plain",
                    pages=1,
                    chunks=count,
                    bytes=sum(len(t) for t in texts),
                    created_at=utcnow(),
                )
                core.store.insert_document(
                    ws.organization_id,
                    ws.environment,
                    document,
                    [(text, [1], [0]) for text in texts],
                    embedder.name,
                    vectors,
                    np.ones(count, dtype=bool),
                )
                made += count
                documents += 1
    return {
        "secret": secret,
        "chunks": made,
        "documents": documents,
        "how": how,
        "prepare_seconds": round(time.perf_counter() - started, 1),
    }


# the server -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def agentcore_command() -> list[str]:
    """The installed ``agentcore`` script next to this interpreter (else ``-m``)."""
    script = Path(sys.executable).with_name("agentcore")
    if script.exists():
        return [str(script)]
    found = shutil.which("agentcore")
    return [found] if found else [sys.executable, "-m", "agentcore.cli"]


def start_server(db: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*agentcore_command(), "--db", db, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_ready(base: str, secret: str, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("agentcore serve exited")
        try:
            response = httpx.get(
                base + "/v1/auth/verify", headers={"Authorization": f"Bearer {secret}"}, timeout=1
            )
            if response.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("agentcore serve did not start")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# the three sides --------------------------------------------------------------------------


def timed(call: Callable[[str], None], queries: list[str]) -> list[float]:
    """Milliseconds of ``call(query)`` for each query, in order (after one untimed call,
    which reopens a keep-alive connection the server closed while other sides ran)."""
    call(queries[-1])
    out: list[float] = []
    clock = time.perf_counter
    for query in queries:
        began = clock()
        call(query)
        out.append((clock() - began) * 1000)
    return out


def sides(db: str, base: str, port: int, secret: str) -> tuple[dict[str, Any], Callable[[], None]]:
    """The callables of each side (each checks its answer), and a closer."""
    import httpx

    from agentcore import AgentCore

    core = AgentCore.open(db, start_workers=False)
    ws = core.authenticate(secret)  # the same key and workspace the server sees

    def in_process(query: str) -> None:
        if not ws.knowledge.search(query, top_k=TOP_K).results:
            raise RuntimeError("no results")

    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    client = httpx.Client(base_url=base, headers=headers, timeout=30)

    def via_httpx(query: str) -> None:
        response = client.post(
            "/v1/knowledge/search", content=json.dumps({"query": query, "top_k": TOP_K})
        )
        if response.status_code != 200 or not response.json()["results"]:
            raise RuntimeError(f"search answered {response.status_code}: {response.text[:200]}")

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def via_stdlib(query: str) -> None:
        try:
            send_stdlib(query)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            connection.close()  # idle past the server's keep-alive: reconnect once
            send_stdlib(query)

    def send_stdlib(query: str) -> None:
        connection.request(
            "POST",
            "/v1/knowledge/search",
            body=json.dumps({"query": query, "top_k": TOP_K}),
            headers=headers,
        )
        response = connection.getresponse()
        body = response.read()
        if response.status != 200 or not json.loads(body)["results"]:
            raise RuntimeError(f"search answered {response.status}: {body[:200]!r}")

    def close() -> None:
        client.close()
        connection.close()
        core.close()

    return {"in-process": in_process, "httpx": via_httpx, "http.client": via_stdlib}, close


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_size(chunks: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    db = str(tmp / f"overhead-{chunks}.db")
    print(f"preparing ~{chunks} chunks ...", flush=True)
    data = prepare(db, chunks, args.real_max)
    print(
        f"  {data['chunks']} chunks in {data['documents']} documents, {data['how']},"
        f" {data['prepare_seconds']} s",
        flush=True,
    )
    _, questions = squad()
    rng = random.Random(3)
    queries = [rng.choice(questions) for _ in range(args.requests)]
    env = {
        **os.environ,
        "AGENTCORE_RATE_LIMIT_TEST": "1000000",
        "AGENTCORE_RATE_LIMIT_LIVE": "1000000",
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(db, port, env)
    profile = None
    try:
        wait_ready(base, data["secret"], server)
        calls, close = sides(db, base, port, data["secret"])
        try:
            for call in calls.values():  # load the index on both sides, warm every path
                timed(call, queries[: min(50, len(queries))])
            names = list(calls)
            rounds: list[dict[str, list[float]]] = []
            for number in range(args.runs):
                order = names[number % len(names) :] + names[: number % len(names)]
                rounds.append({name: timed(calls[name], queries) for name in order})
                r = rounds[-1]
                print(
                    f"  round {number + 1}: p50 in-process {percentile(r['in-process'], 0.5):.2f}"
                    f" ms, httpx {percentile(r['httpx'], 0.5):.2f} ms,"
                    f" http.client {percentile(r['http.client'], 0.5):.2f} ms",
                    flush=True,
                )
            if args.profile:
                profile = py_spy(server.pid, lambda: timed(calls["httpx"], queries * 3))
        finally:
            close()
    finally:
        stop_server(server)
    row: dict[str, Any] = {k: data[k] for k in ("chunks", "documents", "how")}
    for name in calls:
        row[name] = {
            "p50_ms": statistics.median(percentile(r[name], 0.5) for r in rounds),
            "p95_ms": statistics.median(percentile(r[name], 0.95) for r in rounds),
        }
    for name in ("httpx", "http.client"):
        row[name]["overhead_p50_ms"] = statistics.median(
            percentile(r[name], 0.5) - percentile(r["in-process"], 0.5) for r in rounds
        )
        row[name]["overhead_p95_ms"] = statistics.median(
            percentile(r[name], 0.95) - percentile(r["in-process"], 0.95) for r in rounds
        )
        row[name]["overhead_p50_runs"] = [
            round(percentile(r[name], 0.5) - percentile(r["in-process"], 0.5), 3) for r in rounds
        ]
    if profile is not None:
        row["profile"] = profile
    return row


def py_spy(pid: int, load: Callable[[], Any]) -> str | None:
    """Sample the server with py-spy while ``load`` runs; its top functions as text."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(binary).exists():
        print("  --profile: py-spy is not installed (pip install py-spy)", flush=True)
        return None
    out = tempfile.NamedTemporaryFile(suffix=".txt", delete=False)
    out.close()
    spy = subprocess.Popen(
        [binary, "record", "-p", str(pid), "-f", "raw", "-o", out.name, "-r", "500", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    load()
    spy.send_signal(2)
    spy.wait(timeout=30)
    text = Path(out.name).read_text()
    os.unlink(out.name)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 50_000])
    parser.add_argument("--requests", type=int, default=400, help="queries per side per round")
    parser.add_argument("--runs", type=int, default=5, help="rounds (each side once per round)")
    parser.add_argument(
        "--real-max",
        type=int,
        default=5000,
        help="sizes up to this are ingested for real; larger ones get synthetic vectors",
    )
    parser.add_argument("--profile", action="store_true", help="sample the server with py-spy")
    args = parser.parse_args(argv)

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            rows.append(measure_size(size, args, Path(tmp)))

    print()
    print(
        f"{args.requests} sequential queries per side per round, median of {args.runs} rounds;"
        f" {os.cpu_count()} CPUs shared by server, client and any other work"
    )
    print()
    print(
        "| chunks | in-process p50 / p95 ms | httpx p50 / p95 ms | overhead p50 (p95) ms"
        " | http.client p50 / p95 ms | overhead p50 (p95) ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        cells = [f"{row['chunks']:,}"]
        cells.append(f"{row['in-process']['p50_ms']:.2f} / {row['in-process']['p95_ms']:.2f}")
        for name in ("httpx", "http.client"):
            side = row[name]
            cells.append(f"{side['p50_ms']:.2f} / {side['p95_ms']:.2f}")
            cells.append(f"**{side['overhead_p50_ms']:.2f}** ({side['overhead_p95_ms']:.2f})")
        print("| " + " | ".join(cells) + " |")
    print()
    for row in rows:
        overhead = row["httpx"]["overhead_p50_ms"]
        verdict = "meets" if overhead <= TARGET_MS else "misses"
        print(
            f"{row['chunks']:,} chunks ({row['how']}): httpx overhead p50 {overhead:.2f} ms"
            f" ({verdict} the {TARGET_MS:g} ms target); per round"
            f" {row['httpx']['overhead_p50_runs']}"
        )
    for row in rows:
        if row.get("profile"):
            print(f"\nserver profile at {row['chunks']:,} chunks (py-spy raw, top 25 stacks):")
            stacks = [line.rsplit(" ", 1) for line in row["profile"].splitlines() if line]
            stacks.sort(key=lambda item: -int(item[1]))
            for stack, count in stacks[:25]:
                print(f"{count:>6}  {stack[-300:]}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "http_overhead",
                "requests_per_round": args.requests,
                "rounds": args.runs,
                "top_k": TOP_K,
                "rows": [{k: v for k, v in row.items() if k != "profile"} for row in rows],
                "machine": {
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                },
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
