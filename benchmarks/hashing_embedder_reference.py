"""REFERENCE ONLY — the hashing-v1 embedder as it was before vectorisation (main 14489c2).

Kept verbatim (imports and hook registration trimmed) so `embedder_speed.py` can time
the old and the new implementation in one run and check that they agree, and so the
pinned vectors in `tests/data/hashing_v1_pinned.json` can be regenerated from the
original code. Not part of the package; never import it from `agentcore`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agentcore.knowledge.embedders import EmbedKind

__all__ = ["STOP_WORDS", "HashingEmbedder"]

_STOP_WORDS_TEXT = """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he her here hers herself him himself his how i if in into is isn't it
    its itself let's me more most mustn't my myself no nor not of off on once only or
    other ought our ours ourselves out over own same shan't she should shouldn't so some
    such than that the their theirs them themselves then there these they this those
    through to too under until up very was wasn't we were weren't what when where which
    while who whom why will with won't would wouldn't you your yours yourself yourselves
    also may might must shall upon yet within without whose however thus whether whereas
    s t d ll m re ve often usually generally commonly frequently typically specifically
    particularly especially mostly many much several various certain called use used
    using
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def _stable_hash(feature: str) -> int:
    # blake2b, not hash(): Python salts str hashes per process, vectors must not change.
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


def _stem(word: str) -> str:
    """A light suffix stripper: enough to match plurals and common verb forms."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith(("ies", "ied")) and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
            if word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running -> run, stopped -> stop
            break
    return word


class HashingEmbedder:  # the original, per-token Python implementation
    """Deterministic bag-of-features embeddings that need no model and no download.

    Each text becomes lowercased NFKC word tokens without stop words, lightly stemmed.
    Features are the stems, adjacent stem pairs and the character 3- to 5-grams of
    each word (which match inflections and compounds the stemmer misses). Each
    feature is hashed with a stable 64-bit hash to a bucket and a sign, weighted by
    its type and by ``1 + log(tf)``; rows are L2-normalised. Text with no features
    embeds as a zero row. Queries and passages are embedded alike.

    :param dimension: the vector length.
    """

    name = "hashing-v1"

    #: Weights of word, word-pair and character-n-gram features. A word's n-grams
    #: share ``CHAR_WEIGHT`` so long words do not drown short ones.
    WORD_WEIGHT = 1.0
    PAIR_WEIGHT = 0.6
    CHAR_WEIGHT = 1.0
    CHAR_SIZES = (3, 4, 5)
    _CACHE_LIMIT = 200_000

    def __init__(self, dimension: int = 1024) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        self.dimension = dimension
        # stem -> (feature hashes, weights) of its word and n-gram features.
        self._features: dict[str, tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]] = {}

    def tokens(self, text: str) -> list[str]:
        """The stems that ``embed`` uses for ``text``, in order."""
        normal = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
        stems: list[str] = []
        for token in _TOKEN.findall(normal):
            word = token.casefold()
            word = word[:-2] if word.endswith("'s") else word
            if word in STOP_WORDS:
                continue
            # Lone capitals are names ("class P", "Mr. X"); lone lowercase letters
            # are debris of abbreviations and contractions.
            if len(word) == 1 and token.islower():
                continue
            stems.append(_stem(word.replace("'", "")))
        return stems

    def _word_features(self, stem: str) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        cached = self._features.get(stem)
        if cached is not None:
            return cached
        hashes = [_stable_hash("w\x00" + stem)]
        weights = [self.WORD_WEIGHT]
        padded = f"<{stem}>"
        grams = [padded[i : i + n] for n in self.CHAR_SIZES for i in range(len(padded) - n + 1)]
        if grams:
            share = self.CHAR_WEIGHT / np.sqrt(len(grams))
            hashes += [_stable_hash("c\x00" + gram) for gram in grams]
            weights += [share] * len(grams)
        result = (np.array(hashes, dtype=np.uint64), np.array(weights, dtype=np.float32))
        if len(self._features) >= self._CACHE_LIMIT:
            self._features.clear()
        self._features[stem] = result
        return result

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> npt.NDArray[np.float32]:
        """Embed ``texts`` as rows of a ``(len(texts), dimension)`` float32 array."""
        rows: list[npt.NDArray[np.uint64]] = []
        hashes: list[npt.NDArray[np.uint64]] = []
        weights: list[npt.NDArray[np.float32]] = []
        for row, text in enumerate(texts):
            stems = self.tokens(text)
            if not stems:
                continue
            parts = [self._word_features(stem) for stem in stems]
            word_hashes = np.array([part[0][0] for part in parts], dtype=np.uint64)
            pair_hashes = _mix(word_hashes[:-1], word_hashes[1:])
            row_hashes = np.concatenate([*(part[0] for part in parts), pair_hashes])
            row_weights = np.concatenate(
                [
                    *(part[1] for part in parts),
                    np.full(len(pair_hashes), self.PAIR_WEIGHT, dtype=np.float32),
                ]
            )
            hashes.append(row_hashes)
            weights.append(row_weights)
            rows.append(np.full(len(row_hashes), row, dtype=np.uint64))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not hashes:
            return out
        all_rows = np.concatenate(rows)
        all_hashes = np.concatenate(hashes)
        all_weights = np.concatenate(weights)
        # Sublinear term frequency per (row, feature): count repeats of each pair.
        order = np.lexsort((all_hashes, all_rows))
        all_rows, all_hashes, all_weights = all_rows[order], all_hashes[order], all_weights[order]
        new = np.ones(len(all_rows), dtype=bool)
        new[1:] = (all_rows[1:] != all_rows[:-1]) | (all_hashes[1:] != all_hashes[:-1])
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, len(all_rows)))
        feature_rows = all_rows[starts].astype(np.int64)
        feature_hashes = all_hashes[starts]
        values = all_weights[starts] * (1.0 + np.log(counts)).astype(np.float32)
        signs = np.where(feature_hashes & np.uint64(1), 1.0, -1.0).astype(np.float32)
        buckets = ((feature_hashes >> np.uint64(1)) % np.uint64(self.dimension)).astype(np.int64)
        flat = np.bincount(
            feature_rows * self.dimension + buckets,
            weights=values * signs,
            minlength=len(texts) * self.dimension,
        )
        out = flat.reshape(len(texts), self.dimension).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


def _mix(left: npt.NDArray[np.uint64], right: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Combine two feature hashes into a well-spread, order-sensitive third."""
    with np.errstate(over="ignore"):
        value = left * np.uint64(0x9E3779B97F4A7C15) + (right ^ np.uint64(0x632BE59BD9B4E019))
        value ^= value >> np.uint64(31)
        value *= np.uint64(0xBF58476D1CE4E5B9)
        value ^= value >> np.uint64(29)
    return value
