"""Cold start (issue 43, "No cold cliffs"): the first search, and chat, in a fresh process.

A restart or a deploy starts processes with nothing loaded: their first search of a
workspace loads its vector index (from memory-mapped segment files, or from the store),
builds its keyword (BM25) index from the chunk texts, reads its document table, and only
then ranks. This script measures that first search, per search mode (``keyword``,
``hybrid``, ``vector``) and workspace size, beside its peer: the warm searches the same
process makes right after it. And the first chat (``chat``: ``ws.chat.send`` to a deployed
agent, with the default extractive model), whose answer also weighs the question's words
by their rarity over the workspace (its term sums), beside the same first chat after the
store's copy of those sums is deleted (``chat-summed``: the process sums every
document's row, as each one did before the store kept them).

Corpus: one SQLite workspace per size of about ``--sizes`` chunks, ingested through the
public Python API (``ws.knowledge.ingest_text(..., wait=True)``) with the default
``hashing-v1`` embedder (1,024 dimensions) and ``chunk_target_chars = --chunk-chars``
(1,000: chunks of ~790 characters), in documents of about 20 chunks. The text
is generated from a seed: sentences of words drawn from a Zipf (Zipf-Mandelbrot)
distribution over ``--vocabulary`` words (the SQuAD sample's words, by frequency, as the
most common ranks, so stop words and common words come first; then synthetic pronounceable
words) with a number now and then, so the number of distinct stems grows with the corpus
as in real text (both are reported). Built databases are kept under ``--data-dir``
(keyed by size, seed and vocabulary) for the next run.

Variants, on the same database:

* ``segments``: ``index_dir = "auto"`` after a process wrote the segment files (open the
  core, load the workspace, one search per mode and a chat, wait for maintenance, close:
  what a server that ran before the restart leaves behind);
* ``no segments``: ``index_dir = "off"`` (every process reads the vectors from the store),
  after a process with that setting ran the same searches and closed (since the store
  keeps keyword snapshots, it leaves one behind: what a fleet with no files leaves).

Each figure comes from its own fresh child process (this script with ``--child``): it
imports agentcore and opens the core (timed apart, as import+open), times exactly one
first search through ``ws.knowledge.search(query, mode=...)``, then ``--warm`` more
searches with other queries (their median is the warm figure), and prints JSON. Every
(size, mode, variant) runs ``--runs`` times, the order of variants and modes rotated per
run; the table gives medians. The database and segment files are in the OS page cache
(a process restart, not a machine boot).

``--rev REV`` measures that commit's agentcore (``git archive`` into a temporary directory,
for the parent and every child) instead of the working tree's.

``--postgres URL|throwaway`` (a server's URL, or a temporary pgserver started for the run
and stopped at its end) also builds each of ``--postgres-sizes`` in a PostgreSQL database
of its own (the same documents; named by size, seed, vocabulary and chunk size, and kept
on a server that persists: the build's facts are the database's comment, written when it
is complete), and measures two more variants the same way:

* ``pg, no files``: ``index_dir = "off"``: every process loads its indexes from the
  store (after a process with that setting ran, as for ``no segments``). Up to 50918ed the same as the default ``"auto"``, which gives no files on
  PostgreSQL; ``"off"`` keeps this variant file-less where ``"auto"`` puts files in the
  machine's cache directory;
* ``pg, files``: ``index_dir`` set to a directory under ``--data-dir`` (one per size,
  deleted at the end with a throwaway server), after a process wrote the files as for
  ``segments``.

Run: ``python benchmarks/cold_start.py [--sizes 10000,50000,100000] [--runs 3] [--rev REV]
[--postgres URL|throwaway] [--postgres-sizes SIZES]``.
Writes ``benchmarks/results/cold_start.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if os.environ.get("AGENTCORE_BENCH_NO_REPO_PATH") != "1":
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
RESULTS = REPO / "benchmarks" / "results" / "cold_start.json"
SQUAD_PATHS = (
    REPO / ".." / "shared" / "eval" / "squad-sample.json",
    REPO / ".." / ".." / "shared" / "eval" / "squad-sample.json",  # from a worktree
)
ORG = "bench"
ENV = "test"
MODES = ("keyword", "hybrid", "vector", "chat", "chat-summed")
SEARCH_MODES = MODES[:3]
# "chat": the first chat (the default extractive model, so no model server's time) with the
# workspace's term sums as the store keeps them; "chat-summed": the same with the store's
# copy deleted first, so the process sums every document's row, as every process did
# before the store kept them (the peer, measured in the same run)
AGENT = "cold-start"
VARIANTS = {"segments": "auto", "no segments": "off"}
PG_VARIANTS = ("pg, no files", "pg, files")
# issue 43's goals for the first search, ms: {mode: {chunks: goal}}
GOALS: dict[str, dict[int, float]] = {
    "keyword": {50_000: 100, 100_000: 150},
    "hybrid": {50_000: 250, 100_000: 300},
    "vector": {50_000: 100, 100_000: 150},
}
# issue 43's PostgreSQL goal ("PostgreSQL memory mode, 100k chunks, first search <= 0.5 s"),
# for every mode: {chunks: goal ms}
PG_GOALS: dict[int, float] = {100_000: 500}
CORPUS_VERSION = 2  # bump when the generated text changes: cached databases are rebuilt
DOC_CHUNKS = 20
DOC_CHARS = 16_000  # about 20 chunks of at most --chunk-chars 1000 (the default overlap, 150)
NUMBER_RATE = 0.01  # share of tokens that are numbers (years, amounts, codes): rare types
ZIPF_S = 1.1
ZIPF_Q = 2.7  # Mandelbrot's offset: the head is flatter than a pure power law
QUERY_RANKS = (300, 30_000)  # the mid-frequency ranks queries draw their words from


# -- the corpus ---------------------------------------------------------------------------


def squad_words(path: Path | None) -> list[str]:
    """The SQuAD sample's lowercase words, most frequent first (ties alphabetical)."""
    if path is None:
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    counts: Counter[str] = Counter()
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            counts.update(re.findall(r"[a-z]+", paragraph["context"].lower()))
    return [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


ONSETS = (*"bcdfghjklmnprstvwz", *"bdklmnprst", "br", "ch", "cl", "dr", "fr", "gr", "pl", "sh")
ONSETS += ("st", "th", "tr")
NUCLEI = (*"aeiou", *"aeiou", *"aeio", "ai", "ea", "ee", "oa", "ou")
CODAS = ("",) * 5 + (*"nrstlm", "nd", "st", "ng")


def synthetic_words(count: int, seed: int, taken: set[str]) -> list[str]:
    """``count`` distinct pronounceable words of one to four syllables, not in ``taken``."""
    rng = random.Random(f"words-{seed}")
    out: list[str] = []
    seen = set(taken)
    while len(out) < count:
        syllables = rng.choices((1, 2, 3, 4), weights=(3, 6, 3, 1))[0]
        word = "".join(
            rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS) for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            out.append(word)
    return out


class Corpus:
    """Seeded documents: Zipf-distributed words in sentences and paragraphs."""

    def __init__(self, vocabulary: int, seed: int, squad: Path | None) -> None:
        import numpy as np

        head = squad_words(squad)[: vocabulary // 2]
        self.words = head + synthetic_words(vocabulary - len(head), seed, set(head))
        self.squad_words = len(head)
        ranks = np.arange(1, len(self.words) + 1, dtype=np.float64)
        weights = 1.0 / (ranks + ZIPF_Q) ** ZIPF_S
        p = weights / weights.sum()
        self.cdf = np.cumsum(p)
        # characters a token takes in the text, with its space (and a sentence's period)
        lengths = np.array([len(w) for w in self.words], dtype=np.float64)
        self.token_chars = float(p @ lengths) + 1.05
        self.seed = seed
        self.seen_words = np.zeros(len(self.words), dtype=bool)
        self.seen_numbers: set[str] = set()

    def document(self, j: int) -> str:
        """Document ``j`` (the same text for the same seed, whatever the size)."""
        import numpy as np

        rng = np.random.default_rng([self.seed, CORPUS_VERSION, j])
        n = int(DOC_CHARS / self.token_chars)
        picks = np.minimum(np.searchsorted(self.cdf, rng.random(n)), len(self.words) - 1)
        self.seen_words[picks] = True
        tokens = [self.words[i] for i in picks.tolist()]
        numbers = np.flatnonzero(rng.random(n) < NUMBER_RATE).tolist()
        values = rng.integers(0, 1_000_000, size=len(numbers)).tolist()
        for at, value in zip(numbers, values, strict=True):
            tokens[at] = str(value if value % 3 else 1900 + value % 130)
            self.seen_numbers.add(tokens[at])
        lengths = rng.integers(6, 26, size=n).tolist()  # words a sentence
        per_paragraph = rng.integers(4, 11, size=n).tolist()  # sentences a paragraph
        paragraphs: list[str] = []
        sentences: list[str] = []
        at = made = 0
        while at < n:
            words = tokens[at : at + lengths[made]]
            at += len(words)
            made += 1
            sentences.append(" ".join(words).capitalize() + ".")
            if len(sentences) >= per_paragraph[len(paragraphs)] or at >= n:
                paragraphs.append(" ".join(sentences))
                sentences = []
        return "\n\n".join(paragraphs)

    def distinct(self) -> dict[str, int]:
        """Distinct words and stems (as agentcore's stemmer makes them) seen so far."""
        from agentcore.knowledge.text import stem_of

        seen = [w for w, s in zip(self.words, self.seen_words.tolist(), strict=True) if s]
        stems = {stem_of(w) for w in seen} | {stem_of(n) for n in self.seen_numbers}
        stems.discard(None)
        return {
            "distinct_words": len(seen) + len(self.seen_numbers),
            "distinct_stems": len(stems),
        }

    def queries(self, count: int, seed: int) -> list[str]:
        """``count`` queries of 2-4 mid-frequency words (log-uniform over QUERY_RANKS)."""
        import numpy as np

        rng = np.random.default_rng([seed, 43])
        lo, hi = np.log(QUERY_RANKS[0]), np.log(min(QUERY_RANKS[1], len(self.words)))
        out = []
        for _ in range(count):
            ranks = np.exp(rng.uniform(lo, hi, size=int(rng.integers(2, 5)))).astype(int)
            out.append(" ".join(self.words[r] for r in ranks.tolist()))
        return out


# -- building and writing the segment files ------------------------------------------------


def open_core(db: Path | str, index_dir: str, **settings: Any) -> Any:
    from agentcore import AgentCore

    return AgentCore.open(
        str(db), start_workers=False, ingest_workers=0, index_dir=index_dir, **settings
    )


def db_path(data_dir: Path, size: int, args: argparse.Namespace) -> Path:
    return data_dir / (
        f"cold-v{CORPUS_VERSION}-n{size}-s{args.seed}-w{args.vocabulary}-c{args.chunk_chars}.db"
    )


def remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".json", ".webhook-key"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(f"{db}.index", ignore_errors=True)


def ingest(core: Any, size: int, corpus: Corpus, label: str) -> dict[str, Any]:
    """Ingest documents until the workspace holds at least ``size`` chunks; what it holds."""
    began = time.perf_counter()
    chunks = docs = chars = 0
    next_report = began + 10
    knowledge = core.workspace(ORG, ENV).knowledge
    while chunks < size:
        text = corpus.document(docs)
        doc = knowledge.ingest_text(f"doc-{docs:06d}.txt", text, wait=True)
        chunks += doc.chunks
        chars += len(text)
        docs += 1
        if time.perf_counter() >= next_report or chunks >= size:
            next_report = time.perf_counter() + 10
            elapsed = time.perf_counter() - began
            print(
                f"  building {label}: {chunks} chunks in {docs} documents,"
                f" {elapsed:.0f} s ({chunks / elapsed:.0f} chunks/s)",
                flush=True,
            )
    org = core.workspace(ORG, ENV).organization_id
    return {
        "size": size,
        "chunks": chunks,
        "vectors": core.store.count_vectors(org, ENV),
        "documents": docs,
        "chars": chars,
        "chars_per_chunk_stride": chars / max(1, chunks),
        "build_s": time.perf_counter() - began,
        **corpus.distinct(),
        "squad_words_in_vocabulary": corpus.squad_words,
        "vocabulary": len(corpus.words),
    }


def build(db: Path, size: int, corpus: Corpus, chunk_chars: int) -> dict[str, Any]:
    """A fresh SQLite file ``db`` of ``size`` chunks; what it holds (also in ``db.json``)."""
    remove_db(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    core = open_core(db, "off", chunk_target_chars=chunk_chars)
    try:
        info = ingest(core, size, corpus, str(size))
    finally:
        core.close()
    info["chunk_target_chars"] = chunk_chars
    Path(f"{db}.json").write_text(json.dumps(info, indent=2))
    return info


# -- the PostgreSQL databases ---------------------------------------------------------------


def pg_name(size: int, args: argparse.Namespace) -> str:
    return f"cold_v{CORPUS_VERSION}_n{size}_s{args.seed}_w{args.vocabulary}_c{args.chunk_chars}"


def pg_files(data_dir: Path, size: int, args: argparse.Namespace) -> Path:
    """The ``index_dir`` of the ``pg, files`` variant."""
    return data_dir / f"{pg_name(size, args)}.pg-index"


def pg_url(server: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``server``."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(server)._replace(path=f"/{name}"))


def pg_cached(server: str, name: str) -> dict[str, Any] | None:
    """The build facts of database ``name`` (its comment, written once it was complete)."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,),
        ).fetchone()
    if not row or not row[0]:
        return None
    try:
        info: dict[str, Any] = json.loads(row[0])
    except ValueError:
        return None
    return info


def build_pg(server: str, name: str, size: int, corpus: Corpus, chunk_chars: int) -> dict[str, Any]:
    """A fresh database ``name`` of ``size`` chunks; what it holds (also its comment)."""
    import psycopg
    from postgres_store import fresh_database
    from psycopg import sql

    url = fresh_database(server, name)
    core = open_core(url, "off", chunk_target_chars=chunk_chars)
    try:
        info = ingest(core, size, corpus, f"pg {size}")
    finally:
        core.close()
    info["chunk_target_chars"] = chunk_chars
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(name), sql.Literal(json.dumps(info))
            )
        )
    return info


def pg_facts(url: str) -> dict[str, float]:
    """The database's size and the mean characters of its chunks."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        db_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        mean = conn.execute("SELECT avg(length(text)) FROM chunks").fetchone()
    return {
        "db_mb": (db_bytes[0] if db_bytes else 0) / 2**20,
        "chunk_chars_mean": float(mean[0] or 0.0) if mean else 0.0,
    }


def write_segments(db: Path | str, queries: list[str], index_dir: str = "auto") -> float:
    """What a server that ran before the restart leaves: the workspace loaded with
    ``index_dir``, one search per mode, maintenance done, the core closed."""
    began = time.perf_counter()
    core = open_core(db, index_dir)
    try:
        ws = core.workspace(ORG, ENV, create=False)
        core.indexes.get(ws.organization_id, ENV)
        for mode, query in zip(SEARCH_MODES, queries, strict=False):
            ws.knowledge.search(query, mode=mode)
        ws.chat.send(agent_of(ws), queries[0])  # the term sums, stored
        if not core.indexes.wait_for_maintenance(3600):
            raise RuntimeError("index maintenance did not finish within an hour")
    finally:
        core.close()
    return time.perf_counter() - began


def chunk_chars(db: Path) -> float:
    """The mean characters of the workspace's chunks (read-only, straight from the file)."""
    import sqlite3

    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        mean = connection.execute("SELECT avg(length(text)) FROM chunks").fetchone()[0]
    finally:
        connection.close()
    return float(mean or 0.0)


def dir_mb(path: Path) -> float:
    if not path.exists():
        return 0.0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


# -- one fresh process: import, open, one first search, then warm ones ---------------------


def agent_of(ws: Any) -> str:
    """The id of the workspace's deployed ``AGENT`` (created the first time)."""
    found = [a for a in ws.agents.list(limit=100).agents if a.name == AGENT]
    agent = found[0] if found else ws.agents.create(name=AGENT, role="support")
    if agent.status != "deployed":
        ws.agents.deploy(agent.id)
    return str(agent.id)


def use_code(code: str | None) -> None:
    """Import agentcore (and its HTTP adapter, an entry-point plugin) from ``code``."""
    if code:
        sys.path[:0] = [code, str(Path(code) / "adapters")]


def child(spec: dict[str, Any]) -> dict[str, Any]:
    use_code(spec["code"])
    began = time.perf_counter()
    from agentcore import AgentCore

    imported = time.perf_counter()
    core = AgentCore.open(
        spec["db"], start_workers=False, ingest_workers=0, index_dir=spec["index_dir"]
    )
    try:
        ws = core.workspace(ORG, ENV, create=False)
        knowledge = ws.knowledge
        mode, top_k = spec["mode"], spec["top_k"]
        if mode.startswith("chat"):
            agent = agent_of(ws)
            if mode == "chat-summed":
                store: Any = core.store  # a SQL store: its database
                with store.db.write() as conn:  # no stored sums: sum every row
                    conn.execute("DELETE FROM term_sums")

            def ask(question: str) -> list[int]:
                return [len(c.quote or "") for c in ws.chat.send(agent, question).citations]
        else:

            def ask(question: str) -> list[int]:
                found = knowledge.search(question, mode=mode, top_k=top_k)
                return [len(r.chunk) for r in found.results]

        opened = time.perf_counter()
        t0 = time.perf_counter()
        lengths = ask(spec["first"])
        first_s = time.perf_counter() - t0
        first_results = len(lengths)
        warm: list[float] = []
        for query in spec["warm"]:
            t0 = time.perf_counter()
            lengths += ask(query)
            warm.append(time.perf_counter() - t0)
        stats = core.indexes.stats()
    finally:
        core.close()
    return {
        "import_ms": (imported - began) * 1000,
        "open_ms": (opened - imported) * 1000,
        "first_ms": first_s * 1000,
        "first_results": first_results,
        "warm_ms": [w * 1000 for w in warm],
        "warm_median_ms": statistics.median(warm) * 1000,
        "result_chunk_chars_mean": statistics.fmean(lengths) if lengths else 0.0,
        "segment_loads": stats.get("segment_loads"),
        "loads": stats.get("loads"),
    }


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``child(spec)`` in a fresh process (waited for; killed and reaped on timeout)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the machine ----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model, flags = platform.processor() or "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "simd": {f: f in flags for f in ("avx2", "avx512f", "f16c", "fma")},
        "python": platform.python_version(),
    }


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


def extract(rev: str, into: Path) -> str:
    """``rev``'s tree (``git archive``) under ``into``; its commit."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if not commit:
        raise SystemExit(f"no commit {rev!r} in {REPO}")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    # compiled now, so that no child's import+open pays for compiling the tree
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into)], check=True)
    return commit


def squad_path() -> Path | None:
    return next((p.resolve() for p in SQUAD_PATHS if p.exists()), None)


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,50000,100000", help="chunks per workspace")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--warm", type=int, default=20, help="warm searches per process")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--top-k", type=int, default=None, help="default: the core's (5)")
    parser.add_argument("--vocabulary", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--chunk-chars", type=int, default=1000, help="chunk_target_chars of the build"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "agentcore_cold_start",
        help="where built databases are kept for the next run",
    )
    parser.add_argument("--rebuild", action="store_true", help="ignore cached databases")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per child")
    parser.add_argument(
        "--rev",
        default=None,
        help="measure this commit's agentcore (git archive into a temporary directory)"
        " instead of the working tree's",
    )
    parser.add_argument(
        "--postgres",
        default=None,
        help="also measure PostgreSQL: a server's URL, or 'throwaway' for a temporary"
        " pgserver (its databases are then built at every run)",
    )
    parser.add_argument(
        "--postgres-sizes",
        default=None,
        help="chunks per PostgreSQL workspace (default: --sizes; a throwaway server builds"
        " 800-1,350 chunks/s: 100k chunks in about 75 s)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    unknown = [m for m in args.modes.split(",") if m and m not in MODES]
    if unknown:
        parser.error(f"unknown modes: {', '.join(unknown)} (known: {', '.join(MODES)})")
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="cold_start_code"))
        code, commit = None, None
        if args.rev:
            commit = extract(args.rev, Path(tmp))
            code = tmp
            use_code(code)
        server = None
        if args.postgres:
            from throwaway_postgres import postgres

            given = None if args.postgres == "throwaway" else args.postgres
            if given is None:  # its databases go with it: so do their files
                for size in pg_sizes_of(args):
                    files = pg_files(args.data_dir, size, args)
                    stack.callback(shutil.rmtree, files, ignore_errors=True)
            server = stack.enter_context(postgres(given))
        return measure(args, code, commit, server)


def pg_sizes_of(args: argparse.Namespace) -> list[int]:
    if not args.postgres:
        return []
    return [int(s) for s in (args.postgres_sizes or args.sizes).split(",") if s]


def measure(
    args: argparse.Namespace, code: str | None, commit: str | None, server: str | None
) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    pg_sizes = pg_sizes_of(args)
    modes = [m for m in args.modes.split(",") if m]

    head_before, diff_before = git("rev-parse", "HEAD"), git("diff", "--stat")
    load_before = os.getloadavg()
    squad = squad_path()
    corpus = Corpus(args.vocabulary, args.seed, squad)
    pool = corpus.queries(args.runs + args.warm + 3, args.seed)
    first_queries, warm_queries = pool[: args.runs], pool[args.runs : args.runs + args.warm]
    setup_queries = pool[args.runs + args.warm :]

    builds: dict[int, dict[str, Any]] = {}
    for size in sizes:
        db = db_path(args.data_dir, size, args)
        meta = Path(f"{db}.json")
        if meta.exists() and db.exists() and not args.rebuild:
            builds[size] = json.loads(meta.read_text())
            print(f"size {size}: cached {db} ({builds[size]['chunks']} chunks)", flush=True)
        else:
            print(f"size {size}: building {db}", flush=True)
            # each size starts its documents from 0: a fresh corpus's seen-word counts
            fresh = Corpus(args.vocabulary, args.seed, squad)
            builds[size] = build(db, size, fresh, args.chunk_chars)
        seconds = write_segments(db, setup_queries)
        write_segments(db, setup_queries, "off")  # the store's keyword snapshot, if kept
        builds[size].update(
            db_mb=db.stat().st_size / 2**20,
            chunk_chars_mean=chunk_chars(db),
            index_dir_mb=dir_mb(Path(f"{db}.index")),
            segment_write_s=seconds,
        )
        print(
            f"  segment files written/checked in {seconds:.1f} s"
            f" ({builds[size]['index_dir_mb']:.0f} MB), database"
            f" {builds[size]['db_mb']:.0f} MB",
            flush=True,
        )

    # each variant: (the database, its index_dir) per size
    targets: dict[str, dict[int, tuple[str, str]]] = {
        variant: {size: (str(db_path(args.data_dir, size, args)), index_dir) for size in sizes}
        for variant, index_dir in VARIANTS.items()
    }
    pg_builds: dict[int, dict[str, Any]] = {}
    for size in pg_sizes:
        assert server is not None
        name = pg_name(size, args)
        url = pg_url(server, name)
        files = pg_files(args.data_dir, size, args)
        cached = None if args.rebuild else pg_cached(server, name)
        if cached is not None:
            pg_builds[size] = {**cached, "cached": True}
            print(f"pg {size}: cached database {name} ({cached['chunks']} chunks)", flush=True)
        else:
            print(f"pg {size}: building database {name}", flush=True)
            shutil.rmtree(files, ignore_errors=True)  # files of an earlier database
            fresh = Corpus(args.vocabulary, args.seed, squad)
            pg_builds[size] = {
                **build_pg(server, name, size, fresh, args.chunk_chars),
                "cached": False,
            }
            b = pg_builds[size]
            print(
                f"  built in {b['build_s']:.0f} s ({b['chunks'] / b['build_s']:.0f} chunks/s)",
                flush=True,
            )
        files.mkdir(parents=True, exist_ok=True)
        seconds = write_segments(url, setup_queries, str(files))
        write_segments(url, setup_queries, "off")
        pg_builds[size].update(**pg_facts(url), index_dir_mb=dir_mb(files), segment_write_s=seconds)
        print(
            f"  files written/checked in {seconds:.1f} s"
            f" ({pg_builds[size]['index_dir_mb']:.0f} MB in {files}), database"
            f" {pg_builds[size]['db_mb']:.0f} MB",
            flush=True,
        )
        targets.setdefault(PG_VARIANTS[0], {})[size] = (url, "off")
        targets.setdefault(PG_VARIANTS[1], {})[size] = (url, str(files))

    rows: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    all_sizes = sorted({*sizes, *pg_sizes})
    for size in all_sizes:
        variants = [v for v in (*VARIANTS, *PG_VARIANTS) if size in targets.get(v, {})]
        for run in range(args.runs):
            turn = run % len(variants)
            order = modes[run % len(modes) :] + modes[: run % len(modes)]
            for variant in variants[turn:] + variants[:turn]:
                db, index_dir = targets[variant][size]
                for mode in order:
                    spec = {
                        "db": db,
                        "code": code,
                        "index_dir": index_dir,
                        "mode": mode,
                        "top_k": args.top_k,
                        "first": first_queries[run],
                        "warm": warm_queries,
                    }
                    result = run_child(spec, args.timeout)
                    rows.setdefault((size, mode, variant), []).append(result)
                    print(
                        f"  {size} {mode:7} {variant:12} run {run + 1}:"
                        f" first {result['first_ms']:8.1f} ms, warm"
                        f" {result['warm_median_ms']:6.1f} ms, import+open"
                        f" {result['import_ms'] + result['open_ms']:6.0f} ms",
                        flush=True,
                    )

    load_after = os.getloadavg()
    head_after, diff_after = git("rev-parse", "HEAD"), git("diff", "--stat")
    host = machine()
    simd = ", ".join(f"{f} {'yes' if on else 'no'}" for f, on in host["simd"].items())
    print()
    print(
        f"{host['cpu']}, {host['cpus']} CPUs ({simd}); load average"
        f" {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        + (
            f"code of {commit[:10]} (--rev {args.rev})"
            if commit
            else f"working tree at {head_before[:10]}"
            + (" + uncommitted changes" if diff_before else "")
        )
    )
    for size in sizes:
        b = builds[size]
        print(
            f"{size}: {b['chunks']:,} chunks ({b['vectors']:,} vectors) in {b['documents']}"
            f" documents, {b['distinct_stems']:,} distinct stems ({b['distinct_words']:,}"
            f" words), chunks of {b['chunk_chars_mean']:.0f} characters on average;"
            f" database {b['db_mb']:.0f} MB, segment files {b['index_dir_mb']:.0f} MB"
        )
    for size in pg_sizes:
        b = pg_builds[size]
        print(
            f"pg {size}: {b['chunks']:,} chunks ({b['vectors']:,} vectors) in {b['documents']}"
            f" documents, chunks of {b['chunk_chars_mean']:.0f} characters on average;"
            f" database {b['db_mb']:.0f} MB, index_dir files {b['index_dir_mb']:.0f} MB;"
            f" built in {b['build_s']:.0f} s ({b['chunks'] / b['build_s']:.0f} chunks/s)"
            + (", in an earlier run" if b["cached"] else "")
        )
    print(
        f"median of {args.runs} fresh processes per row; warm: median of {args.warm}"
        " searches (or chats) after the first, in the same process"
    )
    print()
    print(
        "| size | mode | variant | first ms | warm ms | first/warm | import+open ms"
        " | goal ms | met |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    table = []
    for size in all_sizes:
        chunks = (builds.get(size) or pg_builds[size])["chunks"]
        for mode in modes:
            for variant in (*VARIANTS, *PG_VARIANTS):
                if (size, mode, variant) not in rows:
                    continue
                runs = rows[(size, mode, variant)]
                first = statistics.median(r["first_ms"] for r in runs)
                warm = statistics.median(r["warm_median_ms"] for r in runs)
                opening = statistics.median(r["import_ms"] + r["open_ms"] for r in runs)
                if variant in PG_VARIANTS:
                    goal = PG_GOALS.get(size) if mode in SEARCH_MODES else None
                else:
                    goal = GOALS.get(mode, {}).get(size)
                met = None if goal is None else first <= goal
                table.append(
                    {
                        "size": size,
                        "chunks": chunks,
                        "mode": mode,
                        "variant": variant,
                        "first_ms": first,
                        "warm_ms": warm,
                        "ratio": first / warm,
                        "import_open_ms": opening,
                        "goal_ms": goal,
                        "met": met,
                        "runs": runs,
                    }
                )
                print(
                    f"| {chunks:,} | {mode} | {variant} | {first:,.1f}"
                    f" | {warm:.1f} | {first / warm:,.0f}x | {opening:,.0f}"
                    f" | {'' if goal is None else f'{goal:.0f}'}"
                    f" | {'' if met is None else ('yes' if met else 'no')} |"
                )
    if not commit and (head_after != head_before or diff_after != diff_before):
        print("\nnote: the checkout changed during the run (see the JSON: git before/after)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "benchmark": "cold_start",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": host,
                "load_average_before": load_before,
                "load_average_after": load_after,
                "code": {"rev": args.rev, "commit": commit} if commit else "working tree",
                "git_before": {"head": head_before, "diff_stat": diff_before},
                "git_after": {"head": head_after, "diff_stat": diff_after},
                "args": {k: str(v) for k, v in vars(args).items() if k != "postgres"},
                "postgres": None
                if args.postgres is None
                else ("throwaway" if args.postgres == "throwaway" else "a server's URL"),
                "squad": str(squad) if squad else None,
                "first_queries": first_queries,
                "warm_queries": warm_queries,
                "builds": {str(k): v for k, v in builds.items()},
                "postgres_builds": {str(k): v for k, v in pg_builds.items()},
                "rows": table,
            },
            indent=2,
        )
    )
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))), flush=True)
    else:
        sys.exit(main())
