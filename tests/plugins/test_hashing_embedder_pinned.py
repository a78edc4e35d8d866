"""hashing-v1 vectors are pinned: a faster implementation must give identical bits.

Stored indexes hold vectors made by earlier versions, and queries are embedded by the
current one; any drift would silently degrade search. The fingerprints in
``tests/data/hashing_v1_pinned.json`` were made by the original implementation
(``benchmarks/hashing_embedder_reference.py``; see ``tests/embedder_corpus.py``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest
from embedder_corpus import DATA, DIMENSIONS, exact_row, fingerprint

from agentcore.plugins import hashing_embedder
from agentcore.plugins.hashing_embedder import HashingEmbedder

PINNED: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
TEXTS: list[str] = PINNED["texts"]


def test_the_corpus_is_varied() -> None:
    # A pin over a dull corpus would pin little: check it covers the hard cases.
    assert "" in TEXTS and any(not t.isascii() for t in TEXTS)
    assert any(len(t) > 1000 for t in TEXTS) and any(c.isdigit() for t in TEXTS for c in t)
    assert len(set(PINNED["fingerprints"]["1024"])) > 200


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_each_text_embeds_to_its_pinned_bits(dimension: int) -> None:
    embedder = HashingEmbedder(dimension=dimension)
    expected = PINNED["fingerprints"][str(dimension)]
    found = [fingerprint(embedder.embed([text])[0]) for text in TEXTS]
    drifted = [
        TEXTS[i][:60] for i, (a, b) in enumerate(zip(found, expected, strict=True)) if a != b
    ]
    assert drifted == []


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_one_batch_embeds_to_its_pinned_bits(dimension: int) -> None:
    vectors = HashingEmbedder(dimension=dimension).embed(TEXTS)
    assert vectors.shape == (len(TEXTS), dimension) and vectors.dtype == np.float32
    assert fingerprint(vectors.ravel()) == PINNED["batch"][str(dimension)]


def test_warm_cache_gives_the_same_bits() -> None:
    # The second pass reads every stem from the caches the first pass filled.
    embedder = HashingEmbedder()
    first = embedder.embed(TEXTS)
    again = embedder.embed(list(reversed(TEXTS)))[::-1]
    assert np.array_equal(first, again)
    assert fingerprint(first.ravel()) == PINNED["batch"]["1024"]


def test_exact_rows() -> None:
    embedder = HashingEmbedder()
    for index, row in PINNED["exact_rows"].items():
        assert exact_row(embedder.embed([TEXTS[int(index)]])[0]) == row


def test_tokens_are_pinned() -> None:
    embedder = HashingEmbedder(dimension=1)
    assert [embedder.tokens(text) for text in TEXTS] == PINNED["tokens"]


def test_cache_overflow_keeps_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # A tiny cache is emptied again and again mid-corpus; vectors must not notice.
    monkeypatch.setattr(HashingEmbedder, "_CACHE_LIMIT", 7)
    embedder = HashingEmbedder()
    rows = [embedder.embed([text])[0] for text in TEXTS]
    assert [fingerprint(row) for row in rows] == PINNED["fingerprints"]["1024"]
    assert fingerprint(embedder.embed(TEXTS).ravel()) == PINNED["batch"]["1024"]


def test_the_exact_sort_path_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fast path sorts one packed key and falls back to a two-key sort when two
    # features could tie in it; force the fallback everywhere and compare.
    monkeypatch.setattr(hashing_embedder, "_KEY_SHIFT_LIMIT", 0)
    assert fingerprint(HashingEmbedder().embed(TEXTS).ravel()) == PINNED["batch"]["1024"]


def test_large_batches_are_embedded_in_slices_with_the_same_bits() -> None:
    embedder = HashingEmbedder(dimension=64)
    assert len(TEXTS) > 3 * HashingEmbedder._BATCH_ROWS
    assert fingerprint(embedder.embed(TEXTS).ravel()) == PINNED["batch"]["64"]
    assert embedder.embed(TEXTS[:0]).shape == (0, 64)


def test_threads_sharing_one_embedder_get_the_pinned_bits() -> None:
    embedder = HashingEmbedder()
    expected = PINNED["fingerprints"]["1024"]
    failures: list[int] = []

    def work(offset: int) -> None:
        order = TEXTS[offset:] + TEXTS[:offset]
        for position, row in enumerate(embedder.embed(order)):
            if fingerprint(row) != expected[(position + offset) % len(TEXTS)]:
                failures.append(position)

    threads = [threading.Thread(target=work, args=(n * 37,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
