"""Many tenants on one node: memory, file handles and latency of touching N small workspaces.

A host that serves many organizations touches many small workspaces. This script
creates ``--tenants`` organizations through the Python API (``core.workspace(name)``
and ``ws.knowledge.ingest_text``), one document of about ``--chunks`` chunks each, and
one large workspace of ``--big-chunks`` chunks (documents of ``--chunks`` chunks). The
vectors come from a deterministic benchmark embedder of ``--dim`` dimensions (random
unit vectors seeded by each text's digest): the cost of an index depends on its rows
and dimension, not on what the vectors mean, and the real embedders would make the
build take hours.

Then, for each store (SQLite file, PostgreSQL) and each ``index_dir`` (``off``: every
index in RAM; ``auto``/a directory: memory-mapped segment files), a fresh process opens
a core, searches one workspace (imports, embedder, caches warm), records its resident
and virtual memory, open files and memory mappings, and then searches every
workspace once (``sweep``). Two caches are measured in the same run:

- ``budget``: ``index_cache_bytes = --budget-mib`` MiB;
- ``unbounded``: the peer, ``index_cache_bytes`` larger than every index together
  (what every process did before the budget).

Per row: RSS growth over the sweep (``VmRSS`` after minus before, MiB; the process
keeps nothing else per tenant but what the sweep loaded), virtual memory growth, open
files and memory mappings after the sweep; the first search of each workspace (p50 and
p95 of the sweep: a load from the store or the segment files); the first search of a
workspace evicted by the budget (``--evicted`` of the earliest ones searched again
after the sweep; under ``unbounded`` they are still cached); and a cached search (p50
of ``--cached`` searches of the most recently used workspaces). The large workspace's
first search is measured in a fresh process with its segment files written (``auto``)
and from the store alone (``off``): its time, the CPU time the process spent on it
(all threads; steadier than the time on a loaded machine) and its RSS growth; with
``--peer-code DIR`` also with the code checked out in ``DIR`` (e.g. ``git worktree add
DIR <commit>``), alternating with this code's, on the same data.

Run: ``python benchmarks/many_tenants.py [--tenants 10000] [--chunks 40] [--dim 384]
[--budget-mib 32] [--stores sqlite,postgres] [--index-dirs off,auto] [--big-chunks
100000] [--runs 3] [--data DIR] [--postgres URL] [--peer-code DIR]``. Each row is the
median of ``--runs`` fresh processes. The databases are built once into ``--data`` (default a temporary
directory; give one to reuse a SQLite file or a ``--postgres`` database between runs: one
whose parameters match is not built again; a throwaway PostgreSQL is built every time).
The build's documents per second (tenants and the large workspace, ``wait=True``) are
printed per store. Writes ``benchmarks/results/many_tenants.json``.
Timings are noisy on a shared machine; memory, file and mapping counts are not.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
# the agentcore measured: this checkout's, or a peer's (a child run for --peer-code)
CODE = Path(os.environ.get("MANY_TENANTS_CODE", REPO))
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(REPO / "benchmarks"))
RESULTS = REPO / "benchmarks" / "results" / "many_tenants.json"
ENV = "test"
BIG = "big-tenant"
QUERY = "how are the quarterly numbers reported to the board"

from bench_embedder import BenchPlugin  # noqa: E402

from agentcore import AgentCore  # noqa: E402

WORDS = [
    "the",
    "report",
    "covers",
    "revenue",
    "margins",
    "staff",
    "policy",
    "travel",
    "security",
    "onboarding",
    "laptop",
    "password",
    "rotation",
    "backup",
    "schedule",
    "incident",
    "review",
    "quarterly",
    "board",
    "budget",
    "vendor",
    "contract",
    "renewal",
    "holiday",
    "leave",
    "expense",
    "approval",
    "audit",
    "compliance",
    "training",
    "office",
    "network",
    "printer",
    "access",
    "badge",
    "visitor",
    "parking",
    "cafeteria",
    "wellness",
    "benefit",
    "pension",
]


def open_core(url: str, dim: int, **settings: Any) -> AgentCore:
    """A core on ``url`` with the benchmark embedder (no background workers)."""
    return AgentCore.open(
        url,
        start_workers=False,
        ingest_workers=0,
        plugins=[BenchPlugin(dim)],
        entry_points=False,
        embedder=f"bench-{dim}",
        **settings,
    )


def document(seed: int, chunks: int) -> str:
    """A text the default chunker cuts into about ``chunks`` chunks (~560 characters each)."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for _ in range(chunks):
        words = rng.choice(len(WORDS), size=80)
        paragraphs.append(" ".join(WORDS[w] for w in words).capitalize() + ".")
    return "\n\n".join(paragraphs)


def tenant(i: int) -> str:
    return f"tenant-{i:06d}"


# building ------------------------------------------------------------------------------


def build(url: str, tenants: int, chunks: int, dim: int, big_chunks: int) -> dict[str, Any]:
    """Create the tenants and the large workspace through the Python API."""
    core = open_core(url, dim, index_dir="off")
    began = time.perf_counter()
    made = 0
    try:
        for i in range(tenants):
            ws = core.workspace(tenant(i), ENV)
            ws.knowledge.ingest_text(f"handbook-{i}.txt", document(i, chunks), wait=True)
            made += 1
            if made % 1000 == 0:
                print(f"  {made} tenants ({time.perf_counter() - began:.0f} s)", flush=True)
        if big_chunks:
            ws = core.workspace(BIG, ENV)
            for j in range(max(1, big_chunks // chunks)):
                ws.knowledge.ingest_text(f"big-{j}.txt", document(10**7 + j, chunks), wait=True)
        seconds = time.perf_counter() - began
        counted = core.store.count_vectors(ws.organization_id, ENV) if big_chunks else 0
    finally:
        core.close()
    return {"seconds": seconds, "big_rows": counted}


# measuring (in a fresh process per configuration) -------------------------------------


def process_figures() -> dict[str, float]:
    """Resident and virtual memory (MiB), open files and memory mappings of this process."""
    status = Path("/proc/self/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":")[1].split() for line in status}
    with open("/proc/self/maps") as maps:
        mappings = sum(1 for _ in maps)
    return {
        "rss_mib": int(fields["VmRSS"][0]) / 1024,
        "vm_mib": int(fields["VmSize"][0]) / 1024,
        "files": len(os.listdir("/proc/self/fd")),
        "mappings": mappings,
    }


def ms(seconds: float) -> float:
    return seconds * 1000


def p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def cache_stats(core: AgentCore) -> dict[str, Any]:
    return dict(core.indexes.stats())


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """One configuration's figures (run in a fresh process)."""
    settings: dict[str, Any] = {"index_dir": config["index_dir"]}
    if config["budget"] is not None:
        settings["index_cache_bytes"] = config["budget"]
    core = open_core(config["url"], config["dim"], **settings)
    core.start()  # as a server does: index maintenance (segment files) runs in the background
    try:
        names = [tenant(i) for i in range(config["tenants"])]
        spaces = [core.workspace(name, ENV, create=False) for name in names]
        services = [ws.knowledge for ws in spaces]
        del spaces
        services[0].search(QUERY)
        gc.collect()
        before = process_figures()
        first: list[float] = []
        for service in services:
            began = time.perf_counter()
            service.search(QUERY)
            first.append(time.perf_counter() - began)
        gc.collect()
        after = process_figures()
        evicted: list[float] = []
        for service in services[1 : 1 + config["evicted"]]:
            began = time.perf_counter()
            service.search(QUERY)
            evicted.append(time.perf_counter() - began)
        recent = services[-10:]
        cached: list[float] = []
        for _ in range(max(1, config["cached"] // len(recent))):
            for service in recent:
                began = time.perf_counter()
                service.search(QUERY)
                cached.append(time.perf_counter() - began)
        return {
            "rss_growth_mib": after["rss_mib"] - before["rss_mib"],
            "vm_growth_mib": after["vm_mib"] - before["vm_mib"],
            "files": after["files"],
            "mappings": after["mappings"],
            "first_p50_ms": ms(statistics.median(first)),
            "first_p95_ms": ms(p(first, 0.95)),
            "evicted_p50_ms": ms(statistics.median(evicted)),
            "cached_p50_ms": ms(statistics.median(cached)),
            "stats": cache_stats(core),
        }
    finally:
        core.close()


def measure_big(config: dict[str, Any]) -> dict[str, Any]:
    """The large workspace's first search in a fresh process (segment files written
    by an earlier process when ``index_dir`` keeps them)."""
    settings: dict[str, Any] = {"index_dir": config["index_dir"]}
    core = open_core(config["url"], config["dim"], **settings)
    try:
        service = core.workspace(BIG, ENV, create=False).knowledge
        before = process_figures()
        cpu = time.process_time()
        began = time.perf_counter()
        service.search(QUERY)
        seconds = time.perf_counter() - began
        cpu = time.process_time() - cpu
        after = process_figures()
        return {
            "first_ms": ms(seconds),
            "cpu_ms": ms(cpu),
            "rss_growth_mib": after["rss_mib"] - before["rss_mib"],
            "stats": cache_stats(core),
        }
    finally:
        core.close()


def prepare(config: dict[str, Any]) -> dict[str, Any]:
    """Load every workspace once and let its segment files be written (as the first
    process to search them after a deployment does)."""
    core = open_core(config["url"], config["dim"], index_dir=config["index_dir"])
    names = [tenant(i) for i in range(config["tenants"])] + ([BIG] if config["big"] else [])
    began = time.perf_counter()
    try:
        for name in names:
            core.workspace(name, ENV, create=False).knowledge.search(QUERY)
            core.indexes.wait_for_maintenance(600)
    finally:
        core.close()
    return {"seconds": time.perf_counter() - began}


def child(kind: str, config: dict[str, Any], code: Path = REPO) -> dict[str, Any]:
    """Run ``kind`` with ``config`` in a fresh interpreter, on the agentcore of checkout
    ``code``; its result."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, json.dumps(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "MANY_TENANTS_CODE": str(code)},
    )
    if out.returncode:
        raise SystemExit(f"{kind} {config} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# orchestration ------------------------------------------------------------------------


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    from throwaway_postgres import postgres as throwaway

    with throwaway(url) as server:
        yield server


def median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over ``results`` (the runs of one row); the rest from the first."""
    out = dict(results[0])
    for name, value in results[0].items():
        if isinstance(value, int | float):
            out[name] = statistics.median(r[name] for r in results)
    out["runs"] = len(results)
    return out


def built(data: Path, name: str, params: dict[str, Any], url: str, fresh: Any) -> float | None:
    """Build the database at ``url`` unless ``data/name.json`` says it holds ``params``."""
    marker = data / f"{name}.json"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return None
    fresh()
    print(f"building {name}: {params['tenants']} tenants ...", flush=True)
    info = build(url, params["tenants"], params["chunks"], params["dim"], params["big_chunks"])
    marker.write_text(json.dumps(params))
    return float(info["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=40)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--budget-mib", type=float, default=32.0)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--index-dirs", default="off,auto")
    parser.add_argument("--big-chunks", type=int, default=100_000)
    parser.add_argument("--evicted", type=int, default=200)
    parser.add_argument("--cached", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per row (median)")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: throwaway)")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--peer-code",
        type=Path,
        default=None,
        help="a checkout of other code (git worktree add DIR COMMIT): the large workspace's"
        " first search is measured with it too, alternating with this code's, on the same data",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, raw = args.child
        run = {"measure": measure, "big": measure_big, "prepare": prepare}[kind]
        print(json.dumps(run(json.loads(raw))))
        return
    data = args.data or Path(tempfile.mkdtemp(prefix="agentcore-tenants-"))
    data.mkdir(parents=True, exist_ok=True)
    params = {
        "tenants": args.tenants,
        "chunks": args.chunks,
        "dim": args.dim,
        "big_chunks": args.big_chunks,
    }
    # 0: leave index_cache_bytes unset (a checkout that predates it)
    budget = int(args.budget_mib * 1024 * 1024) if args.budget_mib > 0 else None
    rows: list[dict[str, Any]] = []
    big_rows: list[dict[str, Any]] = []
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}
        builds: dict[str, float | None] = {}  # seconds to build each store (None: reused)
        for store in stores:
            if store == "sqlite":
                db = data / "tenants.db"

                def fresh_sqlite(db: Path = db) -> None:
                    for leftover in data.glob("tenants.db*"):
                        if leftover.is_dir():
                            shutil.rmtree(leftover)
                        else:
                            leftover.unlink()

                urls[store] = str(db)
                builds[store] = built(data, "sqlite", params, str(db), fresh_sqlite)
            elif store == "postgres":
                server = stack.enter_context(postgres(args.postgres))
                urls[store] = server
                if args.postgres is None:  # a new, empty server: build every time
                    print(f"building postgres: {params['tenants']} tenants ...", flush=True)
                    info = build(server, args.tenants, args.chunks, args.dim, args.big_chunks)
                    builds[store] = float(info["seconds"])
                else:
                    builds[store] = built(data, "postgres", params, server, lambda: None)
            else:
                raise SystemExit(f"unknown store {store!r}")
        index_dirs = [d.strip() for d in args.index_dirs.split(",") if d.strip()]
        for store, url in urls.items():
            for index_dir in index_dirs:
                where = index_dir
                if index_dir == "auto" and store != "sqlite":
                    where = str(data / f"{store}-segments")
                if where != "off":
                    config = {
                        "url": url,
                        "dim": args.dim,
                        "tenants": args.tenants,
                        "index_dir": where,
                        "big": bool(args.big_chunks),
                    }
                    took = child("prepare", config)["seconds"]
                    print(f"  segment files of {store} written in {took:.0f} s", flush=True)
                for label, size in (("budget", budget), ("unbounded", 1 << 50)):
                    if label == "unbounded" and (not args.peer or budget is None):
                        continue
                    config = {
                        "url": url,
                        "dim": args.dim,
                        "tenants": args.tenants,
                        "index_dir": where,
                        "budget": size,
                        "evicted": args.evicted,
                        "cached": args.cached,
                    }
                    result = median_of([child("measure", config) for _ in range(args.runs)])
                    rows.append({"store": store, "index_dir": index_dir, "cache": label, **result})
                    print_row(rows[-1])
                if args.big_chunks:
                    config = {"url": url, "dim": args.dim, "index_dir": where}
                    codes = {"this": REPO}
                    if args.peer_code is not None:
                        codes["peer"] = args.peer_code.resolve()
                    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
                    for run in range(args.runs):  # alternating, each first in turn
                        order = list(codes.items())
                        for name, code in order[run % 2 :] + order[: run % 2]:
                            runs[name].append(child("big", config, code))
                    for name, results in runs.items():
                        row = {"store": store, "index_dir": index_dir, "code": name}
                        big_rows.append({**row, **median_of(results)})
    print()
    print_table(rows, big_rows, params, args.budget_mib)
    documents = args.tenants + max(1, args.big_chunks // args.chunks) * bool(args.big_chunks)
    for store, seconds in builds.items():
        if seconds:
            print(
                f"built {store}: {documents} documents in {seconds:.0f} s ({documents / seconds:.1f} docs/s)"
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"params": params, "budget_mib": args.budget_mib, "rows": rows, "big": big_rows})
    )
    if args.data is None:
        shutil.rmtree(data, ignore_errors=True)


def print_row(row: dict[str, Any]) -> None:
    print(
        f"  {row['store']} index_dir={row['index_dir']} {row['cache']}: RSS +"
        f"{row['rss_growth_mib']:.1f} MiB, first p50 {row['first_p50_ms']:.2f} ms",
        flush=True,
    )


def print_table(
    rows: list[dict[str, Any]], big: list[dict[str, Any]], params: dict[str, Any], mib: float
) -> None:
    print(
        f"{params['tenants']} tenants x ~{params['chunks']} chunks, dim {params['dim']};"
        f" budget {mib:g} MiB (peer: unbounded)"
    )
    head = (
        "| store | index_dir | cache | RSS growth MiB | VM growth MiB | open files | mappings"
        " | first search p50 / p95 ms | evicted first p50 ms | cached p50 ms | loads | evictions |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        stats = r["stats"]
        print(
            f"| {r['store']} | {r['index_dir']} | {r['cache']} | {r['rss_growth_mib']:.1f}"
            f" | {r['vm_growth_mib']:.1f} | {r['files']:.0f} | {r['mappings']:.0f}"
            f" | {r['first_p50_ms']:.2f} / {r['first_p95_ms']:.2f} | {r['evicted_p50_ms']:.2f}"
            f" | {r['cached_p50_ms']:.2f} | {stats.get('loads', stats.get('reloads', '?'))}"
            f" | {stats.get('evictions', '-')} |"
        )
    if big:
        print()
        print(f"large workspace, {params['big_chunks']} chunks: first search in a fresh process")
        print("| store | index_dir | code | first search ms | its CPU ms | RSS growth MiB |")
        print("|---|---|---|---|---|---|")
        for b in big:
            print(
                f"| {b['store']} | {b['index_dir']} | {b['code']} | {b['first_ms']:.0f}"
                f" | {b['cpu_ms']:.0f} | {b['rss_growth_mib']:.0f} |"
            )


if __name__ == "__main__":
    main()
