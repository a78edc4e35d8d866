"""Keyword files: a workspace's BM25 index kept beside its vector segment files (and,
where those are each machine's own, in the store too), so a fresh process reads it back
instead of tokenising every chunk again.

The store stays the source of truth; the file is a per-machine cache of the index as
of one change-log version. A process that built a workspace's keyword index from the
store writes it; one that caught up a good part of it from the change log writes it
again; a fresh process reads it and applies ``changes_since(its version)``. One file
per workspace, ``keywords.bin`` in the workspace's segment directory, replaced whole:
written under a temporary name, fsynced and renamed into place (as the segment files
are), so a reader sees the previous file or the new one, never half of one.

Layout
    A ``HEADER_BYTES`` header (magic, the JSON meta, a CRC-32; see ``file_header``)
    naming the format, the store's identity, the tokenizer (``STEMS_VERSION``), the
    version, and each section's offset, dtype and length; then the sections, each
    page-aligned: the rows' ids, labels, lengths and liveness, the terms' document
    frequencies, the base and tail postings, and the vocabulary (``StoredStems``).

Validation
    A file of another format, store or tokenizer, a version ahead of the store's, a bad
    checksum or a section out of range is not used (logged): the index is built from
    the store and the file written again. The arrays are not checksummed at load (that
    would read them whole); files are only ever published complete and fsynced.

In the store
    ``KeywordSnapshots`` keeps the same bytes in the store (``KeywordSnapshotStore``),
    for a process with no file of its own: a PostgreSQL node whose cache directory is
    new (a fresh container, another machine), or any process with ``index_dir = "off"``.
    Both are a ``KeywordCopy``; ``KeywordCache`` reads the first usable one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from agentcore._logs import get_logger
from agentcore.knowledge._keywords import KeywordIndex, StoredStems, Tokenize, _Postings, _Snapshot
from agentcore.knowledge.text import STEMS_VERSION
from agentcore.knowledge.vectors import (
    HEADER_BYTES,
    SegmentError,
    align,
    file_header,
    read_file_header,
    read_or_map,
    write_file_atomically,
)

if TYPE_CHECKING:
    from agentcore.storage.base import KeywordSnapshotStore

__all__ = ["KeywordCopy", "KeywordFiles", "KeywordSnapshots", "Stored"]

MAGIC = b"ACKWIX\x00\x01"
FORMAT = 1
NAME = "keywords.bin"
IN_STORE = "store"
"""The identity a snapshot in the store names (it cannot be another store's)."""
_log = get_logger(__name__)


@dataclass(frozen=True)
class Stored:
    """A keyword index read back from its file, and the store version it reflects."""

    version: int
    index: KeywordIndex


def _sections(stems: StoredStems, snap: _Snapshot) -> dict[str, npt.NDArray[Any]]:
    """The arrays a file holds, by section name."""
    return {
        "ids": snap.ids,
        "labels": snap.labels,
        "lengths": snap.lengths,
        "alive": snap.alive,
        "df": snap.df,
        "base_starts": snap.base.starts,
        "base_rows": snap.base.rows,
        "base_tfs": snap.base.tfs,
        "tail_starts": snap.tail.starts,
        "tail_rows": snap.tail.rows,
        "tail_tfs": snap.tail.tfs,
        "stem_blob": stems.blob,
        "stem_starts": stems.starts,
        "stem_order": stems.order,
    }


class KeywordCopy(Protocol):
    """Where a workspace's keyword index is kept between processes (``KeywordCache``
    reads the first usable copy, and writes every one)."""

    def read(self, key: tuple[str, str], tokenize: Tokenize, newest: int) -> Stored | None:
        """``key``'s index, if there is a usable copy of a version at most ``newest``
        (the store's); ``None`` otherwise (an unusable copy is logged)."""

    def write(self, key: tuple[str, str], version: int, index: KeywordIndex) -> bool:
        """Keep ``index`` (as of store ``version``) as ``key``'s copy, replacing the
        previous one; whether it was kept. Never raises: a copy is a cache, so a failure
        is logged and searches go on."""


def _encode(
    version: int, index: KeywordIndex, identity: str
) -> tuple[list[tuple[int, memoryview]], int]:
    """The bytes of ``index`` as of ``version``: (offset, bytes) pieces and the size."""
    stems, snap = index.state()
    arrays = {name: np.ascontiguousarray(a) for name, a in _sections(stems, snap).items()}
    offset = HEADER_BYTES
    layout: dict[str, list[Any]] = {}
    for name, array in arrays.items():
        layout[name] = [offset, array.dtype.str, int(array.shape[0])]
        offset = align(offset + array.nbytes)
    meta = {
        "format": FORMAT,
        "store": identity,
        "tokenizer": STEMS_VERSION,
        "version": int(version),
        "live": int(snap.live),
        "live_length": float(snap.live_length),
        "size": offset,
        "sections": layout,
    }
    pieces = [(0, memoryview(file_header(MAGIC, meta)))]
    pieces.extend(
        (layout[name][0], array.reshape(-1).view(np.uint8).data) for name, array in arrays.items()
    )
    return pieces, offset


def _decode(data: Any, name: str, identity: str, tokenize: Tokenize, newest: int) -> Stored | None:
    """The index held in ``data`` (a buffer), if it is ``identity``'s and of the running
    tokenizer; ``None`` if not. Raises ``SegmentError`` (or ``ValueError``, ``KeyError``,
    ``TypeError``) for damaged bytes or a version past ``newest``."""
    size = len(data)
    meta = read_file_header(MAGIC, data, name, format=FORMAT)
    if meta["store"] != identity or meta["tokenizer"] != STEMS_VERSION:
        return None  # another database at this path, or another tokenizer's stems
    version = int(meta["version"])
    if version > newest or meta["size"] != size:
        raise SegmentError(f"{name}: of version {version} and {size} bytes")
    arrays: dict[str, npt.NDArray[Any]] = {}
    for section, (offset, dtype, count) in meta["sections"].items():
        kind = np.dtype(dtype)
        if offset < HEADER_BYTES or offset + count * kind.itemsize > size:
            raise SegmentError(f"{name}: section {section} out of range")
        arrays[section] = np.frombuffer(data, dtype=kind, count=count, offset=offset)
    return Stored(version, KeywordIndex.restore(tokenize, *_state(arrays, meta, name)))


_UNUSABLE = (SegmentError, ValueError, KeyError, TypeError)
"""What damaged or foreign bytes raise while being read (``_decode``)."""


class KeywordFiles:
    """Where a store's keyword files are, and how they are written and read (a
    ``KeywordCopy``).

    :param root: the store's segment root (``segment_root``); a workspace's file is in
        its segment directory.
    :param identity: the store's identity: a file of another store is never used.
    """

    def __init__(self, root: Path, identity: str) -> None:
        self.root = Path(root)
        self._identity = identity

    def path(self, key: tuple[str, str]) -> Path:
        """The file of workspace ``key``."""
        return self.root / quote(key[0], safe="") / quote(key[1], safe="") / NAME

    def write(self, key: tuple[str, str], version: int, index: KeywordIndex) -> bool:
        """Write ``index`` (as of store ``version``) as ``key``'s file, replacing the
        previous one; whether it was written. Never raises: the file is a cache, so a
        failure (a full disk, a read-only directory) is logged and searches go on."""
        try:
            pieces, size = _encode(version, index, self._identity)
            directory = self.path(key).parent
            directory.mkdir(parents=True, exist_ok=True)
            write_file_atomically(directory, NAME, iter(pieces), size=size)
            return True
        except Exception:  # whatever it was, no search fails for a cache file
            _log.warning("could not write the keyword file of %s/%s", *key, exc_info=True)
            return False

    def read(self, key: tuple[str, str], tokenize: Tokenize, newest: int) -> Stored | None:
        """``key``'s index from its file, if there is a usable one of a version at most
        ``newest`` (the store's); ``None`` otherwise (an unusable file is logged)."""
        path = self.path(key)
        try:
            return _decode(read_or_map(path), path.name, self._identity, tokenize, newest)
        except FileNotFoundError:
            return None
        except (OSError, *_UNUSABLE) as exc:
            _log.warning("not using the keyword file %s: %s", path, exc)
            return None


class KeywordSnapshots:
    """Keyword indexes kept in the store itself (a ``KeywordCopy``): the bytes of a
    keyword file, for the processes that have none of their own. A snapshot found
    unusable is replaced by the next write, whatever version it claims.

    :param store: a store with the ``KeywordSnapshotStore`` capability.
    """

    def __init__(self, store: KeywordSnapshotStore) -> None:
        self._store = store
        self._unusable: set[tuple[str, str]] = set()

    def write(self, key: tuple[str, str], version: int, index: KeywordIndex) -> bool:
        """Store ``index`` as ``key``'s snapshot as of ``version``, unless the stored one
        is as new (another process wrote it); whether the store now has one as new.
        Never raises: a failure (the database unreachable) is logged and searches go on."""
        try:
            pieces, size = _encode(version, index, IN_STORE)
            data = bytearray(size)
            for offset, piece in pieces:
                data[offset : offset + piece.nbytes] = piece
            replace = key in self._unusable
            self._store.put_keyword_snapshot(*key, version, data, replace=replace)
            self._unusable.discard(key)
            return True
        except Exception:  # a cache: no search fails for it
            _log.warning("could not store the keyword index of %s/%s", *key, exc_info=True)
            return False

    def read(self, key: tuple[str, str], tokenize: Tokenize, newest: int) -> Stored | None:
        """``key``'s index from the store's snapshot, if there is a usable one of a
        version at most ``newest``; ``None`` otherwise (an unusable one is logged)."""
        found = self._store.keyword_snapshot(*key)
        if found is None:
            return None
        version, data = found
        try:
            stored = _decode(data, "keyword snapshot", IN_STORE, tokenize, newest)
            if stored is not None and stored.version != version:
                raise SegmentError(f"keyword snapshot: of version {stored.version}, not {version}")
        except _UNUSABLE as exc:
            _log.warning("not using the stored keyword index of %s/%s: %s", *key, exc)
            stored = None
        if stored is None:  # damaged, or another tokenizer's: replaced at the next write
            self._unusable.add(key)
        return stored


def _state(
    arrays: dict[str, npt.NDArray[Any]], meta: dict[str, Any], name: str
) -> tuple[StoredStems, _Snapshot]:
    """The vocabulary and snapshot of a file's arrays, their shapes checked."""
    rows = arrays["ids"].shape[0]
    terms = arrays["stem_order"].shape[0]
    postings = []
    for part in ("base", "tail"):
        starts = arrays[f"{part}_starts"]
        pairs = arrays[f"{part}_rows"].shape[0]
        if (
            starts.shape[0] < 1
            or starts.shape[0] > terms + 1
            or int(starts[0]) != 0
            or int(starts[-1]) != pairs
            or arrays[f"{part}_tfs"].shape[0] != pairs
        ):
            raise SegmentError(f"{name}: {part} postings out of shape")
        postings.append(_Postings(starts, arrays[f"{part}_rows"], arrays[f"{part}_tfs"]))
    if (
        any(arrays[k].shape[0] != rows for k in ("labels", "lengths", "alive"))
        or arrays["df"].shape[0] > terms
        or arrays["stem_starts"].shape[0] != terms + 1
        or int(arrays["stem_starts"][-1]) != arrays["stem_blob"].shape[0]
    ):
        raise SegmentError(f"{name}: sections out of shape")
    stems = StoredStems(arrays["stem_blob"], arrays["stem_starts"], arrays["stem_order"])
    snap = _Snapshot(
        arrays["ids"],
        arrays["labels"],
        arrays["lengths"],
        arrays["alive"],
        postings[0],
        postings[1],
        arrays["df"],
        int(meta["live"]),
        float(meta["live_length"]),
    )
    return stems, snap
