"""What a process keeps per workspace: least recently used out first, under a budget."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(eq=False, slots=True)
class Slot(Generic[V]):
    """One resident value, what it is charged, and how many users hold it now."""

    value: V
    nbytes: int = 0
    files: int = 0  # mapped files it holds open
    users: int = 0  # a slot with users is never evicted
    used: int = 0  # when it was last used: its group's clock (orders evictions across members)


class _Group:
    """The bounds one or more ``Residency`` objects share: one lock, the bytes and files
    charged to all of them, and a clock that orders their values' last uses."""

    def __init__(self, budget_bytes: int | None, max_files: int | None) -> None:
        self.lock = threading.Lock()
        self.budget_bytes = budget_bytes
        self.max_files = max_files
        self.bytes = 0
        self.files = 0
        self.clock = 0
        self.members: list[Residency[Any, Any]] = []

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def over(self) -> bool:
        budget, files = self.budget_bytes, self.max_files
        return (budget is not None and self.bytes > budget) or (
            files is not None and self.files > files
        )


@dataclass(frozen=True)
class ResidencyStats:
    """A snapshot of a ``Residency``'s own values: what it holds, what it has evicted,
    and how many values it was given for a key that had none (``loads``);
    ``budget_bytes`` and ``max_files`` are the bounds it shares, if it does."""

    entries: int
    bytes: int
    files: int
    pinned: int
    budget_bytes: int | None
    max_files: int | None
    evictions: int
    loads: int


class Residency(Generic[K, V]):
    """Values by key in least-recently-used order, each charged bytes and mapped files.

    Whenever the charges pass ``budget_bytes`` (``None``: no bound) or the mapped files
    pass ``max_files``, the least recently used values that no one holds (``acquire``
    without ``release`` yet) are evicted until both fit again, and ``on_evict(key,
    value)`` is told, outside the lock. Values in use are never evicted: while they alone
    pass the budget, the budget is exceeded until they are released. Thread-safe: every
    method takes one short lock.

    ``share``: another ``Residency`` whose bounds this one shares instead of having its
    own (its ``budget_bytes`` and ``max_files`` are then ignored). The bounds then hold
    for the values of both together, and the least recently used of all of them goes
    first, whichever holds it; each is told of its own evictions.
    """

    def __init__(
        self,
        *,
        budget_bytes: int | None = None,
        max_files: int | None = None,
        on_evict: Callable[[K, V], object] | None = None,
        share: Residency[Any, Any] | None = None,
    ) -> None:
        self._group: _Group = _Group(budget_bytes, max_files) if share is None else share._group
        self._on_evict = on_evict
        self._slots: OrderedDict[K, Slot[V]] = OrderedDict()
        self._lock = self._group.lock
        self._bytes = 0
        self._files = 0
        self.evictions = 0
        self.loads = 0  # values put for a key that had none (built or loaded afresh)
        with self._lock:
            self._group.members.append(self)

    @property
    def budget_bytes(self) -> int | None:
        """The bytes all the values sharing this object's bounds may be charged."""
        return self._group.budget_bytes

    @property
    def max_files(self) -> int | None:
        """The mapped files all the values sharing this object's bounds may hold."""
        return self._group.max_files

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
            self._use(key, slot)
            return slot

    def touch(self, key: K) -> V | None:
        """``key``'s value, now the most recently used, or ``None`` (not held: a value
        its user may keep using after an eviction, such as a keyword index)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                return None
            self._use(key, slot)
            return slot.value

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
            else:
                self.loads += 1
            slot.used = self._group.tick()
            self._slots[key] = slot
            self._charge(nbytes, files)
            evicted = self._evict_locked()
        self._told(evicted)
        return slot

    def keep(self, key: K, value: V, nbytes: int) -> None:
        """``charge`` ``value`` ``nbytes`` if it is ``key``'s, else ``put`` it: what a
        cache that updates its values in place does after each update."""
        if not self.charge(key, value, nbytes):
            self.put(key, value, nbytes)

    def charge(self, key: K, value: V, nbytes: int, files: int = 0) -> bool:
        """``key``'s value (if it is still ``value``) now costs ``nbytes`` and ``files``;
        whether it is still ``value``."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or slot.value is not value:
                return False
            self._charge(nbytes - slot.nbytes, files - slot.files)
            slot.nbytes, slot.files = nbytes, files
            evicted = self._evict_locked()
        self._told(evicted)
        return True

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
            self._clear_locked()

    def detach(self) -> None:
        """Forget every value and leave the bounds this object shares (it is not used
        again): what it held is no longer charged, and evictions no longer look at it."""
        with self._lock:
            self._clear_locked()
            self._group.members.remove(self)

    def _clear_locked(self) -> None:
        for slot in self._slots.values():
            self._uncharge(slot)
        self._slots.clear()

    def stats(self) -> ResidencyStats:
        """What is held now and how much was evicted so far."""
        with self._lock:
            pinned = sum(1 for slot in self._slots.values() if slot.users)
            return ResidencyStats(
                entries=len(self._slots),
                bytes=self._bytes,
                files=self._files,
                pinned=pinned,
                budget_bytes=self._group.budget_bytes,
                max_files=self._group.max_files,
                evictions=self.evictions,
                loads=self.loads,
            )

    def values(self) -> list[V]:
        """The values, least recently used first (a copy)."""
        with self._lock:
            return [slot.value for slot in self._slots.values()]

    def keys(self) -> list[K]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._slots)

    def _use(self, key: K, slot: Slot[V]) -> None:
        # the most recently used now, of this member and of the group (lock held)
        slot.used = self._group.tick()
        self._slots.move_to_end(key)

    def _charge(self, nbytes: int, files: int) -> None:
        self._bytes += nbytes
        self._files += files
        self._group.bytes += nbytes
        self._group.files += files

    def _uncharge(self, slot: Slot[V]) -> None:
        self._charge(-slot.nbytes, -slot.files)

    def _oldest_unheld(self) -> tuple[K, Slot[V]] | None:
        # held ones are in use: few, and near the new end
        return next(((key, slot) for key, slot in self._slots.items() if not slot.users), None)

    def _evict_locked(self) -> list[tuple[Residency[Any, Any], Any, Any]]:
        """Evict the least recently used unheld values of every member of the group
        while over a bound (lock held): ``(member, key, value)`` of each."""
        evicted: list[tuple[Residency[Any, Any], Any, Any]] = []
        group = self._group
        while group.over():
            oldest = None
            for member in group.members:
                found = member._oldest_unheld()
                if found is not None and (oldest is None or found[1].used < oldest[2].used):
                    oldest = (member, *found)
            if oldest is None:
                break
            member, key, slot = oldest
            del member._slots[key]
            member._uncharge(slot)
            member.evictions += 1
            evicted.append((member, key, slot.value))
        return evicted

    @staticmethod
    def _told(evicted: list[tuple[Residency[Any, Any], Any, Any]]) -> None:
        for member, key, value in evicted:
            if member._on_evict is not None:
                member._on_evict(key, value)


class KeyedLocks(Generic[K]):
    """A re-entrant lock per key, made on first use and dropped once no thread wants it
    (100,000 tenants leave no 100,000 locks behind): one load or write of a key at a
    time, while other keys go on."""

    def __init__(self) -> None:
        self._locks: dict[K, tuple[threading.RLock, list[int]]] = {}
        self._guard = threading.Lock()

    def __len__(self) -> int:
        return len(self._locks)

    @contextlib.contextmanager
    def hold(self, key: K) -> Iterator[None]:
        """Hold ``key``'s lock for the ``with`` block."""
        with self._guard:
            lock, wanted = self._locks.setdefault(key, (threading.RLock(), [0]))
            wanted[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                wanted[0] -= 1
                if not wanted[0]:
                    del self._locks[key]


class Sweeper:
    """Bounds a per-key dict whose old entries mean nothing (the same as no entry): once
    it reaches ``floor`` entries, or twice what the last sweep left, only those ``keep``
    says still matter stay. Call it after each insertion (the caller's lock held)."""

    def __init__(self, floor: int) -> None:
        self._floor = floor
        self._at = floor

    def __call__(self, entries: dict[K, V], keep: Callable[[V], bool]) -> dict[K, V]:
        """``entries``, or when a sweep is due, a new dict of the ones to keep."""
        if len(entries) < self._at:
            return entries
        kept = {key: value for key, value in entries.items() if keep(value)}
        self._at = max(self._floor, 2 * len(kept))
        return kept
