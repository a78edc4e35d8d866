"""Where a blocking handler runs: on the event loop when its recent runs say it is
quick, else on a worker thread.

A thread hop costs two thread wake-ups, and on a busy machine each may wait for a CPU:
more than a search of a small index takes. Concurrent requests do not change that: a
search's scan already shares the cores (the index's helper threads), and quick searches
on worker threads mostly wait for the GIL and hand it back and forth (each hand-over a
wake-up). Deciding by whether another handler was running made a loaded server settle
in one of two states (all on threads, or all on the loop) by chance; see
docs/benchmarks.md. So the decision is each route's own, per workspace: ``Scheduler``
keeps the recent run times of every ``quick_when`` route in each workspace
(``RunEstimates``), and runs a call inline while their median is within
``inline_budget``. Quick calls that can share one run are ``batching``'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from agentcore import Workspace
from agentcore.adapters import Sweeper
from agentcore_starlette.routing import ApiRoute, Call

RECENT_RUNS = 5
"""Run times of a ``quick_when`` route (per workspace) whose median decides inline runs."""
ESTIMATES_SWEPT_PAST = 10_000
"""Workspaces' run-time estimates kept before the idle ones are dropped (``RunEstimates``)."""
ESTIMATE_IDLE_SECONDS = 600.0
"""An estimate not added to for this long is dropped at the next sweep: the workspace's
next run takes a thread, as its first did, and starts a new estimate."""


class RecentRuns:
    """A route's recent run times in one workspace, their median, and when the last was
    noted."""

    __slots__ = ("median", "noted_at", "times")

    def __init__(self) -> None:
        self.times: list[float] = []  # a list: a deque of five is four times its size
        self.median = 0.0
        self.noted_at = 0.0

    def note(self, began: float, ended: float) -> None:
        """Add a run that began and ended at those times."""
        self.times.append(ended - began)
        if len(self.times) > RECENT_RUNS:
            del self.times[0]
        self.median = sorted(self.times)[len(self.times) // 2]
        self.noted_at = ended


EstimateKey = tuple[str, str, str]
"""Whose runs an estimate holds: the route's operation id, the organization, the
environment."""


class RunEstimates:
    """The recent runs of each ``quick_when`` route in each workspace.

    A route's estimate in a workspace is the median (the upper one of an even count) of
    its last ``RECENT_RUNS`` run times (wall clock, so waiting on I/O counts), which a
    stray slow run (the machine busy) does not move, but a run of slow ones does. Worker
    threads and the event loop both note runs (under a lock); the loop reads estimates
    without it.

    Swept so that a node serving many tenants keeps the estimates of the workspaces used
    lately, not of all it has seen: once ``swept_past`` workspaces have estimates (or
    twice what the last sweep kept), those not added to for ``ESTIMATE_IDLE_SECONDS``
    are dropped.
    """

    def __init__(self, *, swept_past: int = ESTIMATES_SWEPT_PAST) -> None:
        self._runs: dict[EstimateKey, RecentRuns] = {}
        self._lock = threading.Lock()
        self._sweep = Sweeper(swept_past)

    def recent(self, route: ApiRoute, ws: Workspace) -> RecentRuns | None:
        """``route``'s recent runs in ``ws``, if it has any."""
        return self._runs.get((route.operation_id, ws.organization_id, ws.environment))

    def note(self, route: ApiRoute, ws: Workspace, began: float, ended: float) -> None:
        """Record a run of ``route`` in ``ws`` that began and ended at those times."""
        key = (route.operation_id, ws.organization_id, ws.environment)
        with self._lock:
            runs = self._runs.get(key)
            if runs is not None:
                runs.note(began, ended)
                return
            runs = RecentRuns()
            runs.note(began, ended)  # before the loop (unlocked) can see it
            self._runs[key] = runs
            idle = ended - ESTIMATE_IDLE_SECONDS
            self._runs = self._sweep(self._runs, lambda kept: kept.noted_at > idle)


class Scheduler:
    """Decides where each blocking handler runs, and times the runs that decide it.

    :param inline_budget: seconds a quick route's recent runs in a workspace may take
        (their median) for its calls there to run on the loop; 0: never on the loop.
    :param clock: what run times are read from (``time.perf_counter``); a test passes
        one it moves itself, so that a run takes what it says.
    :param estimates: the run-time table (default: a new one).
    """

    def __init__(
        self,
        inline_budget: float,
        *,
        clock: Callable[[], float] = time.perf_counter,
        estimates: RunEstimates | None = None,
    ) -> None:
        self.inline_budget = inline_budget
        self.clock = clock
        self.estimates = RunEstimates() if estimates is None else estimates

    def quick(self, route: ApiRoute, call: Call) -> bool:
        """Whether to run a blocking handler on the loop: its route allows it
        (``quick_when``), its recent runs in this workspace took at most
        ``inline_budget``, and ``quick_when(call)`` holds (a search: the index is
        current).

        The first run in a workspace goes to a thread (no estimate yet); a handler that
        turns slow blocks the loop for a few runs (until they are most of the recent
        ones), then runs on threads until its runs are quick again.
        """
        budget = self.inline_budget
        if route.quick_when is None or budget <= 0:
            return False
        recent = self.estimates.recent(route, call.workspace)
        return recent is not None and recent.median <= budget and route.quick_when(call)

    def run_timed(self, route: ApiRoute, call: Call) -> Any:
        """``route.handler(call)``, noting how long it took when the route may run inline.

        A call whose cancellation fired before it started (queued behind a full pool
        past its deadline, or its client gone) is not started: its answer was sent or
        is not wanted, and work started then could only commit unseen.
        """
        call.cancellation.check()
        if route.quick_when is None:
            return route.handler(call)
        began = self.clock()
        result = route.handler(call)  # an error is not noted: it says nothing of the work
        self.estimates.note(route, call.workspace, began, self.clock())
        return result
