"""Access-filtered chat: whole chat turns for an end user against the same turns without.

The chat half of issue #39 (``access_search.py`` is the search half, at the index's
level). Everything here goes through the public Python API: ``AgentCore.open`` on a
SQLite file in a temporary directory (``--db PATH``: this file, kept, and reused when a
run of the same shape already filled it), ``core.workspace("bench")``,
``ws.knowledge.ingest_text`` for every document, one agent on the default chat model
(``ws.agents.create``: the extractive model, vector retrieval of ``chat_top_k`` = 8
passages) and ``ws.chat.send(agent, question, user=EndUser(...))`` against the same
``ws.chat.send`` without ``user``. Each turn is a whole turn as a caller sees it: the
retrieval (the query embedded, the reader's ``Selection`` made, the exact search over
every chunk), the word rarity read, the model, the citations, and the new conversation
stored.

The corpus: ``--chunks`` chunks (default 1M) in documents of ``--chunks-per-document``
(100: 10,000 documents). A document is ``--chunks-per-document`` paragraphs of seeded
sentences of made-up words (a Zipf-like draw from 6,000 words; each paragraph a little
over 520 characters, so the default chunking, 700 characters overlapping by 150, makes
one chunk of each), ingested with ``ingest_text("doc_<n>.txt", ..., access=...,
wait=True)``, one call per document, indexed by the default ``hashing-v1`` embedder
(384 dimensions). The access lists and the cases are ``access_search.py``'s, imported
from it: 10,000 principals (9,900 users, 100 groups), every document
``{"users": [3 users], "groups": ["g{n % 100}"]}``, and the readers

    unfiltered         no end user
    user reads 50 %    EndUser u0 in groups g0 ... g49
    user reads 1 %     EndUser u1 in group g0
    user reads ~0 %    a user the first document names, in no group

The questions: ``--queries`` seeded questions, each made of up to six words of one
sentence of a seeded random document ("What does the handbook say about ...?"), so
most ask about a document the reader may not read. Each round asks every question
once per case, the cases interleaved (their order rotating from question to question);
a turn is timed around ``ws.chat.send`` (wall clock, and this process's CPU time).
The table prints the median over ``--rounds`` rounds of each round's median, each case's
ratio to the unfiltered turn of the same round (the median of those ratios), and the
share of answers that cite anything. Before the timing: one search (it loads the
workspace's vector index: ``index loaded``), the process's first chat turn, timed on
its own (it also sums the workspace's sentence counts, which chat's word rarity reads:
``first chat turn``), then ``--warmup`` untimed questions per case (the first filtered
one builds the document table the selections come from).

Correctness, on every turn: each citation names a document (by its unique source) that
the turn's reader may read, judged from the access lists themselves
(``access_search.may_read``); and every sentence of the answer is found in the text of
a document it cites. Exits 1 if any answer breaks either, else 0.

Scale: the issue's full 1M is the default, reached through the ordinary upload path.
Ingestion ran at 2,260 chunks a second on one core of the 2-core machine these figures
come from, the machine quiet (measured at 10k and at 100k chunks: steady as the store
grows), and at 1,850 a second over the whole 1M with the machine busy (load average
3-6): 540 s, then 13 s for the index's first load; the SQLite file is about 4.9 GB.
Ingesting on two processes at once was not tried: one core is left for the machine's
other work. ``--db PATH`` keeps the filled file, so further runs skip the nine minutes
(the documents are listed and counted again, never assumed). The small mode,
``--chunks 20000 --rounds 3``, takes 13-20 seconds. Setup (ingestion, the index's
first load) and the first chat turn are printed and written.

The issue's target: at 1M chunks and 10,000 principals, at most 1.2x the unfiltered
latency when the user may read half the documents, at most 1.5x at 1 %.

Prints a Markdown table and the target line; ``--json PATH`` also writes the results.
Run: ``python benchmarks/access_chat.py [--chunks N] [--rounds N] [--db PATH]
[--json out.json]``. Timings are wall clock on a machine shared with other work: read
the ratios, which are taken within one round.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

import numpy as np
from access_search import access_lists, may_read, readers, verdicts, write_report

if TYPE_CHECKING:
    from agentcore import AgentCore, WorkspaceServices
    from agentcore.schema import ChatMessageResponse, EndUser

REPO = Path(__file__).resolve().parents[1]
WORKSPACE = "bench"
SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "ni", "pe"]
SYLLABLES += ["qua", "rio", "zan", "bel", "ta", "gor", "li", "mon", "sen", "ur"]
VOCABULARY = 6_000
PARAGRAPH_CHARS = 520  # a paragraph ends at the first sentence past this: one chunk each
WORDS_PER_QUESTION = 6
SOURCE = re.compile(r"doc_(\d+)\.txt")


# the corpus -----------------------------------------------------------------------------


def vocabulary(seed: int = 5) -> list[str]:
    """``VOCABULARY`` made-up words of two or three syllables, seeded, in a seeded order
    (the order of their frequency in the corpus)."""
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(SYLLABLES, int(rng.integers(2, 4)))))
    return [str(word) for word in rng.permutation(sorted(words))]


class Corpus:
    """The documents' texts, each made again from its number alone (seeded)."""

    def __init__(self, paragraphs: int, seed: int = 3) -> None:
        self.paragraphs = paragraphs
        self.seed = seed
        self.words = vocabulary()
        weights = np.cumsum(1 / np.arange(1, VOCABULARY + 1) ** 0.9)
        self._cumulative = weights / weights[-1]

    def sentences(self, n: int) -> list[list[str]]:
        """Document ``n``'s paragraphs, each a list of its sentences."""
        rng = np.random.default_rng((self.seed, n))
        # more words and lengths than any paragraph takes (about 80 words each)
        drawn = np.searchsorted(self._cumulative, rng.random(self.paragraphs * 120))
        words = [self.words[i] for i in drawn.tolist()]
        lengths = rng.integers(8, 16, self.paragraphs * 15).tolist()
        at = taken = 0
        paragraphs = []
        for _ in range(self.paragraphs):
            sentences: list[str] = []
            size = 0
            while size < PARAGRAPH_CHARS:
                length = lengths[taken]
                taken += 1
                sentence = " ".join(words[at : at + length]).capitalize() + "."
                at += length
                sentences.append(sentence)
                size += len(sentence) + 1
            paragraphs.append(sentences)
        return paragraphs

    def text(self, n: int) -> str:
        """Document ``n``'s text: its paragraphs, a blank line between them."""
        return "\n\n".join(" ".join(sentences) for sentences in self.sentences(n))

    def questions(self, documents: int, count: int, seed: int = 17) -> list[str]:
        """``count`` questions, each from up to ``WORDS_PER_QUESTION`` distinct words of
        one sentence of a random document."""
        rng = np.random.default_rng(seed)
        asked = []
        for n in rng.choice(documents, count).tolist():
            paragraphs = self.sentences(n)
            sentences = paragraphs[int(rng.integers(len(paragraphs)))]
            sentence = sentences[int(rng.integers(len(sentences)))]
            words = list(dict.fromkeys(sentence.rstrip(".").lower().split()))
            picked = sorted(rng.choice(len(words), min(WORDS_PER_QUESTION, len(words)), False))
            asked.append(f"What does the handbook say about {' '.join(words[i] for i in picked)}?")
        return asked


# the workspace --------------------------------------------------------------------------


def marker(args: argparse.Namespace, documents: int) -> str:
    """The agent's name, which says what the workspace holds once it is filled."""
    return (
        f"access-chat {documents} documents x {args.chunks_per_document} paragraphs,"
        f" {args.users} users, {args.groups} groups"
    )


def fill(
    ws: WorkspaceServices, corpus: Corpus, lists: list[dict[str, Any]], name: str
) -> tuple[str, int, float]:
    """Ingest every document (one ``ingest_text`` each), then create the agent: its id,
    the chunks stored and the seconds spent ingesting."""
    documents = len(lists)
    chunks = 0
    started = last = time.perf_counter()
    for n in range(documents):
        document = ws.knowledge.ingest_text(
            f"doc_{n}.txt", corpus.text(n), access=lists[n], wait=True
        )
        chunks += document.chunks
        now = time.perf_counter()
        if now - last > 30 or n + 1 == documents:
            last = now
            rate = chunks / (now - started)
            print(
                f"  ingested {n + 1:,} of {documents:,} documents, {chunks:,} chunks"
                f" ({rate:,.0f} chunks/s)",
                file=sys.stderr,
                flush=True,
            )
    ingest_seconds = time.perf_counter() - started
    agent = ws.agents.create(name=name)
    return agent.id, chunks, ingest_seconds


def filled(ws: WorkspaceServices, name: str) -> str | None:
    """The agent of a workspace a run of this shape filled before, if any."""
    for agent in ws.agents.list(limit=100).agents:
        if agent.name == name:
            return agent.id
    if ws.knowledge.list(limit=1).documents:
        raise SystemExit(f"the workspace {WORKSPACE!r} holds other documents: use a new --db")
    return None


def stored_chunks(ws: WorkspaceServices) -> tuple[int, int]:
    """The documents and chunks a reused workspace holds (listed, a page at a time)."""
    documents = chunks = 0
    after = None
    while True:
        page = ws.knowledge.list(limit=100, starting_after=after)
        documents += len(page.documents)
        chunks += sum(document.chunks for document in page.documents)
        if not page.has_more:
            return documents, chunks
        after = page.documents[-1].id


@contextmanager
def opened(db: Path | None) -> Iterator[AgentCore]:
    """A core on ``db``, or on a file in a temporary directory removed afterwards."""
    from agentcore import AgentCore

    with tempfile.TemporaryDirectory(prefix="access_chat-") as scratch:
        core = AgentCore.open(str(db or Path(scratch) / "bench.db"))
        try:
            yield core
        finally:
            core.close()


# the turns ------------------------------------------------------------------------------


class Checker:
    """Checks every answer: its citations only of documents its reader may read, and
    each of its sentences found in a document it cites."""

    def __init__(self, corpus: Corpus, lists: list[dict[str, Any]]) -> None:
        self.corpus = corpus
        self.lists = lists
        self._readable: dict[str | None, np.ndarray[Any, Any]] = {}
        self._texts: dict[int, str] = {}
        self.failures: list[str] = []

    def readable(self, reader: EndUser | None) -> np.ndarray[Any, Any]:
        key = None if reader is None else reader.model_dump_json()
        if key not in self._readable:
            self._readable[key] = may_read(self.lists, reader)
        return self._readable[key]

    def text(self, n: int) -> str:
        if n not in self._texts:
            if len(self._texts) > 2_000:
                self._texts.clear()
            self._texts[n] = self.corpus.text(n)
        return self._texts[n]

    def check(
        self, case: str, reader: EndUser | None, question: str, answer: ChatMessageResponse
    ) -> int:
        """The answer's citations (0 when it cites nothing); failures are kept."""
        readable = self.readable(reader)
        cited = []
        for citation in answer.citations:
            found = SOURCE.fullmatch(citation.source)
            if found is None or int(found[1]) >= len(self.lists):
                self.failures.append(f"{case}: {question!r} cites {citation.source!r}")
                continue
            n = int(found[1])
            cited.append(n)
            if not readable[n]:
                self.failures.append(
                    f"{case}: {question!r} cites {citation.source!r}, which {reader!r} may not read"
                )
        texts = [self.text(n) for n in cited]
        for sentence in re.findall(r"[^.!?]+[.!?]", answer.response):
            if cited and not any(sentence.strip() in text for text in texts):
                self.failures.append(
                    f"{case}: {question!r}: {sentence.strip()!r} is in no cited document"
                )
        return len(cited)


def turn(
    ws: WorkspaceServices, agent_id: str, question: str, reader: EndUser | None
) -> tuple[ChatMessageResponse, float, float]:
    """One chat turn: the answer, its wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    answer = ws.chat.send(agent_id, question, user=reader)
    return answer, time.perf_counter() - wall, time.process_time() - cpu


def timed_rounds(
    args: argparse.Namespace,
    ws: WorkspaceServices,
    agent_id: str,
    questions: list[str],
    cases: dict[str, EndUser | None],
    checker: Checker,
) -> dict[str, dict[str, list[float]]]:
    """Per case and round: the median wall and CPU milliseconds, and the share of
    answers that cite a document."""
    names = list(cases)
    out: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": [], "answered": []} for name in names
    }
    for _ in range(args.rounds):
        times: dict[str, list[tuple[float, float, int]]] = {name: [] for name in names}
        for i, question in enumerate(questions):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                answer, wall, cpu = turn(ws, agent_id, question, cases[name])
                cited = checker.check(name, cases[name], question, answer)
                times[name].append((wall, cpu, cited))
        for name, measured in times.items():
            out[name]["wall"].append(median(w for w, _, _ in measured) * 1000)
            out[name]["cpu"].append(median(c for _, c, _ in measured) * 1000)
            out[name]["answered"].append(sum(1 for *_, c in measured if c) / len(measured))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fill (or reuse) the workspace, warm it up, time the cases, check every answer."""
    documents = args.chunks // args.chunks_per_document
    lists = access_lists(documents, args.users, args.groups)
    cases = readers(lists, args.groups)
    corpus = Corpus(args.chunks_per_document)
    questions = corpus.questions(documents, args.queries)
    checker = Checker(corpus, lists)
    name = marker(args, documents)
    with opened(args.db) as core:
        ws = core.workspace(WORKSPACE)
        started = time.perf_counter()
        agent_id = filled(ws, name)
        reused = agent_id is not None
        ingest_seconds = None
        if agent_id is None:
            agent_id, chunks, ingest_seconds = fill(ws, corpus, lists, name)
        else:
            stored, chunks = stored_chunks(ws)
            if stored != documents:
                raise SystemExit(f"--db holds {stored:,} documents, not {documents:,}")
        first = time.perf_counter()
        ws.knowledge.search(questions[0])  # loads the workspace's index
        load_seconds = time.perf_counter() - first
        setup_seconds = time.perf_counter() - started
        # the process's first turn also sums the workspace's sentence counts (word rarity)
        first_turn = turn(ws, agent_id, questions[0], None)[1]
        for question in questions[: args.warmup]:
            for reader in cases.values():
                turn(ws, agent_id, question, reader)
        measured = timed_rounds(args, ws, agent_id, questions, cases, checker)
    base = measured["unfiltered"]["wall"]
    return {
        "chunks": chunks,
        "documents": documents,
        "chunks_per_document": args.chunks_per_document,
        "principals": {"users": args.users, "groups": args.groups},
        "embedder": "hashing-v1",
        "reused_db": reused,
        "ingest_seconds": ingest_seconds,
        "index_load_seconds": load_seconds,
        "setup_seconds": setup_seconds,
        "first_turn_seconds": first_turn,
        "queries": args.queries,
        "rounds": args.rounds,
        "failures": checker.failures,
        "cases": {
            case: {
                "documents": int(checker.readable(reader).sum()),
                "median_ms": median(measured[case]["wall"]),
                "ratio_to_unfiltered": median(
                    t / b for t, b in zip(measured[case]["wall"], base, strict=True)
                ),
                "cpu_median_ms": median(measured[case]["cpu"]),
                "answered": median(measured[case]["answered"]),
                "rounds_ms": measured[case]["wall"],
                "cpu_rounds_ms": measured[case]["cpu"],
            }
            for case, reader in cases.items()
        },
    }


def print_report(result: dict[str, Any]) -> bool:
    """The Markdown table and the target line; whether every answer passed its checks."""
    principals = result["principals"]
    setup = (
        f"reused {result['chunks']:,}-chunk database"
        if result["reused_db"]
        else f"ingested in {result['ingest_seconds']:.0f} s"
    )
    print(
        f"Access-filtered chat turns: {result['chunks']:,} chunks in {result['documents']:,}"
        f" documents, {principals['users']:,} users + {principals['groups']:,} groups,"
        f" extractive model, chat_top_k 8, {result['queries']} questions x"
        f" {result['rounds']} rounds ({setup}; index loaded in"
        f" {result['index_load_seconds']:.1f} s; setup {result['setup_seconds']:.0f} s;"
        f" first chat turn {result['first_turn_seconds']:.1f} s)\n"
    )
    print("| case | documents readable | median ms | x unfiltered | CPU ms | answered |")
    print("|---|---:|---:|---:|---:|---:|")
    total = result["documents"]
    for name, case in result["cases"].items():
        print(
            f"| {name} | {case['documents'] / total:.2%} ({case['documents']:,})"
            f" | {case['median_ms']:.1f} | {case['ratio_to_unfiltered']:.2f}"
            f" | {case['cpu_median_ms']:.1f} | {case['answered']:.0%} |"
        )
    print(f"\nAccess filter vs unfiltered chat at {result['chunks']:,} chunks: " + verdicts(result))
    failures = result["failures"]
    if failures:
        print(f"\n{len(failures)} answers failed their checks, the first:")
        for failure in failures[:10]:
            print(f"- {failure}")
    else:
        print(
            "Every citation is of a document its reader may read; every sentence quoted is in one."
        )
    return not failures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--chunks-per-document", type=int, default=100)
    parser.add_argument("--users", type=int, default=9_900)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="untimed questions per case")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", type=Path, help="SQLite file to fill, keep and reuse")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.chunks < args.chunks_per_document:
        parser.error("--chunks must be at least --chunks-per-document")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    result = run(args)
    sound = print_report(result)
    if args.json is not None:
        write_report(args.json, "access_chat", "chat", result)
    return 0 if sound else 1


if __name__ == "__main__":
    sys.exit(main())
