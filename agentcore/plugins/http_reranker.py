"""The built-in ``/rerank`` client: Cohere's rerank protocol, which most rerank servers speak.

``POST {model, query, documents, top_n}`` answered by ``{results: [{index,
relevance_score}]}`` (Cohere, Jina, Voyage's ``data``, vLLM, Infinity; a bare list with
``score``, as Hugging Face TEI answers, is read too). Calls pass the shared SSRF guard
(``agentcore.outbound``), are bounded in time by ``rerank_timeout`` and in what they
read back by ``MAX_RESPONSE_BYTES``, and never follow redirects.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentcore._logs import get_logger
from agentcore.config import PluginSettings
from agentcore.errors import AgentCoreError, ProviderError, ProviderTimeout
from agentcore.hookspecs import hookimpl
from agentcore.outbound import (
    AddressPolicy,
    BlockedAddress,
    GuardedTransport,
    deadline,
    validate_url,
)

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge.rerankers import Reranker

__all__ = [
    "MAX_RESPONSE_BYTES",
    "NAME",
    "HttpReranker",
    "RerankerSettings",
    "agentcore_register_rerankers",
    "agentcore_register_settings",
]

NAME = "http"
MAX_RESPONSE_BYTES = 1024 * 1024
"""The most a rerank server's answer may bring (a ranking of a thousand candidates is
well under 100 kB); a longer one fails the call."""

logger = get_logger("agentcore.rerank")


class RerankerSettings(PluginSettings):
    """Settings of the ``/rerank`` client. Namespace ``reranker``:
    ``AGENTCORE_RERANKER_<FIELD>``, or ``AgentCore.open(path, reranker_<field>=...)``."""

    model_config = SettingsConfigDict(env_prefix="AGENTCORE_RERANKER_")

    url: str | None = Field(
        None, description="The rerank endpoint, e.g. https://api.cohere.com/v2/rerank."
    )
    api_key: SecretStr | None = Field(None, description="Sent as `Authorization: Bearer`.")
    model: str | None = Field(None, description="The `model` of each request; none: left out.")

    @field_validator("url", "api_key", "model", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


class HttpReranker:
    """Reranks through a ``/rerank`` endpoint.

    :param url: the endpoint (checked by ``validate_url`` when the core opens).
    :param policy: the SSRF guard every connection passes.
    :param timeout: seconds for the whole exchange (``rerank_timeout``).
    :param transport: the guarded transport by default; tests may pass another.
    """

    name = NAME

    def __init__(
        self,
        url: str,
        *,
        policy: AddressPolicy,
        timeout: float,
        api_key: SecretStr | None = None,
        model: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self._key = api_key.get_secret_value() if api_key is not None else None
        self._model = model
        self._timeout = timeout
        self._policy = policy
        self._transport = transport
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        parsed = httpx.URL(url)  # where errors say the call went: no query string
        self.where = f"{parsed.scheme}://{parsed.netloc.decode('ascii')}{parsed.path}"

    def client(self) -> httpx.Client:
        """The one client, made on first use (no redirects, proxies or compression)."""
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    transport=self._transport or GuardedTransport(self._policy),
                    follow_redirects=False,
                    trust_env=False,
                    headers={"accept-encoding": "identity"},
                )
            return self._client

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        """The best ``top_n`` of ``documents`` by the server, best first.

        :raises ProviderTimeout: no whole answer within the time-out.
        :raises ProviderError: the server refused, could not be reached (or its address
            is refused by the SSRF guard), or answered something else than a ranking.
        """
        payload: dict[str, Any] = {"query": query, "documents": list(documents), "top_n": top_n}
        if self._model:
            payload["model"] = self._model
        status, body = self._post(payload)
        if status >= 400:
            raise ProviderError(f"The reranker at {self.where} answered HTTP {status}.")
        return _ranking(body, self.where)

    def _post(self, payload: dict[str, Any]) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            with deadline(self._timeout):
                request = self.client().build_request(
                    "POST",
                    self.url,
                    content=json.dumps(payload).encode(),
                    headers=headers,
                    timeout=self._timeout,
                )
                response = self.client().send(request, stream=True)
                try:
                    return response.status_code, _read(response, self.where)
                finally:
                    response.close()
        except httpx.TimeoutException:
            raise ProviderTimeout(
                f"The reranker at {self.where} did not answer within {self._timeout:g} s."
            ) from None
        except BlockedAddress as exc:
            raise ProviderError(f"The reranker at {self.where} is refused: {exc}.") from None
        except httpx.HTTPError as exc:
            raise ProviderError(
                f"Could not reach the reranker at {self.where}: {type(exc).__name__}."
            ) from None

    def close(self) -> None:
        """Close the client's connections."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _read(response: httpx.Response, where: str) -> bytes:
    """The body, at most ``MAX_RESPONSE_BYTES`` (more is a ``ProviderError``)."""
    received = bytearray()
    for chunk in response.iter_raw():
        received += chunk
        if len(received) > MAX_RESPONSE_BYTES:
            raise ProviderError(
                f"The reranker at {where} answered more than {MAX_RESPONSE_BYTES} bytes."
            )
    return bytes(received)


def _ranking(body: bytes, where: str) -> list[tuple[int, float]]:
    """The ``(index, score)`` pairs of a rerank answer, best first (sorted by score, as
    some servers answer in the documents' order); the core checks the indexes."""
    try:
        data = json.loads(body)
    except ValueError:
        raise ProviderError(f"The reranker at {where} did not answer with JSON.") from None
    results = data.get("results", data.get("data")) if isinstance(data, dict) else data
    if not isinstance(results, list):
        raise ProviderError(f"The reranker at {where} answered without a list of results.")
    ranking = []
    for item in results:
        score = item.get("relevance_score", item.get("score")) if isinstance(item, dict) else None
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or not isinstance(score, int | float):
            raise ProviderError(
                f"The reranker at {where} answered a result without index or score."
            )
        ranking.append((index, float(score)))
    ranking.sort(key=lambda pair: -pair[1])
    return ranking


@hookimpl
def agentcore_register_settings(register: Callable[[str, type[BaseSettings]], None]) -> None:
    """Declare ``RerankerSettings`` under the namespace ``reranker``."""
    register("reranker", RerankerSettings)


@hookimpl
def agentcore_register_rerankers(register: Callable[[Reranker], None], settings: Settings) -> None:
    """Register ``http`` when ``AGENTCORE_RERANKER_URL`` is set. The URL is checked
    against the SSRF guard now: a refused address is logged (every call then fails, and
    searches keep their first order); a malformed URL stops the core from opening."""
    own = settings.plugin(RerankerSettings)
    if own.url is None:
        return
    policy = AddressPolicy(settings.allowed_networks)
    try:
        url = validate_url(
            own.url, environment="test", policy=policy, param="reranker_url", subject="reranker"
        )
    except AgentCoreError as error:
        if error.code != "url_not_allowed":
            raise ValueError(f"reranker_url: {error.detail}") from None
        logger.warning(
            "reranker_url: %s Allow it with AGENTCORE_OUTBOUND_ALLOWED_NETWORKS.", error.detail
        )
        url = own.url
    register(
        HttpReranker(
            url,
            policy=policy,
            timeout=settings.rerank_timeout,
            api_key=own.api_key,
            model=own.model,
        )
    )
