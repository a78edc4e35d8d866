"""Outgoing webhooks: Standard Webhooks signing, the SSRF guard, retry schedule, sender.

Public modules: ``service`` (``WebhookService``, what ``ws.webhooks`` is), ``signing``
(``verify`` for receivers written in Python) and ``schedule`` (the retry schedule and
``Retry-After`` parsing the client shares). Delivery, the sender, the SSRF guard and
the sealing of secrets at rest are this package's own (``_``-prefixed); the
composition root and the CLI use the names below.
"""

from agentcore.webhooks._delivery import WebhookRuntime
from agentcore.webhooks._keyfile import SETTING_HINT, KeyFileError, secret_keys

__all__ = ["SETTING_HINT", "KeyFileError", "WebhookRuntime", "secret_keys"]
