"""Which workspace indexes a process keeps: least recently used first out, under a budget."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(eq=False, slots=True)
class Slot(Generic[V]):
    """One resident value, what it is charged, and how many users hold it now."""

    value: V
    nbytes: int = 0
    files: int = 0  # mapped files it holds open
    users: int = 0  # a slot with users is never evicted


@dataclass(frozen=True)
class ResidencyStats:
    """A snapshot of a ``Residency``: what it holds and what it has evicted."""

    entries: int
    bytes: int
    files: int
    pinned: int
    budget_bytes: int | None
    max_files: int | None
    evictions: int


class Residency(Generic[K, V]):
    """Values by key in least-recently-used order, each charged bytes and mapped files.

    Whenever the charges pass ``budget_bytes`` (``None``: no bound) or the mapped files
    pass ``max_files``, the least recently used values that no one holds (``acquire``
    without ``release`` yet) are evicted until both fit again, and ``on_evict(key,
    value)`` is told, outside the lock. Values in use are never evicted: while they alone
    pass the budget, the budget is exceeded until they are released. Thread-safe: every
    method takes one short lock.
    """

    def __init__(
        self,
        *,
        budget_bytes: int | None = None,
        max_files: int | None = None,
        on_evict: Callable[[K, V], object] | None = None,
    ) -> None:
        self.budget_bytes = budget_bytes
        self.max_files = max_files
        self._on_evict = on_evict
        self._slots: OrderedDict[K, Slot[V]] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._files = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: K) -> bool:
        return key in self._slots

    def get(self, key: K) -> V | None:
        """The value of ``key``, or ``None``; its place in the order is left as it is."""
        slot = self._slots.get(key)
        return None if slot is None else slot.value

    def acquire(self, key: K, accept: Callable[[V], bool] | None = None) -> Slot[V] | None:
        """Hold ``key``'s value (``release`` it after use) and make it the most recently
        used, if there is one and ``accept(value)`` agrees; else ``None``."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or (accept is not None and not accept(slot.value)):
                return None
            slot.users += 1
            self._slots.move_to_end(key)
            return slot

    def release(self, slot: Slot[V]) -> None:
        """Stop holding ``slot`` (from ``acquire`` or ``put(held=True)``); evict if due."""
        with self._lock:
            slot.users -= 1
            evicted = self._evict_locked() if not slot.users else []
        self._told(evicted)

    def put(self, key: K, value: V, nbytes: int, files: int = 0, *, held: bool = False) -> Slot[V]:
        """Make ``value`` ``key``'s, the most recently used, charged ``nbytes`` and
        ``files``; ``held``: held as by ``acquire`` (``release`` it). Evicts if due."""
        slot = Slot(value, nbytes, files, 1 if held else 0)
        with self._lock:
            old = self._slots.pop(key, None)
            if old is not None:
                self._uncharge(old)
            self._slots[key] = slot
            self._bytes += nbytes
            self._files += files
            evicted = self._evict_locked()
        self._told(evicted)
        return slot

    def charge(self, key: K, value: V, nbytes: int, files: int = 0) -> None:
        """``key``'s value (if it is still ``value``) now costs ``nbytes`` and ``files``."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or slot.value is not value:
                return
            self._bytes += nbytes - slot.nbytes
            self._files += files - slot.files
            slot.nbytes, slot.files = nbytes, files
            evicted = self._evict_locked()
        self._told(evicted)

    def discard(self, key: K, value: V | None = None) -> V | None:
        """Forget ``key`` (only if its value is ``value``, when given); the value forgotten.
        Not an eviction: held values may be discarded (their users keep them)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or (value is not None and slot.value is not value):
                return None
            del self._slots[key]
            self._uncharge(slot)
            return slot.value

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._slots.clear()
            self._bytes = self._files = 0

    def stats(self) -> ResidencyStats:
        """What is held now and how much was evicted so far."""
        with self._lock:
            pinned = sum(1 for slot in self._slots.values() if slot.users)
            return ResidencyStats(
                entries=len(self._slots),
                bytes=self._bytes,
                files=self._files,
                pinned=pinned,
                budget_bytes=self.budget_bytes,
                max_files=self.max_files,
                evictions=self.evictions,
            )

    def values(self) -> list[V]:
        """The values, least recently used first (a copy)."""
        with self._lock:
            return [slot.value for slot in self._slots.values()]

    def keys(self) -> list[K]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._slots)

    def _uncharge(self, slot: Slot[V]) -> None:
        self._bytes -= slot.nbytes
        self._files -= slot.files

    def _over(self) -> bool:
        budget, files = self.budget_bytes, self.max_files
        return (budget is not None and self._bytes > budget) or (
            files is not None and self._files > files
        )

    def _evict_locked(self) -> list[tuple[K, V]]:
        """Evict the least recently used unheld values while over a bound (lock held)."""
        evicted: list[tuple[K, V]] = []
        while self._over():
            # the oldest unheld one (held ones are in use: few, and near the new end)
            victim = next((key for key, slot in self._slots.items() if not slot.users), None)
            if victim is None:
                break
            slot = self._slots.pop(victim)
            self._uncharge(slot)
            evicted.append((victim, slot.value))
        self.evictions += len(evicted)
        return evicted

    def _told(self, evicted: list[tuple[K, V]]) -> None:
        if self._on_evict is not None:
            for key, value in evicted:
                self._on_evict(key, value)
