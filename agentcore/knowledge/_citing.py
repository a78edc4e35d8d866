"""Citing pages: which pages of a retrieved chunk an answer actually drew on, and the
passages of it the answer used, as quotes.

A chunk may span pages (``Chunk.page_offsets`` say where each page's text starts in
it). An answer cites the pages of the chunk sentences it used: those it quotes, and
for a paraphrase, the sentences that best match it. Only when nothing in the answer
can be traced to a sentence does a citation name every page of the chunk (and quote
the chunk's opening).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agentcore.knowledge._chunking import pages_in_span, sentence_spans, split_sentences

__all__ = ["MAX_QUOTE_CHARS", "Support", "support", "supporting_pages"]

#: Answer sentences shorter than this ("Yes.", "See above.") are not traced.
MIN_SENTENCE_CHARS = 12
#: A paraphrased sentence is traced to the chunk sentence sharing the most of its
#: content words (weighted by rarity in the chunk) when that holds at least this share.
MATCH_SHARE = 0.5
#: The longest quote: a longer passage is cut at the last sentence or word end before it.
MAX_QUOTE_CHARS = 500

_WORD = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s+")
_FUNCTION_WORDS_TEXT = """
    a an and are as at be been being but by can could did do does for from had has have
    he her his how i if in into is it its may might no not of on or our she should so
    such than that the their them then there these they this those to was we were what
    when where which while who whom why will with would you your also about after
"""
_FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())
_PREFIX = 5  # words sharing their first five letters count as one ("exports", "exporting")


@dataclass(frozen=True)
class Support:
    """What an answer drew on in one chunk: the pages to cite, and the passages (verbatim
    from the chunk's text, each at most ``MAX_QUOTE_CHARS``) to quote, in the chunk's
    order. ``traced`` says whether any answer sentence was traced to the chunk (when
    none was, every page is cited and the quote is the chunk's opening)."""

    pages: list[int]
    quotes: list[str]
    traced: bool


def supporting_pages(
    chunks: Sequence[tuple[str, list[int], list[int]]], answer: str
) -> list[list[int]]:
    """The pages of each cited chunk that ``answer`` draws on, sorted (``support``'s
    ``pages``)."""
    return [found.pages for found in support(chunks, answer)]


def support(chunks: Sequence[tuple[str, list[int], list[int]]], answer: str) -> list[Support]:
    """What ``answer`` draws on in each of ``chunks``: its pages and its quotes.

    ``chunks`` are ``(text, pages, page_offsets)`` of the chunks an answer cites. Each
    answer sentence is found verbatim (whitespace aside) in the chunks, or else matched
    to the chunk sentence(s) sharing the largest weight of its content words (rarer
    words weigh more) if they hold at least ``MATCH_SHARE`` of it; each chunk cites the
    pages of the sentences traced to it (both pages for a sentence that runs over a
    page break) and quotes them, neighbouring ones as one passage. A chunk to which no
    answer sentence can be traced cites all its pages.
    """
    spans = [sentence_spans(text) for text, _pages, _offsets in chunks]
    squeezed = [_squeeze(text) for text, _pages, _offsets in chunks]
    terms = [
        [_terms(text[a:b]) for a, b in found]
        for (text, _, _), found in zip(chunks, spans, strict=True)
    ]
    frequency = Counter(term for found in terms for sentence in found for term in sentence)
    count = sum(len(found) for found in spans)
    rarity = {term: math.log(1.0 + count / seen) for term, seen in frequency.items()}
    used: list[list[tuple[int, int]]] = [[] for _ in chunks]
    for sentence in split_sentences(answer):
        flat = _SPACE.sub(" ", sentence).strip()
        if len(flat) < MIN_SENTENCE_CHARS:
            continue
        quoted = False
        for number, (text, where) in enumerate(squeezed):
            at = text.find(flat)
            if at >= 0:
                quoted = True
                used[number].append((where[at], where[at + len(flat) - 1] + 1))
        if not quoted:
            for number, index in _best_matches(_terms(flat), terms, rarity):
                used[number].append(spans[number][index])
    return [
        _supported(text, pages, offsets, found)
        for (text, pages, offsets), found in zip(chunks, used, strict=True)
    ]


def _supported(
    text: str, pages: list[int], offsets: list[int], used: list[tuple[int, int]]
) -> Support:
    """One chunk's ``Support`` from the spans of its text the answer used."""
    if not used:
        opening = _bounded(text.strip())
        return Support(list(pages), [opening] if opening else [], traced=False)
    cited: set[int] = set()
    for start, end in used:
        cited.update(pages_in_span(pages, offsets, start, end))
    quotes = [_bounded(text[start:end]) for start, end in _merged(text, used)]
    return Support(sorted(cited), [quote for quote in quotes if quote], traced=True)


def _merged(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, those overlapping or apart only by whitespace joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and (start <= merged[-1][1] or not text[merged[-1][1] : start].strip()):
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _bounded(passage: str) -> str:
    """``passage`` if it is at most ``MAX_QUOTE_CHARS`` long, else its start cut at the
    last sentence end (or else word end) within the bound: still verbatim."""
    passage = passage.strip()
    if len(passage) <= MAX_QUOTE_CHARS:
        return passage
    head = passage[:MAX_QUOTE_CHARS]
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s)", head)]
    if ends and ends[-1] >= MAX_QUOTE_CHARS // 2:
        return head[: ends[-1]]
    cut = head.rfind(" ")
    return (head[:cut] if cut > 0 else head).rstrip()


def _best_matches(
    wanted: set[str], terms: list[list[set[str]]], rarity: dict[str, float]
) -> list[tuple[int, int]]:
    """``(chunk, sentence)`` numbers of the chunk sentences that best match an answer
    sentence's terms, or none when the best holds less than ``MATCH_SHARE`` of them."""
    known = [term for term in wanted if term in rarity]
    total = sum(rarity[term] for term in known)
    # One shared word is no evidence when the sentence says more than one thing.
    if total <= 0 or (len(known) < 2 and len(wanted) > 1):
        return []
    scores = {
        (number, index): sum(rarity[term] for term in known if term in sentence)
        for number, found in enumerate(terms)
        for index, sentence in enumerate(found)
    }
    best = max(scores.values(), default=0.0)
    if best < MATCH_SHARE * total:
        return []
    return [place for place, score in scores.items() if score >= best - 1e-9]


def _terms(text: str) -> set[str]:
    """Content words of ``text``: case-folded, function words dropped, cut to a prefix."""
    words = (word.casefold() for word in _WORD.findall(text))
    return {word[:_PREFIX] for word in words if word not in _FUNCTION_WORDS}


def _squeeze(text: str) -> tuple[str, list[int]]:
    """``text`` with each whitespace run folded to one space, and where each of its
    characters is in ``text``."""
    out: list[str] = []
    where: list[int] = []
    for match in re.finditer(r"\S+", text):
        if out:
            out.append(" ")
            where.append(match.start() - 1)
        out.append(match.group())
        where.extend(range(match.start(), match.end()))
    return "".join(out), where
