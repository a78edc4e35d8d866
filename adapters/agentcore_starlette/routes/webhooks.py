"""Routes: /v1/webhooks — subscribe (also the collection's POST), list, get, delete, rotate, enable, test, deliveries."""

from __future__ import annotations

from typing import cast

from agentcore.schema import (
    Deleted,
    DeliveryList,
    WebhookList,
    WebhookSubscribeRequest,
    WebhookSubscription,
    WebhookSubscriptionWithSecret,
    WebhookTestSent,
)
from agentcore_starlette.routing import PAGINATION, ApiRoute, Call


def subscribe_webhook(call: Call) -> WebhookSubscriptionWithSecret:
    """Subscribe a callback URL to event kinds; the signing secret is shown only here."""
    body = cast(WebhookSubscribeRequest, call.body)
    return call.workspace.webhooks.subscribe(body.url, body.events, body.description)


def create_webhook(call: Call) -> WebhookSubscriptionWithSecret:
    """Subscribe a callback URL to event kinds, as ``POST /webhooks/subscribe`` does (the
    collection's ``POST``, where Stripe and Svix create one); the secret is shown only here."""
    return subscribe_webhook(call)


def list_webhooks(call: Call) -> WebhookList:
    """A page of subscriptions, newest first."""
    return call.workspace.webhooks.list(
        limit=call.int_query("limit"), starting_after=call.str_query("starting_after")
    )


def get_webhook(call: Call) -> WebhookSubscription:
    """One subscription."""
    return call.workspace.webhooks.get(call.path["webhook_id"])


def delete_webhook(call: Call) -> Deleted:
    """Delete a subscription."""
    return call.workspace.webhooks.delete(call.path["webhook_id"])


def rotate_webhook_secret(call: Call) -> WebhookSubscriptionWithSecret:
    """A new signing secret; the one it replaces also signs for 24 hours (until the next rotation)."""
    return call.workspace.webhooks.rotate_secret(call.path["webhook_id"])


def enable_webhook(call: Call) -> WebhookSubscription:
    """Re-enable a disabled subscription."""
    return call.workspace.webhooks.enable(call.path["webhook_id"])


def test_webhook(call: Call) -> WebhookTestSent:
    """Send a ``webhook.ping`` event to this (active) subscription; returns its event and
    delivery ids, or 409 ``subscription_disabled``."""
    return call.workspace.webhooks.send_test(call.path["webhook_id"])


def list_webhook_deliveries(call: Call) -> DeliveryList:
    """Deliveries of this subscription with each attempt's status code and time."""
    return call.workspace.webhooks.deliveries(
        call.path["webhook_id"],
        limit=call.int_query("limit"),
        starting_after=call.str_query("starting_after"),
    )


_ONE = "/webhooks/{webhook_id}"
ROUTES = [
    ApiRoute(
        method="POST",
        path="/webhooks/subscribe",
        handler=subscribe_webhook,
        response=WebhookSubscriptionWithSecret,
        summary="Subscribe to events",
        scope="write",
        tag="webhooks",
        body="json",
        request=WebhookSubscribeRequest,
        status_code=201,
    ),
    ApiRoute(
        method="POST",
        path="/webhooks",
        handler=create_webhook,
        response=WebhookSubscriptionWithSecret,
        summary="Subscribe to events (the collection's POST)",
        scope="write",
        tag="webhooks",
        body="json",
        request=WebhookSubscribeRequest,
        status_code=201,
    ),
    ApiRoute(
        method="GET",
        path="/webhooks",
        handler=list_webhooks,
        response=WebhookList,
        summary="List subscriptions",
        scope="read",
        tag="webhooks",
        query=PAGINATION,
    ),
    ApiRoute(
        method="GET",
        path=_ONE,
        handler=get_webhook,
        response=WebhookSubscription,
        summary="Retrieve a subscription",
        scope="read",
        tag="webhooks",
    ),
    ApiRoute(
        method="DELETE",
        path=_ONE,
        handler=delete_webhook,
        response=Deleted,
        summary="Delete a subscription",
        scope="write",
        tag="webhooks",
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/rotate-secret",
        handler=rotate_webhook_secret,
        response=WebhookSubscriptionWithSecret,
        summary="Rotate the signing secret",
        scope="write",
        tag="webhooks",
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/enable",
        handler=enable_webhook,
        response=WebhookSubscription,
        summary="Re-enable a subscription",
        scope="write",
        tag="webhooks",
    ),
    ApiRoute(
        method="POST",
        path=_ONE + "/test",
        handler=test_webhook,
        response=WebhookTestSent,
        summary="Send a test event",
        scope="write",
        tag="webhooks",
        status_code=202,
    ),
    ApiRoute(
        method="GET",
        path=_ONE + "/deliveries",
        handler=list_webhook_deliveries,
        response=DeliveryList,
        summary="List deliveries and attempts",
        scope="read",
        tag="webhooks",
        query=PAGINATION,
    ),
]
