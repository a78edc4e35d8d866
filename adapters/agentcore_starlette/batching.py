"""Micro-batching: quick calls of one batch key that reach the event loop in the same
turn run as one ``route.batch`` (a search: one embedding call, one matrix product).

This is the dynamic batching of inference servers, with no added wait: the first such
call schedules the batch for the loop's next turn, after the calls read with it; under
load, calls arrive while a batch runs, so batches form by themselves; a lone call does
not wait at all once lone calls are what the route sees (``BatchWaits``). A batch holds
the loop until it ends, so it is bounded by ``inline_budget`` (``Batcher.limit``), and
answers each call as it would alone, its own error included. See docs/decisions.md,
'Performance decisions'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from agentcore import AgentCoreError, Workspace
from agentcore.adapters import get_logger
from agentcore_starlette.routing import ApiRoute, Call
from agentcore_starlette.scheduling import Scheduler

log = get_logger("agentcore.http")  # masks keys and secrets in every record

BatchKey = tuple[asyncio.AbstractEventLoop, str, Hashable]
"""A batch of calls: the loop it runs on, the route, its batch key."""
BATCH_MAX = 32
"""Most calls one batch answers: the loop runs a batch without a break, so a bound
keeps other requests' wait short (32 searches of a 2,000-chunk workspace take about
8 ms together)."""
LONE_BATCHES = 8
"""Batches of one call in a row after which a route's calls stop waiting for a batch."""
BATCH_PROBE_EVERY = 16
"""While they do not wait, every this many-th call waits anyway, to notice company."""

Waiting = list[tuple[Call, asyncio.Future[Any]]]
"""Calls waiting for their batch's run, each with the future its request awaits."""


class BatchWaits:
    """Whether a route's batchable calls wait a turn of the loop for others to join.

    Waiting costs a lone call a turn (about 0.02 ms of CPU), which is worth it only
    while calls arrive together. After ``LONE_BATCHES`` batches in a row of one call,
    calls run at once, but every ``BATCH_PROBE_EVERY``-th still waits, and the calls
    of its batch key reaching the loop in the same turn join it, so that calls arriving
    together again are noticed (a batch of several starts waiting anew).
    """

    __slots__ = ("lone", "skipped")

    def __init__(self) -> None:
        self.lone = 0  # batches of one call in a row
        self.skipped = 0  # calls run at once since the last that waited

    def wanted(self) -> bool:
        """Whether the next call waits for a batch."""
        if self.lone < LONE_BATCHES:
            return True
        self.skipped += 1
        if self.skipped < BATCH_PROBE_EVERY:
            return False
        self.skipped = 0
        return True

    def ran(self, calls: int) -> None:
        """A batch of ``calls`` calls ran."""
        self.lone = self.lone + 1 if calls == 1 else 0


class Batcher:
    """Runs the quick calls of batchable routes (``route.batch``) together.

    :param scheduler: times the runs (a batch's calls are noted at their share of it)
        and runs a call alone; its ``inline_budget`` bounds a batch.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.waits: dict[str, BatchWaits] = {}  # by route
        # quick calls waiting for their batch's run, by loop, route and batch key; an
        # entry lives for one turn of its loop (popped by the run it scheduled)
        self.batches: dict[BatchKey, Waiting] = {}

    def joined(self, route: ApiRoute, call: Call) -> BatchKey | None:
        """The batch a quick ``call`` waits for (an app served by two loops: one batch
        each), or ``None`` to run it at once: it waits when its route batches, it has a
        batch key, and such a batch is waiting to run or ``route``'s recent batches say
        to wait (``BatchWaits``)."""
        group = None if route.batch_key is None else route.batch_key(call)
        if group is None:
            return None
        key = (asyncio.get_running_loop(), route.operation_id, group)
        return key if key in self.batches or self._waits(route).wanted() else None

    async def run(self, route: ApiRoute, key: BatchKey, call: Call) -> Any:
        """The result of ``call``, run together with the calls of the same batch ``key``
        (``joined``) that reach the loop in the same turn.

        The first of them schedules the run for the loop's next turn, after the
        request tasks already due (requests read with it) have joined. One call alone
        runs as ever; under load, requests arrive while a batch runs, so the next
        turn finds several.
        """
        loop = key[0]
        future: asyncio.Future[Any] = loop.create_future()
        waiting = self.batches.get(key)
        if waiting is None:
            waiting = self.batches[key] = []
            loop.call_soon(self._run_batch, route, key, waiting)
        waiting.append((call, future))
        if len(waiting) >= self.limit(route, call.workspace):
            del self.batches[key]  # full: the next call starts another batch
        return await future

    def limit(self, route: ApiRoute, ws: Workspace) -> int:
        """How many calls one batch of ``route`` in ``ws`` answers: as many as its
        recent runs (a batch's calls noted at their share of it) say fit in
        ``inline_budget``, since a batch holds the loop, and other requests wait, until
        it ends; at least 1 and at most ``BATCH_MAX``."""
        recent = self.scheduler.estimates.recent(route, ws)
        if recent is None or recent.median <= 0:
            return BATCH_MAX
        return max(1, min(BATCH_MAX, int(self.scheduler.inline_budget / recent.median)))

    def _waits(self, route: ApiRoute) -> BatchWaits:
        state = self.waits.get(route.operation_id)
        if state is None:
            state = self.waits[route.operation_id] = BatchWaits()
        return state

    def _run_batch(self, route: ApiRoute, key: BatchKey, waiting: Waiting) -> None:
        """Settle the futures of the calls ``waiting`` under ``key``: by one
        ``route.batch`` run; or, when they are one or the batch fails, by one run each,
        each in a turn of the loop of its own (so that each call gets its own answer or
        error, and the loop is not held longer than without batches)."""
        if self.batches.get(key) is waiting:
            del self.batches[key]
        self._waits(route).ran(len(waiting))
        live = _startable(waiting)
        try:
            results = self._batch(route, live) if len(live) > 1 else None
            if results is not None:
                for (_, future), result in zip(live, results, strict=True):
                    future.set_result(result)
                return
        except BaseException as error:  # no request may wait for ever
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            raise
        if len(live) == 1:
            self._run_one(route, *live[0])
            return
        for call, future in live:  # each in a turn of its own, as without batches
            asyncio.get_running_loop().call_soon(self._run_one, route, call, future)

    def _batch(self, route: ApiRoute, live: Waiting) -> list[Any] | None:
        """The results of ``route.batch`` over the calls of ``live``, noted at their
        share of its run; ``None`` when it failed (each call then answers alone)."""
        assert route.batch is not None
        calls = [call for call, _ in live]
        clock = self.scheduler.clock
        began = clock()
        try:
            results = route.batch(calls)
        except Exception as error:  # each call alone answers its own error
            if not isinstance(error, AgentCoreError):
                log.warning(
                    "%s: a batch failed (%r); its calls run one by one", route.operation_id, error
                )
            return None
        each = (clock() - began) / len(calls)
        self.scheduler.estimates.note(route, calls[0].workspace, began, began + each)
        return results

    def _run_one(self, route: ApiRoute, call: Call, future: asyncio.Future[Any]) -> None:
        """Settle ``future`` with the result (or error) of ``call`` run alone."""
        if future.done():  # its request was cancelled meanwhile
            return
        try:
            result = self.scheduler.run_timed(route, call)
        except BaseException as error:  # its request answers it; no request waits for ever
            future.set_exception(error)
            if not isinstance(error, Exception):
                raise
        else:
            future.set_result(result)


def _startable(waiting: Waiting) -> Waiting:
    """The calls of ``waiting`` still to run: not cancelled meanwhile (their request
    gone), and not past their deadline or left by their client, whose futures get that
    error instead (work started now could only commit unseen)."""
    live: Waiting = []
    for call, future in waiting:
        if future.done():
            continue
        try:
            call.cancellation.check()
        except AgentCoreError as error:
            future.set_exception(error)
            continue
        live.append((call, future))
    return live
