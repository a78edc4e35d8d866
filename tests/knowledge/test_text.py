"""StemTokenizer gives exactly HashingEmbedder's stems, without learning features."""

from __future__ import annotations

import threading

import pytest

from agentcore.knowledge.text import StemTokenizer, stem_of
from agentcore.plugins.hashing_embedder import HashingEmbedder

TEXTS = [
    "The turbine blades are stored in Rotterdam. Each blade weighs nine tonnes.",
    "",
    "   \n\t ",
    "It is what it is: the, of, and a.",  # stop words only
    "Class P and Mr. X; a b c d e. Don't stop! O'Neill's running stopped, cities' ties.",
    "Ärzte öffnen die Praxis. Straße, STRASSE, ﬁnance (a ligature), café’s menu.",
    "1234 3.14 v2 x86_64 e.g. U.S.A. i.e.",
    "Studies studied classes bosses running ran processes analyses focus focuses",
    "!!! ... ??? ---",
]


def test_the_same_stems_as_the_embedder() -> None:
    tokenizer = StemTokenizer()
    embedder = HashingEmbedder(dimension=4)
    assert tokenizer.tokens_of(TEXTS) == embedder.tokens_of(TEXTS)
    for text in TEXTS:  # one text at a time, and again once every token is cached
        assert tokenizer.tokens(text) == embedder.tokens(text)
    assert tokenizer.tokens_of([]) == []
    assert tokenizer.tokens("Blades? BLADES! turbine blades") == [
        "blade",
        "blade",
        "turbine",
        "blade",
    ]


def test_stem_of_drops_what_the_embedder_drops() -> None:
    assert stem_of("the") is None and stem_of("a") is None  # stop word, lone lowercase
    assert stem_of("P") == "p"  # a lone capital is a name
    assert stem_of("Blades") == "blade"
    assert stem_of("O'Neill's") == "oneill"


def test_a_full_cache_starts_afresh_with_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(StemTokenizer, "_CACHE_LIMIT", 5)
    tokenizer = StemTokenizer()
    embedder = HashingEmbedder(dimension=4)
    for _ in range(3):
        assert tokenizer.tokens_of(TEXTS) == embedder.tokens_of(TEXTS)
    # past the limit the cache starts afresh, then learns one call's new tokens at once
    assert len(tokenizer._stems) <= 5 + len(set(" ".join(TEXTS).split()))


def test_threads_reading_at_once_agree() -> None:
    tokenizer = StemTokenizer()
    expected = HashingEmbedder(dimension=4).tokens_of(TEXTS)
    words = " ".join(TEXTS).split()
    extra = [" ".join(words[n:] + [f"word{n}x{k}" for k in range(50)]) for n in range(8)]
    answers: list[bool] = []

    def read() -> None:
        for _ in range(20):
            answers.append(tokenizer.tokens_of(TEXTS) == expected)
            tokenizer.tokens_of(extra)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers and all(answers)
