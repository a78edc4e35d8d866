"""Loading a workspace's index: mapped from its segment files and brought up to date by
the change log, else read from the store (and written as segment files later)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import numpy as np

from agentcore._logs import get_logger
from agentcore._memory_budget import Slot
from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors._backend import Key
from agentcore.knowledge.vectors._embedding import Embedding
from agentcore.knowledge.vectors._index import VectorIndex
from agentcore.knowledge.vectors._loading import adopt, from_parts
from agentcore.knowledge.vectors._parts import IdArray, Matrix, Part, codec_named
from agentcore.knowledge.vectors._residency import Entry, Events, LoadedIndexes
from agentcore.knowledge.vectors._segments import SegmentDirectory, SegmentError, WriteStages
from agentcore.storage.records import KnowledgeChanges, KnowledgeState

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore

# Tail rows (added since the segment files were written) that make a background merge
# into a new segment due; the tail is private RAM of each process, the segments shared.
SEGMENT_MERGE_ROWS = 16_384
# Workspaces with fewer bytes of float32 rows than this are not written as segment files:
# the store reads them in a few milliseconds, and files would cost each loaded one an
# open file and a memory mapping (the limits of 1,024 and 65,530 a process has by default).
SEGMENT_MIN_BYTES = 4 << 20
# The newest rows of a workspace's segment files a load checks against the store: a
# database restored from a backup gave their ids to other rows (``_files_match_store``).
CHECKED_ROWS = 4
_log = get_logger(__name__)


class WorkspaceRows:
    """The ``RowStore`` of one workspace: its float32 rows as the store keeps them."""

    def __init__(self, store: IndexStore, key: Key, dimension: int) -> None:
        self._store = store
        self._key = key
        self._dimension = dimension

    def locate(self, ids: IdArray) -> IdArray:
        """Where the store keeps the rows ``ids``."""
        return self._store.locate_vectors(*self._key, ids)

    def read(self, locators: IdArray) -> Matrix:
        """The rows at ``locators`` (NaN for one deleted since)."""
        return self._store.read_vector_rows(*self._key, locators, self._dimension)


def apply_changes(index: VectorIndex, changes: KnowledgeChanges) -> bool:
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


class WorkspaceLoader:
    """Loads a workspace's whole index: from its segment files when they are usable,
    else from the store.

    :param store: the source of truth.
    :param loaded: where a loaded index is installed.
    :param embedding: the configured embedder (the dimension of a workspace with none).
    :param catchup_max_rows: most rows of change log applied on top of segment files.
    :param segments: the directory of this store's segment files (``None``: none).
    :param store_identity: names the store the files belong to.
    :param codec: the codec of a workspace that has stored none.
    :param helpers: the scan helpers lent to each index.
    :param submit: queues a workspace's maintenance (``force``: write its files).
    :param write_stages: told each stage of a segment file write (fault injection).
    :param events: told of each load, segment load and unusable segment files.
    """

    def __init__(
        self,
        store: IndexStore,
        loaded: LoadedIndexes,
        *,
        embedding: Embedding,
        catchup_max_rows: int,
        segments: Path | None,
        store_identity: str,
        codec: str,
        helpers: Executor | None,
        submit: Callable[[Key, bool], None],
        write_stages: WriteStages | None,
        events: Events,
    ) -> None:
        self._store = store
        self._loaded = loaded
        self._embedding = embedding
        self._catchup_max_rows = catchup_max_rows
        self.segments = segments
        self._store_identity = store_identity
        self._codec = codec
        self._helpers = helpers
        self._submit = submit
        self._write_stages = write_stages
        self._events = events

    def codec_of(self, state: KnowledgeState) -> str:
        """The codec of a workspace's index: its stored dtype, else the configured one."""
        return state.index_dtype or self._codec

    def directory(self, key: Key) -> SegmentDirectory:
        """The directory of ``key``'s segment files."""
        assert self.segments is not None
        return SegmentDirectory(
            self.segments / quote(key[0], safe="") / quote(key[1], safe=""),
            write_stages=self._write_stages,
        )

    def load(self, key: Key, state: KnowledgeState) -> Slot[Entry]:
        """Load a workspace's whole index (call with the workspace lock held); its
        entry, installed and held for the caller.

        From the segment files when they are usable (mapped, then the change log since
        they were written); else from the store, and then, if it holds at least
        ``SEGMENT_MIN_BYTES`` of vectors, written as segment files in the background,
        which the index then maps instead of its RAM copy.
        """
        self._events("index.reload", 1)
        if self.segments is not None:
            mapped = self.load_segments(key, state)
            if mapped is not None:
                return self._loaded.install(key, mapped)
        dimension = state.dimension or self._embedding.embedder().dimension
        # the version is read before the vectors: a write in between is applied again
        # by the next catch-up only if it is newer than this version, and a row the
        # load already holds is never added twice (see IndexSync.catch_up)
        version = self._store.knowledge_state(*key).version
        codec = self.codec_of(state)
        approximate = not codec_named(codec).exact
        # one snapshot: ids, rows, labels and (for an approximate codec) where each row is
        loaded = self._store.load_index(*key, dimension, located=approximate)
        vectors = loaded.vectors
        assert vectors is not None
        # a small workspace reads from the store in about a millisecond: it is not
        # worth files (and an open file and a mapping each while loaded)
        persist = self.segments is not None and vectors.nbytes >= SEGMENT_MIN_BYTES
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
        self.attach(key, index, persist)
        slot = self._loaded.install(key, Entry(version, index, None, state.embedder))
        if persist:  # written out as segment files in the background
            self._submit(key, True)
        return slot

    def attach(self, key: Key, index: VectorIndex, persisted: bool) -> None:
        """Make ``index``'s maintenance run on the maintenance loop; ``persisted``: make
        it keep its parts as segment files."""
        submit = self._submit
        if persisted:
            index.persisted = True
            index.merge_rows = SEGMENT_MERGE_ROWS
        index.set_maintenance(lambda _: submit(key, False))

    def load_segments(self, key: Key, state: KnowledgeState) -> Entry | None:
        """The index mapped from the workspace's segment files and brought up to date
        by the change log, as an entry (not installed); ``None`` when there are none, or
        when they are unusable (logged and counted: ``segment_fallbacks``). Call with
        the workspace lock held."""
        try:
            loaded = self.directory(key).load()
        except (SegmentError, OSError) as exc:
            self._fallback(key, "unusable", exc)
            return None
        if loaded is None:
            return None
        manifest, parts = loaded
        dimension = state.dimension or self._embedding.embedder().dimension
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
            index = from_parts(dimension, parts, codec=self.codec_of(state), executor=self._helpers)
        except ValidationFailed as exc:
            self._fallback(key, "invalid", exc)
            return None
        # attached before the change log is applied: what applying it makes due is the
        # maintenance loop's (sealed into segment files), not the RAM steps an index
        # runs on its helpers until then
        self.attach(key, index, True)
        if not apply_changes(index, changes):
            self._fallback(key, "invalid", "the change log's rows do not fit the segments")
            return None
        if not self._files_match_store(key, index, parts, changes.version):
            return None
        self._events("index.segment_load", 1)
        return Entry(changes.version, index, manifest.id, state.embedder, manifest.version)

    def _fallback(self, key: Key, reason: str, detail: object) -> None:
        """A load that found segment files it cannot use: say so (log and count)."""
        self._events("index.segment_fallback", 1)
        _log.warning(
            "segment files of %s/%s not used (%s: %s); loading from the store",
            *key,
            reason,
            detail,
        )

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
