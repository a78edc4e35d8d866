"""OpenAI's Chat Completions answers: the completion, its stream's chunks, the model
list and the error envelope (``citations`` and ``conversation_id`` are agentcore's
extension fields, which OpenAI clients ignore)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agentcore.schema import Citation


class CompletionUsage(BaseModel):
    """Tokens of the turn, as the chat model counted them."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


FinishReason = Literal["stop", "tool_calls"]
"""``stop``: the answer is complete. ``tool_calls``: the model called tools the caller
runs (``message.tool_calls``); send their outputs as ``tool`` messages to go on."""


class CompletionFunction(BaseModel):
    """The function a tool call names, with its arguments as JSON text."""

    name: str
    arguments: str


class CompletionToolCall(BaseModel):
    """A call of a tool the caller runs (one of the request's ``tools``, or an agent's
    tool that no plugin runs)."""

    id: str
    type: Literal["function"] = "function"
    function: CompletionFunction


class UrlCitation(BaseModel):
    """Where a cited page is: ``url`` is the source with the page as a PDF fragment
    (``handbook.pdf#page=4``, the first of its pages), ``title`` the source, its location
    (``Slide 3``, a heading) and its pages; the span is the answer's text that relies on
    it (all of it)."""

    url: str
    title: str
    start_index: int
    end_index: int


class CompletionAnnotation(BaseModel):
    """One of the answer's citations in OpenAI's ``annotations`` shape, which agent
    frameworks keep when they drop extension fields."""

    type: Literal["url_citation"] = "url_citation"
    url_citation: UrlCitation


def url_citations(text: str, citations: list[Citation]) -> list[CompletionAnnotation]:
    """The citations of an answer as OpenAI's ``url_citation`` annotations of ``text``."""
    return [
        CompletionAnnotation(
            url_citation=UrlCitation(
                url=f"{citation.source}#page={citation.pages[0]}"
                if citation.pages
                else citation.source,
                title=_title(citation),
                start_index=0,
                end_index=len(text),
            )
        )
        for citation in citations
    ]


def _title(citation: Citation) -> str:
    """``handbook.pdf, page 4``, ``handbook.pdf, pages 3, 4`` or ``deck.pptx, Slide 3,
    page 3`` (its location first when it has one; the source alone without pages)."""
    where = (
        citation.source if citation.location is None else f"{citation.source}, {citation.location}"
    )
    pages = citation.pages
    if not pages:
        return where
    return f"{where}, page{'s' if len(pages) > 1 else ''} {', '.join(map(str, pages))}"


class CompletionMessage(BaseModel):
    """The assistant's message of a completion."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    annotations: list[CompletionAnnotation] = Field(
        default_factory=list,
        description="The citations, as OpenAI's `url_citation` annotations (`citations`"
        " has them as agentcore gives them).",
    )
    tool_calls: list[CompletionToolCall] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )


class CompletionChoice(BaseModel):
    """The one choice of a completion."""

    index: int = 0
    message: CompletionMessage
    finish_reason: FinishReason = "stop"
    logprobs: None = None


class ChatCompletion(BaseModel):
    """A completion, as OpenAI returns it; ``citations`` and ``conversation_id`` are
    agentcore's extension fields (OpenAI clients ignore them)."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = Field(
        None, description="Token counts when the agent's chat model reports them."
    )
    citations: list[Citation] = Field(
        description="agentcore: the source documents and pages the answer used."
    )
    conversation_id: str = Field(
        description="agentcore: the conversation the turn was stored in (send it back as"
        " `conversation_id` to continue it)."
    )


def _unset(value: Any) -> bool:
    return value is None


class ChunkToolCall(CompletionToolCall):
    """A tool call in a chunk: whole, with its position among the message's calls."""

    index: int


class ChunkDelta(BaseModel):
    """What a chunk adds to the message."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=_unset)
    content: str | None = Field(default=None, exclude_if=_unset)
    tool_calls: list[ChunkToolCall] | None = Field(default=None, exclude_if=_unset)


class ChunkChoice(BaseModel):
    """The one choice of a chunk."""

    index: int = 0
    delta: ChunkDelta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One event of a streamed completion: ``data: {chunk}``. The chunk with the
    ``finish_reason`` also carries ``citations`` and ``conversation_id``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = Field(
        default=None, exclude_if=_unset, description="The usage chunk's (`include_usage`)."
    )
    citations: list[Citation] | None = Field(
        default=None, exclude_if=_unset, description="agentcore: on the chunk with `finish_reason`."
    )
    conversation_id: str | None = Field(
        default=None, exclude_if=_unset, description="agentcore: on the chunk with `finish_reason`."
    )


class ModelObject(BaseModel):
    """An agent, as OpenAI lists a model."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    """``GET /v1/models``: the agents the key may chat with."""

    object: Literal["list"] = "list"
    data: list[ModelObject]


class OpenAIError(BaseModel):
    """OpenAI's error object."""

    message: str
    type: str
    code: str | None
    param: str | None


class OpenAIErrorResponse(BaseModel):
    """OpenAI's error envelope: ``{"error": {...}}``."""

    error: OpenAIError
