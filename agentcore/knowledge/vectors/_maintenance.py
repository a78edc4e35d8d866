"""Index maintenance in the background: the queue of workspaces whose maintenance is
due, the core's loop that runs it, and each step (compaction and merges in RAM, or a
new segment file and manifest) giving way to the writes in flight."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentcore._background import Loop, Runtime
from agentcore._logs import get_logger
from agentcore.knowledge.vectors._backend import Key
from agentcore.knowledge.vectors._parts import codec_named
from agentcore.knowledge.vectors._plan import MaintenancePlan, settle
from agentcore.knowledge.vectors._residency import Entry, Events, LoadedIndexes
from agentcore.knowledge.vectors._segments import Manifest, SegmentDirectory, SegmentError
from agentcore.knowledge.vectors._workspace_loading import WorkspaceLoader

if TYPE_CHECKING:
    from agentcore.storage.base import IndexStore

# Seconds the idle maintenance loop sleeps between looks (a submission wakes it at once).
MAINTENANCE_IDLE = 60.0
# Longest a background step waits between two blocks for this process's writes in
# flight to finish: under a steady stream of writes it still moves a block (4 MB) per wait.
FOREGROUND_WAIT = 0.05
_log = get_logger(__name__)


class Foreground:
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


class Maintainer:
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
        self.looped = False  # whether the loop ever ran a pass (the core was started)
        self._loop: Loop = runtime.loop(
            "agentcore-index-maintenance", self._pass, interval=MAINTENANCE_IDLE
        )

    def submit(self, key: Key, force: bool = False) -> None:
        """Maintain ``key``'s index soon (``force``: seal and persist even if not due)."""
        with self._cond:
            self._pending[key] = self._pending.get(key, False) or force
        self._loop.wake()

    def _pass(self) -> float | None:
        """The loop's pass: one workspace's steps; then at once the next one's, or sleep
        if none waits. Steps end early once the loop is stopping."""
        self.looped = True
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
        if not self._loop.health().running and not self.run_queued(timeout):
            return False
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def run_queued(self, timeout: float) -> bool:
        """Run the queued steps in the calling thread (for a loop that is not running),
        starting none after ``timeout`` seconds; whether none is left queued."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if not self._run_next(lambda: False):
                    return True
            except Exception:  # as the loop would: logged, and the files left as they were
                _log.exception("index maintenance failed")
        with self._cond:
            return not self._pending

    def close(self) -> None:
        """Drop the steps not started yet (a later load writes what they would have)."""
        with self._cond:
            self._pending.clear()


@dataclass(frozen=True)
class _Step:
    """A segment step planned under the workspace's lock, written outside it."""

    entry: Entry
    plan: MaintenancePlan
    current: Manifest | None  # the manifest published before this step
    embedder: str | None
    version: int


class SegmentMaintenance:
    """One maintenance step of a workspace's index (``Maintainer``'s ``run``).

    An index kept in RAM compacts and merges there. A persisted one, under the
    directory's file lock: if another process (or an earlier step) published a
    manifest this index does not come from, it switches to it (maps its files, applies
    the change log) instead of writing. Else it seals the tail and the parts due for
    compaction or merging into one new segment, writes the tombstones of the parts
    kept, publishes a manifest of the version the snapshot reflects, swaps the new
    part in, and deletes the files no longer named.
    """

    def __init__(
        self,
        store: IndexStore,
        loaded: LoadedIndexes,
        loader: WorkspaceLoader,
        *,
        store_identity: str,
        foreground: Foreground,
        events: Events,
    ) -> None:
        self._store = store
        self._loaded = loaded
        self._loader = loader
        self._store_identity = store_identity
        self._foreground = foreground
        self._events = events

    def run(self, key: Key, force: bool) -> bool:
        """One background maintenance step of a workspace; whether another may be due."""
        entry = self._loaded.maintained(key)
        if entry is None:
            return False
        if not entry.index.persisted:  # kept in RAM: compaction and merges there
            more = entry.index.maintain()
            with self._loaded.lock(key):  # its rows' bytes changed: the budget's charge follows
                self._loaded.charge(key, entry)
            return more
        directory = self._loader.directory(key)
        with directory.lock():
            step = self._planned(key, directory, force)
            if step is None:
                return False
            self._write(key, directory, step)
        return step.entry.index.maintenance_due()

    def _planned(self, key: Key, directory: SegmentDirectory, force: bool) -> _Step | None:
        """The step due, planned under the workspace's lock; ``None`` when none is, or
        when the index switched to another process's manifest instead."""
        with self._loaded.lock(key):
            entry = self._loaded.maintained(key)
            if entry is None:
                return None
            try:
                current = directory.read_manifest()
            except SegmentError:
                current = None  # damaged: the manifest written below replaces it
            if current is not None and current.id != entry.manifest and self._switched(key, entry):
                return None
            plan = entry.index.plan_maintenance(force=force)
            if plan is None:
                return None
            # an index loaded before the workspace's first write learnt its embedder
            # from the rows added since
            embedder = entry.embedder or self._store.knowledge_state(*key).embedder
            return _Step(entry, plan, current, embedder, entry.version)

    def _switched(self, key: Key, entry: Entry) -> bool:
        """Switch ``key`` to the segment files another manifest names; whether it did."""
        state = self._store.knowledge_state(*key)
        switched = self._loader.load_segments(key, state)
        if switched is None:
            return False
        self._loaded.written(key)
        if self._loaded.get(key) is entry:
            self._loaded.entries.release(self._loaded.install(key, switched))
        self._events("index.switch", 1)
        return True

    def _write(self, key: Key, directory: SegmentDirectory, step: _Step) -> None:
        """Write ``step``'s segment, tombstones and manifest, swap the new part in, and
        delete the files no longer named."""
        index, plan = step.entry.index, step.plan
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
            version=step.version,
            dimension=index.dimension,
            embedder=step.embedder,
            store=self._store_identity,
            segments=tuple(n for n in names if n),
            tombstones=tombstones,
        )
        directory.publish(manifest)
        applied = index.apply(plan, new_parts)
        with self._loaded.lock(key):
            if applied:
                self._loaded.written(key, step.entry)  # written: its next load maps the files
            if applied and self._loaded.get(key) is step.entry:
                step.entry.manifest = manifest.id
                step.entry.manifest_version = max(step.entry.manifest_version, step.version)
                self._loaded.charge(key, step.entry)
        self._events("index.merge", 1)
        if step.current is not None:
            directory.remove(step.current.files() - manifest.files())
        directory.collect(manifest.files())
