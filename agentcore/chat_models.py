"""The chat-model plugin interface: what a model is given and what it must return."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agentcore.knowledge.terms import TermStats
from agentcore.schema import Usage


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk offered to the model; ``id`` is what the model cites.

    ``page_offsets[i]`` is where the text of ``pages[i]`` starts within ``text``;
    ``location`` names the part of the source it starts in (``Slide 3``, a heading).
    """

    id: str
    text: str
    source: str
    pages: list[int]
    score: float
    document_id: str = ""
    page_offsets: list[int] = field(default_factory=list)
    location: str | None = None


@dataclass(frozen=True)
class ChatTurn:
    """One earlier message of the conversation."""

    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: JSON-Schema ``parameters`` as OpenAI expects."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolStep:
    """A tool call made earlier in this turn and the result fed back to the model."""

    call: ToolCall
    result: str


@dataclass(frozen=True)
class ChatRequest:
    """Everything a chat model sees for one turn.

    ``term_stats`` says how rare each word of ``message`` is in the workspace's
    knowledge (its sentences, and how many hold each question stem); ``None`` when
    the caller has none. Models that only read ``passages`` ignore it.
    """

    system_prompt: str
    message: str
    passages: list[Passage] = field(default_factory=list)
    history: list[ChatTurn] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    steps: list[ToolStep] = field(default_factory=list)
    timeout: float = 30.0
    term_stats: TermStats | None = None
    tool_choice: str = "auto"
    """``auto`` (the model decides), ``required`` (it must call a tool) or the name of
    the tool it must call, as the caller asked (OpenAI's ``tool_choice``); models that
    cannot be told may ignore it."""
    response_format: dict[str, Any] | None = None
    """The JSON the caller wants the answer in (OpenAI's ``response_format``:
    ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema": {...}}``);
    given only to a model whose ``accepts_response_format`` is true (else the request
    is refused), ``None`` for text."""


@dataclass(frozen=True)
class ChatResult:
    """The model's answer.

    ``used_passage_ids`` are the ids of the passages the answer actually relies on
    (citations are built from these only). ``tool_calls`` non-empty means the model
    wants tools run before it answers; ``text`` may then be empty. ``usage`` is the
    tokens this call took, when the model reports them (``None`` otherwise): the core
    sums it over a turn's calls into the answer's ``usage``.
    """

    text: str
    used_passage_ids: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None


@runtime_checkable
class ChatModel(Protocol):
    """A chat model; ``name`` is what ``agent.model`` refers to.

    A model that can answer in the JSON a caller asks for (``ChatRequest.response_format``)
    says so with a class attribute ``accepts_response_format = True``; the others are
    never given one.
    """

    name: str

    def complete(self, request: ChatRequest) -> ChatResult:
        """Answer one turn.

        Must return within ``request.timeout`` seconds or raise
        ``agentcore.errors.ProviderTimeout``; any other provider failure raises
        ``agentcore.errors.ProviderError``. Never hang.
        """
        ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A chat model that can also hand out its answer while it is being generated."""

    def stream(self, request: ChatRequest) -> Iterator[str | ChatResult]:
        """Answer one turn piece by piece.

        Yield ``str`` deltas as the text is generated, then exactly one ``ChatResult``
        (last), whose ``text`` is the deltas joined (the core sends any missing tail of
        it as a last delta). Tool calls arrive in the final result. Time to the first
        item and between items must stay within ``request.timeout`` seconds; failures
        raise ``ProviderError`` / ``ProviderTimeout`` as in ``complete``. The core may
        close the iterator early (the client went away): release everything in a
        ``finally`` (or a ``with``) around the generation.
        """
        ...


def stream_answer(model: ChatModel, request: ChatRequest) -> Iterator[str | ChatResult]:
    """The items of ``model.stream(request)``, or, for a model that cannot stream, its
    ``complete`` answer as one delta followed by the result."""
    if isinstance(model, StreamingChatModel):
        return model.stream(request)
    return whole_answer(model, request)


def whole_answer(model: ChatModel, request: ChatRequest) -> Iterator[str | ChatResult]:
    """``model.complete(request)`` in the streaming shape: its text as one delta, then
    the result (no delta for an empty text)."""
    result = model.complete(request)
    if result.text:
        yield result.text
    yield result
