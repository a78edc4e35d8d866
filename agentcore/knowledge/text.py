"""Text analysis shared by search, term counts and the built-in plugins: word tokens,
stop words and a light stemmer.

One tokenizer for retrieval and answering: the same stop words and stemmer make a
question match a sentence (the extractive model) exactly when it would match its chunk
(keyword search, the hashing embedder), and the workspace's sentence frequencies are
counted with it too. The built-in plugins import it; nothing here imports a plugin.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from typing import cast

__all__ = ["STEMS_VERSION", "STOP_WORDS", "StemTokenizer", "raw_tokens", "stem_of", "stems"]

#: Names what ``StemTokenizer`` makes of a text: change it whenever ``raw_tokens``,
#: ``STOP_WORDS`` or ``stem_of`` would give other stems, so that indexes kept in files
#: (keyword files) built with the old stems are rebuilt, never read.
STEMS_VERSION = "stems-1"

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

# Letters and digits, possibly joined by one apostrophe. The quantifiers are possessive:
# nothing follows that could make them give characters back, so the matches are the
# same, found without keeping backtracking state. On ASCII text ``[^\W_]`` is exactly
# ``[A-Za-z0-9]``, which the engine tests faster.
_TOKEN = re.compile(r"[^\W_]++(?:'[^\W_]++)?+")
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]++(?:'[A-Za-z0-9]++)?+")
# Every ASCII character but letters and digits, to a space (for ``raw_tokens``).
# Letters and digits map to themselves rather than being left out: ``str.translate``
# looks each distinct character up, and a character missing from the table costs a
# KeyError raised and caught inside it (about a fifth of the call on English text).
_NOT_ALNUM = {code: chr(code) if chr(code).isalnum() else " " for code in range(128)}


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


def stem_of(token: str) -> str | None:
    """The stem of one raw token (``raw_tokens``), or ``None`` when it is dropped."""
    word = token.casefold()
    word = word[:-2] if word.endswith("'s") else word
    # Lone capitals are names ("class P", "Mr. X"); lone lowercase letters are
    # debris of abbreviations and contractions.
    if word in STOP_WORDS or (len(word) == 1 and token.islower()):
        return None
    return _stem(word.replace("'", ""))


class _StemCache(dict[str, str | None]):
    """Each token's stem (``None``: dropped), learnt by the lookup that misses it: a
    lookup that hits stays a C call (``map(cache.__getitem__, tokens)``), and one that
    misses stems the token once and keeps it. Two threads missing the same token at
    once store the same stem."""

    def __missing__(self, token: str) -> str | None:
        stem = self[token] = stem_of(token)
        return stem


class StemTokenizer:
    """The stems of texts: ``raw_tokens``, each through ``stem_of``.

    The hashing embedder reads the same stems (and learns each new stem's features as
    well); keyword search, the workspace term counts and the extractive chat model read
    text with this. Each token's stem is cached (started afresh once the cache holds
    ``_CACHE_LIMIT`` tokens, at the next call). Thread-safe.
    """

    _CACHE_LIMIT = 800_000

    def __init__(self) -> None:
        self._stems = _StemCache()

    def tokens(self, text: str) -> list[str]:
        """The stems of ``text``, in order."""
        [found] = self.tokens_of([text])
        return found

    def tokens_of(self, texts: Sequence[str]) -> list[list[str]]:
        """``tokens(text)`` of each of ``texts``."""
        stem = self._cache().__getitem__
        # a stem is never empty, so only a dropped token (None) is falsy
        return [list(filter(None, map(stem, raw_tokens(text)))) for text in texts]

    def stem_frequencies(self, texts: Sequence[str]) -> Counter[str]:
        """Per stem, how many of ``texts`` hold it (``tokens_of`` counted once per text),
        without building the stem lists: what ``TermCounter`` counts sentences with."""
        stem = self._cache().__getitem__
        # one count over every text's distinct stems (each ``update`` call first asks
        # whether its argument is a Mapping, an ABC check that costs more than a
        # sentence's counting); a dropped token adds to None, taken out below
        counts: Counter[str | None] = Counter(
            chain.from_iterable(set(map(stem, raw_tokens(text))) for text in texts)
        )
        counts.pop(None, None)
        return cast("Counter[str]", counts)  # no None left

    def _cache(self) -> _StemCache:
        """The cache, started afresh when full (a call keeps the one it got)."""
        cache = self._stems
        if len(cache) >= self._CACHE_LIMIT:
            cache = self._stems = _StemCache()
        return cache


def raw_tokens(text: str) -> list[str]:
    """The word tokens of ``text`` before case folding, stop words and stemming."""
    if text.isascii():  # NFKC leaves ASCII as it is, and it holds no U+2019
        if "'" in text:
            return _ASCII_TOKEN.findall(text)
        # Without apostrophes a token is a maximal run of ASCII letters and digits:
        # every other character made a space, ``split`` finds the runs (quicker).
        return text.translate(_NOT_ALNUM).split()
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).replace("\u2019", "'"))


stems = StemTokenizer()
"""The process's tokenizer: the stem of a token never changes, so one cache serves every
core and plugin of the process (the core's term counts and keyword indexes, the
extractive model) instead of one copy each."""
