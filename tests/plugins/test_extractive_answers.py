"""Which retrieved sentence the extractive model quotes, and which page chat then cites."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import core_with
from pdfs import make_pdf

from agentcore.chat_models import ChatRequest, Passage
from agentcore.knowledge._chunking import split_sentences
from agentcore.knowledge.terms import TermStats
from agentcore.plugins.extractive import NO_ANSWER, ExtractiveModel, _analysed


def passage(number: int, text: str, score: float = 0.5, pages: list[int] | None = None) -> Passage:
    return Passage(f"P{number}", text, "doc.pdf", pages or [number], score, "doc", [0])


def answer(question: str, *texts: str, stats: TermStats | None = None) -> str:
    """The one sentence the model ranks best (no runner-up is added)."""
    passages = [passage(n, text) for n, text in enumerate(texts, 1)]
    request = ChatRequest(system_prompt="", message=question, passages=passages, term_stats=stats)
    return ExtractiveModel(second_ratio=2.0).complete(request).text


# --- what the question asks -------------------------------------------------------------

DECISION = (
    "A decision problem is a special type of computational problem whose answer is either"
    " yes or no, or alternately either 1 or 0."
)
SQUARING = (
    "For example, the problem of squaring an integer can be reduced to the problem of"
    " multiplying two integers."
)


def test_a_spelled_out_number_in_the_question_is_not_a_word_to_match() -> None:
    # "the two integer responses" asks for two things; "two" need not be in the answer.
    text = answer("What are the two integer responses to a decision problem?", SQUARING, DECISION)
    assert text.startswith(DECISION)
    assert SQUARING not in text


def test_a_question_made_only_of_numbers_still_matches_them() -> None:
    text = answer("Two or three?", "The canteen opens at eight.", "Two or three blades broke.")
    assert text == "Two or three blades broke."


WARS = "The French Wars of Religion destroyed many Norman churches and abbeys."
FAITH = "The Normans replaced the Norse religion with the Catholic faith of the Franks."


def test_a_lower_case_word_does_not_match_the_same_word_inside_a_name() -> None:
    # "religion" as asked is not the "Religion" of "the Wars of Religion".
    assert answer("Which religion did the Normans adopt?", WARS, FAITH).startswith(FAITH)
    named = {entry[0]: entry[3] for entry in _analysed(WARS + " " + FAITH)}
    assert "religion" in named[WARS] and "french" in named[WARS]
    assert "religion" not in named[FAITH] and "catholic" in named[FAITH]


def test_a_capitalised_question_word_still_matches_a_name() -> None:
    text = answer("What did the Wars of Religion destroy?", FAITH, WARS)
    assert text.startswith(WARS)


def test_a_word_both_in_a_name_and_lower_case_is_an_ordinary_word_there() -> None:
    both = "After the Wars of Religion, religion was a private matter in Normandy."
    [(_, _, _, names, _)] = _analysed(both)
    assert "religion" not in names and "normandy" in names


# --- how rare a word is in the workspace --------------------------------------------------

TURBINE = "The old turbine is kept in the north hangar."
BLADE = "Each spare blade is kept in the south depot."


def test_workspace_rarity_decides_between_sentences_that_match_alike() -> None:
    question = "Where is the turbine blade kept?"
    common_turbine = TermStats(1000, {"turbine": 900, "blade": 3, "kept": 40})
    common_blade = TermStats(1000, {"turbine": 3, "blade": 900, "kept": 40})
    assert answer(question, TURBINE, BLADE, stats=common_turbine).startswith(BLADE)
    assert answer(question, TURBINE, BLADE, stats=common_blade).startswith(TURBINE)


def test_missing_or_stale_statistics_fall_back_to_the_passages() -> None:
    question = "Where is the turbine blade kept?"
    alone = answer(question, TURBINE, BLADE)
    assert answer(question, TURBINE, BLADE, stats=TermStats(0)) == alone
    # counts below what the passages themselves show (documents indexed before counts
    # were kept) are raised to the passages' own counts, never read as "rarer"
    assert answer(question, TURBINE, BLADE, stats=TermStats(1, {})) == alone


# --- odd input -------------------------------------------------------------------------


def test_no_passages_or_no_sentences_answer_nothing() -> None:
    assert answer("Where is the turbine blade kept?") == NO_ANSWER
    assert answer("Where is the turbine blade kept?", "", "   ", "... !!! ?") == NO_ANSWER


def test_a_question_without_content_words_answers_nothing() -> None:
    assert answer("What is it?", TURBINE, BLADE) == NO_ANSWER
    assert answer("", TURBINE) == NO_ANSWER
    assert answer("???", TURBINE) == NO_ANSWER


# --- counting questions ------------------------------------------------------------------

NOTICE = "Give four weeks of notice in writing to your manager."
EXIT = "We ask everyone who leaves for an exit interview: it is optional."
REMOTE = "Remote work is welcome for up to three days a week."
OFFICE_DAYS = "Agree on your office days with your team, and make sure your home workplace is safe."


def test_how_many_is_answered_by_a_sentence_with_a_number() -> None:
    # the sentence matching most words has no number: the one with a number answers
    home = "You choose the days you work from home with your team."
    assert answer("How many days can I work from home?", home, REMOTE) == REMOTE
    assert answer("How many outputs does a function problem expect?", SINGLE) == SINGLE


def test_a_runner_up_without_a_number_may_still_follow_the_count() -> None:
    days = "Employees get 25 vacation days per year."
    expiry = "Unused vacation days expire at the end of March."
    request = ChatRequest(
        "",
        "How many vacation days do I get, and when do unused days expire?",
        [passage(1, f"{days} {expiry}")],
    )
    assert ExtractiveModel().complete(request).text == f"{days} {expiry}"


def test_how_many_with_no_number_anywhere_answers_nothing() -> None:
    assert answer("How many days do I agree on with my team?", OFFICE_DAYS) == NO_ANSWER
    # "how long" is no count: a sentence without a number may say it
    assert answer("How long is the exit interview optional?", EXIT) == EXIT


def test_a_sentence_holding_only_the_kind_of_answer_says_nothing() -> None:
    # "weeks" is what is counted, not what is asked about: four weeks of notice are not
    # parental leave, and someone who leaves has no number to give
    assert answer("How many weeks of parental leave?", NOTICE, EXIT) == NO_ANSWER
    assert answer("Which country was the meeting held in?", "The country is large.") == NO_ANSWER
    # with a word of what is asked about, the same sentence answers
    assert answer("How many weeks of notice do I give?", NOTICE, EXIT) == NOTICE
    assert answer("How much notice do I give?", NOTICE, EXIT) == NOTICE


LEAVING = f"# Leaving Acme\n\n{NOTICE} {EXIT}"
WELCOME = "# Acme employee handbook\n\nWelcome to Acme."


def test_a_heading_is_never_the_answer_but_says_what_its_sentences_are_about() -> None:
    # the words of "Leaving Acme" count for the sentences under it, not for "Welcome"
    question = "What do I do when leaving Acme?"
    assert answer(question, WELCOME, LEAVING) == NOTICE
    assert (
        "#"
        not in ExtractiveModel()
        .complete(ChatRequest("", "Leaving Acme", [passage(1, LEAVING)]))
        .text
    )
    # a passage of headings alone has nothing to quote
    assert answer(question, "# Leaving Acme\n\n# Returning equipment") == NO_ANSWER
    # a sentence that merely starts with "#" is no heading
    counting = "#P is the class of counting problems of NP."
    assert answer("Which class holds the counting problems of NP?", counting) == counting


def test_the_answer_kind_rule_reads_the_sentence_not_its_heading() -> None:
    # under "Leaving Acme", "four weeks" still says nothing about parental leave
    assert answer("How many weeks of parental leave?", LEAVING) == NO_ANSWER
    assert answer("How many weeks of notice do I give when leaving?", LEAVING) == NOTICE


SINGLE = "A function problem expects a single output for every input."


@pytest.mark.parametrize(
    ("question", "texts", "expected"),
    [
        (
            "Wo werden die Turbinenschaufeln gelagert?",
            ("Die Kantine öffnet um acht.", "Die Turbinenschaufeln werden in Rotterdam gelagert."),
            "Rotterdam",
        ),
        (
            "Πού φυλάσσονται τα πτερύγια;",
            ("Η καντίνα ανοίγει στις οκτώ.", "Τα πτερύγια φυλάσσονται στο Ρότερνταμ."),
            "Ρότερνταμ",
        ),
    ],
)
def test_other_languages_are_matched_word_for_word(
    question: str, texts: tuple[str, ...], expected: str
) -> None:
    assert expected in answer(question, *texts)


def test_text_without_spaces_or_letters_does_not_break_selection() -> None:
    text = answer("涡轮叶片存放在哪里？", "涡轮叶片存放在鹿特丹。", "食堂八点开门。")
    assert isinstance(text, str) and text
    assert answer("1234?", "1234 5678.") in {"1234 5678.", NO_ANSWER}


def test_a_very_long_sentence_is_scored_not_refused() -> None:
    long = "The inventory lists " + " ".join(f"part{n} crate{n}" for n in range(5000)) + "."
    text = answer("Where is the turbine blade kept?", long, BLADE)
    assert text.startswith(BLADE)
    # a sentence past the chunker's limit is cut into pieces; the piece that holds the
    # asked-for word is quoted
    quoted = answer("What comes with part4999 and crate4999?", BLADE, long)
    assert "part4999" in quoted and quoted in long


def test_streaming_quotes_the_same_sentences() -> None:
    passages = [passage(1, SQUARING), passage(2, DECISION)]
    request = ChatRequest(
        system_prompt="", message="What are the two integer responses?", passages=passages
    )
    model = ExtractiveModel()
    *deltas, result = list(model.stream(request))
    assert "".join(str(d) for d in deltas) == model.complete(request).text


# --- end to end: the cited page is the page of the quoted sentence ---------------------------

PAGES = [
    "For example, the problem of squaring an integer can be reduced to the problem of"
    " multiplying two integers. Integers are whole numbers.",
    "A decision problem is a special type of computational problem whose answer is either"
    " yes or no, or alternately either 1 or 0.",
    "The French Wars of Religion destroyed many Norman churches and abbeys.",
    "The Normans replaced the Norse religion with the Catholic faith of the Franks.",
]


def test_chat_cites_the_page_of_the_sentence_it_quotes(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        ws = core.workspace("acme", "test")
        document = ws.knowledge.ingest_file(make_pdf(PAGES), filename="theory.pdf")
        assert document.pages == 4
        agent = ws.agents.create(name="Tutor", role="support")
        expected = {
            "What are the two integer responses to a decision problem?": (2, PAGES[1]),
            "Which religion did the Normans adopt?": (4, PAGES[3]),
        }
        for question, (page, sentence) in expected.items():
            reply = ws.chat.send(agent.id, question)
            assert sentence in reply.response, (question, reply.response)
            # only the pages of the quoted sentences: the quote's page, and a second
            # quoted sentence's page if there is one
            cited = [c.model_dump() for c in reply.citations]
            assert cited[0]["source"] == "theory.pdf" and page in cited[0]["pages"]
            quoted = {
                number
                for number, text in enumerate(PAGES, 1)
                if any(part in reply.response for part in split_sentences(text))
            }
            assert set(cited[0]["pages"]) == quoted, (question, reply.response, cited)
    finally:
        core.close()


def test_workspace_rarity_picks_the_page_over_real_pdfs(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_file(make_pdf([TURBINE, BLADE]), filename="store.pdf")
        # a manual that says "turbine" in every sentence makes it the common word
        manual = " ".join(f"Turbine check {n} passed on the turbine deck." for n in range(40))
        ws.knowledge.ingest_file(make_pdf([manual]), filename="manual.pdf")
        agent = ws.agents.create(name="Ops", role="support")
        reply = ws.chat.send(agent.id, "Where is the turbine blade kept?")
        assert BLADE in reply.response, reply.response
        store_citations = [c for c in reply.citations if c.source == "store.pdf"]
        assert store_citations and 2 in store_citations[0].pages
    finally:
        core.close()


HANDBOOK = Path(__file__).resolve().parents[2] / "docs" / "handbook.pdf"


def test_the_issues_parental_leave_question_is_not_answered_from_the_handbook(
    tmp_path: Path,
) -> None:
    """The shipped handbook says nothing of parental leave: its notice period ("four
    weeks") and its page on leaving Acme must not answer for it, while the questions
    they do answer still are, quoting the sentence under the heading, not the heading."""
    core = core_with(tmp_path)
    try:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_file(HANDBOOK.read_bytes(), filename="handbook.pdf")
        agent = ws.agents.create(name="HR", role="support")
        refused = ws.chat.send(agent.id, "How many weeks of parental leave?")
        assert refused.response == NO_ANSWER and refused.citations == []
        notice = ws.chat.send(agent.id, "How much notice do I give when I leave?")
        assert notice.response.startswith("Give four weeks of notice in writing")
        assert [(c.source, c.pages) for c in notice.citations] == [("handbook.pdf", [5])]
        remote = ws.chat.send(agent.id, "How many days a week can I work from home?")
        assert "three days a week" in remote.response
        # the heading's words lead to its page; the answer is the page's sentence
        leaving = ws.chat.send(agent.id, "What do I do when leaving Acme?")
        assert leaving.response.startswith("Give four weeks of notice")
    finally:
        core.close()
