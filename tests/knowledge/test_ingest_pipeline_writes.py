"""The fast ingestion path: same vectors, same stored data, never a missed write.

A document's own rows go straight into the cached index when no other write came in
between (the store's version is one step past the cache's); any other write in
between makes the cache read the change log instead. The hashing embedder's packed
sort must give the original implementation's bits for every batch shape.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from embedder_corpus import DATA, fingerprint
from helpers import cli_env, index_loads, open_seen, run_python, seen, stored_chunk_ids

from agentcore import AgentCore
from agentcore.knowledge._chunking import chunk_pages
from agentcore.knowledge.embedders import bounded_text
from agentcore.knowledge.vectors import unit_rows
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.workspace import Workspace

pytestmark = pytest.mark.both_stores

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import chunking_reference  # noqa: E402
from hashing_embedder_reference import HashingEmbedder as ReferenceEmbedder  # noqa: E402

TEXTS: list[str] = json.loads(DATA.read_text(encoding="utf-8"))["texts"]
ALPHA = "Alpha manual. The red pump needs oil every week. " * 5
BETA = "Beta guide. Quantum flux capacitors hum when charged by zebras. " * 5
GAMMA = "Gamma notes. Vintage typewriters jam on humid mornings in Lisbon. " * 5
DELTA = "Delta memo. Copper kettles whistle loudly at dawn in Reykjavik. " * 5


def _ws(core: AgentCore) -> Workspace:
    return core.workspace("acme", "test")


def _sources(core: AgentCore, query: str, k: int = 3) -> list[str]:
    return [r.source for r in _ws(core).knowledge.search(query, top_k=k).results]


# the embedder: the original's bits for every batch shape ----------------------------------


@pytest.mark.parametrize("dimension", [1024, 64, 1])
def test_batches_of_every_shape_give_the_original_bits(dimension: int) -> None:
    rng = random.Random(dimension)
    new, old = HashingEmbedder(dimension), ReferenceEmbedder(dimension)
    texts = TEXTS + [" ".join(rng.choices(["pump", "oil", "pumps", "oiled"], k=40))]
    position = 0
    for size in [1, 2, 3, 5, 17, 63, 64, 65, 130, 1, 1]:
        batch = [texts[(position + i) % len(texts)] for i in range(size)]
        position += size
        assert new.embed(batch).tobytes() == old.embed(batch).tobytes(), size


def test_a_text_with_many_repeats_gives_the_original_bits() -> None:
    # every feature repeats: the tf weighting and first-occurrence weights matter
    text = "pump " * 300 + "pumping pumped " * 50 + "oil pump " * 40
    new, old = HashingEmbedder().embed([text]), ReferenceEmbedder().embed([text])
    assert fingerprint(new[0]) == fingerprint(old[0])
    assert np.count_nonzero(new) > 10


def test_the_exact_fallback_sort_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentcore.plugins import hashing_embedder

    expected = ReferenceEmbedder().embed(TEXTS[:40])
    monkeypatch.setattr(hashing_embedder, "_KEY_SHIFT_LIMIT", 0)
    assert HashingEmbedder().embed(TEXTS[:40]).tobytes() == expected.tobytes()
    single = [HashingEmbedder().embed([text])[0] for text in TEXTS[:40]]
    assert np.stack(single).tobytes() == expected.tobytes()


def test_empty_and_featureless_texts_embed_as_zero_rows() -> None:
    rows = HashingEmbedder().embed(["", "the of and", "   "])
    assert rows.shape == (3, 1024) and not rows.any()
    assert HashingEmbedder().embed([]).shape == (0, 1024)


# the chunker: the original's cuts -----------------------------------------------------------

_PIECES = [
    "The pump needs oil.",
    "Dr. Smith arrived at 3.14 p.m. on Jan. 5.",
    "J. R. R. Tolkien wrote e.g. this, i.e. that.",
    "Wait... what?",
    "Really?! Yes!",
    '"Quoted sentence." Next one.',
    "(A bracketed one.) After it.",
    "approx. five litres",
    "\n# A heading\n",
    "\n## Another heading",
    "\n- a list item",
    "\n1. numbered item",
    "\n> a quote",
    "\n| a | table |",
    "\n\n",
    "\n  \n\t",
    "   ",
    "\n",
    "Ünïcödé wörds… and ‘curly’ “quotes”.",
    "x" * 90,
    "a" * 800,
    "word " * 40,
    "U.S. Army units moved.",
    "It ended:",
    "agentcore.errors is a module",
]


def _random_pages(rng: random.Random) -> list[str]:
    pages = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        parts = rng.choices(_PIECES, k=rng.randint(0, 40))
        pages.append("".join(p + rng.choice([" ", "", "  ", "\n"]) for p in parts))
    return pages


def _cuts(module: Any, pages: list[str], target: int, overlap: int) -> list[Any]:
    chunks = module.chunk_pages(pages, target_chars=target, overlap_chars=overlap)
    return [(c.text, c.pages, c.page_offsets) for c in chunks]


@pytest.mark.parametrize(("target", "overlap"), [(700, 150), (300, 60), (80, 40), (2000, 0)])
def test_the_chunker_cuts_every_text_as_the_original(target: int, overlap: int) -> None:
    rng = random.Random(target)
    corpora = [[text] for text in TEXTS if text.strip()]
    corpora += [_random_pages(rng) for _ in range(300)]
    for pages in corpora:
        if not any(page.strip() for page in pages):
            continue
        assert _cuts(chunking_reference, pages, target, overlap) == _cuts(
            sys.modules[chunk_pages.__module__], pages, target, overlap
        ), pages


# the store: what ingestion writes is what the original path wrote ------------------------


def test_stored_vectors_are_the_original_embedders_unit_rows(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, _ = pair
    ws = _ws(a)
    ws.knowledge.ingest_text("warm.txt", "warm up")
    ws.knowledge.search("warm")  # the index is cached: later writes take the fast path
    texts = [t for t in TEXTS if t.strip()][:60]
    for number, text in enumerate(texts):
        try:
            ws.knowledge.ingest_text(f"{number}.txt", text)
        except Exception as exc:  # a text with no words: refused, nothing stored
            assert getattr(exc, "code", None) == "no_text" or "no text" in str(exc).lower()
    store = a.store
    ids, vectors = store.load_vectors(ws.organization_id, ws.environment, 1024)
    chunks = store.get_chunks(ids.tolist())
    reference = ReferenceEmbedder()
    limit = a.settings.max_token_chars  # what embedders are fed: long runs cut
    expected = unit_rows(reference.embed([bounded_text(chunks[int(i)].text, limit) for i in ids]))
    assert vectors.tobytes() == expected.tobytes()
    ws.knowledge.search("Normans")  # adds the held-back rows
    assert seen(a)["index.own_write"] >= 50 and seen(a)["index.reload"] == 1


def test_the_cached_index_equals_a_fresh_load(pair: tuple[AgentCore, AgentCore]) -> None:
    a, b = pair
    _ws(a).knowledge.ingest_text("warm.txt", "warm up")
    _ws(a).knowledge.search("warm")
    for number, text in enumerate(t for t in TEXTS if len(t) > 40):
        _ws(a).knowledge.ingest_text(f"{number}.txt", text)
    for query in ["Normans conquered England", "photosynthesis sugar", "running studies"]:
        mine = _ws(a).knowledge.search(query, top_k=20)
        fresh = _ws(b).knowledge.search(query, top_k=20)  # B loads the workspace now
        assert [(r.document_id, r.chunk) for r in mine.results] == [
            (r.document_id, r.chunk) for r in fresh.results
        ]
        assert [r.score for r in mine.results] == pytest.approx([r.score for r in fresh.results])
    assert index_loads(a) == (1, 0)


# read-your-writes across processes --------------------------------------------------------


def _own_and_deltas(core: AgentCore) -> tuple[int, int]:
    """Writes of this core added to its index without a read, and deltas it applied."""
    return seen(core)["index.own_write"], seen(core)["index.catch_up"]


def test_a_write_by_another_core_between_two_of_ours_is_seen(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    assert _sources(a, "red pump oil")[0] == "alpha.txt"  # A caches the workspace
    _ws(a).knowledge.ingest_text("gamma.txt", GAMMA)
    assert seen(a)["index.own_write"] == 0  # held back until the next read
    assert _sources(a, "typewriters Lisbon")[0] == "gamma.txt"
    assert _own_and_deltas(a) == (1, 0)  # no log read

    _ws(a).knowledge.ingest_text("epsilon.txt", ALPHA.replace("Alpha", "Epsilon"))
    _ws(b).knowledge.ingest_text("beta.txt", BETA)  # another writer, between two of ours
    _ws(a).knowledge.ingest_text("delta.txt", DELTA)
    assert _sources(a, "quantum flux capacitors zebras")[0] == "beta.txt"
    assert _own_and_deltas(a) == (1, 1)  # read the log
    assert _sources(a, "copper kettles Reykjavik")[0] == "delta.txt"
    assert "epsilon.txt" in _sources(a, "Epsilon manual red pump")
    assert _sources(a, "typewriters Lisbon")[0] == "gamma.txt"
    assert seen(a)["index.reload"] == 1


def test_a_delete_by_another_core_between_two_of_ours_is_applied(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, b = pair
    ws = _ws(a)
    beta = ws.knowledge.ingest_text("beta.txt", BETA)
    assert _sources(a, "quantum flux")[0] == "beta.txt"
    gone = stored_chunk_ids(a.store, ws.organization_id, ws.environment, beta.id)
    _ws(b).knowledge.delete(beta.id)
    ws.knowledge.ingest_text("alpha.txt", ALPHA)
    index = a.indexes.get(ws.organization_id, ws.environment)
    assert gone and not any(index.contains(i) for i in gone)
    assert "beta.txt" not in _sources(a, "quantum flux capacitors zebras", k=5)
    assert _sources(a, "red pump oil")[0] == "alpha.txt"


def test_a_write_by_another_process_between_two_of_ours_is_seen(db_path: Path) -> None:
    with open_seen(str(db_path), start_workers=False) as core:
        _ws(core).knowledge.ingest_text("alpha.txt", ALPHA)
        assert _sources(core, "red pump")[0] == "alpha.txt"
        script = (
            "import sys\nfrom agentcore import AgentCore\n"
            "with AgentCore.open(sys.argv[1], start_workers=False) as core:\n"
            "    core.workspace('acme', 'test').knowledge.ingest_text('beta.txt', sys.argv[2])\n"
        )
        done = run_python(script, str(db_path), BETA)
        assert done.returncode == 0, done.stderr
        _ws(core).knowledge.ingest_text("gamma.txt", GAMMA)
        assert _sources(core, "quantum flux capacitors zebras")[0] == "beta.txt"
        assert _sources(core, "typewriters Lisbon")[0] == "gamma.txt"
        assert _own_and_deltas(core) == (0, 1)


def test_a_write_refused_before_the_store_changes_nothing(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    a, _ = pair
    _ws(a).knowledge.ingest_text("alpha.txt", ALPHA)
    _sources(a, "red pump")
    with pytest.raises(Exception):  # noqa: B017,PT011 - the blank text's 400
        _ws(a).knowledge.ingest_text("blank.txt", "   ")
    _ws(a).knowledge.ingest_text("gamma.txt", GAMMA)
    assert _sources(a, "typewriters Lisbon")[0] == "gamma.txt"
    assert _own_and_deltas(a) == (1, 0)
    assert [d.source for d in _ws(a).knowledge.list().documents] == ["gamma.txt", "alpha.txt"]


def test_many_writes_without_a_read_are_added_in_bounded_batches(
    pair: tuple[AgentCore, AgentCore], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcore.knowledge.vectors import _sync

    monkeypatch.setattr(_sync, "_MAX_PENDING_ROWS", 3)  # a few rows held back at most
    a, _ = pair
    ws = _ws(a)
    ws.knowledge.ingest_text("alpha.txt", ALPHA)
    _sources(a, "red pump")
    for number in range(10):
        ws.knowledge.ingest_text(f"{number}.txt", f"Item {number}. Lonely lighthouse {number}.")
    entry = a.indexes._loaded.get((ws.organization_id, ws.environment))
    assert entry is not None
    assert entry.pending_rows <= 3 and seen(a)["index.own_write"] >= 6  # flushed on the way
    assert entry.pending  # the budget charges the rows held back, counted as they came
    held = sum(array.nbytes for rows in entry.pending for array in rows)
    slot = a.indexes.budget._slots[(ws.organization_id, ws.environment)]
    assert held and slot.nbytes == entry.index.resident_bytes + held
    found = ws.knowledge.search("lonely lighthouse", top_k=20).results
    assert sorted(r.source for r in found if r.source != "alpha.txt") == [
        f"{n}.txt" for n in range(10)
    ]
    assert _own_and_deltas(a) == (10, 0)


# nothing half-written on a crash ----------------------------------------------------------

CRASH_SCRIPT = """
import sys
from agentcore import AgentCore

core = AgentCore.open(sys.argv[1], start_workers=False)
knowledge = core.workspace("acme", "test").knowledge
knowledge.ingest_text("first.txt", "The first document is stored before the signal.")
knowledge.search("first")
print("ready", flush=True)
number = 0
while True:
    text = " ".join(f"word{number + i} sentence{i}." for i in range(120))
    knowledge.ingest_text(f"doc-{number}.txt", text)
    number += 1
"""


def test_a_process_killed_mid_ingestion_leaves_only_whole_documents(db_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", CRASH_SCRIPT, str(db_path)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # many documents, the kill lands mid-way through one of them
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    with AgentCore.open(str(db_path), start_workers=False) as core:
        ws = _ws(core)
        documents: list[Any] = []
        cursor = None
        while True:
            page = ws.knowledge.list(limit=100, starting_after=cursor)
            documents += page.documents
            if not page.has_more:
                break
            cursor = page.documents[-1].id
        assert len(documents) > 2
        store = core.store
        ids, _ = store.load_vectors(ws.organization_id, ws.environment, 1024)
        by_document: dict[str, int] = {}
        for chunk in store.get_chunks(ids.tolist()).values():
            by_document[chunk.document_id] = by_document.get(chunk.document_id, 0) + 1
        # every stored document has every chunk and every vector, and nothing else is stored
        assert {d.id: d.chunks for d in documents} == by_document
        assert len(ids) == sum(d.chunks for d in documents)
        assert _sources(core, "first document stored signal")[0] == "first.txt"
