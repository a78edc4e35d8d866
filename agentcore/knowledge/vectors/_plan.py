"""Maintenance planning: which parts of an index a step compacts, merges or seals, the
rows it rewrites (streamed), and how its result is carried over to a newer snapshot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agentcore._logs import get_logger
from agentcore.knowledge.vectors._parts import (
    EMPTY_IDS,
    NO_LABEL,
    UNLABELLED,
    IdArray,
    LabelCodes,
    Matrix,
    Part,
    Snapshot,
    StoredRows,
    ascending,
    live_positions,
)

COMPACT_FRACTION = 8  # a part is compacted once its dead rows exceed 1/8 of its rows
MAX_PARTS = 8  # more frozen parts than this: the smallest are merged
# Steps one submission of an index may run back to back. Each step leaves fewer parts
# or fewer dead rows, so a handful settle anything; the cap turns a step that would
# never settle into a logged warning instead of a thread that spins forever.
MAX_STEPS = 4 * MAX_PARTS
_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class MaintenancePlan:
    """The parts one maintenance step rewrites, as a snapshot saw them.

    ``parts`` are frozen parts to merge or compact; ``tail_rows`` is how many leading
    rows of the tail to seal (0: the tail stays). ``keep`` are the frozen parts left as
    they are; with the new part they hold everything the snapshot held (if the whole
    tail is sealed), which is what a persisted manifest then describes.
    """

    snapshot: Snapshot
    parts: tuple[Part, ...]
    tail_rows: int

    @property
    def keep(self) -> tuple[Part, ...]:
        """The frozen parts this step leaves as they are."""
        return tuple(p for p in self.snapshot.parts if not any(p.same_rows(c) for c in self.parts))

    def still_valid(self, snap: Snapshot) -> bool:
        """Whether ``snap`` still holds the parts and tail rows this step rewrites."""
        if self.tail_rows and snap.epoch != self.snapshot.epoch:
            return False
        return all(any(p.same_rows(q) for q in snap.parts) for p in self.parts)

    def carry_deletes(
        self, before: Snapshot, now: Snapshot, new_parts: Sequence[Part]
    ) -> list[Part]:
        """``new_parts`` with the rows deleted between snapshots ``before`` and ``now``
        (both still valid for this step) among the rows it rewrites marked dead."""
        gone: list[IdArray] = []
        for part in now.parts:
            if not any(p.same_rows(part) for p in self.parts):
                continue
            old = next(p for p in before.parts if p.same_rows(part))
            if part.dead is not old.dead and part.dead.shape != old.dead.shape:
                gone.append(part.ids[_added(old.dead, part.dead)])
        cut = self.tail_rows
        if cut and now.tail.dead is not before.tail.dead:
            was = before.tail.dead[before.tail.dead < cut]
            is_ = now.tail.dead[now.tail.dead < cut]
            if is_.shape != was.shape:
                gone.append(now.tail.ids[_added(was, is_)])
        if not gone:
            return list(new_parts)
        dead_ids = np.unique(np.concatenate(gone))
        out: list[Part] = []
        for part in new_parts:
            if part.rows:
                hit, rows = part.find(dead_ids)
                if hit.any():
                    part = part.with_dead(np.union1d(part.dead, rows[hit]))
            out.append(part)
        return out

    def live_rows(self) -> tuple[IdArray, Matrix]:
        """The live rows of the chosen parts and tail rows, sorted by id (read only).

        One part with no dead rows and ascending ids is returned as it is (a store
        load written out as a segment needs no second copy of the matrix).
        """
        ids, rows = self.gather()
        if rows.view is not None:
            return ids, rows.view
        return ids, rows.fill(0, rows.rows, np.empty((rows.rows, rows.dimension), np.float32))

    def gather(self) -> tuple[IdArray, RowSource]:
        """The sorted live ids of the rows this step rewrites, and their rows (and
        labels) as a ``RowSource`` that copies them out block by block (nothing is
        copied here)."""
        pieces: list[tuple[Matrix | StoredRows, IdArray | None]] = []
        ids: list[IdArray] = []
        labels: list[Part] = []
        for part in self.parts:
            if part.dead.size:
                selected = live_positions(part.rows, part.dead)
                pieces.append((part.vectors, selected))
                ids.append(part.ids[selected])
            else:
                pieces.append((part.vectors, None))
                ids.append(np.asarray(part.ids))
            labels.append(part)
        if self.tail_rows:
            tail = self.snapshot.tail
            selected = live_positions(self.tail_rows, tail.dead[tail.dead < self.tail_rows])
            pieces.append((tail.vectors[: self.tail_rows], selected))
            ids.append(tail.ids[selected])
            labels.append(tail)
        d = self.snapshot.buffer.shape[1]
        if not pieces:
            return EMPTY_IDS, RowSource((), None, d)
        if len(pieces) == 1 and ascending(ids[0]):
            return ids[0], RowSource(tuple(pieces), None, d, tuple(labels))
        joined = np.concatenate(ids).astype(np.int64, copy=False)
        order = np.argsort(joined, kind="stable")
        return joined[order], RowSource(tuple(pieces), order, d, tuple(labels))


class RowSource:
    """The rows of a maintenance step's new part, in id order, copied out on demand.

    ``pieces`` are ``(rows, selected)`` pairs: a frozen part's or the tail's float32
    rows and the row numbers taken from them (``None``: all). Output row ``i`` is
    entry ``order[i]`` of the pieces' selections laid end to end (``order`` ``None``:
    one piece, already in id order). ``fill`` copies any range of output rows, so a
    writer can stream a part of any size through a small buffer: each copy is one
    numpy call that runs without the GIL, and the GIL is handed over between blocks.
    """

    def __init__(
        self,
        pieces: tuple[tuple[Matrix | StoredRows, IdArray | None], ...],
        order: IdArray | None,
        dimension: int,
        labelled: tuple[Part, ...] = (),
    ) -> None:
        self.pieces = pieces
        self.order = order
        self.dimension = dimension
        self._labelled = labelled  # the part each piece's rows come from (their labels)
        sizes = [rows.shape[0] if sel is None else sel.shape[0] for rows, sel in pieces]
        self.rows = int(sum(sizes))
        self._starts = np.cumsum([0, *sizes]).astype(np.int64)

    def label_codes(self) -> tuple[LabelCodes | None, IdArray | None]:
        """The output rows' labels as ``(codes, values)`` in output order (``values``
        sorted; ``(None, None)``: no row has a label). Codes are gathered, never the
        labels themselves: 4 bytes a row, nothing when no source part has labels."""
        parts = self._labelled
        if not parts or all(p.label_codes is None for p in parts):
            return None, None
        values = np.unique(
            np.concatenate(
                [UNLABELLED if p.label_values is None else p.label_values for p in parts]
            )
        )
        pieces: list[LabelCodes] = []
        for (rows, selected), part in zip(self.pieces, parts, strict=True):
            count = rows.shape[0] if selected is None else selected.shape[0]
            if part.label_codes is None or part.label_values is None:
                none = int(np.searchsorted(values, NO_LABEL))
                pieces.append(np.full(count, none, dtype=np.int32))
                continue
            remap = np.searchsorted(values, part.label_values).astype(np.int32)
            codes = part.label_codes[: rows.shape[0]]
            pieces.append(remap[codes if selected is None else codes[selected]])
        joined = np.concatenate(pieces)
        return (joined if self.order is None else joined[self.order]), values

    @property
    def view(self) -> Matrix | None:
        """All the rows as one existing array (no copy), when they are one whole piece."""
        if self.order is None and len(self.pieces) == 1 and self.pieces[0][1] is None:
            rows = self.pieces[0][0]
            return None if isinstance(rows, StoredRows) else rows
        return None

    def fill(self, start: int, stop: int, out: Matrix) -> Matrix:
        """Copy output rows ``start:stop`` into ``out[: stop - start]``; that view."""
        m = stop - start
        target = out[:m]
        if m <= 0:
            return target
        if self.order is None:
            rows, selected = self.pieces[0]
            if selected is None:
                target[...] = rows[start:stop]
            else:
                if isinstance(rows, StoredRows):
                    target[...] = rows[selected[start:stop]]
                else:
                    np.take(rows, selected[start:stop], axis=0, out=target, mode="clip")
            return target
        wanted = self.order[start:stop]
        which = np.searchsorted(self._starts, wanted, side="right") - 1
        for p in np.unique(which).tolist():
            at = np.flatnonzero(which == p)
            local = wanted[at] - self._starts[p]
            rows, selected = self.pieces[p]
            target[at] = rows[local if selected is None else selected[local]]
        return target

    def block(self, start: int, stop: int, buffer: Matrix) -> Matrix:
        """Output rows ``start:stop``: a view of the source when it is one whole piece,
        else copied into ``buffer`` (at least ``stop - start`` rows)."""
        view = self.view
        return view[start:stop] if view is not None else self.fill(start, stop, buffer)


def plan(
    snap: Snapshot, *, persisted: bool, seal_rows: int | None, force: bool
) -> MaintenancePlan | None:
    """The next maintenance step of an index whose state is ``snap``, or ``None``.

    Parts with too many dead rows are compacted and, when the index is ``persisted``
    (its frozen parts are segment files), parts in RAM are rewritten as files. The
    tail is sealed into a frozen part once it has too many dead rows, or (with
    ``seal_rows``) that many live ones, or, ``force``d and persisted, any rows. The
    smallest parts are merged once there would be more than ``MAX_PARTS``.
    ``force``d and persisted there is always a step, so a manifest can record the
    current state; and a persisted step seals the whole tail (a manifest describes
    whole snapshots).
    """
    forced = force and persisted
    chosen = _rewritten(snap.parts, persisted)
    seal = _seal_due(snap.tail, seal_rows, forced)
    chosen += _merged_away(snap.parts, chosen, seal)
    if not chosen and not seal and not forced:
        return None
    if persisted and snap.tail.rows:
        seal = True
    return MaintenancePlan(snap, tuple(chosen), snap.tail.rows if seal else 0)


def _rewritten(parts: Sequence[Part], persisted: bool) -> list[Part]:
    """The parts rewritten as they are: those past ``COMPACT_FRACTION`` dead rows, then
    (persisted) the ones in RAM (a load from the store becomes segment files)."""
    chosen = [p for p in parts if _too_dead(p)]
    if persisted:
        chosen += [p for p in parts if p.name is None and not _among(p, chosen)]
    return chosen


def _seal_due(tail: Part, seal_rows: int | None, forced: bool) -> bool:
    """Whether the tail is sealed: too many dead rows, ``seal_rows`` live ones, or any
    row when ``forced``."""
    if _too_dead(tail):
        return True
    if seal_rows is not None and tail.live >= seal_rows:
        return True
    return forced and tail.rows > 0


def _merged_away(parts: Sequence[Part], chosen: list[Part], seal: bool) -> list[Part]:
    """The smallest parts not ``chosen``, merged when there would be more than
    ``MAX_PARTS`` (counting a sealed tail): down to half as many."""
    if len(parts) + (1 if seal else 0) <= MAX_PARTS:
        return []
    rest = sorted((p for p in parts if not _among(p, chosen)), key=lambda p: p.rows)
    return rest[: len(parts) - MAX_PARTS // 2 + 1]


def _too_dead(part: Part) -> bool:
    return bool(part.dead.shape[0] * COMPACT_FRACTION > part.rows)


def _among(part: Part, chosen: list[Part]) -> bool:
    return any(part is c for c in chosen)


def settle(step: Callable[[], bool], *, what: str, stopping: Callable[[], bool] = bool) -> int:
    """Call ``step()`` while it says another step is due, at most ``MAX_STEPS`` times,
    and not once ``stopping()`` is true; how many ran.

    Each maintenance step leaves fewer parts or fewer dead rows, so a handful settle
    anything; one that never settles is logged as ``what`` instead of spun on.
    """
    steps = 0
    while not stopping():
        steps += 1
        if not step():
            break
        if steps >= MAX_STEPS:
            _log.warning("%s still due after %d steps", what, steps)
            break
    return steps


def _added(old: IdArray, new: IdArray) -> IdArray:
    """The entries of sorted ``new`` not in sorted ``old`` (``old`` is a subset of ``new``:
    dead rows only ever get added), in O(n) instead of ``setdiff1d``'s sorts."""
    keep = np.ones(new.shape[0], dtype=bool)
    keep[np.searchsorted(new, old)] = False
    return new[keep]
