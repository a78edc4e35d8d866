"""Token buckets in a file that every process on one machine maps
(``rate_limit_backend = "host"``).

``serve --workers N`` on a SQLite file runs N processes behind one port; a client's
requests land on any of them, so they must take from one bucket per key. The store
could keep it, but on SQLite that is a write per request, serialised with every other
writer, and a write also empties each process's key cache (it is checked against the
file's change counter). The processes of one SQLite file are on one machine, so a small
memory-mapped file beside the database serves instead: a fixed table of buckets, taken
under an exclusive ``lockf`` lock held for a few microseconds (the kernel releases it
if a process dies holding it).

Layout: a 64-byte header naming the layout, then ``slots + PROBES`` key hashes
(``uint64``, 0 for an empty slot), then three ``float64`` per slot: tokens, when they
were counted, and when the bucket is full again (about 2 MiB for the default 65,536
slots). A key's bucket is in the ``PROBES`` slots from its hash's home slot on. A
bucket full again is the same as no bucket, so its slot may be taken by another key;
only when all ``PROBES`` slots of a window hold buckets still refilling is one given up,
the one nearest to full (its key then starts again with a full bucket). A file of
another layout is laid out again in place, so a new layout must take a new file name:
a process still mapping the old one would read past the end of a smaller file.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from pathlib import Path

SLOTS = 1 << 16
"""Home slots of the table: about 65,000 keys (and client tokens) limited at once."""
PROBES = 32
"""Slots a key's bucket may be in, from its home slot on (the window never wraps)."""
_HEADER_BYTES = 64
_MAGIC = b"agentcore token buckets v1"


def _header(slots: int) -> bytes:
    return f"{_MAGIC.decode()} {slots}\n".encode().ljust(_HEADER_BYTES, b"\0")


SUFFIX = ".rate-limits"
"""``<database>.rate-limits``: the file of a SQLite database's buckets."""


def bucket_file_for(database: str | None) -> Path | None:
    """``<database>.rate-limits`` for a SQLite database file; ``None`` for
    ``:memory:``, for a store that is not a file, and off POSIX (no ``lockf``)."""
    if database is None or database == ":memory:" or os.name != "posix":
        return None
    return Path(database + SUFFIX)


class BucketFile:
    """The token buckets of ``path``, shared with every process that opens it.

    Creates the file (mode 0600) when missing, and lays it out again when it is not a
    bucket file of this layout (its buckets are only rate-limit state: at worst a key
    starts again with a full bucket).

    :raises OSError: the file cannot be created, opened or mapped.
    """

    def __init__(self, path: Path, *, slots: int = SLOTS) -> None:
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self.path = path
        self._slots = slots
        rows = slots + PROBES
        values_at = _HEADER_BYTES + 8 * rows
        size = values_at + 3 * 8 * rows
        header = _header(slots)
        import fcntl  # POSIX only: bucket_file_for() names no file elsewhere

        self._lockf, self._exclusive, self._unlock = fcntl.lockf, fcntl.LOCK_EX, fcntl.LOCK_UN
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size != size or os.pread(fd, len(header), 0) != header:
                    os.ftruncate(fd, 0)  # zeroes every slot: empty buckets
                    os.ftruncate(fd, size)
                    os.pwrite(fd, header, 0)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        view = memoryview(self._map)
        self._keys = view[_HEADER_BYTES:values_at].cast("Q")
        self._values = view[values_at:size].cast("d")
        # lockf excludes other processes only; this excludes this process's threads
        self._lock = threading.Lock()

    def take(self, key: str, *, rate: float, burst: float, now: float) -> tuple[bool, float]:
        """Take one token from ``key``'s bucket if there is one: ``(allowed, tokens
        left)``. The bucket refills at ``rate`` a second up to ``burst`` (a new one
        starts full); ``now`` is Unix time, so the file outlives restarts. A clock
        that went back refills nothing."""
        home = _hash(key)
        start = home & (self._slots - 1)
        with self._lock:
            if self._map.closed:
                raise ValueError(f"the bucket file {self.path} is closed")
            self._lockf(self._fd, self._exclusive)
            try:
                slot = self._slot(home, start, now)
                at = 3 * slot
                values = self._values
                if self._keys[slot] == home:
                    tokens, last = values[at], values[at + 1]
                    tokens = min(burst, tokens + max(0.0, now - last) * rate)
                    now = max(now, last)  # counted up to the latest clock that took
                else:
                    self._keys[slot] = home
                    tokens = burst
                allowed = tokens >= 1.0
                if allowed:
                    tokens -= 1.0
                values[at] = tokens
                values[at + 1] = now
                values[at + 2] = now + (burst - tokens) / rate
            finally:
                self._lockf(self._fd, self._unlock)
        return allowed, tokens

    def _slot(self, home: int, start: int, now: float) -> int:
        """The slot of ``home``'s bucket: its own, else the first free one of its
        window (empty, or a bucket full again), else the one nearest to full."""
        window = self._keys[start : start + PROBES].tolist()
        try:
            return start + window.index(home)
        except ValueError:
            pass
        values = self._values
        fullest, soonest = start, float("inf")
        for offset, held in enumerate(window):
            slot = start + offset
            full_at = values[3 * slot + 2]
            if held == 0 or full_at <= now:
                return slot
            if full_at < soonest:
                fullest, soonest = slot, full_at
        return fullest

    def close(self) -> None:
        """Unmap and close the file (the buckets stay in it for the other processes),
        once a take under way has finished; a take afterwards raises ``ValueError``."""
        with self._lock:
            if self._map.closed:
                return
            self._keys.release()
            self._values.release()
            self._map.close()
            os.close(self._fd)


def _hash(key: str) -> int:
    """A key's 64-bit hash, the same in every process (never 0: 0 marks an empty slot)."""
    digest = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
    return digest or 1
