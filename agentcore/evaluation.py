"""Evaluating a workspace against a golden file: search and cited answers, question by question.

A golden file is JSON Lines, one question a line::

    {"question": "How many vacation days do I get?", "source": "handbook.pdf", "pages": [4], "answer": "25"}
    {"question": "Who won the 1998 World Cup?"}

``source`` names the document (as ingested) that answers the question; ``pages`` (some
of its 1-based pages) and ``answer`` (a text the answer must hold, or a list of texts of
which one must be held, compared case-insensitively) are optional and need ``source``.
A line without ``source`` is a question the agent should not answer. Blank lines are
skipped.

``evaluate`` searches once per question (and, given an agent, chats once), and returns
a ``Report``: each question's ``Outcome`` and the figures over them. ``agentcore eval``
is this on the command line; ``benchmarks/retrieval_quality.py`` computes its figures
with it too.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, median
from typing import TYPE_CHECKING, Any

# only these two at run time: benchmarks/retrieval_quality.py --code loads this file
# beside an older checkout's agentcore, so that both are measured by the same figures
from agentcore.errors import NotFound, ValidationFailed

if TYPE_CHECKING:
    from agentcore._workspace_services import WorkspaceServices
    from agentcore.schema import ChatMessageResponse, SearchMode, SearchResult

__all__ = [
    "Figure",
    "GoldenQuestion",
    "Outcome",
    "Report",
    "evaluate",
    "parse_golden",
    "read_golden",
    "recall_at",
    "unknown_sources",
]

FIELDS = ("question", "source", "pages", "answer")
"""The fields a golden line may have; any other is an error."""


@dataclass(frozen=True)
class GoldenQuestion:
    """One line of a golden file. ``source`` is ``None`` for a question the agent should
    not answer; ``pages`` and ``answers`` are empty when the line gives none."""

    question: str
    source: str | None = None
    pages: tuple[int, ...] = ()
    answers: tuple[str, ...] = ()


def read_golden(path: str | Path) -> list[GoldenQuestion]:
    """The questions of the golden file at ``path``.

    :raises ValidationFailed: the file is missing or unreadable, holds no question, or a
        line is malformed (not JSON, not an object, without ``question``, a field of the
        wrong type, an unknown field); the message names the file and the line.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValidationFailed(f"No such file: {path}", param="golden") from None
    except OSError as error:
        raise ValidationFailed(f"Cannot read {path}: {error.strerror}", param="golden") from None
    return parse_golden(data, str(path))


def parse_golden(text: str | bytes, name: str) -> list[GoldenQuestion]:
    """The questions of a golden file's ``text``; ``name`` is how errors name the file
    (``name:line: what is wrong``). Raises as ``read_golden`` does."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    data = data.removeprefix(codecs.BOM_UTF8)  # as some editors on Windows save a file
    found: list[GoldenQuestion] = []
    # bytes split at line breaks only (a JSON string may hold U+2028, which str splits at)
    for number, raw in enumerate(data.splitlines(), 1):
        question = _golden_line(raw, f"{name}:{number}")
        if question is not None:
            found.append(question)
    if not found:
        raise ValidationFailed(f"{name}: no questions (the file is empty)", param="golden")
    return found


def _golden_line(raw: bytes, where: str) -> GoldenQuestion | None:
    """One line as a question (``None`` for a blank line), or a ``ValidationFailed``."""

    def bad(what: str) -> ValidationFailed:
        return ValidationFailed(f"{where}: {what}", param="golden")

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not UTF-8 text") from None
    if not text.strip():
        return None
    try:
        line = json.loads(text)
    except ValueError as error:
        reason = getattr(error, "msg", str(error))
        raise bad(f"not JSON ({reason})") from None
    if not isinstance(line, dict):
        raise bad(f"not a JSON object but {_json_kind(line)}")
    unknown = [key for key in line if key not in FIELDS]
    if unknown:
        raise bad(f"unknown field {', '.join(map(repr, unknown))} (a line has {', '.join(FIELDS)})")
    question = line.get("question")
    if not isinstance(question, str) or not question.strip():
        missing = "question" not in line
        raise bad("no 'question'" if missing else "'question' must be a non-empty string")
    source = line.get("source")
    if "source" in line and (not isinstance(source, str) or not source.strip()):
        raise bad("'source' must be a document's name (leave it out for a question not to answer)")
    for field in ("pages", "answer"):
        if field in line and source is None:
            raise bad(f"'{field}' needs a 'source'")
    return GoldenQuestion(
        question,
        source,
        _pages(line.get("pages"), bad) if "pages" in line else (),
        _answers(line.get("answer"), bad) if "answer" in line else (),
    )


def _pages(value: object, bad: Callable[[str], ValidationFailed]) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(type(page) is int and page >= 1 for page in value)
    ):
        raise bad("'pages' must be a non-empty list of page numbers (1, 2, ...)")
    return tuple(value)


def _answers(value: object, bad: Callable[[str], ValidationFailed]) -> tuple[str, ...]:
    answers = [value] if isinstance(value, str) else value
    if (
        not isinstance(answers, list)
        or not answers
        or not all(isinstance(answer, str) and answer.strip() for answer in answers)
    ):
        raise bad("'answer' must be a non-empty string or a non-empty list of them")
    return tuple(answers)


def _json_kind(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


@dataclass(frozen=True)
class Outcome:
    """What one question got: the search's top results and, with an agent, its answer."""

    golden: GoldenQuestion
    results: tuple[SearchResult, ...]
    search_seconds: float
    answer: ChatMessageResponse | None = None
    chat_seconds: float | None = None
    chat_cpu_seconds: float | None = None
    """This process's CPU time during the chat turn (other processes barely move it)."""

    @property
    def source_rank(self) -> int | None:
        """The 1-based rank of the first result from ``source``; ``None`` when none is."""
        return _first(self.results, lambda result: result.source == self.golden.source)

    @property
    def page_rank(self) -> int | None:
        """The 1-based rank of the first result from ``source`` on one of the gold
        ``pages`` (a chunk spanning pages is on each of them); ``None`` when none is."""
        pages = set(self.golden.pages)
        return _first(
            self.results,
            lambda result: (
                result.source == self.golden.source and not pages.isdisjoint(result.pages)
            ),
        )

    @property
    def cites_source(self) -> bool:
        """The answer cites ``source``."""
        citations = self.answer.citations if self.answer else []
        return any(citation.source == self.golden.source for citation in citations)

    @property
    def cites_page(self) -> bool:
        """The answer cites ``source`` with at least one of the gold ``pages``."""
        pages = set(self.golden.pages)
        citations = self.answer.citations if self.answer else []
        return any(
            c.source == self.golden.source and not pages.isdisjoint(c.pages) for c in citations
        )

    @property
    def contains_answer(self) -> bool:
        """The answer's text holds one of the gold ``answers``, ignoring case."""
        text = self.answer.response.casefold() if self.answer else ""
        return any(answer.casefold() in text for answer in self.golden.answers)

    @property
    def abstained(self) -> bool:
        """The agent did not answer: it cited nothing (as a no-answer does), handed the
        conversation to a person, or waits for a tool's output."""
        return not (self.answer and self.answer.status == "completed" and self.answer.citations)


def _first(results: Sequence[SearchResult], test: Callable[[SearchResult], bool]) -> int | None:
    return next((rank for rank, result in enumerate(results, 1) if test(result)), None)


@dataclass(frozen=True)
class Figure:
    """A figure over ``of`` questions: a share (``hits`` of them) or a mean; ``value`` is
    ``None`` when ``of`` is 0."""

    value: float | None
    of: int
    hits: int | None = None

    @classmethod
    def share(cls, outcomes: Sequence[Outcome], test: Callable[[Outcome], bool]) -> Figure:
        """The share of ``outcomes`` that pass ``test``."""
        hits = sum(1 for outcome in outcomes if test(outcome))
        return cls(hits / len(outcomes) if outcomes else None, len(outcomes), hits)

    @classmethod
    def average(cls, outcomes: Sequence[Outcome], value: Callable[[Outcome], float]) -> Figure:
        """The mean of ``value`` over ``outcomes``."""
        return cls(mean(value(o) for o in outcomes) if outcomes else None, len(outcomes))

    def as_json(self) -> dict[str, Any]:
        """``{"value", "of"}``, and ``hits`` for a share; the value rounded to 4 places."""
        shown: dict[str, Any] = {"value": None if self.value is None else round(self.value, 4)}
        if self.hits is not None:
            shown["hits"] = self.hits
        shown["of"] = self.of
        return shown


def recall_at(outcomes: Sequence[Outcome], k: int, *, pages: bool = False) -> Figure:
    """The share of the answerable ``outcomes`` with a result from their ``source``
    among the first ``k`` (``pages``: of those that give pages, a result from ``source``
    on a gold page)."""
    counted = [o for o in outcomes if o.golden.source is not None and (o.golden.pages or not pages)]

    def found(outcome: Outcome) -> bool:
        rank = outcome.page_rank if pages else outcome.source_rank
        return rank is not None and rank <= k

    return Figure.share(counted, found)


@dataclass(frozen=True)
class Report:
    """The outcome of each question of a golden file, and the figures over them."""

    outcomes: tuple[Outcome, ...]
    top_k: int
    mode: str
    agent_id: str | None = None
    reranked: bool = False

    def figures(self) -> dict[str, Figure | None]:
        """Each figure by its name; the answers' figures are ``None`` without an agent.

        ``search_recall_at_<k>`` (``k`` = ``top_k``): answerable questions with a result
        from ``source``; ``search_mrr``: the mean of 1/rank of the first such result (0
        when none is in the top k); ``search_page_recall_at_<k>`` and
        ``search_page_mrr``: the same over questions with ``pages``, for a result from
        ``source`` on one of them; ``cites_source``,
        ``cites_page`` (over questions with ``pages``), ``answer_contains`` (over
        questions with ``answer``); ``abstains``: questions without ``source`` the
        agent did not answer.
        """
        k = self.top_k
        answerable = [o for o in self.outcomes if o.golden.source is not None]
        chatted = self.agent_id is not None
        return {
            f"search_recall_at_{k}": recall_at(self.outcomes, k),
            "search_mrr": Figure.average(
                answerable, lambda o: 1 / o.source_rank if o.source_rank else 0.0
            ),
            f"search_page_recall_at_{k}": recall_at(self.outcomes, k, pages=True),
            "search_page_mrr": Figure.average(
                [o for o in answerable if o.golden.pages],
                lambda o: 1 / o.page_rank if o.page_rank else 0.0,
            ),
            "cites_source": Figure.share(answerable, lambda o: o.cites_source) if chatted else None,
            "cites_page": (
                Figure.share([o for o in answerable if o.golden.pages], lambda o: o.cites_page)
                if chatted
                else None
            ),
            "answer_contains": (
                Figure.share(
                    [o for o in answerable if o.golden.answers], lambda o: o.contains_answer
                )
                if chatted
                else None
            ),
            "abstains": (
                Figure.share(
                    [o for o in self.outcomes if o.golden.source is None], lambda o: o.abstained
                )
                if chatted
                else None
            ),
        }

    def cost(self) -> dict[str, float | None]:
        """What a question cost: the median wall time of its search and chat turn, the
        median CPU time of its chat turn, and the mean tokens a turn's model reported
        (``None`` without an agent, or when the model reports none)."""
        outcomes = self.outcomes
        chats = [o.chat_seconds for o in outcomes if o.chat_seconds is not None]
        cpu = [o.chat_cpu_seconds for o in outcomes if o.chat_cpu_seconds is not None]
        usage = [o.answer.usage for o in outcomes if o.answer and o.answer.usage]
        return {
            "search_ms_p50": _ms(median(o.search_seconds for o in outcomes)) if outcomes else None,
            "chat_ms_p50": _ms(median(chats)) if chats else None,
            "chat_cpu_ms_p50": _ms(median(cpu)) if cpu else None,
            "input_tokens_mean": round(mean(u.input_tokens for u in usage), 1) if usage else None,
            "output_tokens_mean": round(mean(u.output_tokens for u in usage), 1) if usage else None,
        }

    def as_json(self) -> dict[str, Any]:
        """The report as ``agentcore eval --json`` prints it."""
        figures = {
            name: None if figure is None else figure.as_json()
            for name, figure in self.figures().items()
        }
        return {
            "questions": len(self.outcomes),
            "mode": self.mode,
            "reranked": self.reranked,
            "top_k": self.top_k,
            "agent": self.agent_id,
            **figures,
            "cost_per_question": self.cost(),
        }

    def table(self) -> list[str]:
        """The report as ``agentcore eval`` prints it: a heading, a line per figure
        (its name, value and count), and what a question cost."""
        answerable = sum(1 for o in self.outcomes if o.golden.source is not None)
        agent = f"agent {self.agent_id}" if self.agent_id else "no agent: search only"
        lines = [
            f"{len(self.outcomes)} questions ({answerable} answerable, "
            f"{len(self.outcomes) - answerable} not); {self.mode} search"
            f"{', reranked' if self.reranked else ''}, top {self.top_k}; {agent}",
        ]
        figures = self.figures()
        width = max(len(name) for name in figures)
        lines.append(f"{'figure':<{width}}  value  of")
        for name, figure in figures.items():
            if figure is None:
                lines.append(f"{name:<{width}}      -  (no agent)")
                continue
            value = "    -" if figure.value is None else f"{figure.value:.3f}"
            count = str(figure.of) if figure.hits is None else f"{figure.hits}/{figure.of}"
            lines.append(f"{name:<{width}}  {value}  {count}")
        cost = self.cost()
        spent = [f"search {cost['search_ms_p50']} ms"]
        if cost["chat_ms_p50"] is not None:
            spent.append(f"chat {cost['chat_ms_p50']} ms ({cost['chat_cpu_ms_p50']} ms CPU)")
        if cost["input_tokens_mean"] is not None:
            spent.append(
                f"{cost['input_tokens_mean']} tokens in, {cost['output_tokens_mean']} out (mean)"
            )
        lines.append(f"cost per question (p50): {', '.join(spent)}")
        return lines


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def evaluate(
    ws: WorkspaceServices,
    golden: Sequence[GoldenQuestion],
    *,
    agent_id: str | None = None,
    top_k: int = 5,
    mode: SearchMode | None = None,
    rerank: bool = False,
    progress: Callable[[], None] | None = None,
) -> Report:
    """Search ``ws`` once for each question (``top_k`` results, in ``mode``, reordered by
    the core's reranker with ``rerank``) and, given ``agent_id``, ask the agent once
    (its turns rerank as its ``knowledge.rerank`` says); ``progress`` is told after
    each question.

    Each question is a chat turn as any other (announced as ``agent.action`` events);
    its conversation is deleted once its answer is read, so none is left behind (nor
    one waiting for a person after a handoff), which needs the write scope. A turn
    retrieves its passages as the core's ``chat_search_mode`` says, whatever ``mode``
    the searches use.

    :raises NotFound: no agent ``agent_id`` (before any question is asked).
    """
    if agent_id is not None:
        ws.agents.get(agent_id)
    outcomes: list[Outcome] = []
    searched = mode or "vector"
    for item in golden:
        started = time.perf_counter()
        response = ws.knowledge.search(item.question, top_k=top_k, mode=mode, rerank=rerank)
        outcome = Outcome(item, tuple(response.results), time.perf_counter() - started)
        searched = response.mode
        if agent_id is not None:
            outcome = _ask(ws, agent_id, outcome)
        outcomes.append(outcome)
        if progress is not None:
            progress()
    return Report(tuple(outcomes), top_k=top_k, mode=searched, agent_id=agent_id, reranked=rerank)


def _ask(ws: WorkspaceServices, agent_id: str, outcome: Outcome) -> Outcome:
    """``outcome`` with the agent's answer to its question, timed; the turn's
    conversation is deleted afterwards."""
    started, cpu_started = time.perf_counter(), time.process_time()
    answer = ws.chat.send(agent_id, outcome.golden.question)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    with suppress(NotFound):  # a turn that was not stored
        ws.conversations.delete(answer.conversationId)
    return Outcome(outcome.golden, outcome.results, outcome.search_seconds, answer, seconds, cpu)


def unknown_sources(ws: WorkspaceServices, golden: Iterable[GoldenQuestion]) -> dict[str, int]:
    """The ``source`` names no document of ``ws`` has, each with its question count: a
    misspelt name would count as a miss on every one of them."""
    names: set[str] = set()
    after: str | None = None
    while True:
        page = ws.knowledge.list(limit=100, starting_after=after)
        names.update(document.source for document in page.documents)
        if not page.has_more or not page.documents:
            break
        after = page.documents[-1].id
    missing: dict[str, int] = {}
    for item in golden:
        if item.source is not None and item.source not in names:
            missing[item.source] = missing.get(item.source, 0) + 1
    return missing
