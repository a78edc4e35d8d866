"""Chunking: sentence-aware packing with overlap that never loses a page number."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentcore.knowledge._chunking import Chunk, chunk_pages, split_sentences


def test_sentences_respect_abbreviations_and_decimals() -> None:
    text = (
        "Mr. Smith paid $3.50 in the U.S. on Jan. 5 for coffee, e.g. a latte. "
        "Dr. J. R. Watson agreed! Did he? Yes... he did. Version 2.0 shipped. "
        "The end"
    )
    assert split_sentences(text) == [
        "Mr. Smith paid $3.50 in the U.S. on Jan. 5 for coffee, e.g. a latte.",
        "Dr. J. R. Watson agreed!",
        "Did he?",
        "Yes... he did.",
        "Version 2.0 shipped.",
        "The end",
    ]


def test_paragraphs_and_markdown_blocks_end_sentences() -> None:
    text = "No full stop here\n\n# Heading\nBody text\n- one\n- two"
    assert split_sentences(text) == [
        "No full stop here",
        "# Heading",
        "Body text",
        "- one",
        "- two",
    ]


def test_text_without_punctuation_is_cut_at_word_boundaries() -> None:
    words = [f"word{i}" for i in range(400)]
    chunks = chunk_pages([" ".join(words)], target_chars=100, overlap_chars=0)
    assert all(len(c.text) <= 100 for c in chunks)
    assert [w for c in chunks for w in c.text.split()] == words


def test_giant_word_is_cut_mid_word_only_when_forced() -> None:
    chunks = chunk_pages(["x" * 250], target_chars=100, overlap_chars=10)
    assert [len(c.text) for c in chunks] == [100, 100, 50]


def test_paragraph_break_preferred_and_not_overlapped() -> None:
    first = "Alpha one is here. Alpha two is here. Alpha three is here."
    second = "Beta one is here. Beta two is here."
    chunks = chunk_pages([f"{first}\n\n{second}"], target_chars=100, overlap_chars=40)
    assert [c.text for c in chunks] == [first, second]


def test_overlap_repeats_whole_trailing_sentences() -> None:
    sentences = [f"Sentence number {i} is short." for i in range(12)]
    chunks = chunk_pages([" ".join(sentences)], target_chars=120, overlap_chars=60)
    assert len(chunks) > 2
    for previous, current in zip(chunks, chunks[1:], strict=False):
        # Two 27-character sentences fit in 60 characters of overlap; three do not.
        assert split_sentences(current.text)[:2] == split_sentences(previous.text)[-2:]
        assert split_sentences(current.text)[2] not in previous.text


def test_chunk_crossing_pages_carries_both_sorted() -> None:
    pages = ["Intro sentence. The fact starts on page one and", "ends on page two. Later text."]
    chunks = chunk_pages(pages, target_chars=500, overlap_chars=0)
    assert chunks == [
        Chunk(
            "Intro sentence. The fact starts on page one and ends on page two. Later text.", [1, 2]
        )
    ]
    small = chunk_pages(pages, target_chars=60, overlap_chars=0)
    assert [c.pages for c in small] == [[1], [1, 2], [2]]


def test_empty_pages_yield_no_chunks_and_keep_numbering() -> None:
    assert chunk_pages([]) == []
    assert chunk_pages(["", "  \n ", ""]) == []
    assert chunk_pages(["", "Only page two has text.", ""]) == [
        Chunk("Only page two has text.", [2])
    ]


@pytest.mark.parametrize(
    ("target", "overlap"), [(0, 0), (-5, 0), (100, -1), (100, 51), (100, 100), (100, 200)]
)
def test_bad_parameters(target: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_pages(["text"], target_chars=target, overlap_chars=overlap)


# --- properties ----------------------------------------------------------------
# Documents are built from unique words ("w17"), so each chunk maps back to an exact
# slice of the word sequence and every word to the page it was printed on.


@dataclass
class Document:
    pages: list[str]
    word_page: list[int]  # 1-based page of each word


@st.composite
def documents(draw: st.DrawFn) -> Document:
    count = draw(st.integers(1, 150))
    pads = draw(st.lists(st.integers(0, 12), min_size=count, max_size=count))
    ends = draw(
        st.lists(
            st.sampled_from(["", "", "", "", ".", ".", "?", "para"]), min_size=count, max_size=count
        )
    )
    breaks = set(draw(st.lists(st.integers(0, count - 1), max_size=6)))
    empty_after = set(draw(st.lists(st.integers(0, count - 1), max_size=2)))
    pages: list[str] = []
    word_page: list[int] = []
    current = ""
    sentence_start = True
    for i in range(count):
        word = f"w{i}" + "x" * pads[i]
        current += word.capitalize() if sentence_start else word
        word_page.append(len(pages) + 1)
        end = ends[i]
        sentence_start = end != ""
        current += {"": " ", ".": ". ", "?": "? ", "para": ".\n\n"}[end]
        if i in breaks or i == count - 1:
            pages.append(current)
            current = ""
            if i in empty_after:
                pages.append("")
    return Document(pages, word_page)


def word_ids(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"w(\d+)", text.lower())]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(doc=documents(), target=st.integers(60, 400), share=st.floats(0, 0.5))
def test_chunk_properties(doc: Document, target: int, share: float) -> None:
    overlap = int(target * share)
    chunks = chunk_pages(doc.pages, target_chars=target, overlap_chars=overlap)
    assert chunk_pages(doc.pages, target_chars=target, overlap_chars=overlap) == chunks
    spans: list[tuple[int, int]] = []
    for chunk in chunks:
        assert chunk.text.strip() == chunk.text != ""
        assert len(chunk.text) <= target
        ids = word_ids(chunk.text)
        assert ids == list(range(ids[0], ids[-1] + 1)), "a chunk is one contiguous passage"
        spans.append((ids[0], ids[-1] + 1))
        # Exactly the pages its words come from, sorted, all within the document.
        assert chunk.pages == sorted({doc.word_page[i] for i in ids})
    # All text covered, in order; consecutive chunks overlap by at most overlap_chars.
    assert spans[0][0] == 0
    assert spans[-1][1] == len(doc.word_page)
    for (start, end), (next_start, _next_end), nxt in zip(
        spans, spans[1:], chunks[1:], strict=False
    ):
        assert start < next_start <= end
        if next_start < end:
            last_repeated = re.search(rf"\bw{end - 1}x*\b[.?]?", nxt.text, re.IGNORECASE)
            assert last_repeated is not None
            assert len(nxt.text[: last_repeated.end()]) <= overlap


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(2, 12), min_size=5, max_size=80),
    target=st.integers(120, 500),
)
def test_chunks_fill_up_to_near_the_target(lengths: list[int], target: int) -> None:
    sentences = [" ".join(["Word"] + ["word"] * (n - 1)) + "." for n in lengths]
    longest = max(len(s) for s in sentences)
    chunks = chunk_pages([" ".join(sentences)], target_chars=target, overlap_chars=0)
    for chunk in chunks[:-1]:
        assert target - longest - 1 <= len(chunk.text) <= target
