"""HTTP overhead of search: ``POST /v1/knowledge/search`` p50 minus in-process search p50.

For each workspace size, one temporary SQLite file holds one workspace; a real
``agentcore serve`` subprocess (the CLI, default settings, access log on, output to
/dev/null) serves it on 127.0.0.1, and this process opens its own core on the same
file. Then, in rounds, the same queries (SQuAD questions, cycled) are answered:

- ``in-process``: ``ws.knowledge.search(query, top_k=5)`` in this process;
- ``socket``: sequential ``POST /v1/knowledge/search`` requests on one keep-alive
  connection by ``ThinClient``, the least a correct HTTP/1.1 client does, written
  with a plain socket (the headline figure: its own CPU is a small part of the gap,
  which is then mostly the server's and the network's);
- ``http.client``: the same requests on one keep-alive stdlib ``http.client``
  connection (its header parsing through the ``email`` package costs it about 2.5
  times the thin client's CPU per request);
- ``httpx``: the same on one keep-alive ``httpx.Client`` connection (a heavier client
  still: its own per-request CPU, about three times http.client's, is part of its
  gap).

All three send the JSON body as bytes encoded once per query and read the answer
with ``json.loads``.

The framework floor: the same three clients also talk to a bare Starlette route
(``benchmarks/bare_route.py``: read the body, ``json.loads`` it, answer a real search
answer's bytes) under the same uvicorn settings as ``agentcore serve``
(``agentcore_starlette.serve.server_options``), in the same rounds. ``HTTP p50 -
in-process p50 - floor p50`` (per round, median of rounds) is what agentcore adds
beyond the framework; the server's CPU per search beyond the search and beyond the
floor's CPU per request is reported too.

In each round every query is answered by every side in turn (the order rotating
from query to query), so all sides meet the same machine load at the same moments.
Reported per size: p50 and p95 of each side (median over rounds); the overhead,
``HTTP p50 - in-process p50`` computed per round, median over rounds; and CPU
milliseconds per query (the server process's over the round, per request it served
with all its clients together; this process's per call), which stay steady when other
work makes wall times noisy. Rate limits are lifted
(``AGENTCORE_RATE_LIMIT_TEST=1000000``); everything else is the CLI's default.

Sizes: up to ``--real-max`` chunks are made by the real ingestion path from the
SQuAD sample's paragraphs; larger workspaces get chunk texts cut from the same
paragraphs with random unit vectors written straight to the store (search cost
depends on rows × dimension, not on what the vectors mean).

Run: ``python benchmarks/http_overhead.py [--sizes 2000 50000] [--requests 400]
[--runs 5] [--blas-threads 1] [--baseline CMD] [--profile] [--no-floor]``; writes
``benchmarks/results/http_overhead.json``. ``--baseline CMD`` serves the same file
with another ``agentcore`` command too (e.g. the script in a virtualenv of an older
checkout) and measures it in the same rounds, so before/after compare like for like.
``--profile`` samples the server with ``py-spy`` (if installed) during one extra
block of httpx requests and prints where its time goes.
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
SQUAD = (
    next(
        (
            path
            for path in (REPO.parent / "shared", REPO.parent.parent / "shared")
            if (path / "eval" / "squad-sample.json").exists()
        ),
        REPO.parent / "shared",
    )
    / "eval"
    / "squad-sample.json"
)
TARGET_MS = 1.0
BEYOND_FLOOR_TARGET_MS = 0.5  # issue 24: what agentcore adds beyond the bare route, httpx
SERVER_CPU_TARGET_MS = 0.3  # issue 24: server CPU per search beyond the search itself
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
    words = ["agent", "answer", "cite", "page", "source", "policy", "refund", "invoice"]
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
    from agentcore._ids import new_id, utcnow
    from agentcore.schema import Document

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
            embedder = core.embedding.embedder()
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


def start_server(
    command: list[str], db: str, port: int, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``<command> --db DB serve --port PORT`` with the access log going nowhere."""
    return subprocess.Popen(
        [*command, "--db", db, "serve", "--port", str(port)],
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


def start_floor(answer: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``benchmarks/bare_route.py`` answering ``answer``'s bytes, access log to nowhere."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "bare_route.py"), "--port", str(port)]
        + ["--answer", str(answer)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_floor_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("the bare route's server exited")
        try:
            if httpx.post(base + "/v1/knowledge/search", content=b"{}", timeout=1).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the bare route's server did not start")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# the three sides --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(call: Callable[[str], None], queries: list[str]) -> list[float]:
    """Milliseconds of ``call(query)`` for each query, in order (warming up, profiling)."""
    out: list[float] = []
    clock = time.perf_counter
    for query in queries:
        began = clock()
        call(query)
        out.append((clock() - began) * 1000)
    return out


Side = tuple[Callable[[str], None], int | None]  # the call, and its server's pid


def interleaved(sides: dict[str, Side], queries: list[str], turn: int) -> dict[str, Any]:
    """One round: each query is answered by every side in turn, so all sides meet the
    same machine load at the same moments (their order rotates with the query).

    Per side: the milliseconds of each call, and the CPU milliseconds per call of this
    process and of its server process. CPU time barely moves when other work shares
    the machine, wall time does: the CPU figures show what each side costs even when
    the latencies are noisy. A server's CPU is read from ``/proc`` over the whole round
    and divided by the requests it served (all its clients'), so work it does after a
    response has left (the access line, uvicorn's bookkeeping) counts too, however the
    next call in the rotation overlaps it; ``server_cpu_ms`` is thus one figure per
    server, the same for all of its clients.
    """
    names = list(sides)
    ms: dict[str, list[float]] = {name: [] for name in names}
    own_cpu = dict.fromkeys(names, 0.0)
    pids = {pid for _, pid in sides.values() if pid}
    served = {pid: sum(1 for _, p in sides.values() if p == pid) * len(queries) for pid in pids}
    started = {pid: cpu_seconds(pid) for pid in pids}
    clock, cpu = time.perf_counter, time.process_time
    for number, query in enumerate(queries):
        shift = (number + turn) % len(names)
        for name in names[shift:] + names[:shift]:
            call, _ = sides[name]
            own = cpu()
            began = clock()
            call(query)
            took = clock() - began
            own_cpu[name] += cpu() - own
            ms[name].append(took * 1000)
    per_request = {pid: (cpu_seconds(pid) - started[pid]) / served[pid] for pid in pids}
    return {
        name: {
            "ms": ms[name],
            "client_cpu_ms": own_cpu[name] * 1000 / len(queries),
            "server_cpu_ms": per_request[pid] * 1000 if pid else 0.0,
        }
        for name, (_, pid) in sides.items()
    }


def in_process_side(db: str, secret: str) -> tuple[Callable[[str], None], Callable[[], None]]:
    """``ws.knowledge.search`` in this process, through the same key; and a closer."""
    from agentcore import AgentCore

    core = AgentCore.open(db, start_workers=False)
    ws = core.authenticate(secret)  # the same key and workspace the server sees

    def search(query: str) -> None:
        if not ws.knowledge.search(query, top_k=TOP_K).results:
            raise RuntimeError("no results")

    return search, core.close


def search_answer(db: str, secret: str, query: str) -> bytes:
    """A real search answer's JSON bytes (what the API sends for ``query``)."""
    from agentcore import AgentCore

    with AgentCore.open(db, start_workers=False) as core:
        answer = core.authenticate(secret).knowledge.search(query, top_k=TOP_K)
        return answer.model_dump_json().encode()


def http_sides(
    port: int, secret: str
) -> tuple[Callable[[str], None], Callable[[str], None], Callable[[str], None], Callable[[], None]]:
    """Search over keep-alive ``httpx``, ``http.client`` and ``ThinClient`` connections;
    and a closer."""
    import httpx

    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30)

    def via_httpx(query: str) -> None:
        response = client.post(
            "/v1/knowledge/search", content=json.dumps({"query": query, "top_k": TOP_K}).encode()
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
            body=json.dumps({"query": query, "top_k": TOP_K}).encode(),
            headers=headers,
        )
        response = connection.getresponse()
        body = response.read()
        if response.status != 200 or not json.loads(body)["results"]:
            raise RuntimeError(f"search answered {response.status}: {body[:200]!r}")

    thin = ThinClient(port, headers)

    def via_socket(query: str) -> None:
        status, body = thin.post(
            "/v1/knowledge/search", json.dumps({"query": query, "top_k": TOP_K}).encode()
        )
        if status != 200 or not json.loads(body)["results"]:
            raise RuntimeError(f"search answered {status}: {body[:200]!r}")

    def close() -> None:
        client.close()
        connection.close()
        thin.close()

    return via_httpx, via_stdlib, via_socket, close


class ThinClient:
    """The least work a correct HTTP/1.1 client does for one request on a keep-alive
    connection, written out with a plain socket: the request line, headers and body in
    one ``sendall``; then the status line and every header line of the answer parsed
    (``Content-Length`` and ``Connection`` read, a chunked or length-less answer
    refused), exactly ``Content-Length`` body bytes read, and the body decoded with
    ``json.loads`` by the caller, as the other clients' callers do.

    It skips nothing the protocol asks of a client; what it skips is the general
    machinery of the stdlib's ``http.client`` (which parses headers with the ``email``
    package into a message object) and of ``httpx`` (URL and header models, h11):
    costs of those libraries, not of talking HTTP to this server.
    """

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port = port
        self.fixed = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.sock: socket.socket | None = None
        self.buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buffer = sock, b""
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``POST path`` with a JSON ``body``: the status and the answer's body."""
        request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{self.fixed}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        fresh = self.sock is None
        sock = self.sock or self._connect()
        try:
            sock.sendall(request)
            return self._answer(sock)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            if fresh:
                raise
            self.close()  # idle past the server's keep-alive: reconnect once
            sock = self._connect()
            sock.sendall(request)
            return self._answer(sock)

    def _answer(self, sock: socket.socket) -> tuple[int, bytes]:
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        while end < 0:
            more = sock.recv(65536)
            if not more:
                raise EOFError("the server closed the connection")
            buffer += more
            end = buffer.find(b"\r\n\r\n")
        lines = buffer[:end].decode("latin-1").split("\r\n")
        version, status, _ = (lines[0] + " ").split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise RuntimeError(f"not an HTTP/1.x answer: {lines[0]!r}")
        length = None
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                raise RuntimeError("a chunked answer: not expected from this server")
            elif name == "connection":
                close = value.strip().lower() == "close"
        if length is None:
            raise RuntimeError("an answer without Content-Length")
        start = end + 4
        while len(buffer) < start + length:
            more = sock.recv(65536)
            if not more:
                raise EOFError("the server closed the connection mid-answer")
            buffer += more
        self.buffer = buffer[start + length :]
        if close:
            self.close()
        return int(status), buffer[start : start + length]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


HTTP_SIDES = ("socket", "http.client", "httpx")


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
    commands = {"": agentcore_command()}
    if args.baseline:
        commands["baseline "] = args.baseline.split()
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    closers: list[Callable[[], None]] = []
    profile = None
    try:
        for label, command in commands.items():
            port = free_port()
            servers[label] = (start_server(command, db, port, env), port)
        if not args.no_floor:
            answer = tmp / f"answer-{chunks}.json"
            answer.write_bytes(search_answer(db, data["secret"], queries[0]))
            port = free_port()
            servers["floor "] = (start_floor(answer, port, env), port)
        for label, (server, port) in servers.items():
            if label == "floor ":
                wait_floor_ready(f"http://127.0.0.1:{port}", server)
            else:
                wait_ready(f"http://127.0.0.1:{port}", data["secret"], server)
        search, close = in_process_side(db, data["secret"])
        closers.append(close)
        sides: dict[str, Side] = {"in-process": (search, None)}
        for label, (server, port) in servers.items():
            via_httpx, via_stdlib, via_socket, close = http_sides(port, data["secret"])
            closers.append(close)
            sides[f"{label}httpx"] = (via_httpx, server.pid)
            sides[f"{label}http.client"] = (via_stdlib, server.pid)
            sides[f"{label}socket"] = (via_socket, server.pid)
        for call, _ in sides.values():  # load the index on every side, warm every path
            timed(call, queries[: min(50, len(queries))])
        rounds: list[dict[str, Any]] = []
        for number in range(args.runs):
            rounds.append(interleaved(sides, queries, number))
            print(
                f"  round {number + 1}: p50 "
                + ", ".join(
                    f"{name} {percentile(rounds[-1][name]['ms'], 0.5):.2f} ms" for name in sides
                ),
                flush=True,
            )
        if args.profile:
            server, _ = servers[""]
            profile = py_spy(server.pid, lambda: timed(sides["httpx"][0], queries * 3))
    finally:
        for close in closers:
            close()
        for server, _ in servers.values():
            stop_server(server)
    row: dict[str, Any] = {k: data[k] for k in ("chunks", "documents", "how")}
    for name in sides:
        row[name] = {
            "p50_ms": statistics.median(percentile(r[name]["ms"], 0.5) for r in rounds),
            "p95_ms": statistics.median(percentile(r[name]["ms"], 0.95) for r in rounds),
            "client_cpu_ms": statistics.median(r[name]["client_cpu_ms"] for r in rounds),
            "server_cpu_ms": statistics.median(r[name]["server_cpu_ms"] for r in rounds),
        }
    for name in sides:
        if name == "in-process":
            continue

        def gap(r: dict[str, Any], q: float, side: str = name) -> float:
            return percentile(r[side]["ms"], q) - percentile(r["in-process"]["ms"], q)

        row[name]["overhead_p50_ms"] = statistics.median(gap(r, 0.5) for r in rounds)
        row[name]["overhead_p95_ms"] = statistics.median(gap(r, 0.95) for r in rounds)
        row[name]["overhead_p50_runs"] = [round(gap(r, 0.5), 3) for r in rounds]
        # the server's CPU per request beyond what the same search costs in-process
        row[name]["server_cpu_overhead_ms"] = statistics.median(
            r[name]["server_cpu_ms"] - r["in-process"]["client_cpu_ms"] for r in rounds
        )
        client = name.rsplit(" ", 1)[-1]
        floor = f"floor {client}"
        if floor in sides and name != floor:

            def beyond(r: dict[str, Any], side: str = name, floor: str = floor) -> float:
                return gap(r, 0.5, side) - percentile(r[floor]["ms"], 0.5)

            row[name]["beyond_floor_p50_ms"] = statistics.median(beyond(r) for r in rounds)
            row[name]["beyond_floor_p50_runs"] = [round(beyond(r), 3) for r in rounds]
            row[name]["server_cpu_beyond_floor_ms"] = statistics.median(
                r[name]["server_cpu_ms"]
                - r["in-process"]["client_cpu_ms"]
                - r[floor]["server_cpu_ms"]
                for r in rounds
            )
    row["sides"] = [name for name in sides if name != "in-process"]
    if profile is not None:
        row["profile"] = profile
    return row


def py_spy(pid: int, load: Callable[[], Any]) -> str | None:
    """Sample the server with py-spy while ``load`` runs; its top functions as text."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(binary).exists():
        print("  --profile: py-spy is not installed (pip install py-spy)", flush=True)
        return None
    with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as out:
        pass  # py-spy writes it
    spy = subprocess.Popen(
        [
            binary,
            "record",
            "-p",
            str(pid),
            "-f",
            "raw",
            "-o",
            out.name,
            "-r",
            "500",
            "--nonblocking",
            "--gil",
        ],
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


def print_profile(chunks: int, raw: str, top: int = 30) -> None:
    """py-spy's raw stacks as two tables: time by leaf (self) and by function (inclusive)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        frames = stack.split(";")
        total += samples
        own[frames[-1]] = own.get(frames[-1], 0) + samples
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + samples
    for title, table in (("self", own), ("inclusive", inclusive)):
        print(f"\nserver profile at {chunks:,} chunks, {title} (% of {total} samples):")
        for frame, samples in sorted(table.items(), key=lambda item: -item[1])[:top]:
            print(f"{100 * samples / total:6.1f}%  {frame}")


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
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads of both sides (OPENBLAS/OMP/MKL_NUM_THREADS; default 1: a search"
        " here is one small BLAS call, and idle BLAS threads spinning on a shared machine"
        " swamp both sides' figures); 0 keeps the library's default",
    )
    parser.add_argument("--profile", action="store_true", help="sample the server with py-spy")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the bare Starlette route (the floor)"
    )
    parser.add_argument(
        "--baseline",
        help="another server command measured in the same run, e.g. the agentcore script"
        " of another checkout's virtualenv ('/tmp/base/.venv/bin/agentcore'); its sides"
        " are labelled 'baseline'",
    )
    args = parser.parse_args(argv)
    if args.blas_threads:  # before numpy loads here; the servers inherit it
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.blas_threads)

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            rows.append(measure_size(size, args, Path(tmp)))

    print()
    print(
        f"{args.requests} sequential queries per side per round, median of {args.runs} rounds;"
        f" BLAS threads {args.blas_threads or 'default'};"
        f" {os.cpu_count()} CPUs shared by server, client and any other work"
    )
    print()
    print(
        "| chunks | side | p50 / p95 ms | overhead p50 (p95) ms | beyond the floor p50 ms"
        " | server CPU ms/query (beyond the search; beyond it and the floor)"
        " | client CPU ms/query |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        side = row["in-process"]
        print(
            f"| {row['chunks']:,} | in-process | {side['p50_ms']:.2f} / {side['p95_ms']:.2f}"
            f" | - | - | - | {side['client_cpu_ms']:.2f} |"
        )
        for name in row["sides"]:
            side = row[name]
            if name.startswith("floor "):  # the bare route: its own latency and CPU
                print(
                    f"| {row['chunks']:,} | {name} (bare route) | {side['p50_ms']:.2f} /"
                    f" {side['p95_ms']:.2f} | - | - | {side['server_cpu_ms']:.2f}"
                    f" | {side['client_cpu_ms']:.2f} |"
                )
                continue
            beyond = side.get("beyond_floor_p50_ms")
            cpu_beyond = side.get("server_cpu_beyond_floor_ms")
            print(
                f"| {row['chunks']:,} | {name} | {side['p50_ms']:.2f} / {side['p95_ms']:.2f}"
                f" | **{side['overhead_p50_ms']:.2f}** ({side['overhead_p95_ms']:.2f})"
                f" | {'-' if beyond is None else f'**{beyond:.2f}**'}"
                f" | {side['server_cpu_ms']:.2f} ({side['server_cpu_overhead_ms']:.2f};"
                f" {'-' if cpu_beyond is None else f'{cpu_beyond:.2f}'})"
                f" | {side['client_cpu_ms']:.2f} |"
            )
    print(
        "\n(overhead: HTTP minus in-process, per round, median of rounds; beyond the floor:"
        " that minus the bare route's p50 with the same client; CPU: the server process's"
        " over the round per request it served (all clients), and this process's per call;"
        " in-process CPU is the search itself)"
    )
    print()
    for row in rows:
        print(f"{row['chunks']:,} chunks ({row['how']}):")
        for name in HTTP_SIDES:  # the headline first: the thin client (README says why)
            overhead = row[name]["overhead_p50_ms"]
            verdict = "meets" if overhead <= TARGET_MS else "misses"
            print(
                f"  {name}: overhead p50 {overhead:.2f} ms ({verdict} the {TARGET_MS:g} ms"
                f" target); per round {row[name]['overhead_p50_runs']}; the client's own CPU"
                f" {row[name]['client_cpu_ms']:.2f} ms per request"
            )
            if "beyond_floor_p50_ms" in row[name]:
                beyond = row[name]["beyond_floor_p50_ms"]
                line = f"    beyond the bare route: {beyond:.2f} ms"
                if name == "httpx":
                    verdict = "meets" if beyond <= BEYOND_FLOOR_TARGET_MS else "misses"
                    line += f" ({verdict} the {BEYOND_FLOOR_TARGET_MS:g} ms target)"
                print(f"{line}; per round {row[name]['beyond_floor_p50_runs']}")
            if f"baseline {name}" in row:
                before = row[f"baseline {name}"]
                line = (
                    f"    baseline in the same run: overhead p50"
                    f" {before['overhead_p50_ms']:.2f} -> {overhead:.2f} ms; server CPU beyond"
                    f" the search {before['server_cpu_overhead_ms']:.2f} ->"
                    f" {row[name]['server_cpu_overhead_ms']:.2f} ms per query"
                )
                if "beyond_floor_p50_ms" in before:
                    line += (
                        f"; beyond the bare route {before['beyond_floor_p50_ms']:.2f} ->"
                        f" {row[name]['beyond_floor_p50_ms']:.2f} ms"
                    )
                print(line)
        cpu = row["httpx"]["server_cpu_overhead_ms"]
        verdict = "meets" if cpu <= SERVER_CPU_TARGET_MS else "misses"
        print(
            f"  server CPU per search beyond the search: {cpu:.2f} ms ({verdict} the"
            f" {SERVER_CPU_TARGET_MS:g} ms target)"
            + (
                f"; beyond the search and the bare route's CPU per request:"
                f" {row['httpx']['server_cpu_beyond_floor_ms']:.2f} ms"
                if "server_cpu_beyond_floor_ms" in row["httpx"]
                else ""
            )
        )
    for row in rows:
        if row.get("profile"):
            print_profile(row["chunks"], row["profile"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "http_overhead",
                "requests_per_round": args.requests,
                "rounds": args.runs,
                "top_k": TOP_K,
                "blas_threads": args.blas_threads,
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
