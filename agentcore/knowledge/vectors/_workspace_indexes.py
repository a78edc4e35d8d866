"""WorkspaceIndexes: the in-memory ``VectorBackend``, each workspace's ``VectorIndex``
loaded once per core and kept in step with the store's change log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agentcore._background import Runtime
from agentcore._memory_budget import Residency
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors._backend import Found, Key, Query, Rows, T, Within
from agentcore.knowledge.vectors._embedding import Embedding, unit_rows
from agentcore.knowledge.vectors._index import VectorIndex
from agentcore.knowledge.vectors._maintenance import Foreground, Maintainer, SegmentMaintenance
from agentcore.knowledge.vectors._parts import IdArray, Matrix, ScoreArray
from agentcore.knowledge.vectors._reembed import WorkspaceEmbedders
from agentcore.knowledge.vectors._residency import Events, LoadedIndexes, stats
from agentcore.knowledge.vectors._segments import MANIFEST, WriteStages
from agentcore.knowledge.vectors._sync import IndexSync
from agentcore.knowledge.vectors._workspace_loading import WorkspaceLoader
from agentcore.observer import Counts, unobserved

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore

# Keyword searches of a workspace whose vector index is not loaded (and has no segment
# files to map) that read their candidates' vectors from the store; the next one loads
# the index, whose later searches then read nothing.
STORED_SCORE_SEARCHES = 16
STORED_SCORE_WORKSPACES = 10_000  # most workspaces whose such searches are counted


class WorkspaceIndexes:
    """Ranks vectors in this process (``vector_search="memory"``): loads each workspace's
    index once, shares it between threads, keeps it current (``IndexSync``), within a
    memory budget (``LoadedIndexes``), maintained in the background (``Maintainer``).

    :param store: where documents, chunks and vectors are kept.
    :param embedding: the configured embedder (re-embedding, and the dimension of a
        workspace that has none yet).
    :param catchup_max_rows: most rows to add from the change log before a full
        reload is preferred (``Settings.index_catchup_max_rows``).
    :param segments: a directory for this store's memory-mapped segment files
        (``_segments.py``; ``Settings.index_dir``), or ``None`` to keep indexes in RAM.
        With it, a load maps the files and applies the change log since they were
        written; rows added since live in each index's tail until a background
        thread merges them into a new segment (``SEGMENT_MERGE_ROWS``), and deletes
        are tombstones until it compacts the segment.
    :param store_identity: names the store the files belong to (a manifest written
        for another store is ignored).
    :param codec: how a new workspace's index stores its rows (``Settings.index_dtype``,
        a name in ``CODECS``). The first write to a workspace stores it with the
        workspace (``claim_index_dtype``); from then on its stored dtype is used,
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
        (``WriteStages``, a fault-injection point); none by default.
    :param observer: told of each load, catch-up, own write, segment load, switch,
        merge, eviction and unusable segment load (``runtime.Observer``; ``stats()``
        counts them too).
    """

    def __init__(
        self,
        store: IndexStore,
        *,
        embedding: Embedding,
        catchup_max_rows: int = 100_000,
        segments: Path | None = None,
        store_identity: str = "",
        codec: str = "float32",
        budget_bytes: int | None = None,
        max_mapped_files: int | None = None,
        runtime: Runtime | None = None,
        segment_write_stages: WriteStages | None = None,
        observer: Counts = unobserved,
    ) -> None:
        self._own_runtime = runtime is None
        self._runtime = runtime or Runtime()
        helpers = kernels.default_helpers()
        executor = (
            self._runtime.executor("agentcore-index", helpers, initializer=kernels.pin_blas_thread)
            if helpers
            else None
        )
        self._events = Events(observer)
        self._embedding = embedding
        embedders = WorkspaceEmbedders(
            store, embedding, codec=codec, reembedded=lambda key: self._loaded.entries.discard(key)
        )
        self._loaded = LoadedIndexes(
            budget_bytes=budget_bytes,
            max_mapped_files=max_mapped_files,
            events=self._events,
            forget=embedders.forget,
        )
        foreground = Foreground()  # writes in flight: background steps give way
        # the steps are made below (they need the loader, which submits to this queue)
        self._maintainer = Maintainer(lambda key, force: steps.run(key, force), self._runtime)
        loader = WorkspaceLoader(
            store,
            self._loaded,
            embedding=embedding,
            catchup_max_rows=catchup_max_rows,
            segments=segments,
            store_identity=store_identity,
            codec=codec,
            helpers=executor,
            submit=self._maintainer.submit,
            write_stages=segment_write_stages,
            events=self._events,
        )
        steps = SegmentMaintenance(
            store,
            self._loaded,
            loader,
            store_identity=store_identity,
            foreground=foreground,
            events=self._events,
        )
        self._sync = IndexSync(
            store,
            self._loaded,
            loader,
            embedders,
            catchup_max_rows=catchup_max_rows,
            submit=self._maintainer.submit,
            writing=foreground.running,
            events=self._events,
        )
        self._store = store
        self._loader = loader
        self._stored_scores: dict[Key, int] = {}

    def close(self, timeout: float = 30.0) -> None:
        """Drop the maintenance not yet started; one with its own runtime also ends
        its threads (waiting up to ``timeout`` for a step under way). A core's
        runtime is stopped by the core.

        When the maintenance loop never ran (a core used embedded, never started), the
        steps queued are run here first, for up to ``timeout`` seconds: a workspace
        loaded from the store gets its segment files written, so the next process maps
        them instead of reading every vector from the store. A server's shutdown does
        not wait for them (its next start writes what they would have)."""
        if not self._runtime.started and not self._maintainer.looped:
            self._maintainer.run_queued(timeout)
        self._maintainer.close()
        self._loaded.clear()  # their mappings and files close with their last user
        if self._own_runtime:
            self._runtime.stop(timeout)

    def wait_for_maintenance(self, timeout: float = 60.0) -> bool:
        """Wait until no background maintenance is queued or running; whether it is so.

        When the maintenance loop is not running (the core was not started), the
        queued steps run here, in the calling thread.
        """
        return self._maintainer.wait_idle(timeout)

    @property
    def budget(self) -> Residency[Any, Any]:
        """What the loaded indexes are charged to: other per-workspace caches (keyword
        indexes, document tables) share its bounds, ``index_cache_bytes``, so the least
        recently used of all of them are evicted first."""
        return self._loaded.entries

    def stats(self) -> dict[str, int | None]:
        """What the cache holds and has done, for metrics (``VectorBackend.stats``):
        ``workspaces``, ``rows`` and ``nbytes`` (in RAM or mapped) of the indexes held
        now; ``entries``, ``bytes`` (charged to the budget), ``budget_bytes``,
        ``mapped_files``, ``max_mapped_files``, ``pinned`` (in use by a search now);
        and the counts of ``loads``, ``evictions``, ``segment_loads``,
        ``segment_fallbacks``, ``catch_ups`` and ``merges`` since it was made."""
        workspaces, rows, nbytes = self._loaded.size()
        held = stats(self._loaded.entries, self._events.counts())
        return {"workspaces": workspaces, "rows": rows, "nbytes": nbytes, **held}

    def loaded(self) -> list[Key]:
        """The workspaces whose index is loaded, least recently used first."""
        return self._loaded.entries.keys()

    def get(self, organization_id: str, environment: str) -> VectorIndex:
        """The current index of a workspace (re-embedded first if the embedder changed).

        Loaded if it is not (which may evict others); the caller's reference keeps the
        index usable even if the cache evicts it afterwards.
        """
        slot = self._sync.acquire((organization_id, environment))
        self._sync.release(slot)
        return slot.value.index

    def is_current(self, organization_id: str, environment: str) -> bool:
        """Whether a workspace's index is loaded here and at the store's version, so a
        search now neither loads nor catches up."""
        entry = self._loaded.get((organization_id, environment))
        if entry is None:
            return False
        return self._sync.current(entry, self._store.knowledge_state(organization_id, environment))

    def search(
        self,
        organization_id: str,
        environment: str,
        query: Query,
        k: int,
        min_score: float | None = None,
        *,
        within: Within | None = None,
    ) -> Found:
        """The ``k`` best ids and scores for the vector ``query()`` returns (``None``: none),
        in this process's index of the workspace. ``query`` is called only when there
        is something to search. ``within`` (a filter's selection) restricts the rows
        ranked by their labels, before the top ``k``."""
        slot = self._sync.acquire((organization_id, environment))
        try:  # held: never evicted while this search runs
            index = slot.value.index
            if len(index) == 0:
                return _nothing()
            vector = query()
            if vector is None:
                return _nothing()
            return index.search(vector, k, min_score=min_score, allow=within)
        finally:
            self._sync.release(slot)

    def search_batch(
        self,
        organization_id: str,
        environment: str,
        queries: Matrix,
        k: int,
        min_score: float | None = None,
    ) -> list[Found]:
        """``search`` for each row of ``queries`` ``(m, d)`` (none of them zero), in order.

        The rows are scanned together, one matrix product for all of them, which costs
        less per query than one scan each; a score may then differ from a lone
        search's in the last bit of its float32.
        """
        slot = self._sync.acquire((organization_id, environment))
        try:  # held: never evicted while this search runs
            index = slot.value.index
            if len(index) == 0:
                return [_nothing()] * queries.shape[0]
            ids, scores = index.search_batch(queries, k)
        finally:
            self._sync.release(slot)
        found = []
        for row_ids, row_scores in zip(ids, scores, strict=True):
            keep = row_ids >= 0  # padding, where the index holds fewer than k rows
            if min_score is not None:
                keep &= row_scores >= min_score
            found.append((row_ids[keep], row_scores[keep]))
        return found

    def similarities(
        self, organization_id: str, environment: str, vector: Matrix, ids: IdArray
    ) -> ScoreArray:
        """The cosine similarity of the query ``vector`` to each of these rows (``nan``
        for a row not in the index): the ``score`` of a keyword search's results.

        A workspace whose index is not loaded here has these few rows read from the
        store instead of loading it whole (a keyword search needs only them)."""
        unit = unit_rows(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        out = np.full(ids.shape[0], np.nan, dtype=np.float32)
        if not ids.size:
            return out
        key = (organization_id, environment)
        if self._loaded.get(key) is None and self._scores_from_store(key, ids, unit, out):
            return out
        slot = self._sync.acquire((organization_id, environment))
        try:  # held: never evicted while its rows are read
            index = slot.value.index
            for at, chunk_id in enumerate(ids.tolist()):
                row = index.get(chunk_id)
                if row is not None:
                    out[at] = np.float32(np.clip(np.dot(row, unit), -1.0, 1.0))
        finally:
            self._sync.release(slot)
        return out

    def _scores_from_store(self, key: Key, ids: IdArray, unit: Matrix, out: ScoreArray) -> bool:
        """Score rows ``ids`` read from the store into ``out`` instead of loading the
        workspace's index, if that is the cheaper path now; whether it was taken.

        It is while the index has no segment files to map (loading would read every
        vector from the store: 0.15 s at 50k rows, 1.5 s at 100k on PostgreSQL), for the
        first ``STORED_SCORE_SEARCHES`` searches; and never when the stored vectors are
        another embedder's (the index load re-embeds them).
        """
        segments = self._loader.segments
        if segments is not None and (self._loader.directory(key).path / MANIFEST).is_file():
            return False
        done = self._stored_scores.get(key, 0)
        if done >= STORED_SCORE_SEARCHES:
            self._stored_scores.pop(key, None)
            return False
        state = self._store.knowledge_state(*key)
        if state.embedder != self._embedding.embedder().name or state.dimension != unit.size:
            return False
        if len(self._stored_scores) >= STORED_SCORE_WORKSPACES:
            self._stored_scores.clear()  # many tenants: each counts again from 0
        self._stored_scores[key] = done + 1
        locators = self._store.locate_vectors(*key, ids)
        stored = locators >= 0
        rows = self._store.read_vector_rows(*key, locators[stored], unit.size)
        out[stored] = np.clip(rows @ unit, -1.0, 1.0)  # a row deleted since: nan
        return True

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
            cached index holds them back until its next read (a few thousand rows at
            most); if the store's version has then moved exactly one step per held-back
            write, those writes were the only ones since, and it adds their rows in one
            batch without reading them back; otherwise it reads the change log as usual.
            Such a write (``insert_document``, ``complete_document``) checks the
            workspace's embedder in its own transaction (``StaleEmbedder``), so after
            the workspace's first one no read of its state precedes it.
        """
        return self._sync.write((organization_id, environment), store_write, added)


def _nothing() -> Found:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
