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


class CompletionMessage(BaseModel):
    """The assistant's message of a completion."""

    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class CompletionChoice(BaseModel):
    """The one choice of a completion."""

    index: int = 0
    message: CompletionMessage
    finish_reason: Literal["stop"] = "stop"
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


class ChunkDelta(BaseModel):
    """What a chunk adds to the message."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=_unset)
    content: str | None = Field(default=None, exclude_if=_unset)


class ChunkChoice(BaseModel):
    """The one choice of a chunk."""

    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop"] | None = None
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
