"""Reranked search: ``rerank=True`` hands the top ``rerank_candidates`` to the core's
reranker (a plugin's, registered through ``agentcore_register_rerankers``) and keeps its
best ``top_k`` with their ``rerank_score``; a reranker that fails, hangs or answers
nonsense leaves the first order, logged and counted, never an error."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agentcore import AgentCore, hookimpl
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.errors import InvalidRequest

TOPICS = [f"Vacation policy note {n}: employees get {20 + n} vacation days." for n in range(8)]
QUERY = "vacation days"

Answer = Callable[[str, Sequence[str], int], Any]


def reversed_order(query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
    """The candidates last first, scored by their position."""
    return [(i, float(i)) for i in reversed(range(len(documents)))][:top_n]


class Scripted:
    """A reranker that records its calls and answers as ``answer`` says."""

    def __init__(self, name: str = "scripted", answer: Answer = reversed_order) -> None:
        self.name = name
        self.answer = answer
        self.calls: list[tuple[str, list[str], int]] = []

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> Any:
        self.calls.append((query, list(documents), top_n))
        return self.answer(query, documents, top_n)


class Registers:
    """A plugin registering the given rerankers."""

    def __init__(self, *rerankers: Scripted) -> None:
        self.rerankers = rerankers

    @hookimpl
    def agentcore_register_rerankers(self, register: Any, settings: Any) -> None:
        for reranker in self.rerankers:
            register(reranker)


def open_core(url: str | Path, *rerankers: Scripted, **settings: Any) -> AgentCore:
    return AgentCore.open(url, plugins=[Registers(*rerankers)], entry_points=False, **settings)


def fill(core: AgentCore) -> Any:
    ws = core.workspace("acme")
    for n, topic in enumerate(TOPICS):
        ws.knowledge.ingest_text(f"note-{n}.txt", topic, metadata={"n": n})
    return ws


def failures(core: AgentCore, reranker: str, code: str) -> float:
    value = core.metrics.registry.get_sample_value(
        "agentcore_rerank_failures_total", {"reranker": reranker, "code": code}
    )
    return value or 0.0


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


@pytest.fixture
def core(store_url: str, scripted: Scripted) -> Iterator[AgentCore]:
    instance = open_core(store_url, scripted, reranker="scripted")
    yield instance
    instance.close()


@pytest.mark.both_stores
def test_the_reranker_orders_the_candidates_and_scores_each(
    core: AgentCore, scripted: Scripted
) -> None:
    ws = fill(core)
    first = ws.knowledge.search(QUERY, top_k=3).results
    assert all(r.rerank_score is None for r in first)
    assert "rerank_score" not in first[0].model_dump_json()  # absent, not null
    plain = ws.knowledge.search(QUERY, top_k=8).results  # every candidate, first order
    got = ws.knowledge.search(QUERY, top_k=3, rerank=True).results
    # the reranker saw every candidate (8 < rerank_candidates) in the first order
    ((query, documents, top_n),) = scripted.calls
    assert query == QUERY and top_n == 3
    assert documents == [r.chunk for r in plain]
    assert [r.chunk for r in got] == [r.chunk for r in reversed(plain)][:3]
    assert [r.rerank_score for r in got] == [7.0, 6.0, 5.0]
    # score and rank_score stay what the first ranking said
    by_chunk = {r.chunk: r for r in plain}
    assert all(r.score == by_chunk[r.chunk].score for r in got)


def test_only_the_top_rerank_candidates_reach_the_reranker(tmp_path: Path) -> None:
    scripted = Scripted()
    with open_core(tmp_path / "db", scripted, rerank_candidates=4) as core:
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=8).results
        ws.knowledge.search(QUERY, top_k=2, rerank=True)
        ws.knowledge.search(QUERY, top_k=6, rerank=True)  # top_k above the candidates
    assert [len(documents) for _, documents, _ in scripted.calls] == [4, 6]
    assert scripted.calls[0][1] == [r.chunk for r in plain[:4]]
    assert [top_n for *_, top_n in scripted.calls] == [2, 6]


def test_rerank_candidates_are_bounded() -> None:
    with pytest.raises(pydantic.ValidationError, match="rerank_candidates"):
        AgentCore.open(":memory:", entry_points=False, rerank_candidates=0)
    with pytest.raises(pydantic.ValidationError, match="rerank_candidates"):
        AgentCore.open(":memory:", entry_points=False, rerank_candidates=1001)
    with pytest.raises(pydantic.ValidationError, match="rerank_timeout"):
        AgentCore.open(":memory:", entry_points=False, rerank_timeout=0)


def test_filters_and_modes_choose_the_candidates(core: AgentCore, scripted: Scripted) -> None:
    ws = fill(core)
    ws.knowledge.search(QUERY, rerank=True, filter={"type": "lt", "key": "n", "value": 3})
    assert sorted(scripted.calls[-1][1]) == sorted(TOPICS[:3])
    for mode in ("keyword", "hybrid"):
        plain = ws.knowledge.search(QUERY, top_k=8, mode=mode).results  # type: ignore[arg-type]
        got = ws.knowledge.search(QUERY, top_k=2, mode=mode, rerank=True)  # type: ignore[arg-type]
        assert got.mode == mode
        assert scripted.calls[-1][1] == [r.chunk for r in plain]
        assert [r.chunk for r in got.results] == [plain[-1].chunk, plain[-2].chunk]


def test_search_many_reranks_each_query_alone(core: AgentCore, scripted: Scripted) -> None:
    ws = fill(core)
    answers = ws.knowledge.search_many([QUERY, "employees"], top_k=2, rerank=True)
    assert [call[0] for call in scripted.calls] == [QUERY, "employees"]
    assert all(r.rerank_score is not None for a in answers for r in a.results)


def test_an_empty_result_does_not_call_the_reranker(core: AgentCore, scripted: Scripted) -> None:
    ws = fill(core)
    got = ws.knowledge.search(QUERY, rerank=True, filter={"type": "eq", "key": "n", "value": 99})
    assert got.results == [] and scripted.calls == []


def test_rerank_without_a_reranker_is_a_400_naming_rerank(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "db", entry_points=False) as core:
        ws = fill(core)
        with pytest.raises(InvalidRequest) as refused:
            ws.knowledge.search(QUERY, rerank=True)
        assert (refused.value.code, refused.value.param) == ("reranker_unavailable", "rerank")
        assert "AGENTCORE_RERANKER_URL" in refused.value.detail
        assert ws.knowledge.search(QUERY).results  # without rerank, as before
    # a name no plugin registers, or several rerankers and none named
    named = open_core(tmp_path / "db", Scripted(), reranker="cohere")
    with named, pytest.raises(InvalidRequest, match="no reranker is named 'cohere'"):
        named.workspace("acme").knowledge.search(QUERY, rerank=True)
    several = open_core(tmp_path / "db", Scripted("a"), Scripted("b"))
    with several, pytest.raises(InvalidRequest, match="several rerankers"):
        several.workspace("acme").knowledge.search(QUERY, rerank=True)


def test_the_only_reranker_is_the_default(tmp_path: Path) -> None:
    only = Scripted("only")
    with open_core(tmp_path / "db", only) as core:
        got = fill(core).knowledge.search(QUERY, top_k=1, rerank=True)
    assert got.results[0].rerank_score is not None and len(only.calls) == 1


def test_two_rerankers_of_one_name_stop_the_core() -> None:
    with pytest.raises(ValueError, match="two rerankers are named 'x'"):
        open_core(":memory:", Scripted("x"), Scripted("x"))


def raises(query: str, documents: Sequence[str], top_n: int) -> Any:
    raise RuntimeError("the model fell over")


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (raises, "provider_error"),
        (lambda q, d, n: [(len(d), 1.0)], "invalid_answer"),  # out of range
        (lambda q, d, n: [(-1, 1.0)], "invalid_answer"),
        (lambda q, d, n: [(0, 1.0), (0, 0.5)], "invalid_answer"),  # repeated
        (lambda q, d, n: [(True, 1.0)], "invalid_answer"),
        (lambda q, d, n: [(0, math.nan)], "invalid_answer"),
        (lambda q, d, n: [(0, "high")], "invalid_answer"),
        (lambda q, d, n: [0, 1], "invalid_answer"),
        (lambda q, d, n: {"results": []}, "invalid_answer"),
    ],
)
def test_a_failing_reranker_leaves_the_first_order(
    tmp_path: Path, answer: Answer, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    with open_core(tmp_path / "db", Scripted("bad", answer)) as core:
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=3)
        with caplog.at_level(logging.WARNING, "agentcore.rerank"):
            got = ws.knowledge.search(QUERY, top_k=3, rerank=True)
        assert got == plain  # same chunks, same order, no rerank_score
        assert failures(core, "bad", code) == 1
    assert f"reranker 'bad' failed ({code})" in caplog.text


def test_a_hung_reranker_is_abandoned_after_rerank_timeout(tmp_path: Path) -> None:
    release = threading.Event()

    def hangs(query: str, documents: Sequence[str], top_n: int) -> Any:
        release.wait(30)
        return reversed_order(query, documents, top_n)

    try:
        with open_core(tmp_path / "db", Scripted("slow", hangs), rerank_timeout=0.2) as core:
            ws = fill(core)
            plain = ws.knowledge.search(QUERY, top_k=3)
            assert ws.knowledge.search(QUERY, top_k=3, rerank=True) == plain
            assert failures(core, "slow", "provider_timeout") == 1
            release.set()
    finally:
        release.set()


def test_a_short_ranking_is_kept_as_it_is(tmp_path: Path) -> None:
    one = Scripted("one", lambda q, d, n: [(2, 0.9)])
    with open_core(tmp_path / "db", one) as core:
        got = fill(core).knowledge.search(QUERY, top_k=3, rerank=True).results
    assert [(r.chunk, r.rerank_score) for r in got] == [(one.calls[0][1][2], 0.9)]


def test_an_agent_with_knowledge_rerank_retrieves_reranked(tmp_path: Path) -> None:
    scripted = Scripted()
    reader = ReadsPassages()
    plugins = [Registers(scripted), reader]
    with AgentCore.open(tmp_path / "db", plugins=plugins, entry_points=False) as core:
        ws = fill(core)
        plain = ws.agents.create(name="Plain", model="reads-passages")
        ws.chat.send(plain.id, "How many vacation days?")
        assert scripted.calls == []
        agent = ws.agents.create(name="HR", model="reads-passages", knowledge={"rerank": True})
        assert agent.knowledge is not None and agent.knowledge.rerank
        ws.chat.send(agent.id, "How many vacation days?")
        k = core.settings.chat_top_k
    ((query, documents, top_n),) = scripted.calls
    assert query == "How many vacation days?" and top_n == k
    first, reranked = reader.passages
    assert first == documents[:k]  # what the agent without rerank was given
    assert reranked == list(reversed(documents))[:k]


class ReadsPassages:
    """A plugin with a chat model that notes the passages each turn is given."""

    def __init__(self) -> None:
        self.passages: list[list[str]] = []

    name = "reads-passages"

    def complete(self, request: ChatRequest) -> ChatResult:
        self.passages.append([passage.text for passage in request.passages])
        return ChatResult("Noted.")

    @hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


def test_an_agent_asking_for_reranking_without_a_reranker_still_answers(
    tmp_path: Path,
) -> None:
    with AgentCore.open(tmp_path / "db", entry_points=False) as core:
        ws = fill(core)
        agent = ws.agents.create(name="HR", knowledge={"rerank": True})
        assert ws.chat.send(agent.id, "How many vacation days?").citations
        assert failures(core, "none", "unavailable") == 1
