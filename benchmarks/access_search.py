"""Access-filtered exact search: a search for an end user against the same search without.

``--rows`` unit vectors (default 1M x 384, float32, ``filtered_search.data``) in one
``VectorIndex``, one document per ``--rows-per-document`` rows (100: 10,000 documents).
10,000 principals: ``--users`` users ``u0 ...`` (9,900) and ``--groups`` groups ``g0 ...``
(100). Every document has an access list (none is open to everyone), so what a reader
may read is set by their groups: document ``n`` gets
``{"users": [3 users, seeded], "groups": ["g{n % 100}"]}``. The cases, each one search
per query, interleaved per round:

    unfiltered         no end user: no selection, the plain search
    user reads 50 %    EndUser with groups g0 ... g49           (every row, masked)
    user reads 1 %     EndUser with group g0                    (the rows gathered)
    user reads ~0 %    EndUser in no group: only the documents naming them (~3 of 10,000)

A reader case's time is the real path's (``Search._ranked``): the ``Selection``
made for the reader (``DocumentTable.selection(None, reader)``, with the documents'
access lists applied to the table), then, unless it is empty, the index's search with it
as ``allow``; the selection alone is timed too. Each round times every query once per
case; the table prints the median over ``--rounds`` rounds of each round's median, each
case's ratio to the unfiltered search of the same round (the median of those ratios),
and the selection's median. Correctness, for ``--recall-queries`` queries: every row
found belongs to a document the reader may read (judged from the access lists
themselves, not the table), the selection lets through exactly those documents, and
recall@10 is against brute force (numpy) over the readable rows alone.

The issue's target: at 1M chunks and 10,000 principals, at most 1.2x the unfiltered
search when the user may read half the documents, at most 1.5x at 1 %.

Prints a Markdown table and the target line; ``--json PATH`` also writes the results.
Exits 1 if a search returned a row its reader may not read (or a selection is not
exactly the readable documents), else 0.
Run: ``python benchmarks/access_search.py [--rows N] [--rounds N] [--json out.json]``.
Timings are wall clock on a machine shared with other work: read the ratios, which are
taken within one round.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

import numpy as np
from filtered_search import K, Matrix, data

if TYPE_CHECKING:
    from agentcore.knowledge._filters import DocumentTable
    from agentcore.knowledge.vectors import VectorIndex
    from agentcore.schema import EndUser

REPO = Path(__file__).resolve().parents[1]
USERS_PER_DOCUMENT = 3
TARGETS = {"user reads 50 %": 1.2, "user reads 1 %": 1.5}


def access_lists(documents: int, users: int, groups: int, seed: int = 11) -> list[dict[str, Any]]:
    """Each document's access list: ``USERS_PER_DOCUMENT`` distinct users, seeded, and
    the group ``g{n % groups}``."""
    rng = np.random.default_rng(seed)
    return [
        {
            "users": [f"u{u}" for u in rng.choice(users, USERS_PER_DOCUMENT, replace=False)],
            "groups": [f"g{n % groups}"],
        }
        for n in range(documents)
    ]


def readers(lists: list[dict[str, Any]], groups: int) -> dict[str, EndUser | None]:
    """The cases: no end user, and readers of about half, 1 % and almost none."""
    from agentcore.schema import EndUser

    return {
        "unfiltered": None,
        "user reads 50 %": EndUser(id="u0", groups=[f"g{g}" for g in range(groups // 2)]),
        "user reads 1 %": EndUser(id="u1", groups=["g0"]),
        # a user the first document names: in no group, so they read only their own few
        "user reads ~0 %": EndUser(id=lists[0]["users"][0], groups=[]),
    }


def may_read(lists: list[dict[str, Any]], reader: EndUser | None) -> np.ndarray[Any, Any]:
    """Which documents ``reader`` may read, from the access lists alone (the reference)."""
    if reader is None:
        return np.ones(len(lists), dtype=bool)
    groups = set(reader.groups)
    return np.array(
        [reader.id in a["users"] or not groups.isdisjoint(a["groups"]) for a in lists], dtype=bool
    )


def search_once(
    table: DocumentTable, index: VectorIndex, reader: EndUser | None, q: Matrix
) -> tuple[float, float]:
    """One search as ``Search._ranked`` makes it: the total and the selection's seconds."""
    started = time.perf_counter()
    within = None if reader is None else table.selection(None, reader)
    selected = time.perf_counter()
    if within is None or not within.empty:
        index.search(q, K, allow=within)
    return time.perf_counter() - started, selected - started


def check(
    args: argparse.Namespace,
    matrix: Matrix,
    queries: Matrix,
    labels: np.ndarray[Any, Any],
    table: DocumentTable,
    index: VectorIndex,
    cases: dict[str, EndUser | None],
    lists: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Per case: the share of rows readable, recall@10 against brute force over them,
    rows found that the reader may not read, and whether the selection is exact."""
    checked: dict[str, dict[str, Any]] = {}
    sample = queries[: args.recall_queries]
    scores = [matrix @ q for q in sample]  # once per query, shared by the cases
    for name, reader in cases.items():
        readable = may_read(lists, reader)
        within = None if reader is None else table.selection(None, reader)
        exact = within is None or bool(np.array_equal(within(np.arange(len(lists))), readable))
        rows = np.flatnonzero(readable[labels])
        hits = leaks = 0
        for q, all_scores in zip(sample, scores, strict=True):
            truth = rows[np.lexsort((rows, -all_scores[rows]))][:K]
            found = index.search(q, K, allow=within)[0]
            hits += len(set(truth.tolist()) & set(found.tolist()))
            leaks += int(np.count_nonzero(~readable[labels[found]]))
        checked[name] = {
            "share": rows.shape[0] / labels.shape[0],
            "documents": int(readable.sum()),
            "recall_at_10": hits / (K * len(sample)),
            "leaks": leaks,
            "selection_exact": exact,
        }
    return checked


def timed_rounds(
    args: argparse.Namespace,
    queries: Matrix,
    table: DocumentTable,
    index: VectorIndex,
    cases: dict[str, EndUser | None],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per case and round, the median total and selection milliseconds."""
    for q in queries[:3]:  # warm up, the selections too (the table sorts its seqs once)
        for reader in cases.values():
            search_once(table, index, reader, q)
    total: dict[str, list[float]] = {name: [] for name in cases}
    selection: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for q in queries:
            for name, reader in cases.items():
                times[name].append(search_once(table, index, reader, q))
        for name, pairs in times.items():
            total[name].append(median(t for t, _ in pairs) * 1000)
            selection[name].append(median(s for _, s in pairs) * 1000)
    return total, selection


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the index and the table, check the reader cases, time them all."""
    from agentcore.knowledge._filters import DocumentTable
    from agentcore.knowledge.vectors import adopt
    from agentcore.storage.records import DocumentRow

    matrix, queries = data(args.rows, args.dimension, args.queries)
    labels = np.arange(args.rows, dtype=np.int64) // args.rows_per_document
    documents = int(labels[-1]) + 1
    lists = access_lists(documents, args.users, args.groups)
    table = DocumentTable()
    started = time.perf_counter()
    table.apply((DocumentRow(n, f"doc_{n}", {}, lists[n]) for n in range(documents)), 1)
    applied = time.perf_counter() - started
    index = adopt(np.arange(args.rows, dtype=np.int64), matrix, labels=labels)
    cases = readers(lists, args.groups)
    checked = check(args, matrix, queries, labels, table, index, cases, lists)
    total, selection = timed_rounds(args, queries, table, index, cases)
    base = total["unfiltered"]
    return {
        "rows": args.rows,
        "dimension": args.dimension,
        "documents": documents,
        "principals": {"users": args.users, "groups": args.groups},
        "table_apply_seconds": applied,
        "table_nbytes": table.nbytes,
        "queries": args.queries,
        "rounds": args.rounds,
        "cases": {
            name: {
                **checked[name],
                "median_ms": median(total[name]),
                "ratio_to_unfiltered": median(
                    t / b for t, b in zip(total[name], base, strict=True)
                ),
                "selection_ms": median(selection[name]),
                "rounds_ms": total[name],
                "selection_rounds_ms": selection[name],
            }
            for name in cases
        },
    }


def print_report(result: dict[str, Any]) -> bool:
    """The Markdown table and the target line; whether no search leaked a row."""
    principals = result["principals"]
    print(
        f"Access-filtered exact search: {result['rows']:,} x {result['dimension']} float32, "
        f"{result['documents']:,} documents, {principals['users']:,} users + "
        f"{principals['groups']:,} groups, k={K}, {result['queries']} queries x "
        f"{result['rounds']} rounds (table built in {result['table_apply_seconds']:.2f} s, "
        f"~{result['table_nbytes'] / 1e6:.1f} MB)\n"
    )
    print("| case | rows readable | median ms | x unfiltered | selection ms | recall@10 | leaks |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    sound = True
    for name, case in result["cases"].items():
        selection = "-" if name == "unfiltered" else f"{case['selection_ms']:.3f}"
        exact = "" if case["selection_exact"] else " (selection not exact)"
        sound = sound and case["leaks"] == 0 and case["selection_exact"]
        print(
            f"| {name} | {case['share']:.2%} ({case['documents']:,} docs) "
            f"| {case['median_ms']:.2f} | {case['ratio_to_unfiltered']:.2f} | {selection} "
            f"| {case['recall_at_10']:.3f} | {case['leaks']}{exact} |"
        )
    print(f"\nAccess filter vs unfiltered at {result['rows']:,} chunks: " + verdicts(result))
    return sound


def verdicts(result: dict[str, Any]) -> str:
    """Each target case's ratio to the unfiltered case, and whether it meets ``TARGETS``."""
    said = []
    for name, target in TARGETS.items():
        ratio = result["cases"][name]["ratio_to_unfiltered"]
        said.append(
            f"{name.removeprefix('user reads ')}: {ratio:.2f}x "
            f"(target <= {target}x, {'met' if ratio <= target else 'NOT met'})"
        )
    return "; ".join(said)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--rows-per-document", type=int, default=100)
    parser.add_argument("--users", type=int, default=9_900)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--recall-queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    result = run(args)
    sound = print_report(result)
    if args.json is not None:
        write_report(args.json, "access_search", "vector", result)
    return 0 if sound else 1


def write_report(path: Path, benchmark: str, part: str, result: dict[str, Any]) -> None:
    """``result`` as ``path``'s JSON under ``part``, with the benchmark's name and the
    Python and numpy versions (the access benchmarks' shared form)."""
    report = {
        "benchmark": benchmark,
        "python": platform.python_version(),
        "numpy": np.__version__,
        part: result,
    }
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
