"""Filtered exact search and keyword search: the speed and recall of ``filter`` and ``mode``.

Vector part: ``--rows`` unit vectors (default 1M x 384, float32) in one ``VectorIndex``,
one document per ``--rows-per-document`` rows (100), each document with metadata
``{"bucket": n % 100, "half": n % 2}``; filters go through the real path (a
``DocumentTable`` of the documents' metadata, ``selection`` turned into the index's
``allow``):

    unfiltered       no filter
    1 %              {"type": "eq", "key": "bucket", "value": 0}   (the rows gathered)
    50 %             {"type": "eq", "key": "half", "value": 0}     (every row, masked)
    everything       {"type": "gte", "key": "bucket", "value": 0}  (a filter letting all through)

Each round times every query once per case, the cases interleaved (so a busy machine
slows all alike); the table prints the median over ``--rounds`` rounds of each
round's median, and each case's ratio to the unfiltered search of the same round.
recall@10 is against brute force (numpy) over the matching rows alone.

The peer for "filters add nothing to unfiltered searches": the same unfiltered search
with the ``VectorIndex`` of another checkout (``--before PATH``, default ``/work/main``:
the code before this change), run in a child process over the same seeded data.

Keyword part: ``--keyword-chunks`` texts (100k; SQuAD paragraphs, then shuffled-word
passages of the same sizes, ``squad_corpus.py``) in one ``KeywordIndex`` with the
library's stemming tokenizer; SQuAD questions searched for the top 10, unfiltered and
with the 1 % filter; p50 and p95 of the single-query latency.

Prints Markdown tables, writes ``benchmarks/results/filtered_search.json``, exits 0.
Run: ``python benchmarks/filtered_search.py [--rows N] [--keyword-chunks N] [--rounds N]``.
Timings are wall clock on a machine shared with other work: read the ratios, which are
taken within one round.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[1]
SQUAD = REPO / ".." / "shared" / "eval" / "squad-sample.json"
RESULTS = REPO / "benchmarks" / "results" / "filtered_search.json"
K = 10
FILTERS: dict[str, dict[str, Any] | None] = {
    "unfiltered": None,
    "1 %": {"type": "eq", "key": "bucket", "value": 0},
    "50 %": {"type": "eq", "key": "half", "value": 0},
    "everything": {"type": "gte", "key": "bucket", "value": 0},
}

Matrix = npt.NDArray[np.float32]


def data(rows: int, dimension: int, queries: int, seed: int = 7) -> tuple[Matrix, Matrix]:
    """``rows`` unit vectors and ``queries`` unit queries, the same for the same seed."""
    rng = np.random.default_rng(seed)
    matrix = np.empty((rows, dimension), dtype=np.float32)
    step = 65_536
    for start in range(0, rows, step):  # in blocks: no float64 copy of the whole
        block = rng.standard_normal((min(step, rows - start), dimension), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        matrix[start : start + block.shape[0]] = block
    q = rng.standard_normal((queries, dimension), dtype=np.float32)
    return matrix, q / np.linalg.norm(q, axis=1, keepdims=True)


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def unfiltered_only(args: argparse.Namespace) -> int:
    """The child process: unfiltered searches with the checkout first on ``sys.path``."""
    sys.path.insert(0, str(Path(args.code).resolve()))
    import agentcore

    try:
        from agentcore.knowledge.vectors import adopt
    except ImportError:  # a checkout from before the vectors package
        from agentcore.knowledge.index import VectorIndex  # type: ignore[import-not-found]

        adopt = VectorIndex.adopt

    matrix, queries = data(args.rows, args.dimension, args.queries)
    index = adopt(np.arange(args.rows, dtype=np.int64), matrix)
    for q in queries[:3]:
        index.search(q, K)
    rounds = [
        median(_timed(lambda q=q: index.search(q, K)) for q in queries) for _ in range(args.rounds)
    ]
    code = str(Path(agentcore.__file__).resolve().parent.parent)
    print(json.dumps({"code": code, "rounds_ms": [r * 1000 for r in rounds]}))
    return 0


def vector_part(args: argparse.Namespace) -> dict[str, Any]:
    """Filtered and unfiltered searches of one index; recall against brute force."""
    from agentcore.knowledge._filters import DocumentTable, check_filter
    from agentcore.knowledge.vectors import adopt
    from agentcore.storage.records import DocumentRow

    matrix, queries = data(args.rows, args.dimension, args.queries)
    labels = np.arange(args.rows, dtype=np.int64) // args.rows_per_document
    documents = int(labels[-1]) + 1
    table = DocumentTable()
    table.apply(
        (DocumentRow(n, f"doc_{n}", {"bucket": n % 100, "half": n % 2}) for n in range(documents)),
        1,
    )
    index = adopt(np.arange(args.rows, dtype=np.int64), matrix, labels=labels)
    cases = {name: check_filter(spec) for name, spec in FILTERS.items()}
    share: dict[str, float] = {}
    recall: dict[str, float] = {}
    for name, spec in cases.items():
        allow = None if spec is None else table.selection(spec)
        mask = np.ones(args.rows, bool) if allow is None else allow(labels)
        share[name] = float(mask.mean())
        hits = 0
        rows = np.flatnonzero(mask)
        for q in queries[: args.recall_queries]:
            scores = (matrix @ q)[rows]  # no copy of the matching rows
            truth = rows[np.lexsort((rows, -scores))][:K]
            found = index.search(q, K, allow=allow)[0]
            hits += len(set(truth.tolist()) & set(found.tolist()))
        recall[name] = hits / (K * min(args.recall_queries, len(queries)))
    for q in queries[:3]:  # warm up
        index.search(q, K)
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for q in queries:
            for name, spec in cases.items():
                # the selection is made per search, as the service makes it
                def one(spec: Any = spec, q: Matrix = q) -> None:
                    allow = None if spec is None else table.selection(spec)
                    index.search(q, K, allow=allow)

                rounds[name].append(_timed(one))
    per_round = {
        name: [median(times[r * len(queries) : (r + 1) * len(queries)]) for r in range(args.rounds)]
        for name, times in rounds.items()
    }
    return {
        "rows": args.rows,
        "dimension": args.dimension,
        "documents": documents,
        "share": share,
        "recall_at_10": recall,
        "rounds_ms": {name: [t * 1000 for t in ts] for name, ts in per_round.items()},
    }


def before_part(args: argparse.Namespace) -> dict[str, Any] | None:
    """The unfiltered search of ``--before``'s checkout, in a child process."""
    if not args.before or not Path(args.before, "agentcore").is_dir():
        return None
    command = [
        sys.executable,
        __file__,
        "--child",
        "--code",
        args.before,
        *("--rows", str(args.rows), "--dimension", str(args.dimension)),
        *("--queries", str(args.queries), "--rounds", str(args.rounds)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def keyword_part(args: argparse.Namespace) -> dict[str, Any]:
    """BM25 search over ``--keyword-chunks`` texts: build time and latency."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from squad_corpus import corpus

    from agentcore.knowledge._filters import DocumentTable, check_filter
    from agentcore.knowledge._keywords import KeywordIndex
    from agentcore.plugins.extractive import tokens_of
    from agentcore.storage.records import DocumentRow

    squad = SQUAD.resolve()
    texts = corpus(squad, args.keyword_chunks)
    sample = json.loads(squad.read_text(encoding="utf-8"))
    questions = [
        qa["question"] for a in sample["data"] for p in a["paragraphs"] for qa in p["qas"]
    ][: args.keyword_queries]
    labels = np.arange(len(texts), dtype=np.int64) // 10  # ten chunks a document
    table = DocumentTable()
    table.apply(
        (DocumentRow(n, f"doc_{n}", {"bucket": n % 100}) for n in range(int(labels[-1]) + 1)), 1
    )
    selective = check_filter(FILTERS["1 %"])
    assert selective is not None
    index = KeywordIndex(tokens_of)
    started = time.perf_counter()
    index.add(np.arange(len(texts), dtype=np.int64), labels, texts)
    build = time.perf_counter() - started
    for question in questions[:5]:
        index.search(question, K)
    unfiltered, filtered = [], []
    for _ in range(args.rounds):
        for question in questions:
            unfiltered.append(_timed(lambda q=question: index.search(q, K)))
            filtered.append(
                _timed(lambda q=question: index.search(q, K, allow=table.selection(selective)))
            )
    return {
        "chunks": len(texts),
        "queries": len(questions),
        "build_seconds": build,
        "p50_ms": median(unfiltered) * 1000,
        "p95_ms": float(np.percentile(unfiltered, 95)) * 1000,
        "filtered_p50_ms": median(filtered) * 1000,
        "filtered_p95_ms": float(np.percentile(filtered, 95)) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    """Run both parts, print the tables, write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--rows-per-document", type=int, default=100)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--recall-queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keyword-chunks", type=int, default=100_000)
    parser.add_argument("--keyword-queries", type=int, default=200)
    parser.add_argument("--before", default="/work/main", help="checkout timed as the peer")
    parser.add_argument("--skip-keyword", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return unfiltered_only(args)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    before = before_part(args)
    vector = vector_part(args)
    rounds = vector["rounds_ms"]
    base = rounds["unfiltered"]
    print(
        f"Filtered exact search: {args.rows:,} x {args.dimension} float32, "
        f"{vector['documents']:,} documents, k={K}, {args.queries} queries x {args.rounds} rounds\n"
    )
    print("| search | rows matching | p50 ms | x unfiltered | recall@10 |")
    print("|---|---:|---:|---:|---:|")
    ratios: dict[str, float] = {}
    for name, times in rounds.items():
        ratios[name] = median(t / b for t, b in zip(times, base, strict=True))
        print(
            f"| {name} | {vector['share'][name]:.1%} | {median(times):.2f} "
            f"| {ratios[name]:.2f} | {vector['recall_at_10'][name]:.3f} |"
        )
    if before is not None:
        peer = median(before["rounds_ms"])
        print(
            f"| unfiltered, {before['code']} (before) | 100.0% | {peer:.2f} "
            f"| {peer / median(base):.2f} | - |"
        )
        vector["before_p50_ms"] = peer
    vector["ratio_to_unfiltered"] = ratios

    report: dict[str, Any] = {
        "benchmark": "filtered_search",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "vector": vector,
    }
    if not args.skip_keyword:
        keyword = keyword_part(args)
        report["keyword"] = keyword
        print(
            f"\nKeyword (BM25) search: {keyword['chunks']:,} chunks "
            f"(built in {keyword['build_seconds']:.1f} s), {keyword['queries']} SQuAD questions, "
            f"top {K}\n"
        )
        print("| search | p50 ms | p95 ms |")
        print("|---|---:|---:|")
        print(f"| keyword | {keyword['p50_ms']:.2f} | {keyword['p95_ms']:.2f} |")
        print(
            f"| keyword, 1 % filter | {keyword['filtered_p50_ms']:.2f} "
            f"| {keyword['filtered_p95_ms']:.2f} |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
