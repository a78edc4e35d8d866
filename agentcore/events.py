"""The event bus: typed events scoped to a workspace, in-process listeners and sinks."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentcore._ids import new_id, now_iso
from agentcore._logs import get_logger
from agentcore._unicode import find_lone_surrogate
from agentcore.errors import ValidationFailed
from agentcore.schema import Environment, EventPayload

log = get_logger("agentcore.events")  # masks keys and secrets in every record

BUILTIN_KINDS: dict[str, str] = {
    "agent.action": "An agent took an action (knowledge lookup, tool call, reply sent).",
    "agent.handoff": "An agent needs a human to take over the conversation.",
    "agent.error": "An agent failed (model provider error or time-out, MCP server failure).",
    "conversation.message": "A message in a handed-off conversation (the user's, or an"
    " operator's reply), for the person who took it over.",
    "message.feedback": "An answer was rated (up or down, with the reason given).",
    "document.ready": "A document indexed in the background became searchable.",
    "document.failed": "A document indexed in the background failed (the problem says why).",
}
ANY = "*"


@dataclass(frozen=True)
class Event:
    """Something that happened in one workspace: ``{id, type, timestamp, data}``.

    The one event model: publishers create it, the webhook outbox stores it
    (``Store.record_event``), listeners receive it. ``payload()`` is its wire form.
    """

    type: str
    data: dict[str, Any]
    organization_id: str
    environment: Environment
    id: str = field(default_factory=lambda: new_id("evt"))
    timestamp: str = field(default_factory=now_iso)

    def payload(self) -> EventPayload:
        """The wire form, as webhooks deliver it (no tenancy fields)."""
        return EventPayload(id=self.id, type=self.type, timestamp=self.timestamp, data=self.data)


Listener = Callable[[Event], None]


#: How event data is written as JSON in each delivery's body (``encode_payload``):
#: compact, keys sorted, UTF-8 as is, and no NaN or infinity.
EVENT_JSON: dict[str, Any] = {
    "separators": (",", ":"),
    "sort_keys": True,
    "ensure_ascii": False,
    "allow_nan": False,
}

# keys unsorted: the outbox stores the data as JSON first, whose keys are all strings by
# the time a delivery sorts them (``{1: .., "b": ..}`` is fine)
_CHECK_JSON = {**EVENT_JSON, "sort_keys": False}


def check_data(data: dict[str, Any]) -> None:
    """Refuse event ``data`` that is not JSON (NaN, infinity, objects JSON cannot hold,
    strings UTF-8 cannot hold such as a lone surrogate).

    Checked when an event is published, where the publisher can be told: the outbox
    stores it and every delivery sends it encoded as here, so such data could never be
    sent.

    :raises ValidationFailed: 422 ``invalid_event_data``, ``param="data"`` (for a lone
        surrogate, the path to its string, ``data.<key>...``).
    """
    try:
        json.dumps(data, **_CHECK_JSON).encode("utf-8")
    except UnicodeEncodeError:  # looked for only now: a walk would cost every event
        found = find_lone_surrogate(data, prefix=("data",))
        assert found is not None  # the only str UTF-8 cannot encode
        raise ValidationFailed(
            f"Event data must be Unicode text: at {found.param}, {found.message}.",
            code="invalid_event_data",
            param=found.param,
        ) from None
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(
            f"Event data must be JSON (no NaN or infinity): {exc}.",
            code="invalid_event_data",
            param="data",
        ) from None


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (in nested dicts, lists and tuples) replaced
    by ``None``, as ``null`` in JSON: for event data that quotes what others produced (a
    model's tool-call arguments), which ``check_data`` would otherwise refuse."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


class EventBus:
    """Publishes events to durable sinks first, then to in-process listeners.

    Sinks (the webhook outbox) run in the publisher's thread and their failure fails
    the publish, so an event is never acknowledged without being stored. Listeners are
    best effort: an exception in one is logged and does not reach the publisher.
    Publishers never know who listens, so webhook delivery plugs in as a sink.
    """

    def __init__(self) -> None:
        self._kinds: dict[str, str] = dict(BUILTIN_KINDS)
        self._listeners: dict[str, list[Listener]] = {}
        self._sinks: list[Listener] = []
        self._lock = threading.Lock()

    @property
    def kinds(self) -> dict[str, str]:
        """Registered kinds and their descriptions."""
        return dict(self._kinds)

    def register_kind(self, kind: str, description: str) -> None:
        """Make ``kind`` publishable (plugins call this through the event-kinds hook)."""
        if not kind or "." not in kind or kind == ANY:
            raise ValueError(f"event kinds look like 'noun.verb', not {kind!r}")
        self._kinds[kind] = description

    def check_kind(self, kind: str, *, param: str = "events") -> str:
        """``kind`` if registered, else a 422 listing the known kinds."""
        if kind not in self._kinds:
            known = ", ".join(sorted(self._kinds))
            raise ValidationFailed(
                f"Unknown event kind {kind!r}; known kinds: {known}.",
                code="unknown_event_kind",
                param=param,
            )
        return kind

    def subscribe(self, kind: str, callback: Listener) -> Callable[[], None]:
        """Call ``callback(event)`` for every event of ``kind`` (``"*"`` for all).

        Returns a function that unsubscribes.
        """
        if kind != ANY:
            self.check_kind(kind, param="kind")
        with self._lock:
            self._listeners.setdefault(kind, []).append(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._listeners.get(kind, [])
                if callback in callbacks:
                    callbacks.remove(callback)

        return unsubscribe

    def add_sink(self, sink: Listener) -> None:
        """Add a durable sink: called for every event before listeners; errors propagate."""
        with self._lock:
            self._sinks.append(sink)

    def publish(
        self, kind: str, data: dict[str, Any], *, organization_id: str, environment: Environment
    ) -> Event:
        """Create an event, hand it to the sinks, then to the listeners; return it."""
        event = self.prepare(kind, data, organization_id=organization_id, environment=environment)
        with self._lock:
            sinks = list(self._sinks)
        for sink in sinks:
            sink(event)
        self.announce(event)
        return event

    def prepare(
        self, kind: str, data: dict[str, Any], *, organization_id: str, environment: Environment
    ) -> Event:
        """A new event of a registered ``kind``, not yet published: for a publisher that
        records it in the outbox itself, in the transaction of the change it reports
        (``Store.complete_document``), so it is recorded exactly when the change is;
        it then ``announce``s it."""
        self.check_kind(kind, param="type")
        check_data(data)
        return Event(kind, data, organization_id, environment)

    def announce(self, event: Event) -> None:
        """Hand ``event`` to the in-process listeners (not the sinks: its publisher
        recorded it in the outbox already, or ``publish`` just did)."""
        with self._lock:
            listeners = [*self._listeners.get(event.type, ()), *self._listeners.get(ANY, ())]
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a faulty listener must not break the publisher
                log.exception("event listener failed for %s %s", event.type, event.id)
