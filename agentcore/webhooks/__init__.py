"""Outgoing webhooks: Standard Webhooks signing, the SSRF guard, retry schedule, sender."""
