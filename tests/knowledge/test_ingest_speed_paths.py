"""The quicker forms the ingestion path takes give exactly what the plain forms gave.

Sentence cutting for term counts (a regex without a lookbehind, one branch for text
without line breaks), ASCII tokens without apostrophes (``str.translate`` and
``split``), counting stems with ``StemTokenizer.stem_frequencies``, the embedder's
one-text sort and its table of tf factors, and ``embed_passages``' check of the norms:
each is compared with the form it replaced, on hand-made edge cases and on seeded
random strings over the characters that matter.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import numpy as np
import pytest

from agentcore.knowledge.terms import TermCounter, _sentences, count_terms
from agentcore.knowledge.text import _ASCII_TOKEN, StemTokenizer, raw_tokens, stems
from agentcore.knowledge.vectors import embed_passages, unit_rows
from agentcore.plugins import hashing_embedder
from agentcore.plugins.hashing_embedder import HashingEmbedder, _tf_factors

tokens_of, stem_frequencies = stems.tokens_of, stems.stem_frequencies

# the rule as it was written before: re.split with a lookbehind
_OLD_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|\n\s*\n")

EDGE_TEXTS = [
    "",
    " ",
    "a.\n\nb",
    "a!.  b",
    'x.) y? "z"  w\n\n\nq. ',
    " . . ",
    "...   ",
    "a\n\n.  b",
    "Dr. Smith left.' Then  he came back!\" Why?) (Yes.] no",
    "One.\u00a0Two.\u2003Three\n \nFour",
    "End.”  Next’s’ ‘quote’.’\tGo",
]


def _random_texts(alphabet: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(alphabet, k=rng.randrange(0, 30))) for _ in range(count)]


def _old_count(texts: list[str]) -> tuple[int, Counter[str]]:
    sentences = [
        piece for text in texts for piece in _OLD_SENTENCE_END.split(text) if piece.strip()
    ]
    stems: Counter[str] = Counter()
    for found in tokens_of(sentences):
        stems.update(set(found))
    return len(sentences), stems


def test_sentences_are_cut_as_re_split_cut_them() -> None:
    alphabet = [*".!?\"'”’)]\n \t\u00a0", "ab", "Z", "x."]
    for text in EDGE_TEXTS + _random_texts(alphabet, 20_000, seed=1):
        assert _sentences(text) == _OLD_SENTENCE_END.split(text), repr(text)


def test_term_counts_equal_the_old_counting() -> None:
    alphabet = [*".!? \n'", "Blades", "blade", "the", "Don't", "O'Neill", "café", "ﬁ", "1"]
    texts = EDGE_TEXTS + _random_texts(alphabet, 3_000, seed=2)
    for text in texts:
        expected_sentences, expected = _old_count([text])
        for counts in (
            count_terms([text], tokens_of, stem_frequencies),
            count_terms([text], tokens_of),
        ):
            assert counts.sentences == expected_sentences
            assert counts.stems == expected
    counter = TermCounter(tokens_of, stem_frequencies)
    whole = counter.count(texts)
    assert (whole.sentences, whole.stems) == _old_count(texts)
    assert count_terms([], tokens_of, stem_frequencies).sentences == 0


def test_stem_frequencies_count_each_text_once_per_stem() -> None:
    tokenizer = StemTokenizer()
    texts = ["Blades, blades and more blades.", "the of and", "", "Blade BLADES! Turbines"]
    assert tokenizer.stem_frequencies(texts) == Counter({"blade": 2, "turbine": 1})
    assert tokenizer.stem_frequencies([]) == Counter()
    # the same counts again once every token is cached
    assert tokenizer.stem_frequencies(texts) == Counter({"blade": 2, "turbine": 1})


def test_ascii_tokens_without_the_regex_are_the_regex_tokens() -> None:
    alphabet = [chr(code) for code in range(128)] + ["ab", "Zz9", " ", " "]
    texts = _random_texts(alphabet, 30_000, seed=3) + ["x86_64 e.g. 3.14", "a-b_c\td\x00e"]
    for text in texts:
        assert raw_tokens(text) == _ASCII_TOKEN.findall(text), repr(text)
    assert raw_tokens("don't stop") == ["don't", "stop"]  # apostrophes: the regex
    assert raw_tokens("") == []


def test_tf_factors_from_the_table_are_the_computed_ones() -> None:
    counts = np.arange(1, 70_000, dtype=np.intp)
    computed = (1.0 + np.log(counts)).astype(np.float32)
    assert _tf_factors(counts[: 1 << 15], 1 << 15).tobytes() == computed[: 1 << 15].tobytes()
    # past the table's end the factors are computed
    assert _tf_factors(counts, 1 << 17).tobytes() == computed.tobytes()
    assert _tf_factors(counts[:3], 3).tolist() == [1.0, *computed[1:3].tolist()]


def test_a_key_tie_in_one_text_falls_back_to_the_exact_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two different hashes that differ only in the bits the one-text key gives the
    # position tie in it; listed out of order they must be noticed and sorted exactly.
    base = 0xABCDEF0000000000  # low bits zero
    high, low = np.uint64(base + 5), np.uint64(base + 1)
    hashes = np.array([high, np.uint64(5), low, high, low, low], dtype=np.uint64)
    exact_calls: list[int] = []
    exact = hashing_embedder._exact_first

    def counting(rows: object, values: np.ndarray) -> object:
        exact_calls.append(len(values))
        return exact(rows, values)  # type: ignore[arg-type]

    monkeypatch.setattr(hashing_embedder, "_exact_first", counting)
    repeats, where = hashing_embedder._first_occurrences(None, hashes, 1)
    assert exact_calls == [6]  # the tie was noticed
    assert where.tolist() == [1, 2, 0]  # ascending hash, each at its first position
    assert repeats is not None and repeats.tolist() == [1, 3, 2]
    # a tie listed in order needs no fallback and gives the same
    in_order = np.array([np.uint64(5), low, high, low], dtype=np.uint64)
    repeats, where = hashing_embedder._first_occurrences(None, in_order, 1)
    assert exact_calls == [6]
    assert where.tolist() == [0, 1, 2] and repeats is not None and repeats.tolist() == [1, 2, 1]
    # nothing repeated: no repeat counts
    none, order = hashing_embedder._first_occurrences(None, hashes[:3], 1)
    assert none is None and order.tolist() == [1, 2, 0]


def test_embed_passages_keeps_rows_as_before() -> None:
    embedder = HashingEmbedder(dimension=64)
    texts = ["Blades are stored in Rotterdam.", "the of and", "Turbines turn."]
    vectors, keep = embed_passages(embedder, texts, max_token_chars=None)
    assert keep.tolist() == [True, False, True]
    assert not vectors[1].any()
    expected = unit_rows(embedder.embed(texts))  # the whole-array form, not the fast check
    assert vectors.tobytes() == expected.tobytes()
    vectors, keep = embed_passages(embedder, texts[::2], max_token_chars=None)
    assert keep.dtype == bool and keep.tolist() == [True, True]
    vectors, keep = embed_passages(embedder, [], max_token_chars=None)
    assert vectors.shape == (0, 64) and keep.shape == (0,)
