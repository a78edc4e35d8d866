"""The built-in extractive chat model: quotes the passage that answers, or admits it can't."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from agentcore.chat_models import ChatRequest, ChatResult, Passage, ToolSpec
from agentcore.config import Settings
from agentcore.plugins.extractive import (
    GATES,
    NO_ANSWER,
    ExtractiveModel,
    Gate,
    agentcore_register_chat_models,
)

NORMANS = Passage(
    "P1",
    "The Normans were the people who in the 10th and 11th centuries gave their name to "
    "Normandy, a region in France. They were descended from Norse raiders and pirates "
    "from Denmark, Iceland and Norway who, under their leader Rollo, agreed to swear "
    "fealty to King Charles III of West Francia.",
    "normans.pdf",
    [1],
    0.42,
)
COMPLEXITY = Passage(
    "P2",
    "Computational complexity theory classifies computational problems according to "
    "their inherent difficulty. A problem is regarded as inherently difficult if its "
    "solution requires significant resources, whatever the algorithm used.",
    "complexity.pdf",
    [3],
    0.31,
)
FRANKS = Passage(
    "P3",
    "The Duchy of Normandy was formed in 911 by the Treaty of Saint-Clair-sur-Epte "
    "between King Charles III and Rollo.",
    "normans.pdf",
    [2],
    0.2,
)


def ask(question: str, passages: list[Passage]) -> ChatResult:
    return ExtractiveModel().complete(ChatRequest("You are helpful.", question, passages))


def test_answers_a_known_fact_quoting_and_citing_only_its_passage() -> None:
    result = ask("From which countries did the Norse raiders come?", [COMPLEXITY, NORMANS])
    assert "Denmark, Iceland and Norway" in result.text
    assert result.text in NORMANS.text  # quoted verbatim
    assert result.used_passage_ids == ["P1"]
    assert result.tool_calls == []


def test_date_question_prefers_the_sentence_with_the_date() -> None:
    result = ask("When was the Duchy of Normandy formed?", [NORMANS, FRANKS, COMPLEXITY])
    assert "911" in result.text
    assert "P3" in result.used_passage_ids and "P2" not in result.used_passage_ids


def test_quotes_at_most_two_sentences_from_at_most_two_passages() -> None:
    result = ask("Who was the leader Rollo of the Normans in Normandy?", [NORMANS, FRANKS])
    quoted = [s for s in (*NORMANS.text.split(". "), *FRANKS.text.split(". ")) if s in result.text]
    assert 1 <= len(quoted) <= 2
    assert 1 <= len(result.used_passage_ids) <= 2
    assert set(result.used_passage_ids) <= {"P1", "P3"}


def test_unrelated_question_gets_no_answer_and_no_citations() -> None:
    for question in ["What is the capital of Mongolia?", "How do I bake sourdough bread?"]:
        result = ask(question, [NORMANS, COMPLEXITY])
        assert result == ChatResult(NO_ANSWER)


def test_names_match_without_accents() -> None:
    herve = Passage("P1", "Hervé served as a Byzantine general in the 1050s.", "n.pdf", [4], 0.3)
    result = ask("When did Herve serve as a Byzantine general?", [herve, COMPLEXITY])
    assert "1050s" in result.text and result.used_passage_ids == ["P1"]


def test_no_passages_gets_no_answer() -> None:
    assert ask("Who was Rollo?", []) == ChatResult(NO_ANSWER)
    assert ask("", [NORMANS]) == ChatResult(NO_ANSWER)


def test_tools_are_ignored() -> None:
    tool = ToolSpec("lookup", "Look something up.", {"type": "object", "properties": {}})
    request = ChatRequest("", "Who was the leader of the Norse?", [NORMANS], tools=[tool])
    result = ExtractiveModel().complete(request)
    assert result.tool_calls == [] and result.used_passage_ids == ["P1"]


def test_deterministic() -> None:
    request = ChatRequest("", "What does complexity theory classify?", [NORMANS, COMPLEXITY])
    first = ExtractiveModel().complete(request)
    assert all(ExtractiveModel().complete(request) == first for _ in range(5))
    assert first.used_passage_ids == ["P2"]


@pytest.mark.slow
def test_same_answer_under_any_hash_seed() -> None:
    """Python salts str hashes per process; set order must never pick the answer."""
    script = (
        "from agentcore.chat_models import ChatRequest, Passage\n"
        "from agentcore.plugins.extractive import ExtractiveModel\n"
        f"ps = [Passage(*a) for a in {[tuple(vars(p).values()) for p in (NORMANS, FRANKS)]!r}]\n"
        "r = ExtractiveModel().complete(ChatRequest('', 'Who agreed with Charles III?', ps))\n"
        "print(repr(r))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1 and "Rollo" in outputs.pop()


def test_registered_as_extractive() -> None:
    models: list[object] = []
    agentcore_register_chat_models(register=models.append, settings=Settings())
    assert [getattr(m, "name", None) for m in models] == ["extractive"]


@pytest.mark.parametrize(
    ("embedder", "expected"),
    [("hashing-v1", Gate(min_support=0.565, score_weight=2.9)), ("openai-embedder", None)],
)
def test_the_gate_is_the_embedders_measured_one(embedder: str, expected: Gate | None) -> None:
    models: list[ExtractiveModel] = []
    settings = Settings().model_copy(update={"embedder": embedder})
    agentcore_register_chat_models(register=models.append, settings=settings)  # type: ignore[arg-type]
    assert models[0].gate == GATES.get(embedder) == expected


def _scored(passage: Passage, score: float) -> Passage:
    return dataclasses.replace(passage, score=score)


QUESTION = "From which countries did the Norse raiders come?"


def _covered(question: str, passage: Passage) -> float:
    """The best sentence's covered share of ``question``, as the gate sees it."""
    found = ExtractiveModel()._ranked(ChatRequest("", question, [passage]))
    assert found is not None
    (_, coverage), _ = found[0][0]
    return coverage * found[1]


def test_the_gate_adds_coverage_and_retrieval_score() -> None:
    covered = _covered(QUESTION, NORMANS)
    assert 0 < covered < 1
    model = ExtractiveModel(gate=Gate(min_support=covered + 2 * 0.3, score_weight=2))
    at = model.complete(ChatRequest("", QUESTION, [_scored(NORMANS, 0.3)]))
    assert "Denmark" in at.text and at.used_passage_ids == ["P1"]
    below = model.complete(ChatRequest("", QUESTION, [_scored(NORMANS, 0.29)]))
    assert below.text == NO_ANSWER and below.used_passage_ids == []


def test_a_near_passage_makes_up_for_few_words_and_a_far_one_does_not() -> None:
    covered = _covered(QUESTION, NORMANS)
    gate = Gate(min_support=covered + 0.5, score_weight=1)
    assert gate.supports(covered, 0.5) and not gate.supports(covered, 0.49)
    assert gate.supports(covered + 0.5, 0.0)  # all words, however far the passage
    model = ExtractiveModel(min_coverage=0.0, gate=gate)
    near = model.complete(ChatRequest("", QUESTION, [_scored(NORMANS, 0.6)]))
    assert near.used_passage_ids == ["P1"]
    far = model.complete(ChatRequest("", QUESTION, [_scored(NORMANS, 0.1)]))
    assert far.text == NO_ANSWER


def test_without_a_gate_min_coverage_alone_decides() -> None:
    covered = _covered(QUESTION, NORMANS)
    far = [_scored(NORMANS, -0.5)]  # no retrieval score counts without a gate
    assert ExtractiveModel(min_coverage=covered).complete(
        ChatRequest("", QUESTION, far)
    ).used_passage_ids == ["P1"]
    assert (
        ExtractiveModel(min_coverage=covered + 1e-9).complete(ChatRequest("", QUESTION, far)).text
        == NO_ANSWER
    )
