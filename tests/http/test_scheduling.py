"""``scheduling``: a blocking handler runs on the event loop once its recent runs in the
caller's workspace say it is quick, and the estimates of idle workspaces are swept.

The scheduler as a unit, with a clock the test moves (no timing in the assertions);
``test_request_path.py`` checks the same decisions over a real server.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import BaseModel
from starlette.datastructures import Headers, QueryParams

from agentcore import Cancellation, Cancelled, Workspace, WorkspaceServices
from agentcore_starlette.routing import ApiRoute, Call
from agentcore_starlette.scheduling import (
    ESTIMATE_IDLE_SECONDS,
    RECENT_RUNS,
    RunEstimates,
    Scheduler,
)

BUDGET = 0.005


class Clock:
    """Read by the scheduler; each handler run moves it on by ``step`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.step = BUDGET / 10

    def __call__(self) -> float:
        return self.now


class Answer(BaseModel):
    ok: bool = True


def route(clock: Clock, *, quick_when: Any = lambda call: True) -> ApiRoute:
    def handler(call: Call) -> Answer:
        clock.now += clock.step
        return Answer()

    return ApiRoute(
        method="POST",
        path="/work",
        handler=handler,
        response=Answer,
        summary="Work",
        scope="read",
        tag="work",
        quick_when=quick_when,
    )


def call_in(organization: str, cancellation: Cancellation | None = None) -> Call:
    workspace = Workspace(
        organization_id=organization,
        organization=organization,
        environment="test",
        scopes=frozenset({"read"}),
    )
    return Call(
        cast(WorkspaceServices, workspace),  # the scheduler reads only whose it is
        {},
        QueryParams(),
        Headers(),
        cancellation=cancellation or Cancellation(),
    )


def test_a_quick_route_runs_inline_after_its_first_run_in_a_workspace() -> None:
    clock = Clock()
    scheduler, work = Scheduler(BUDGET, clock=clock), route(clock)
    acme, globex = call_in("acme"), call_in("globex")
    assert not scheduler.quick(work, acme)  # no estimate yet: a thread
    scheduler.run_timed(work, acme)
    assert scheduler.quick(work, acme)
    assert not scheduler.quick(work, globex)  # each workspace has its own estimate
    assert not scheduler.quick(route(clock, quick_when=lambda call: False), acme)
    assert not Scheduler(0, clock=clock).quick(work, acme)  # a budget of 0: never inline


def test_the_median_of_the_recent_runs_decides() -> None:
    clock = Clock()
    scheduler, work, acme = Scheduler(BUDGET, clock=clock), route(clock), call_in("acme")
    for _ in range(RECENT_RUNS):
        scheduler.run_timed(work, acme)
    clock.step = BUDGET * 10  # a stray slow run does not move the median; most of them do
    places = []
    for _ in range(RECENT_RUNS):
        scheduler.run_timed(work, acme)
        places.append(scheduler.quick(work, acme))
    slow_inline = RECENT_RUNS // 2
    assert places == [True] * slow_inline + [False] * (RECENT_RUNS - slow_inline)


def test_errors_and_cancelled_calls_are_not_noted() -> None:
    clock = Clock()
    scheduler, acme = Scheduler(BUDGET, clock=clock), call_in("acme")

    def failing(call: Call) -> Answer:
        raise ValueError("no")

    broken = ApiRoute(
        method="POST",
        path="/broken",
        handler=failing,
        response=Answer,
        summary="Broken",
        scope="read",
        tag="work",
        quick_when=lambda call: True,
    )
    with pytest.raises(ValueError):
        scheduler.run_timed(broken, acme)
    assert scheduler.estimates.recent(broken, acme.workspace) is None
    stopped = Cancellation()
    stopped.cancel("client disconnected")
    work = route(clock)
    with pytest.raises(Cancelled):  # never started: its answer is not wanted
        scheduler.run_timed(work, call_in("acme", stopped))
    assert clock.now == 0.0 and scheduler.estimates.recent(work, acme.workspace) is None


def test_idle_workspaces_estimates_are_swept_when_the_table_grows() -> None:
    # a node serving many tenants keeps the estimates of workspaces used lately only
    estimates = RunEstimates(swept_past=2)  # sweep once two workspaces have estimates
    work = route(Clock())
    acme, globex = (call_in(name).workspace for name in ("acme", "globex"))
    estimates.note(work, acme, 0.0, 0.0)
    estimates.note(work, acme, 1.0, 1.0)
    # globex's first estimate makes two: acme's, idle for the whole interval, goes
    idle_since = 1.0 + ESTIMATE_IDLE_SECONDS
    estimates.note(work, globex, idle_since, idle_since)
    assert estimates.recent(work, acme) is None
    assert estimates.recent(work, globex) is not None
    # acme's new estimate makes two again: globex's, noted just now, stays
    estimates.note(work, acme, idle_since + 1, idle_since + 1)
    assert estimates.recent(work, acme) is not None
    assert estimates.recent(work, globex) is not None
