"""When to retry a failed webhook delivery: Svix's schedule, jitter and Retry-After."""

from __future__ import annotations

import random
from datetime import UTC
from email.utils import parsedate_to_datetime

RETRY_SCHEDULE: tuple[int, ...] = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
"""Seconds before attempt n (1-based) is made, counted from the failure of attempt n-1:
immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h. After the last one, ``failed``."""

JITTER = 0.2
"""Each delay is spread uniformly over ±20 % so retries after an outage do not stampede."""

MAX_RETRY_AFTER = 86_400.0
"""A receiver's Retry-After is honoured up to a day; longer asks are cut to this."""


def next_delay(
    attempt_number: int, *, retry_after: float | None, rng: random.Random
) -> float | None:
    """Seconds to wait before the next attempt, or ``None`` when none remain.

    :param attempt_number: how many attempts have failed so far (0: none made yet).
    :param retry_after: the receiver's Retry-After in seconds, if it sent one; the
        delay is at least this (capped at :data:`MAX_RETRY_AFTER`).
    :param rng: the source of jitter (seed it in tests).
    """
    if attempt_number < 0:
        raise ValueError("attempt_number must be >= 0")
    if attempt_number >= len(RETRY_SCHEDULE):
        return None
    base = float(RETRY_SCHEDULE[attempt_number])
    delay = base * rng.uniform(1 - JITTER, 1 + JITTER) if base else 0.0
    if retry_after is not None:
        delay = max(delay, min(max(retry_after, 0.0), MAX_RETRY_AFTER))
    return delay


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds from ``now`` given by a ``Retry-After`` header, or ``None`` if unusable.

    Accepts delta-seconds (``"120"``) and an HTTP-date; a date in the past gives 0.

    :param now: the current Unix time.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


__all__ = ["JITTER", "MAX_RETRY_AFTER", "RETRY_SCHEDULE", "next_delay", "parse_retry_after"]
