"""How rare each word is in a workspace: sentence frequencies kept as documents come and go.

Choosing which retrieved sentence answers a question weighs the question's words by
their rarity (a word most sentences hold says little). Rarity measured over the few
retrieved passages alone is noisy, so each document's counts are stored beside it
when it is indexed and dropped with it: how many sentences it has and, per word stem,
how many of them hold the stem. A workspace's figures are the sums over its ready
documents, read for the few stems of one question at chat time (one indexed query;
nothing is ever recounted).

Sentences are counted per chunk: a sentence that chunk overlap repeats counts once per
chunk that holds it, which keeps every document's counts independent of the others.
For speed they are cut by a plain rule (after ``.``, ``!`` or ``?`` and any closing
quote or bracket, then whitespace; and at blank lines) rather than by the chunker's
sentence splitter, which also keeps abbreviations and decimals whole: these are
counts for weighing words, and on the SQuAD sample both give the same answers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["TermCounter", "TermCounts", "TermStats", "count_terms"]

#: The stems of each of several texts, as the chat model's tokenizer gives them.
Tokenizer = Callable[[Sequence[str]], list[list[str]]]
#: Per stem, how many of several texts hold it (the same stems as the ``Tokenizer``'s):
#: the counts ``count_terms`` makes, in one call (``StemTokenizer.stem_frequencies``).
Frequencies = Callable[[Sequence[str]], Counter[str]]

# Where sentences end: after ``.``, ``!`` or ``?`` and any closing quote or bracket,
# then whitespace; and at blank lines. ``re.split`` by the same rule written with a
# lookbehind (``(?<=[.!?])...``) tries the lookbehind at every character; this form
# opens with the punctuation, so the engine skips ahead to it, and ``_sentences``
# keeps the punctuation in the sentence it ends: the same pieces, found sooner.
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+|\n\s*\n")
# The same rule for a text without line breaks (no blank line to find): one branch,
# which the engine searches for several times faster than the alternation.
_SENTENCE_END_IN_LINE = re.compile(r"[.!?][\"'”’)\]]*\s+")


@dataclass(frozen=True)
class TermCounts:
    """The counts of one document: its sentences, and per stem the sentences holding it."""

    sentences: int
    stems: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class TermStats:
    """A workspace's sentence frequencies for the stems of one question.

    ``sentences`` is how many sentences the workspace's ready documents hold;
    ``counts[stem]`` how many of them hold ``stem`` (a stem asked about but found in
    none is absent or 0). ``sentences == 0`` means no statistics are kept (for
    example, documents indexed before they were).
    """

    sentences: int
    counts: Mapping[str, int] = field(default_factory=dict)


class TermCounter:
    """Counts the sentences of chunk texts and the stems they hold, with one tokenizer.

    :param tokenize: the stems of each of several texts (e.g.
        ``StemTokenizer.tokens_of``); the same one must read the questions.
    :param frequencies: optional, the same tokenizer's counts of how many texts hold
        each stem, in one call (``StemTokenizer.stem_frequencies``): quicker than
        counting ``tokenize``'s lists, with the same result.
    """

    def __init__(self, tokenize: Tokenizer, frequencies: Frequencies | None = None) -> None:
        self._tokenize = tokenize
        self._frequencies = frequencies

    def count(self, texts: Iterable[str]) -> TermCounts:
        """The sentences of ``texts`` (chunk texts) and, per stem, how many hold it."""
        return count_terms(texts, self._tokenize, self._frequencies)

    def stems(self, text: str) -> list[str]:
        """The distinct stems of ``text`` (a question), in order of first appearance."""
        [found] = self._tokenize([text])
        return list(dict.fromkeys(found))


def count_terms(
    texts: Iterable[str], tokenize: Tokenizer, frequencies: Frequencies | None = None
) -> TermCounts:
    """Sentence counts of ``texts``: how many sentences, and per stem how many hold it.

    A sentence without any stem (punctuation, numbers the tokenizer drops) still
    counts as a sentence. Empty texts add nothing. ``frequencies``, when given, must
    count ``tokenize``'s stems (it only saves building their lists).
    """
    sentences = [
        sentence
        for text in texts
        for sentence in _sentences(text)
        if sentence and not sentence.isspace()
    ]
    if frequencies is not None:
        return TermCounts(len(sentences), frequencies(sentences))
    stems: Counter[str] = Counter()
    for found in tokenize(sentences):
        stems.update(set(found))
    return TermCounts(len(sentences), stems)


def _sentences(text: str) -> list[str]:
    """``text`` cut where ``_SENTENCE_END`` matches, each cut's punctuation kept before
    it (pieces may be empty or blank, as ``re.split``'s are)."""
    pieces: list[str] = []
    start = 0
    ends = _SENTENCE_END if "\n" in text else _SENTENCE_END_IN_LINE
    for match in ends.finditer(text):
        end = match.start()
        if text[end] != "\n":  # a blank line has no punctuation to keep
            end += 1
        pieces.append(text[start:end])
        start = match.end()
    pieces.append(text[start:])
    return pieces
