"""An httpx client for the /v1 API that returns the same pydantic models as the core."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

import agentcore.errors as errors
from agentcore.models import (
    Agent,
    AgentList,
    ChatMessageResponse,
    Deleted,
    DeliveryList,
    Document,
    DocumentList,
    SearchResponse,
    VerifyResponse,
    WebhookList,
    WebhookSubscription,
    WebhookSubscriptionWithSecret,
)

M = TypeVar("M", bound=BaseModel)
_BY_STATUS: dict[int, type[errors.AgentCoreError]] = {
    cls.status: cls
    for cls in (
        errors.InvalidRequest,
        errors.AuthenticationError,
        errors.PermissionDenied,
        errors.NotFound,
        errors.MethodNotAllowed,
        errors.Conflict,
        errors.PayloadTooLarge,
        errors.UnsupportedMediaType,
        errors.ValidationFailed,
        errors.RateLimited,
        errors.ProviderError,
        errors.ProviderTimeout,
    )
}


class Client:
    """Talks to an agentcore server: ``Client("http://127.0.0.1:8000", "ak_test_...")``.

    Failures raise the same ``agentcore.errors`` classes the core raises, with the
    server's ``code``, ``param`` and request id (in ``extra``). Pass ``transport`` to
    use, e.g., ``httpx.ASGITransport`` or a mounted prefix in ``base_url``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/v1",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise _error(response)
        return model.model_validate_json(response.content)

    # auth and agents -----------------------------------------------------------------

    def verify(self) -> VerifyResponse:
        """``GET /v1/auth/verify``."""
        return self._call(VerifyResponse, "GET", "/auth/verify")

    def list_agents(self, **params: Any) -> AgentList:
        """``GET /v1/agents`` (``limit``, ``starting_after``, ``status``)."""
        return self._call(AgentList, "GET", "/agents", params=params)

    def create_agent(self, **fields: Any) -> Agent:
        """``POST /v1/agents``."""
        return self._call(Agent, "POST", "/agents", json=fields)

    def get_agent(self, agent_id: str) -> Agent:
        """``GET /v1/agents/{id}``."""
        return self._call(Agent, "GET", f"/agents/{agent_id}")

    def update_agent(self, agent_id: str, **fields: Any) -> Agent:
        """``PATCH /v1/agents/{id}``."""
        return self._call(Agent, "PATCH", f"/agents/{agent_id}", json=fields)

    def deploy_agent(self, agent_id: str) -> Agent:
        """``POST /v1/agents/{id}/deploy``."""
        return self._call(Agent, "POST", f"/agents/{agent_id}/deploy")

    def undeploy_agent(self, agent_id: str) -> Agent:
        """``POST /v1/agents/{id}/undeploy``."""
        return self._call(Agent, "POST", f"/agents/{agent_id}/undeploy")

    def archive_agent(self, agent_id: str) -> Agent:
        """``DELETE /v1/agents/{id}``."""
        return self._call(Agent, "DELETE", f"/agents/{agent_id}")

    # knowledge and chat ------------------------------------------------------------

    def upload(self, path: str | Path, *, content_type: str | None = None) -> Document:
        """``POST /v1/knowledge/documents`` with a file."""
        file = Path(path)
        files = {"file": (file.name, file.read_bytes(), content_type or "application/octet-stream")}
        return self._call(Document, "POST", "/knowledge/documents", files=files)

    def add_text(self, source: str, text: str) -> Document:
        """``POST /v1/knowledge/documents`` with ``{source, text}``."""
        return self._call(
            Document, "POST", "/knowledge/documents", json={"source": source, "text": text}
        )

    def list_documents(self, **params: Any) -> DocumentList:
        """``GET /v1/knowledge/documents``."""
        return self._call(DocumentList, "GET", "/knowledge/documents", params=params)

    def delete_document(self, document_id: str) -> Deleted:
        """``DELETE /v1/knowledge/documents/{id}``."""
        return self._call(Deleted, "DELETE", f"/knowledge/documents/{document_id}")

    def search(
        self, query: str, *, top_k: int | None = None, min_score: float | None = None
    ) -> SearchResponse:
        """``POST /v1/knowledge/search``."""
        body: dict[str, Any] = {"query": query}
        if top_k is not None:
            body["top_k"] = top_k
        if min_score is not None:
            body["min_score"] = min_score
        return self._call(SearchResponse, "POST", "/knowledge/search", json=body)

    def chat(
        self, agent_id: str, message: str, conversation_id: str | None = None
    ) -> ChatMessageResponse:
        """``POST /v1/chat/message``."""
        body: dict[str, Any] = {"agentId": agent_id, "message": message}
        if conversation_id is not None:
            body["conversationId"] = conversation_id
        return self._call(ChatMessageResponse, "POST", "/chat/message", json=body)

    # webhooks ---------------------------------------------------------------------

    def subscribe(self, url: str, events: list[str]) -> WebhookSubscriptionWithSecret:
        """``POST /v1/webhooks/subscribe``; keep the returned ``secret``."""
        return self._call(
            WebhookSubscriptionWithSecret,
            "POST",
            "/webhooks/subscribe",
            json={"url": url, "events": events},
        )

    def list_webhooks(self, **params: Any) -> WebhookList:
        """``GET /v1/webhooks``."""
        return self._call(WebhookList, "GET", "/webhooks", params=params)

    def delete_webhook(self, webhook_id: str) -> Deleted:
        """``DELETE /v1/webhooks/{id}``."""
        return self._call(Deleted, "DELETE", f"/webhooks/{webhook_id}")

    def test_webhook(self, webhook_id: str) -> WebhookSubscription:
        """``POST /v1/webhooks/{id}/test``."""
        return self._call(WebhookSubscription, "POST", f"/webhooks/{webhook_id}/test")

    def webhook_deliveries(self, webhook_id: str, **params: Any) -> DeliveryList:
        """``GET /v1/webhooks/{id}/deliveries``."""
        return self._call(DeliveryList, "GET", f"/webhooks/{webhook_id}/deliveries", params=params)


def _error(response: httpx.Response) -> errors.AgentCoreError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    cls = _BY_STATUS.get(response.status_code, errors.AgentCoreError)
    return cls(
        str(problem.get("detail") or response.reason_phrase),
        code=problem.get("code"),
        param=problem.get("param"),
        extra={"request_id": problem.get("request_id"), "status": response.status_code},
    )
