"""Citations name the pages of the sentences an answer used, not every page of a chunk."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import Recorder, core_with
from hypothesis import given, settings
from hypothesis import strategies as st
from pdfs import make_pdf
from test_chunking import Document, documents

from agentcore.chat import build_citations, quoted_pages
from agentcore.chat_models import ChatRequest, ChatResult, Passage
from agentcore.knowledge._chunking import chunk_pages, pages_in_span, sentence_spans
from agentcore.knowledge._citing import MAX_QUOTE_CHARS, support, supporting_pages
from agentcore.plugins.extractive import NO_ANSWER, ExtractiveModel

# --- character -> page offsets ---------------------------------------------------


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(doc=documents(), target=st.integers(60, 400), share=st.floats(0, 0.5))
def test_every_word_of_a_chunk_maps_to_the_page_it_was_printed_on(
    doc: Document, target: int, share: float
) -> None:
    for chunk in chunk_pages(doc.pages, target_chars=target, overlap_chars=int(target * share)):
        assert len(chunk.page_offsets) == len(chunk.pages)
        assert chunk.page_offsets == sorted(chunk.page_offsets)
        for word in re.finditer(r"w(\d+)x*", chunk.text, re.IGNORECASE):
            page = doc.word_page[int(word.group(1))]
            found = pages_in_span(chunk.pages, chunk.page_offsets, word.start(), word.end())
            assert found == [page], (word.group(), chunk)


def test_a_sentence_over_a_page_break_maps_to_both_pages_and_no_other() -> None:
    pages = [
        "The cafeteria opens at eight. The turbine blades are stored",
        "in the Rotterdam warehouse. The garage closes at midnight.",
    ]
    [chunk] = chunk_pages(pages)
    assert chunk.pages == [1, 2]
    # Page 2 starts inside the sentence, exactly where its text starts.
    assert chunk.text[chunk.page_offsets[1] :].startswith("in the Rotterdam warehouse.")
    spans = {chunk.text[a:b]: (a, b) for a, b in sentence_spans(chunk.text)}
    blades = spans["The turbine blades are stored in the Rotterdam warehouse."]
    assert pages_in_span(chunk.pages, chunk.page_offsets, *blades) == [1, 2]
    assert pages_in_span(
        chunk.pages, chunk.page_offsets, *spans["The garage closes at midnight."]
    ) == [2]
    assert pages_in_span(
        chunk.pages, chunk.page_offsets, *spans["The cafeteria opens at eight."]
    ) == [1]
    # The last character of page 1 and the first of page 2.
    boundary = chunk.page_offsets[1]
    assert pages_in_span(chunk.pages, chunk.page_offsets, boundary - 2, boundary - 1) == [1]
    assert pages_in_span(chunk.pages, chunk.page_offsets, boundary, boundary + 1) == [2]


def test_a_chunk_over_three_pages_keeps_each_page_start() -> None:
    pages = [
        "Alpha facts are here.",
        "Beta facts fill this page.",
        "",  # a blank page keeps its number but is no page of the chunk
        "Gamma facts close it.",
    ]
    [chunk] = chunk_pages(pages)
    assert chunk.pages == [1, 2, 4]
    for page, offset in zip(chunk.pages, chunk.page_offsets, strict=True):
        assert chunk.text[offset:].startswith(pages[page - 1])
    for page, sentence in ((1, "Alpha"), (2, "Beta"), (4, "Gamma")):
        start = chunk.text.index(sentence)
        assert pages_in_span(chunk.pages, chunk.page_offsets, start, start + 5) == [page]
    # A span over all of it touches all three pages.
    assert pages_in_span(chunk.pages, chunk.page_offsets, 0, len(chunk.text)) == [1, 2, 4]


# --- which pages an answer used -----------------------------------------------------

PAGES = [
    "The cafeteria opens at eight and serves breakfast until ten. The spare turbine blades "
    "for the northern wind farms are kept",
    "in the Rotterdam warehouse next to the harbour. The parking garage closes at midnight "
    "on weekdays and at two on Saturdays.",
    "The emergency generator is tested every Tuesday at seven by the facilities team.",
]


def passage(pages: list[str] = PAGES, number: str = "P1") -> Passage:
    [chunk] = chunk_pages(pages)
    return Passage(number, chunk.text, "ops.pdf", chunk.pages, 0.5, "doc", chunk.page_offsets)


def test_quotes_cite_their_own_pages() -> None:
    chunk = passage()
    assert chunk.pages == [1, 2, 3]
    generator = "The emergency generator is tested every Tuesday at seven by the facilities team."
    assert quoted_pages(chunk, generator) == [3]
    blades = (
        "The spare turbine blades for the northern wind farms are kept in the Rotterdam "
        "warehouse next to the harbour."
    )
    assert quoted_pages(chunk, blades) == [1, 2]
    assert quoted_pages(chunk, blades + " " + generator) == [1, 2, 3]


def test_quotes_are_found_whatever_the_whitespace() -> None:
    # Markdown-style hard wraps inside a sentence; the answer folds them to spaces.
    wrapped = ["Intro line here.\n\nThe garage\ncloses   at\tmidnight.", "Other page text."]
    chunk = passage(wrapped)
    assert chunk.pages == [1, 2]
    assert quoted_pages(chunk, "The garage closes at midnight.") == [1]
    assert quoted_pages(chunk, "Other page text, which is ok.") == [2]


def test_a_paraphrase_cites_the_page_of_the_sentence_it_best_matches() -> None:
    chunk = passage()
    llm = "Every Tuesday the facilities team runs a test of the emergency generator."
    assert quoted_pages(chunk, llm) == [3]
    two = (
        "Breakfast is served by the cafeteria until ten. On weekdays the garage closes at midnight."
    )
    assert quoted_pages(chunk, two) == [1, 2]


def test_an_answer_traced_to_nothing_cites_the_whole_chunk() -> None:
    chunk = passage()
    assert quoted_pages(chunk, "I hope this helps you with your question today.") == [1, 2, 3]
    # One shared word is no evidence for a sentence that says more.
    assert quoted_pages(chunk, "Bananas and generators both need yellow paint.") == [1, 2, 3]
    assert quoted_pages(chunk, "") == [1, 2, 3]
    assert quoted_pages(chunk, "Yes.") == [1, 2, 3]


def test_each_cited_chunk_gets_the_sentences_traced_to_it() -> None:
    first = passage()
    second = passage(
        ["Visitors sign in at the front desk and wear a badge.", "Badges are blue."], "P2"
    )
    answer = (
        "The emergency generator is tested every Tuesday at seven by the facilities team. "
        "Visitors sign in at the front desk and wear a badge."
    )
    # The first sentence is not best-matched inside the second chunk, nor the reverse.
    assert supporting_pages(
        [(p.text, p.pages, p.page_offsets) for p in (first, second)], answer
    ) == [[3], [1]]
    citations = build_citations([first, second], ["P1", "P2"], answer)
    generator = "The emergency generator is tested every Tuesday at seven by the facilities team."
    visitors = "Visitors sign in at the front desk and wear a badge."
    assert [c.model_dump() for c in citations] == [
        {"source": "ops.pdf", "pages": [1, 3], "quote": generator, "quotes": [generator, visitors]}
    ]
    # A chunk the answer never draws on, though the model cited it, keeps all its pages.
    assert build_citations([first, second], ["P2"], answer)[0].pages == [1]
    assert build_citations([first, second], ["P1"], "Nothing relevant at all here, sorry.")[
        0
    ].pages == [1, 2, 3]


def test_chunks_without_offsets_cite_all_their_pages() -> None:
    # Chunks stored before page offsets existed have none: never guess.
    old = Passage("P1", PAGES[0] + " " + PAGES[1], "ops.pdf", [1, 2], 0.5, "doc", [])
    assert quoted_pages(
        old, "The parking garage closes at midnight on weekdays and at two on Saturdays."
    ) == [1, 2]


# --- end to end over a real PDF --------------------------------------------------------


def ingest(ws: Any) -> None:
    document = ws.knowledge.ingest_file(make_pdf(PAGES), filename="ops.pdf")
    assert document.pages == 3 and document.chunks == 1  # one chunk over all three pages
    [hit] = ws.knowledge.search("turbine blades warehouse generator", top_k=1).results
    assert hit.pages == [1, 2, 3]


def test_extractive_answers_over_a_pdf_cite_the_quoted_sentences_pages(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        ws = core.workspace("acme", "test")
        ingest(ws)
        agent = ws.agents.create(name="Ops", role="support")
        expected = {
            "When is the emergency generator tested?": [3],
            "Where are the spare turbine blades kept?": [1, 2],
            "When does the parking garage close?": [2],
            "Until when is breakfast served?": [1],
        }
        for question, pages in expected.items():
            reply = ws.chat.send(agent.id, question)
            [citation] = reply.citations
            assert (citation.source, citation.pages) == ("ops.pdf", pages), reply.response
            # the quote is what the extractive model repeated, as the stored text has it
            assert citation.quote is not None and citation.quotes is None
            assert " ".join(citation.quote.split()) == reply.response, (question, citation)
            stored = ws.conversations.messages(reply.conversationId).messages[-1]
            assert stored.citations == reply.citations
    finally:
        core.close()


def test_llm_answers_are_narrowed_to_the_best_matching_sentences(tmp_path: Path) -> None:
    answers = {
        "generator?": "According to the manual, the facilities team tests the emergency "
        "generator each Tuesday at seven.",
        "garage and breakfast?": "The cafeteria serves breakfast until ten. The garage "
        "closes at midnight on weekdays.",
        "anything?": "Here is a short summary of what I found for you.",
    }

    def answer(request: ChatRequest) -> ChatResult:
        return ChatResult(text=answers[request.message], used_passage_ids=[request.passages[0].id])

    core = core_with(tmp_path, Recorder("llm", answer))
    try:
        ws = core.workspace("acme", "test")
        ingest(ws)
        agent = ws.agents.create(name="Ops", model="llm")
        cited = {q: ws.chat.send(agent.id, q).citations[0].pages for q in answers}
        assert cited == {"generator?": [3], "garage and breakfast?": [1, 2], "anything?": [1, 2, 3]}
    finally:
        core.close()


# --- a misspelt name still finds its passage ------------------------------------------


def test_a_name_misspelt_by_one_letter_is_still_answered() -> None:
    text = "Juris Hartmanis and Richard Stearns published their seminal paper in 1965."
    found = Passage("P1", text, "cc.pdf", [7], 0.4, "doc", [0])
    model = ExtractiveModel()

    def ask(question: str) -> str:
        request = ChatRequest(system_prompt="", message=question, passages=[found])
        return model.complete(request).text

    assert ask("In what year did Hatmanis and Stearn publish their paper?") == text
    assert ask("In what year did Hartmanis and Stearns publish their paper?") == text
    # Two letters off, or a name nowhere in the passages: not about these passages.
    assert ask("In what year did Hatmaniz and Stearm publish their paper?") == NO_ANSWER
    assert ask("In what year did Dijkstra publish his paper?") == NO_ANSWER


# --- what an answer quotes --------------------------------------------------------------


def chunk_of(passage: Passage) -> tuple[str, list[int], list[int]]:
    return passage.text, passage.pages, passage.page_offsets


def test_a_quote_is_the_stored_text_of_the_sentences_used() -> None:
    chunk = passage()
    answer = "The parking garage closes at midnight on weekdays and at two on Saturdays."
    [found] = support([chunk_of(chunk)], answer)
    assert found.traced and found.pages == [2] and found.quotes == [answer]
    # a paraphrase quotes the sentence it matched, not the answer's words
    llm = "Every Tuesday the facilities team runs a test of the emergency generator."
    [found] = support([chunk_of(chunk)], llm)
    assert found.quotes == [
        "The emergency generator is tested every Tuesday at seven by the facilities team."
    ]
    # whitespace as stored: the folded answer still quotes the wrapped original
    wrapped = passage(["Intro line here.\n\nThe garage\ncloses   at\tmidnight.", "Other."])
    [found] = support([chunk_of(wrapped)], "The garage closes at midnight.")
    assert found.quotes == ["The garage\ncloses   at\tmidnight."]
    assert found.quotes[0] in wrapped.text


def test_neighbouring_sentences_are_one_quote_and_others_apart() -> None:
    chunk = passage()
    breakfast = "The cafeteria opens at eight and serves breakfast until ten."
    generator = "The emergency generator is tested every Tuesday at seven by the facilities team."
    garage = "The parking garage closes at midnight on weekdays and at two on Saturdays."
    [found] = support([chunk_of(chunk)], f"{generator} {breakfast}")
    assert found.quotes == [breakfast, generator]  # in the chunk's order
    [found] = support([chunk_of(chunk)], f"{garage} {generator}")
    assert len(found.quotes) == 1 and found.quotes[0].startswith("The parking garage")
    assert found.quotes[0].endswith("facilities team.")  # one passage: they are neighbours


def test_an_untraced_chunk_quotes_its_opening_and_long_quotes_are_cut() -> None:
    chunk = passage()
    [found] = support([chunk_of(chunk)], "I hope this helps you with your question today.")
    assert not found.traced and found.pages == [1, 2, 3]
    assert chunk.text.startswith(found.quotes[0])
    long = " ".join(f"Sentence number {n} is here." for n in range(60))  # ~1,700 chars
    [found] = support([(long, [1], [0])], "")
    [quote] = found.quotes
    assert len(quote) <= MAX_QUOTE_CHARS and long.startswith(quote) and quote.endswith(".")
    wordy = "word " * 200  # no sentence end: cut at a word end
    [found] = support([(wordy.strip(), [1], [0])], "")
    assert len(found.quotes[0]) <= MAX_QUOTE_CHARS and found.quotes[0].endswith("word")
    # exactly the bound is kept whole
    exact = "x" * (MAX_QUOTE_CHARS - 1) + "."
    assert support([(exact, [1], [0])], "")[0].quotes == [exact]
    assert support([("", [1], [0])], "")[0].quotes == []


def test_a_citation_keeps_at_most_five_quotes_traced_first() -> None:
    sentences = [f"Fact {word} is recorded in the archive ledger." for word in "abcdefgh"]
    chunks = [
        Passage(f"P{n}", sentence, "facts.pdf", [n + 1], 0.5, "doc", [0])
        for n, sentence in enumerate(sentences)
    ]
    unrelated = Passage(
        "PX", "Completely different words about bananas.", "facts.pdf", [9], 0.5, "doc", [0]
    )
    answer = " ".join(sentences)
    [citation] = build_citations([unrelated, *chunks], [c.id for c in [unrelated, *chunks]], answer)
    assert citation.quote == sentences[0]
    assert citation.quotes == sentences[:5]  # the untraced opening of PX is not among them
