"""Whole-ingestion speed: docs/s through ``ws.knowledge.ingest_text``, one document per call.

The corpus is ``embedder_speed.py``'s: the SQuAD sample's paragraphs (about 700
characters, one chunk each) plus seeded shuffles of their words, ``--docs`` in all.
Each run is a fresh process on a fresh SQLite file (WAL, as ``AgentCore.open`` makes
it) with the workspace index already cached (one document ingested and one search
made first, as in a running server). It ingests the corpus one document per call
(``cold``: the embedder learns its vocabulary inside the timing, as after a start),
then the same texts again under new source names (``warm``). Parsing, chunking,
embedding, the store's transaction and the index update are all inside the timing, and
each pass ends with one search (so rows the index held back are added inside it too).

The peer is the same workload on another version of the code, by default main before
the packed term counts (``--peer 45cf151``, which stores one ``term_counts`` row per stem;
``--peer 348c4ec`` is main before term counts were stored at all, ``--peer a641ba4``
before the first round of ingestion work), extracted with ``git archive`` into a
temporary directory (a peer that still has the compiled hashing kernel's C source gets
it built, as its install did), run in the same invocation, alternating which goes first. The script
stops with an error unless both versions store identical documents, chunks, pages,
page offsets and vectors (a digest over everything but the random ids). Prints the
median docs/s of ``--runs`` runs and the ratio this ÷ peer.

``--http-docs N`` also times ``POST /v1/knowledge/documents`` (JSON text) against a
uvicorn server on a fresh file, one client, keep-alive, for both versions (for
information). ``--profile`` prints the top cumulative functions of one extra cold pass
of this checkout (``--profile-peer``: of the peer too).

Run: ``python benchmarks/ingest_speed.py [--squad PATH] [--docs 2000] [--runs 5]
[--peer REV|none] [--http-docs 0] [--profile] [--profile-peer]``.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.metadata
import io
import json
import os
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from squad_corpus import corpus  # standard library only: safe before choosing a checkout

REPO = Path(__file__).resolve().parents[1]
SQUAD_CANDIDATES = [
    REPO / ".." / "shared" / "eval" / "squad-sample.json",
    REPO / ".." / ".." / "shared" / "eval" / "squad-sample.json",  # from a worktree
]
DEFAULT_PEER = "45cf151"


def default_squad() -> Path:
    """The SQuAD sample next to the checkout (``../shared``; ``../../shared`` for worktrees)."""
    for candidate in SQUAD_CANDIDATES:
        if candidate.exists():
            return candidate.resolve()
    return SQUAD_CANDIDATES[0]


# one run, in a child process whose ``agentcore`` comes from ``--code`` -------------------


def use_code(code: Path) -> None:
    """Import ``agentcore`` from the checkout ``code``; refuse to run on another one."""
    sys.path.insert(0, str(code))
    import agentcore

    where = Path(agentcore.__file__).resolve()
    if not where.is_relative_to(code.resolve()):
        raise SystemExit(f"agentcore was imported from {where}, not from {code}")


def stored_digest(core: Any, organization_id: str, environment: str) -> str:
    """A digest of every document's source, pages and chunks (text, pages, offsets,
    vector bits), in ingestion order; ids are random and left out."""
    store = core.store
    digest = hashlib.sha256()
    dimension = core.embedders[core.settings.embedder].dimension  # any version has these
    ids, vectors = store.load_vectors(organization_id, environment, dimension)
    row_of = {int(i): n for n, i in enumerate(ids.tolist())}
    with store.db.read() as conn:
        documents = conn.execute(
            "SELECT id, source, content_type, pages, chunks, bytes, status FROM documents"
            " WHERE organization_id = ? AND environment = ? ORDER BY seq",
            [organization_id, environment],
        ).fetchall()
        for document in documents:
            digest.update(repr(tuple(document)[1:]).encode())
            chunks = conn.execute(
                "SELECT id, ordinal, text, pages, page_offsets FROM chunks"
                " WHERE document_id = ? ORDER BY ordinal",
                [document["id"]],
            ).fetchall()
            for chunk in chunks:
                digest.update(repr(tuple(chunk)[1:]).encode())
                row = row_of.get(int(chunk["id"]))
                digest.update(b"-" if row is None else vectors[row].tobytes())
    return digest.hexdigest()


def one_run(code: Path, texts: list[str], profile: bool) -> dict[str, Any]:
    """Ingest ``texts`` twice (cold, warm) into a fresh file; docs/s and a digest."""
    use_code(code)
    from agentcore import AgentCore

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ingest_speed") as tmp:
        core = AgentCore.open(str(Path(tmp) / "bench.db"), start_workers=False)
        ws = core.workspace("bench", "test")
        knowledge = ws.knowledge
        knowledge.ingest_text("warm-up.txt", "A first document, so the index is cached.")
        knowledge.search("first document")  # the index is now loaded, as in a server
        profiler = cProfile.Profile() if profile else None
        for name in ("cold", "warm"):
            if profiler is not None and name == "cold":
                profiler.enable()
            started, cpu = time.perf_counter(), time.process_time()
            for number, text in enumerate(texts):
                knowledge.ingest_text(f"{name}-{number}.txt", text)
            # one search: the index adds any rows it held back, inside the timing
            knowledge.search(texts[number][:100], top_k=1)
            out[name] = len(texts) / (time.perf_counter() - started)
            out[f"{name} cpu"] = len(texts) / (time.process_time() - cpu)
            if profiler is not None and name == "cold":
                profiler.disable()
        if not knowledge.search(texts[0][:200], top_k=1).results:
            raise SystemExit("search found nothing after ingestion")
        out["digest"] = stored_digest(core, ws.organization_id, ws.environment)
        core.close()
    if profiler is not None:
        buffer = io.StringIO()
        stats = pstats.Stats(profiler, stream=buffer)
        stats.sort_stats("cumulative").print_stats(30)
        out["profile"] = buffer.getvalue()
    return out


# the HTTP upload path -------------------------------------------------------------------


def serve(code: Path, db: str, port: int) -> None:
    """Serve ``db`` on ``port`` with the ``agentcore`` of ``code`` (a child process)."""
    use_code(code)
    import uvicorn

    from agentcore import AgentCore
    from agentcore_starlette import create_app

    # the rate limit would cap a one-client loop at 25 requests/s on a test key
    core = AgentCore.open(db, start_workers=False, rate_limit_test=1e6)
    uvicorn.run(
        create_app(core), host="127.0.0.1", port=port, access_log=False, log_level="warning"
    )


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_run(code: Path, texts: list[str]) -> float:
    """docs/s of ``POST /v1/knowledge/documents`` (JSON text), one client, keep-alive."""
    import httpx

    sys.path.insert(0, str(code))
    with tempfile.TemporaryDirectory(prefix="ingest_speed_http") as tmp:
        db = str(Path(tmp) / "bench.db")
        secret = subprocess.run(
            [sys.executable, __file__, "prepare", "--code", str(code), "--db", db],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "serve",
                "--code",
                str(code),
                "--db",
                db,
                "--port",
                str(port),
            ]
        )
        try:
            base = f"http://127.0.0.1:{port}"
            headers = {"Authorization": f"Bearer {secret}"}
            with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if client.get("/v1/auth/verify").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the server did not start")
                    time.sleep(0.1)
                client.post("/v1/knowledge/documents", json={"source": "w.txt", "text": "warm"})
                client.post("/v1/knowledge/search", json={"query": "warm"})
                started = time.perf_counter()
                for number, text in enumerate(texts):
                    answer = client.post(
                        "/v1/knowledge/documents", json={"source": f"{number}.txt", "text": text}
                    )
                    if answer.status_code != 201:
                        raise SystemExit(f"upload failed: {answer.status_code} {answer.text}")
                return len(texts) / (time.perf_counter() - started)
        finally:
            server.terminate()
            server.wait(30)


def prepare(code: Path, db: str) -> None:
    """Create the organization and a read/write key on ``db``; print the key."""
    use_code(code)
    from agentcore import AgentCore

    with AgentCore.open(db, start_workers=False) as core:
        core.create_organization("bench")
        print(core.keys.create("bench", "test", ["read", "write"]).secret)


# the parent -----------------------------------------------------------------------------


def peer_checkout(rev: str, into: Path) -> Path:
    """``rev``'s ``agentcore`` and adapter, extracted with ``git archive`` into ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "agentcore", "adapters"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    # the adapter is imported as a top-level package, as the editable install does
    shutil.copytree(into / "adapters" / "agentcore_starlette", into / "agentcore_starlette")
    # a peer from before the compiled hashing kernel was removed carries its C source:
    # build it as that version's install did, else the peer would time its numpy fallback
    for source in (into / "agentcore" / "plugins").glob("_*.c"):
        build_extension(into, source)
    # a plugin module the installed distribution declares (an entry point) but the peer
    # predates would stop the peer's core from opening: it gets an empty one
    for point in importlib.metadata.entry_points(group="agentcore"):
        for root in (into, into / "adapters"):
            module = (root / Path(*point.module.split("."))).with_suffix(".py")
            if module.parent.is_dir() and not module.exists():
                module.write_text('"""Not in this version: an empty plugin."""\n')
    return into


def build_extension(root: Path, source: Path) -> None:
    """Compile ``source`` (a C extension of ``root``'s package) in place, with the flags
    its ``setup.py`` used (IEEE float semantics: no contraction, no fast-math)."""
    module = ".".join(source.relative_to(root).with_suffix("").parts)
    script = (
        "import sys; from setuptools import Extension, setup; setup(ext_modules=[Extension("
        f"{module!r}, [{str(source.relative_to(root))!r}],"
        " extra_compile_args=['-O2', '-ffp-contract=off', '-fno-fast-math'])],"
        " script_args=['-q', 'build_ext', '--inplace', '--build-temp', sys.argv[1]])"
    )
    with tempfile.TemporaryDirectory(prefix="ingest_speed_build") as temp:
        subprocess.run([sys.executable, "-c", script, temp], cwd=root, check=True)


def run_json(command: list[str]) -> dict[str, Any]:
    """Run ``command`` (one run of a benchmark, in a fresh process); the JSON object its
    last line of output holds."""
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def child(args: list[str]) -> dict[str, Any]:
    """Run this script as a child process with ``args``; its JSON answer."""
    return run_json([sys.executable, __file__, *args])


def main(argv: list[str] | None = None) -> int:
    """Time this checkout and its peer, alternating, and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "mode", nargs="?", default="bench", choices=["bench", "run", "serve", "prepare"]
    )
    parser.add_argument("--squad", default=str(default_squad()), help="SQuAD-format JSON file")
    parser.add_argument("--docs", type=int, default=2000, help="documents per pass")
    parser.add_argument("--runs", type=int, default=5, help="runs; the median is shown")
    parser.add_argument("--peer", default=DEFAULT_PEER, help="git revision to compare, or none")
    parser.add_argument("--http-docs", type=int, default=0, help="documents over HTTP (0: skip)")
    parser.add_argument("--profile", action="store_true", help="profile one cold pass")
    parser.add_argument("--profile-peer", action="store_true", help="profile the peer too")
    parser.add_argument("--code", default=str(REPO), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    code = Path(args.code)
    if args.mode == "serve":
        serve(code, args.db, args.port)
        return 0
    if args.mode == "prepare":
        prepare(code, args.db)
        return 0
    texts = corpus(Path(args.squad), args.docs)
    if args.mode == "run":
        print(json.dumps(one_run(code, texts, args.profile)))
        return 0

    with tempfile.TemporaryDirectory(prefix="ingest_speed_peer") as tmp:
        versions = {"this": REPO}
        if args.peer != "none":
            versions["peer"] = peer_checkout(args.peer, Path(tmp))
        common = ["--squad", args.squad, "--docs", str(args.docs)]
        timings: dict[tuple[str, str], list[float]] = {}
        digests: dict[str, set[str]] = {}
        for number in range(args.runs):
            names = list(versions) if number % 2 == 0 else list(reversed(versions))
            for name in names:
                result = child(["run", "--code", str(versions[name]), *common])
                for mode in ("cold", "warm", "cold cpu", "warm cpu"):
                    timings.setdefault((name, mode), []).append(result[mode])
                digests.setdefault(name, set()).add(result["digest"])
        if any(len(found) != 1 for found in digests.values()):
            raise SystemExit("a version stored different data in different runs")
        if len({found.pop() for found in digests.values()}) != 1:
            raise SystemExit("this checkout and its peer stored different data")
        http: dict[str, float] = {}
        if args.http_docs:
            for name in versions:
                http[name] = http_run(versions[name], texts[: args.http_docs])
        profiles = {}
        if args.profile:
            for name in versions:
                if name == "this" or args.profile_peer:
                    result = child(["run", "--code", str(versions[name]), *common, "--profile"])
                    profiles[name] = result["profile"]

    chars = sum(map(len, texts)) / len(texts)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    peer = f"peer {args.peer}" if "peer" in versions else "no peer"
    print(
        f"ingest_text, one document per call, {len(texts)} docs of {chars:.0f} chars on"
        f" average, SQLite WAL file, warm index; median of {args.runs} runs; {peer}"
        f" (load average {load:.1f})\n"
    )
    header = "| pass | this docs/s |" + (
        " peer docs/s | this ÷ peer |" if "peer" in versions else ""
    )
    print(header)
    print("|---|---:|" + ("---:|---:|" if "peer" in versions else ""))
    for mode in ("cold", "warm", "cold cpu", "warm cpu"):
        this = statistics.median(timings[("this", mode)])
        line = f"| {mode} | {this:,.0f} |"
        if "peer" in versions:
            other = statistics.median(timings[("peer", mode)])
            line += f" {other:,.0f} | {this / other:.2f}× |"
        print(line)
    if http:
        line = f"| HTTP POST /v1/knowledge/documents ({args.http_docs} docs, 1 run) | {http['this']:,.0f} |"
        if "peer" in http:
            line += f" {http['peer']:,.0f} | {http['this'] / http['peer']:.2f}× |"
        print(line)
    print(
        "\n`cpu` rows: documents per second of the process's own CPU time (user + system),"
        " steadier than wall time on a loaded machine; the target is the wall-time rows."
    )
    if "peer" in versions:
        print("\nstored documents, chunks, pages, offsets and vectors: identical to the peer's")
    for name, text in profiles.items():
        print(f"\nprofile of one cold pass ({name}):\n```\n{text.strip()}\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
