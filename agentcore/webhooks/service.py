"""WebhookService: subscribe, list, get, delete, rotate, re-enable and test-ping webhooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from agentcore.errors import Conflict, NotFound, ValidationFailed, check_unicode
from agentcore.events import Event
from agentcore.outbound import validate_url
from agentcore.schema import (
    MAX_WEBHOOK_DESCRIPTION,
    Deleted,
    DeliveryList,
    WebhookList,
    WebhookSubscription,
    WebhookSubscriptionWithSecret,
    WebhookTestSent,
)
from agentcore.storage.records import StoredSubscription
from agentcore.webhooks.signing import generate_secret

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.storage.base import WebhookStore
    from agentcore.webhooks._delivery import WebhookRuntime
    from agentcore.workspace import Workspace

ROTATION_OVERLAP = 24 * 3600.0
PING = "webhook.ping"


class EventKinds(Protocol):
    """Knows which event kinds exist (``EventBus.check_kind``)."""

    def check_kind(self, kind: str, *, param: str = "events") -> str:
        """``kind`` if registered, else a 422 listing the known kinds."""
        ...


class WebhookService:
    """Webhook subscriptions of one workspace; reached as ``workspace.webhooks``.

    :param workspace: whose subscriptions, and the scopes the caller holds.
    :param runtime: the core's delivery runtime (SSRF policy, resolver, clock, wake-up).
    :param store: subscriptions, deliveries and the event outbox.
    :param kinds: the registered event kinds a subscription may name.
    :param settings: page-size limits.
    """

    def __init__(
        self,
        workspace: Workspace,
        runtime: WebhookRuntime,
        *,
        store: WebhookStore,
        kinds: EventKinds,
        settings: Settings,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._runtime = runtime
        self._kinds = kinds
        self._settings = settings

    def subscribe(
        self, url: str, events: list[str], description: str | None = None
    ) -> WebhookSubscriptionWithSecret:
        """Subscribe ``url`` to event kinds; the ``whsec_`` secret is returned only here."""
        self._ws.require("write")
        check_unicode(url, param="url")
        check_unicode(description, param="description")
        if not events:
            raise ValidationFailed("List at least one event kind.", param="events")
        kinds = sorted({self._kinds.check_kind(kind) for kind in events})
        if description is not None and len(description) > MAX_WEBHOOK_DESCRIPTION:
            # the HTTP body model caps it too; checked here so Python callers meet the same cap
            raise ValidationFailed(
                f"The description must be at most {MAX_WEBHOOK_DESCRIPTION} characters.",
                param="description",
            )
        checked = validate_url(
            url,
            environment=self._ws.environment,
            policy=self._runtime.policy,
            resolver=self._runtime.resolver,
        )
        secret = generate_secret()
        stored = self._store.insert_subscription(
            self._ws.organization_id,
            self._ws.environment,
            url=checked,
            events=kinds,
            secret=self._runtime.secrets.seal(secret),  # the store never sees it, with a key
            description=description,
        )
        return WebhookSubscriptionWithSecret(**stored.public.model_dump(), secret=secret)

    def _find(self, subscription_id: str) -> StoredSubscription:
        found = self._store.get_subscription(
            self._ws.organization_id, self._ws.environment, subscription_id
        )
        if found is None:
            raise NotFound(f"No webhook subscription with id {subscription_id!r}.", param="id")
        return found

    def get(self, subscription_id: str) -> WebhookSubscription:
        """One subscription (never its secret). Read scope."""
        self._ws.require("read")
        return self._find(subscription_id).public

    def list(self, *, limit: int | None = None, starting_after: str | None = None) -> WebhookList:
        """A page of subscriptions, newest first. Read scope."""
        self._ws.require("read")
        found, more = self._store.list_subscriptions(
            self._ws.organization_id,
            self._ws.environment,
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
        )
        return WebhookList(webhooks=[s.public for s in found], has_more=more)

    def delete(self, subscription_id: str) -> Deleted:
        """Delete a subscription; its pending deliveries stop (attempts already under
        way may still arrive). Write scope."""
        self._ws.require("write")
        if not self._store.delete_subscription(
            self._ws.organization_id, self._ws.environment, subscription_id
        ):
            raise NotFound(f"No webhook subscription with id {subscription_id!r}.", param="id")
        self._runtime.forget(subscription_id)
        return Deleted(id=subscription_id)

    def rotate_secret(self, subscription_id: str) -> WebhookSubscriptionWithSecret:
        """A new secret; the one it replaces keeps signing (beside it) for 24 hours. Write scope.

        Only the most recent previous secret is kept: rotating again within the 24 hours
        ends the earlier overlap, and the secret before that stops signing at once.

        With a key (``webhook_secret_key``, or the key file beside a SQLite database)
        both are stored sealed: a secret sealed with an older key is sealed anew.
        """
        self._ws.require("write")
        current = self._find(subscription_id)
        secret = generate_secret()
        box = self._runtime.secrets
        self._store.update_subscription(
            subscription_id,
            secret=box.seal(secret),
            previous_secret=box.seal(box.open(current.secret)),
            previous_secret_expires_at=self._runtime.clock() + ROTATION_OVERLAP,
        )
        return WebhookSubscriptionWithSecret(
            **self._find(subscription_id).public.model_dump(), secret=secret
        )

    def enable(self, subscription_id: str) -> WebhookSubscription:
        """Re-enable a disabled subscription: events recorded from now on are delivered.

        Its deliveries that were pending when it was disabled ended as ``failed`` then
        (``GET /v1/webhooks/{id}/deliveries`` shows them); they are not resent. Write scope.
        """
        self._ws.require("write")
        self._find(subscription_id)
        self._store.update_subscription(
            subscription_id, status="active", failing_since=None, disabled_reason=None
        )
        return self._find(subscription_id).public

    def send_test(self, subscription_id: str) -> WebhookTestSent:
        """Queue a ``webhook.ping`` event to this subscription only. Write scope.

        Returns the subscription with the ids of the event and the delivery created.

        :raises Conflict: 409 ``subscription_disabled``: a disabled subscription is sent
            nothing (``enable`` it first).
        """
        self._ws.require("write")
        found = self._find(subscription_id)
        if found.public.status != "active":
            raise self._disabled(subscription_id)
        event = Event(
            PING,
            {"subscription_id": subscription_id, "message": "This is a test event."},
            self._ws.organization_id,
            self._ws.environment,
        )
        if not self._store.record_event(
            event, now=self._runtime.clock(), only_subscription=subscription_id
        ):  # disabled (or deleted) since it was read: the store queued nothing
            self._find(subscription_id)
            raise self._disabled(subscription_id)
        self._runtime.wake()
        return WebhookTestSent(
            **found.public.model_dump(),
            event_id=event.id,
            delivery_id=self._delivery_of(subscription_id, event.id),
        )

    @staticmethod
    def _disabled(subscription_id: str) -> Conflict:
        return Conflict(
            f"The webhook subscription {subscription_id!r} is disabled; enable it first.",
            code="subscription_disabled",
            param="id",
        )

    def _delivery_of(self, subscription_id: str, event_id: str) -> str:
        # the ping's delivery was created just now, so it is on the first (newest) page
        found, _ = self._store.list_deliveries(
            self._ws.organization_id,
            self._ws.environment,
            subscription_id,
            limit=self._settings.max_page_size,
            starting_after=None,
        )
        return next(d.id for d in found if d.event_id == event_id)

    def deliveries(
        self, subscription_id: str, *, limit: int | None = None, starting_after: str | None = None
    ) -> DeliveryList:
        """A page of this subscription's deliveries and their attempts. Read scope."""
        self._ws.require("read")
        self._find(subscription_id)
        found, more = self._store.list_deliveries(
            self._ws.organization_id,
            self._ws.environment,
            subscription_id,
            limit=self._settings.page_size(limit),
            starting_after=starting_after,
        )
        return DeliveryList(deliveries=found, has_more=more)
