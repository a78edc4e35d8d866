"""WorkspaceIndexes: each workspace's vector index, loaded once per core and kept in step
with the store's change log (catch-up, own writes, re-embedding, segment maintenance)."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from agentcore.errors import Conflict, InvalidRequest, ValidationFailed
from agentcore.knowledge.embedders import Embedder, bounded_text
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors._index import VectorIndex
from agentcore.knowledge.vectors._loading import adopt, from_parts
from agentcore.knowledge.vectors._parts import Part, codec_named
from agentcore.knowledge.vectors._plan import settle
from agentcore.knowledge.vectors._segments import (
    Manifest,
    SegmentDirectory,
    SegmentError,
    WriteStages,
)
from agentcore.redact import get_logger
from agentcore.residency import KeyedLocks, Residency, Slot
from agentcore.runtime import Loop, Observer, Runtime, unobserved
from agentcore.storage.base import VectorSearchStore
from agentcore.storage.records import KnowledgeChanges, KnowledgeState, StaleEmbedder

if TYPE_CHECKING:
    from agentcore.cancellation import Cancellation
    from agentcore.storage.base import KnowledgeStore


class Within(Protocol):
    """The rows a filtered search may return (``filters.Selection``): a verdict on row
    labels for the index, and the selected documents' ids for a store that searches."""

    document_ids: list[str]

    def __call__(self, labels: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """The verdict for each of ``labels`` (distinct document seqs)."""
        ...


T = TypeVar("T")
Key = tuple[str, str]
# the ids, unit vectors and labels (their document's seq) of the rows a write added
Rows = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]

# A loaded index gets no spare tail rows: its loaded rows are a frozen part that no write
# copies, and the tail its writes fill grows geometrically from a few hundred rows.
# (4,096 spare rows once cost every small workspace 6 MB of address space and a memory
# mapping of its own: 100,000 tenants would pass vm.max_map_count.)


# Tail rows (added since the segment files were written) that make a background merge
# into a new segment due; the tail is private RAM of each process, the segments shared.
SEGMENT_MERGE_ROWS = 16_384
# Workspaces with fewer bytes of float32 rows than this are not written as segment files:
# the store reads them in a few milliseconds, and files would cost each loaded one an
# open file and a memory mapping (the limits of 1,024 and 65,530 a process has by default).
SEGMENT_MIN_BYTES = 4 << 20
# Indexes evicted before their first segment files were written that are kept until
# maintenance writes them (more wait for their next load).
MAX_UNWRITTEN = 4
# Versions a workspace may move past its manifest before one is written anyway: a
# load then bridges a short change log (the store keeps 10,000 versions of deletes).
MANIFEST_LAG_VERSIONS = 1_000
# The newest rows of a workspace's segment files a load checks against the store: a
# database restored from a backup gave their ids to other rows (``_files_match_store``).
CHECKED_ROWS = 4
# Seconds the idle maintenance loop sleeps between looks (a submission wakes it at once).
MAINTENANCE_IDLE = 60.0
_log = get_logger(__name__)


# Rows of this process's own writes a cached index may hold back: they are added in one
# batch at its next read (or once there are more), not one write at a time.
_MAX_PENDING_ROWS = 4096


@dataclass
class _Entry:
    version: int
    index: VectorIndex
    manifest: str | None = None  # id of the segment manifest the index's parts come from
    embedder: str | None = None
    manifest_version: int = 0  # the store version that manifest reflects
    # this process's writes since ``version`` whose rows are not in ``index`` yet, one
    # (ids, unit vectors) per write; each write moved the store's version one step
    pending: list[Rows] = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0  # counted as rows come: summing them per write was quadratic

    def hold(self, rows: Rows) -> None:
        """Hold back one write's rows for the next read."""
        self.pending.append(rows)
        self.pending_rows += len(rows[0])
        self.pending_bytes += sum(array.nbytes for array in rows)

    def drop_held(self) -> None:
        """Forget the held-back rows (added to the index, or superseded by the log)."""
        self.pending.clear()
        self.pending_rows = self.pending_bytes = 0


class WorkspaceIndexes:
    """Loads each workspace's index once, shares it between threads, keeps it current.

    The store keeps a per-workspace version that every knowledge write advances and a
    change log (rows added, ids deleted, per version). Before each search it
    compares its version with the store's (one small read); if it is behind (a write
    by this or another process, on this or another machine), it applies only the
    changes since its version. It reloads the whole workspace only when the log cannot
    bridge the gap: more than ``catchup_max_rows`` rows added, a re-embed, or
    deletions older than the log keeps. So a search answered after any process's
    write has returned reflects that write.

    :param store: where documents, chunks and vectors are kept.
    :param embedders: the registered embedders, by name.
    :param embedder: the name of the one that indexes (``Settings.embedder``).
    :param catchup_max_rows: most rows to add from the change log before a full
        reload is preferred (``Settings.index_catchup_max_rows``).
    :param store_search: a store that ranks vectors itself; when given
        (``vector_search="pgvector"``), searches run there and no index is held here.
    :param max_token_chars: the longest whitespace-free run re-embedding feeds it.
    :param segments: a directory for this store's memory-mapped segment files
        (``segments.py``; ``Settings.index_dir``), or ``None`` to keep indexes in RAM.
        With it, a load maps the files and applies the change log since they were
        written; rows added since live in each index's tail until a background
        thread merges them into a new segment (``SEGMENT_MERGE_ROWS``), and deletes
        are tombstones until it compacts the segment.
    :param store_identity: names the store the files belong to (a manifest written
        for another store is ignored).
    :param codec: how a new workspace's index stores its rows (``Settings.index_dtype``,
        a name in ``kernels.CODECS``). The first write to a workspace stores it with
        the workspace (``claim_index_dtype``); from then on its stored dtype is used,
        whatever this says.
    :param budget_bytes: the most bytes of indexes kept loaded (``Settings.index_cache_bytes``,
        charged as ``VectorIndex.resident_bytes`` plus held-back rows; ``None``: no
        bound). Past it the least recently used workspaces are evicted, never one a
        search is using; an evicted workspace loads again at its next search (from its
        segment files, else from the store) and catches up with the change log.
    :param max_mapped_files: the most segment files kept mapped (each holds an open
        file and a mapping while its workspace is loaded); past it the least recently
        used workspaces holding them are evicted. ``None``: no bound.
    :param runtime: the core's runtime, which runs index maintenance (compaction,
        merges, segment files) on its loop ``agentcore-index-maintenance`` and lends
        the indexes its pool ``agentcore-index`` of scan helpers. Without one the
        object makes its own, which nobody starts: maintenance then runs only in
        ``wait_for_maintenance``, and ``close()`` ends the helpers.
    :param segment_write_stages: called at each stage of a segment file write
        (``segments.WriteStages``, a fault-injection point); none by default.
    :param observer: told of each load, catch-up, segment load, switch, merge,
        eviction and unusable segment load (``runtime.Observer``; ``stats()`` counts
        them too).
    """

    def __init__(
        self,
        store: KnowledgeStore,
        *,
        embedders: Mapping[str, Embedder],
        embedder: str,
        catchup_max_rows: int = 100_000,
        store_search: VectorSearchStore | None = None,
        max_token_chars: int = 64,
        segments: Path | None = None,
        store_identity: str = "",
        codec: str = "float32",
        budget_bytes: int | None = None,
        max_mapped_files: int | None = None,
        runtime: Runtime | None = None,
        segment_write_stages: WriteStages | None = None,
        observer: Observer = unobserved,
    ) -> None:
        self._store = store
        self._segments = None if store_search is not None else segments
        self._store_identity = store_identity
        self._write_stages = segment_write_stages
        self._codec = codec
        self._own_runtime = runtime is None
        self._runtime = runtime or Runtime()
        helpers = kernels.default_helpers()
        self._helpers = (
            self._runtime.executor("agentcore-index", helpers, initializer=kernels.pin_blas_thread)
            if helpers
            else None
        )
        self._maintainer = _Maintainer(self._maintain, self._runtime)
        self._foreground = _Foreground()  # writes in flight: background steps give way
        self._store_search = store_search
        self._max_token_chars = max_token_chars
        self._embedders = embedders
        self._embedder_name = embedder
        self._catchup_max_rows = catchup_max_rows
        self._entries: Residency[Key, _Entry] = Residency(
            budget_bytes=budget_bytes, max_files=max_mapped_files, on_evict=self._evicted
        )
        self._locks: KeyedLocks[Key] = KeyedLocks()  # one load or write of a workspace at a time
        self._guard = threading.Lock()
        self._unwritten: dict[Key, _Entry] = {}  # see _evicted
        # workspaces whose embedder this object has checked and whose dtype is claimed:
        # their document writes check the embedder in their own transaction instead
        self._checked: set[Key] = set()
        self._observer = observer
        # what stats() reports: the events told to the observer, counted here too
        self._counts: collections.Counter[str] = collections.Counter()
        self._counts_lock = threading.Lock()

    def close(self, timeout: float = 30.0) -> None:
        """Drop the maintenance not yet started; one with its own runtime also ends
        its threads (waiting up to ``timeout`` for a step under way). A core's
        runtime is stopped by the core."""
        self._maintainer.close()
        self._entries.clear()  # their mappings and files close with their last user
        with self._guard:
            self._unwritten.clear()
        if self._own_runtime:
            self._runtime.stop(timeout)

    def wait_for_maintenance(self, timeout: float = 60.0) -> bool:
        """Wait until no background maintenance is queued or running; whether it is so.

        When the maintenance loop is not running (the core was not started), the
        queued steps run here, in the calling thread.
        """
        return self._maintainer.wait_idle(timeout)

    def size(self) -> tuple[int, int, int]:
        """``(workspaces, rows, bytes)`` of the indexes this process holds now: what the
        metrics report (``nbytes``: in RAM or mapped; ``stats()["bytes"]`` is what the
        budget charges)."""
        entries = self._entries.values()  # a copy: other threads add and drop
        rows = sum(len(entry.index) for entry in entries)
        return len(entries), rows, sum(entry.index.nbytes for entry in entries)

    @property
    def budget(self) -> Residency[Any, Any]:
        """What the loaded indexes are charged to: other per-workspace caches (keyword
        indexes, document tables) share its bounds, ``index_cache_bytes``, so the least
        recently used of all of them are evicted first."""
        return self._entries

    def _lock(self, key: Key) -> contextlib.AbstractContextManager[None]:
        """Hold ``key``'s lock (re-entrant): one load or write of a workspace at a time."""
        return self._locks.hold(key)

    def stats(self) -> dict[str, int | None]:
        """What the cache holds and has done, for metrics: ``entries`` (workspaces
        loaded), ``bytes`` (charged to the budget), ``budget_bytes``, ``mapped_files``,
        ``max_mapped_files``, ``pinned`` (in use by a search now), and the counts of
        ``loads``, ``evictions``, ``segment_loads``, ``segment_fallbacks``,
        ``catch_ups`` and ``merges`` since the cache was made."""
        held = self._entries.stats()
        with self._counts_lock:
            counts = self._counts.copy()
        return {
            "entries": held.entries,
            "bytes": held.bytes,
            "budget_bytes": held.budget_bytes,
            "mapped_files": held.files,
            "max_mapped_files": held.max_files,
            "pinned": held.pinned,
            "loads": counts["index.reload"],
            "evictions": held.evictions,
            "segment_loads": counts["index.segment_load"],
            "segment_fallbacks": counts["index.segment_fallback"],
            "catch_ups": counts["index.catch_up"],
            "merges": counts["index.merge"],
        }

    def _observe(self, event: str, count: int) -> None:
        """Tell the observer of ``event`` and count it for ``stats()``."""
        with self._counts_lock:
            self._counts[event] += count
        self._observer(event, count)

    def loaded(self) -> list[Key]:
        """The workspaces whose index is loaded, least recently used first."""
        return self._entries.keys()

    def _evicted(self, key: Key, entry: _Entry) -> None:
        # its next write checks the embedder again: nothing per workspace stays behind
        self._checked.discard(key)
        if entry.index.persisted and entry.manifest is None:
            # loaded from the store, evicted before its segment files were written: kept
            # for the maintenance step that writes them (a few at most), else its next
            # load reads the store again
            with self._guard:
                self._unwritten[key] = entry
                while len(self._unwritten) > MAX_UNWRITTEN:
                    del self._unwritten[next(iter(self._unwritten))]
        self._observe("index.evict", 1)
        _log.debug("evicted the index of %s/%s (least recently used)", *key)

    def _charge(self, key: Key, entry: _Entry) -> None:
        """Charge ``entry`` (if still ``key``'s) what it holds now; evicts if due."""
        self._entries.charge(key, entry, _bytes_of(entry), entry.index.mapped_files)

    def _install(self, key: Key, entry: _Entry) -> Slot[_Entry]:
        """Make ``entry`` ``key``'s, held for the caller (``release`` it)."""
        with self._guard:
            self._unwritten.pop(key, None)  # superseded
        return self._entries.put(key, entry, _bytes_of(entry), entry.index.mapped_files, held=True)

    def embedder(self) -> Embedder:
        """The configured embedder, or a 400 naming the ones registered."""
        name = self._embedder_name
        embedder = self._embedders.get(name)
        if embedder is None:
            known = ", ".join(sorted(self._embedders)) or "none"
            raise InvalidRequest(
                f"The configured embedder {name!r} is not registered (registered: {known}).",
                code="embedder_unavailable",
            )
        return embedder

    def get(self, organization_id: str, environment: str) -> VectorIndex:
        """The current index of a workspace (re-embedded first if the embedder changed).

        Loaded if it is not (which may evict others); the caller's reference keeps the
        index usable even if the cache evicts it afterwards.
        """
        slot = self._acquire((organization_id, environment))
        self._entries.release(slot)
        return slot.value.index

    def _acquire(self, key: Key) -> Slot[_Entry]:
        """The workspace's current entry, held (never evicted) until ``release``d.

        Loaded or caught up under the workspace's lock, so threads that want the same
        workspace at once load it once: the others wait, then find it loaded.
        """
        state = self._store.knowledge_state(*key)
        slot = self._entries.acquire(key, lambda entry: self._current(entry, state))
        if slot is not None:
            return slot
        with self._lock(key):
            state = self._ensure_embedder(*key)
            slot = self._entries.acquire(key)
            if slot is not None:
                entry = slot.value
                if self._fits(entry, state) and (
                    entry.version == state.version or self._catch_up(key, entry)
                ):
                    self._charge(key, entry)
                    return slot
                self._entries.release(slot)
            return self._load(key, state)

    def codec_of(self, state: KnowledgeState) -> str:
        """The codec of a workspace's index: its stored dtype, else the configured one."""
        return state.index_dtype or self._codec

    def _fits(self, entry: _Entry, state: KnowledgeState) -> bool:
        # an index loaded before another process fixed the workspace's dtype (to one
        # other than this process's setting) is reloaded with the stored one
        return entry.index.codec == self.codec_of(state)

    def is_current(self, organization_id: str, environment: str) -> bool:
        """Whether a workspace's index is loaded here and at the store's version, so a
        search now neither loads nor catches up (always, when the store searches)."""
        if self._store_search is not None:
            return True
        entry = self._entries.get((organization_id, environment))
        if entry is None:
            return False
        return self._current(entry, self._store.knowledge_state(organization_id, environment))

    def _current(self, entry: _Entry, state: KnowledgeState) -> bool:
        """Whether ``entry`` is at the store's version with the workspace's codec."""
        return entry.version == state.version and self._fits(entry, state)

    def search(
        self,
        organization_id: str,
        environment: str,
        query: Callable[[], npt.NDArray[np.float32] | None],
        k: int,
        min_score: float | None = None,
        *,
        within: Within | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The ``k`` best ids and scores for the vector ``query()`` returns (``None``: none).

        The one place search runs: in this node's index (``vector_search="memory"``),
        or in the store (``"pgvector"``), so a node then holds no vectors in RAM.
        ``query`` is called only when there is something to search. ``within`` (a
        filter's selection) restricts the rows ranked, before the top ``k``: by their
        labels in the index, by their documents' ids in the store.
        """
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        if self._store_search is None:
            slot = self._acquire((organization_id, environment))
            try:  # held: never evicted while this search runs
                index = slot.value.index
                if len(index) == 0:
                    return empty
                vector = query()
                if vector is None:
                    return empty
                return index.search(vector, k, min_score=min_score, allow=within)
            finally:
                self._entries.release(slot)
        self._ensure_embedder(organization_id, environment)
        if within is not None and not within.document_ids:
            return empty
        vector = query()
        if vector is None:
            return empty
        unit = unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        ids, scores = self._store_search.search_vectors(
            organization_id,
            environment,
            unit,
            k,
            documents=None if within is None else within.document_ids,
        )
        if min_score is not None:
            keep = scores >= min_score
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    def search_batch(
        self,
        organization_id: str,
        environment: str,
        queries: npt.NDArray[np.float32],
        k: int,
        min_score: float | None = None,
    ) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]:
        """``search`` for each row of ``queries`` ``(m, d)`` (none of them zero), in order.

        In this node's index the rows are scanned together, one matrix product for all
        of them, which costs less per query than one scan each; a score may then
        differ from a lone search's in the last bit of its float32. In the store
        (``"pgvector"``) each row is one query, as ``search`` sends it.
        """
        if self._store_search is not None:
            return [
                self.search(organization_id, environment, _given(row), k, min_score)
                for row in queries
            ]
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        slot = self._acquire((organization_id, environment))
        try:  # held: never evicted while this search runs
            index = slot.value.index
            if len(index) == 0:
                return [empty] * queries.shape[0]
            ids, scores = index.search_batch(queries, k)
        finally:
            self._entries.release(slot)
        found = []
        for row_ids, row_scores in zip(ids, scores, strict=True):
            keep = row_ids >= 0  # padding, where the index holds fewer than k rows
            if min_score is not None:
                keep &= row_scores >= min_score
            found.append((row_ids[keep], row_scores[keep]))
        return found

    def similarities(
        self,
        organization_id: str,
        environment: str,
        vector: npt.NDArray[np.float32],
        ids: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.float32]:
        """The cosine similarity of the query ``vector`` to each of these rows (``nan``
        for a row not in the index): the ``score`` of a keyword search's results."""
        unit = unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        out = np.full(ids.shape[0], np.nan, dtype=np.float32)
        if not ids.size:
            return out
        if self._store_search is None:
            slot = self._acquire((organization_id, environment))
            try:  # held: never evicted while its rows are read
                index = slot.value.index
                for at, chunk_id in enumerate(ids.tolist()):
                    row = index.get(chunk_id)
                    if row is not None:
                        out[at] = np.float32(np.clip(np.dot(row, unit), -1.0, 1.0))
            finally:
                self._entries.release(slot)
            return out
        found, scores = self._store_search.search_vectors(
            organization_id, environment, unit, ids.shape[0], chunk_ids=ids.tolist()
        )
        where = dict(zip(found.tolist(), scores.tolist(), strict=True))
        for at, chunk_id in enumerate(ids.tolist()):
            if chunk_id in where:
                out[at] = where[chunk_id]
        return out

    def write(
        self,
        organization_id: str,
        environment: str,
        store_write: Callable[[], T],
        *,
        added: Callable[[T], Rows | None] | None = None,
    ) -> T:
        """Run ``store_write`` (a knowledge write to the store), then bring the index up to date.

        Serialised per workspace in this process. The cached index, if any, applies
        the change log since its version, which holds this write and any other
        process's writes in between, so it never misses one.

        :param added: for a write that only adds rows (one version step): the ids and
            unit vectors it stored, from its result (``None``: it wrote nothing). The
            cached index holds them back until its next read (``_MAX_PENDING_ROWS`` at
            most); if the store's version has then moved exactly one step per held-back
            write, those writes were the only ones since, and it adds their rows in one
            batch without reading them back; otherwise it reads the change log as usual.
            Such a write (``insert_document``, ``complete_document``) checks the
            workspace's embedder in its own transaction (``StaleEmbedder``), so after
            the workspace's first one no read of its state precedes it.
        """
        key = (organization_id, environment)
        with self._foreground.running(), self._lock(key):
            if added is None or key not in self._checked:
                self._check_embedder(key)
            try:
                result = store_write()
            except StaleEmbedder:  # another process re-embedded it: follow, write again
                self._check_embedder(key)
                result = store_write()
            entry = self._entries.get(key)
            if entry is not None and not self._caught_up(key, entry, result, added):
                self._entries.discard(key, entry)
            elif entry is not None:
                self._charge(key, entry)
                lag = entry.version - entry.manifest_version
                if entry.index.persisted and lag >= MANIFEST_LAG_VERSIONS:
                    entry.manifest_version = entry.version  # asked once per lag
                    self._maintainer.submit(key, force=True)
            return result

    def _check_embedder(self, key: Key) -> None:
        """Bring a workspace to this object's embedder (a re-embed, or a 409 when only
        the dimension changed) and claim its dtype on its first write. Locked."""
        self._checked.discard(key)
        state = self._ensure_embedder(*key)
        if state.index_dtype is None:  # the workspace's first write fixes its dtype
            self._store.claim_index_dtype(*key, self._codec)
        self._checked.add(key)

    def _caught_up(
        self, key: Key, entry: _Entry, result: T, added: Callable[[T], Rows | None] | None
    ) -> bool:
        """Bring ``entry`` past a write of this process that returned ``result``: hold its
        own rows back for the next read, else apply the change log. False: reload."""
        rows = added(result) if added is not None else None
        if rows is None:
            return self._catch_up(key, entry)
        entry.hold(rows)
        return entry.pending_rows <= _MAX_PENDING_ROWS or self._catch_up(key, entry)

    def _add_own(self, key: Key, entry: _Entry) -> bool:
        """Add the held-back rows of this process's writes if no other write came since
        the index's version (the store's version moved one step per held-back write);
        False to read the change log instead."""
        version = self._store.knowledge_state(*key).version
        if version != entry.version + len(entry.pending):
            return False
        ids = np.concatenate([rows[0] for rows in entry.pending])
        if ids.size:
            # new ids: each write ran under this workspace's lock, after the index's load
            try:
                entry.index.add(
                    ids,
                    np.concatenate([rows[1] for rows in entry.pending]),
                    np.concatenate([rows[2] for rows in entry.pending]),
                )
            except ValidationFailed:
                return False
        entry.version = version
        added = len(entry.pending)
        entry.drop_held()
        self._observe("index.own_write", added)
        return True

    def _load(self, key: Key, state: KnowledgeState) -> Slot[_Entry]:
        """Load a workspace's whole index (call with the workspace lock held); its
        entry, installed and held for the caller.

        From the segment files when they are usable (mapped, then the change log since
        they were written); else from the store, and then, if it holds at least
        ``SEGMENT_MIN_BYTES`` of vectors, written as segment files in the background,
        which the index then maps instead of its RAM copy.
        """
        self._observe("index.reload", 1)
        if self._segments is not None:
            mapped = self._load_segments(key, state)
            if mapped is not None:
                return self._install(key, mapped)
        dimension = state.dimension or self.embedder().dimension
        # the version is read before the vectors: a write in between is applied again
        # by the next catch-up only if it is newer than this version, and a row the
        # load already holds is never added twice (see _catch_up)
        version = self._store.knowledge_state(*key).version
        codec = self.codec_of(state)
        approximate = not codec_named(codec).exact
        # one snapshot: ids, rows, labels and (for an approximate codec) where each row is
        loaded = self._store.load_index(*key, dimension, located=approximate)
        vectors = loaded.vectors
        assert vectors is not None
        # a small workspace reads from the store in about a millisecond: it is not
        # worth files (and an open file and a mapping each while loaded)
        persist = self._segments is not None and vectors.nbytes >= SEGMENT_MIN_BYTES
        # an approximate codec in RAM keeps its codes (and labels) only: the few float32
        # rows a search re-scores are read back from the store (those of a persisted
        # index from its segment files, once written)
        rows = WorkspaceRows(self._store, key, dimension) if approximate and not persist else None
        index = adopt(
            loaded.ids,
            vectors,
            codec=codec,
            executor=self._helpers,
            labels=loaded.labels,
            row_store=rows,
            locators=loaded.locators,
        )
        del vectors, loaded  # kept as codes (and by the store) when rows is given
        self._attach(key, index, persist)
        slot = self._install(key, _Entry(version, index, None, state.embedder))
        if persist:  # written out as segment files in the background
            self._maintainer.submit(key, force=True)
        return slot

    def _catch_up(self, key: Key, entry: _Entry) -> bool:
        """Apply the store's changes since ``entry.version``; False if a reload is needed.

        Rows this process held back are added without a log read when its writes are
        all that changed; else the log, which holds them too, replaces them.
        """
        if entry.pending:
            if self._add_own(key, entry):
                return True
            entry.drop_held()
        changes = self._store.changes_since(*key, entry.version, max_rows=self._catchup_max_rows)
        if changes is None:
            return False
        if changes.version == entry.version:
            return True
        if not _apply(entry.index, changes):
            return False
        entry.version = changes.version
        self._observe("index.catch_up", 1)
        return True

    # -- segment files -------------------------------------------------------------

    def _directory(self, key: Key) -> SegmentDirectory:
        assert self._segments is not None
        return SegmentDirectory(
            self._segments / quote(key[0], safe="") / quote(key[1], safe=""),
            write_stages=self._write_stages,
        )

    def _attach(self, key: Key, index: VectorIndex, persisted: bool) -> None:
        """Make ``index``'s maintenance run on the maintenance loop; ``persisted``: make
        it keep its parts as segment files."""
        maintainer = self._maintainer
        if persisted:
            index.persisted = True
            index.merge_rows = SEGMENT_MERGE_ROWS
        index.set_maintenance(lambda _: maintainer.submit(key))

    def _fallback(self, key: Key, reason: str, detail: object) -> None:
        """A load that found segment files it cannot use: say so (log and count)."""
        self._observe("index.segment_fallback", 1)
        _log.warning(
            "segment files of %s/%s not used (%s: %s); loading from the store",
            *key,
            reason,
            detail,
        )

    def _load_segments(self, key: Key, state: KnowledgeState) -> _Entry | None:
        """The index mapped from the workspace's segment files and brought up to date
        by the change log, as an entry (not installed); ``None`` when there are none, or
        when they are unusable (logged and counted: ``segment_fallbacks``). Call with
        the workspace lock held."""
        try:
            loaded = self._directory(key).load()
        except (SegmentError, OSError) as exc:
            self._fallback(key, "unusable", exc)
            return None
        if loaded is None:
            return None
        manifest, parts = loaded
        dimension = state.dimension or self.embedder().dimension
        found = (manifest.store, manifest.dimension, manifest.embedder)
        # files of an empty index written before the first write named no embedder
        unnamed = manifest.embedder is None and not any(p.rows for p in parts)
        if found != (self._store_identity, dimension, state.embedder) and not (
            unnamed and found[:2] == (self._store_identity, dimension)
        ):
            self._fallback(key, "foreign", f"written for {found}")
            return None
        changes = self._store.changes_since(*key, manifest.version, max_rows=self._catchup_max_rows)
        if changes is None:
            self._fallback(
                key, "behind", f"the change log cannot bridge version {manifest.version}"
            )
            return None
        try:
            index = from_parts(
                dimension,
                parts,
                codec=self.codec_of(state),
                executor=self._helpers,
            )
        except ValidationFailed as exc:
            self._fallback(key, "invalid", exc)
            return None
        # attached before the change log is applied: what applying it makes due is the
        # maintenance loop's (sealed into segment files), not the RAM steps an index
        # runs on its helpers until then
        self._attach(key, index, True)
        if not _apply(index, changes):
            self._fallback(key, "invalid", "the change log's rows do not fit the segments")
            return None
        if not self._files_match_store(key, index, parts, changes.version):
            return None
        self._observe("index.segment_load", 1)
        return _Entry(changes.version, index, manifest.id, state.embedder, manifest.version)

    def _files_match_store(
        self, key: Key, index: VectorIndex, parts: Sequence[Part], version: int
    ) -> bool:
        """Whether the index made of the segment files and the change log is the store's:
        as many rows as it stores, and its newest ``CHECKED_ROWS`` rows the store's rows
        under those ids.

        A database restored from a backup into the same file keeps its identity, and
        once its version passes the manifest's, its change log seems to bridge the
        files: but the ids written after the backup point were handed out again to other
        rows (the newest ids, so the newest rows tell), and rows it wrote up to the
        manifest's version are in neither. A mismatch while the store is still at
        ``version`` is stale files (logged and counted); after another write it may be
        a concurrent one, so the load just reads the store, quietly.
        """
        store = self._store
        stored = store.count_vectors(*key)
        problem = None
        if stored != len(index):
            problem = f"{len(index)} rows where the store has {stored}"
        else:
            tails = [p.live_ids()[-4 * CHECKED_ROWS :] for p in parts]
            newest = np.unique(np.concatenate(tails or [np.empty(0, np.int64)]))[::-1]
            ids = np.asarray(
                [i for i in newest.tolist() if index.contains(i)][:CHECKED_ROWS], dtype=np.int64
            )
            rows = store.read_vector_rows(*key, store.locate_vectors(*key, ids), index.dimension)
            for id, row in zip(ids.tolist(), rows, strict=True):
                mine = index.get(id)
                if mine is None or not np.allclose(mine, row, rtol=0, atol=1e-5):
                    problem = f"row {id} is not the store's"
                    break
        if problem is None:
            return True
        if store.knowledge_state(*key).version == version:
            self._fallback(key, "stale", f"{problem} (a database restored from a backup?)")
        return False

    def _maintained(self, key: Key) -> _Entry | None:
        """The entry background maintenance works on: the loaded one, or one evicted
        before its first segment files were written (kept for that)."""
        return self._entries.get(key) or self._unwritten.get(key)

    def _maintain(self, key: Key, force: bool) -> bool:
        """One background maintenance step of a workspace; whether another may be due.

        Under the directory's file lock: if another process (or an earlier step)
        published a manifest this index does not come from, switch to it (map its
        files, apply the change log) instead of writing. Else seal the tail and the
        parts due for compaction or merging into one new segment, write the
        tombstones of the parts kept, publish a manifest of the version the snapshot
        reflects, swap the new part in, and delete the files no longer named.
        """
        entry = self._maintained(key)
        if entry is None:
            return False
        if not entry.index.persisted:  # kept in RAM: compaction and merges there
            more = entry.index.maintain()
            with self._lock(key):  # its rows' bytes changed: the budget's charge follows
                self._charge(key, entry)
            return more
        directory = self._directory(key)
        with directory.lock():
            with self._lock(key):
                entry = self._maintained(key)
                if entry is None:
                    return False
                try:
                    current = directory.read_manifest()
                except SegmentError:
                    current = None  # damaged: the manifest written below replaces it
                if current is not None and current.id != entry.manifest:
                    state = self._store.knowledge_state(*key)
                    switched = self._load_segments(key, state)
                    if switched is not None:
                        self._unwritten.pop(key, None)
                        if self._entries.get(key) is entry:
                            self._entries.release(self._install(key, switched))
                        self._observe("index.switch", 1)
                        return False
                index = entry.index
                plan = index.plan_maintenance(force=force)
                # an index loaded before the workspace's first write learnt its embedder
                # from the rows added since
                embedder = entry.embedder or self._store.knowledge_state(*key).embedder
                version = entry.version
            if plan is None:
                return False
            ids, rows = plan.gather()  # streamed into the file: no copy of the matrix
            codec = codec_named(index.codec)
            pace = self._foreground.wait_idle
            new_parts = [directory.write_segment(ids, rows, codec, pace=pace)] if ids.size else []
            keep = plan.keep
            # one entry per segment the manifest names: the new ones have no dead rows
            dead = [p.dead for p in keep] + [p.dead[:0] for p in new_parts]
            tombstones = directory.write_tombstones(dead)
            names = [p.name for p in keep] + [p.name for p in new_parts]
            assert all(names), "a persisted index keeps only parts mapped from files"
            manifest = Manifest(
                version=version,
                dimension=index.dimension,
                embedder=embedder,
                store=self._store_identity,
                segments=tuple(n for n in names if n),
                tombstones=tombstones,
            )
            directory.publish(manifest)
            applied = index.apply(plan, new_parts)
            with self._lock(key):
                if applied and self._unwritten.get(key) is entry:
                    del self._unwritten[key]  # written: its next load maps the files
                if applied and self._entries.get(key) is entry:
                    entry.manifest = manifest.id
                    entry.manifest_version = max(entry.manifest_version, version)
                    self._charge(key, entry)
            self._observe("index.merge", 1)
            if current is not None:
                directory.remove(current.files() - manifest.files())
            directory.collect(manifest.files())
        return index.maintenance_due()

    def _ensure_embedder(self, organization_id: str, environment: str) -> KnowledgeState:
        store = self._store
        state = store.knowledge_state(organization_id, environment)
        embedder = self.embedder()
        if state.embedder is None or state.embedder != embedder.name:
            if state.embedder is not None:
                self._reembed(organization_id, environment, embedder)
                state = store.knowledge_state(organization_id, environment)
        elif state.dimension is not None and state.dimension != embedder.dimension:
            raise Conflict(
                f"The index was built by {state.embedder!r} with dimension {state.dimension},"
                f" but that embedder now returns {embedder.dimension}.",
                code="embedder_dimension_mismatch",
            )
        return state

    def _reembed(self, organization_id: str, environment: str, embedder: Embedder) -> None:
        segments: list[tuple[str | None, npt.NDArray[np.int64], npt.NDArray[np.float32]]] = []
        for document_id, ids, texts in self._store.iter_chunk_texts(organization_id, environment):
            if not texts:
                continue
            vectors, keep = embed_passages(embedder, texts, max_token_chars=self._max_token_chars)
            segments.append((document_id, np.asarray(ids, dtype=np.int64)[keep], vectors[keep]))
        self._store.replace_all_vectors(
            organization_id, environment, embedder.name, segments, embedder.dimension
        )
        self._entries.discard((organization_id, environment))


class WorkspaceRows:
    """The ``RowStore`` of one workspace: its float32 rows as the store keeps them."""

    def __init__(self, store: KnowledgeStore, key: Key, dimension: int) -> None:
        self._store = store
        self._key = key
        self._dimension = dimension

    def locate(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Where the store keeps the rows ``ids``."""
        return self._store.locate_vectors(*self._key, ids)

    def read(self, locators: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The rows at ``locators`` (NaN for one deleted since)."""
        return self._store.read_vector_rows(*self._key, locators, self._dimension)


def _bytes_of(entry: _Entry) -> int:
    """What an entry costs the budget: its index and the rows it holds back."""
    return entry.index.resident_bytes + entry.pending_bytes


def _apply(index: VectorIndex, changes: KnowledgeChanges) -> bool:
    """Apply a change log delta (adds first); False if the index refuses its rows."""
    added = changes.added_ids
    if added.size:
        # a load that raced a write may already hold some of these rows
        fresh = np.fromiter(
            (not index.contains(i) for i in added.tolist()), dtype=bool, count=added.size
        )
        labels = changes.added_labels
        try:
            index.add(
                added[fresh],
                changes.added_vectors[fresh],
                None if labels is None else labels[fresh],
            )
        except ValidationFailed:  # rows the index refuses: rebuild from the store
            return False
    if changes.deleted_ids.size:
        index.remove(changes.deleted_ids)
    return True


# Longest a background step waits between two blocks for this process's writes in
# flight to finish: under a steady stream of writes it still moves a block (4 MB) per wait.
FOREGROUND_WAIT = 0.05


class _Foreground:
    """Counts the writes in flight, so background maintenance can give way to them.

    The segment maintainer calls ``wait_idle`` between the blocks it copies: while a
    request's write (a DELETE, an ingest) runs in this process, the compaction pauses
    instead of competing for the cores, the GIL and the disk (at most
    ``FOREGROUND_WAIT`` per block, so it always progresses). The maintainer holds no
    lock a request needs while it waits, and keeps the normal CPU priority (a lower one
    is a priority inversion under the GIL).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark a write in flight for the duration of the block."""
        with self._cond:
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self._cond.notify_all()

    def wait_idle(self, timeout: float = FOREGROUND_WAIT) -> bool:
        """Wait until no write is in flight, at most ``timeout`` seconds; whether none is."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, timeout)


class _Maintainer:
    """The workspaces whose index maintenance is due, and the runtime loop running it.

    ``run(key, force)`` makes one step and returns whether another may be due; the
    loop ``agentcore-index-maintenance`` takes one workspace per pass and runs its
    steps until none is (``settle``). A failing step is the loop's to log and retry
    after a backoff (the workspace is submitted again by its next write).
    """

    def __init__(self, run: Callable[[Key, bool], bool], runtime: Runtime) -> None:
        self._run = run
        self._cond = threading.Condition()
        self._pending: dict[Key, bool] = {}
        self._busy = False
        self._loop: Loop = runtime.loop(
            "agentcore-index-maintenance", self._pass, interval=MAINTENANCE_IDLE
        )

    def submit(self, key: Key, *, force: bool = False) -> None:
        """Maintain ``key``'s index soon (``force``: seal and persist even if not due)."""
        with self._cond:
            self._pending[key] = self._pending.get(key, False) or force
        self._loop.wake()

    def _pass(self) -> float | None:
        """The loop's pass: one workspace's steps; then at once the next one's, or sleep
        if none waits. Steps end early once the loop is stopping."""
        return 0.0 if self._run_next(lambda: self._loop.stopping) else None

    def _run_next(self, stopping: Callable[[], bool]) -> bool:
        """Run the steps of one queued workspace; whether one was queued."""
        with self._cond:
            if not self._pending:
                return False
            key, force = self._pending.popitem()
            self._busy = True
        try:
            first = [force]

            def step() -> bool:
                forced, first[0] = first[0], False  # a forced seal is the first step's
                return self._run(key, forced)

            settle(step, what="index maintenance of {}/{}".format(*key), stopping=stopping)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or running; without a running loop (the core
        not started, or stopped), run the queued steps here first."""
        if not self._loop.health().running:
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                try:
                    if not self._run_next(lambda: False):
                        break
                except Exception:  # as the loop would: logged, and the files left as they were
                    _log.exception("index maintenance failed")
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self) -> None:
        """Drop the steps not started yet (a later load writes what they would have)."""
        with self._cond:
            self._pending.clear()


EMBED_BATCH = 256  # texts per embedder call: bounds its temporaries, checks cancellation


def embed_passages(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    max_token_chars: int | None,
    cancellation: Cancellation | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Unit vectors of ``texts`` and the mask of rows fit to index (``nonzero_rows``).

    The embedder is fed ``EMBED_BATCH`` texts at a time, each cut by ``bounded_text``
    (``max_token_chars=None``: the caller already cut them so), into one preallocated
    matrix: memory stays the matrix plus one batch, and ``cancellation`` is checked
    between batches.
    """
    vectors = np.empty((len(texts), embedder.dimension), dtype=np.float32)
    keep = np.empty(len(texts), dtype=bool)
    for start in range(0, len(texts), EMBED_BATCH):
        if cancellation is not None:
            cancellation.check()
        batch = texts[start : start + EMBED_BATCH]
        if max_token_chars is not None:
            batch = [bounded_text(text, max_token_chars) for text in batch]
        rows = np.asarray(embedder.embed(batch, kind="passage"), dtype=np.float32)
        if rows.shape != (len(batch), embedder.dimension):
            raise ValueError(
                f"embedder {embedder.name!r} returned shape {rows.shape},"
                f" expected {(len(batch), embedder.dimension)}"
            )
        end = start + len(batch)
        keep[start:end] = _unit_rows_into(rows, vectors[start:end])
    return vectors, keep


def _unit_rows_into(
    rows: npt.NDArray[np.float32], out: npt.NDArray[np.float32]
) -> npt.NDArray[np.bool_]:
    """``out[:] = unit_rows(rows)``, and ``nonzero_rows`` of that, from one pass over the
    norms (bit for bit the same). A row's float64 norm is finite and positive exactly
    when the float32 row is finite and not all zeros (float32 squares can neither
    overflow nor vanish in float64), and such a row divided by it stays so. Nothing here
    can raise a floating-point warning (squares of float32 values cannot overflow in
    float64 and are never negative, and NaN stays quiet), so no ``errstate`` is set."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    # every norm finite and positive (the usual case), in two reductions: the least is
    # positive (NaN is not) and the largest finite
    if not len(norms) or (norms.min() > 0 and norms.max() < np.inf):
        np.divide(rows, norms[:, None], out=out, casting="same_kind")
        return np.ones(len(norms), dtype=bool)
    ok: npt.NDArray[np.bool_] = np.isfinite(norms) & (norms > 0)
    out[...] = rows
    out[ok] = (rows[ok] / norms[ok, None]).astype(np.float32)
    return ok


def nonzero_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    """A mask of rows that are finite and not all zeros (the index refuses the others)."""
    finite = np.isfinite(vectors).all(axis=1)
    mask: npt.NDArray[np.bool_] = finite & (np.abs(vectors).sum(axis=1) > 0)
    return mask


def _given(
    vector: npt.NDArray[np.float32],
) -> Callable[[], npt.NDArray[np.float32] | None]:
    """A ``search`` query callable giving a vector already made."""
    return lambda: vector


def unit_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``vectors`` as float32 with each finite non-zero row scaled to unit length.

    Embedders need not normalise, but the store keeps unit rows: the index loads
    persisted segments as already normalised, so cosine stays a dot product.
    Zero and non-finite rows are left as they are (``nonzero_rows`` drops them).
    """
    rows = np.array(vectors, dtype=np.float32, copy=True)
    if rows.ndim != 2 or rows.size == 0:
        return rows
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    ok = np.isfinite(norms) & (norms > 0)
    if ok.all():  # the usual case: divide in float64 and round once, without the mask
        np.divide(rows, norms[:, None], out=rows, casting="same_kind")
    else:
        rows[ok] = (rows[ok] / norms[ok, None]).astype(np.float32)
    return rows
