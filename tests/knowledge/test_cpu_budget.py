"""``CpuBudget``: a thread's work stopped once it used its CPU seconds, and only then."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from agentcore.knowledge.ingest import BudgetSpent, CpuBudget, _cpu_budget
from agentcore.knowledge.ingest._cpu_budget import on_stuck

# A stop raised while the thread runs a callback whose errors Python ignores (a weakref
# callback during garbage collection) is reported as unraisable, and raised again at the
# next poll: the work still stops, which is what these tests check.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def spin(seconds: float) -> None:
    """Use about ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_part_past_its_budget_is_stopped_and_named() -> None:
    budget = CpuBudget(60.0)
    with pytest.raises(BudgetSpent) as caught, budget, budget.part(0.2, "page"):
        while True:  # never returns by itself
            pass
    assert budget.reason(caught.value) == "page"


def test_the_whole_budget_counts_across_parts() -> None:
    budget = CpuBudget(0.5)
    parts = 0
    with pytest.raises(BudgetSpent) as caught, budget:
        for _ in range(1_000):
            with budget.part(10.0, "page"):
                spin(0.05)
            parts += 1
    assert budget.reason(caught.value) == "document"
    assert 3 <= parts < 1_000  # several parts fitted, and it stopped


def test_except_exception_cannot_swallow_it() -> None:
    swallowed = 0

    def careless_parser() -> None:
        nonlocal swallowed
        while True:
            try:
                spin(0.01)
            except Exception:  # what a parser recovering from a bad object does
                swallowed += 1

    with pytest.raises(BudgetSpent), CpuBudget(0.2):
        careless_parser()
    assert swallowed == 0


def test_a_stop_lost_once_is_raised_again() -> None:
    lost = 0
    with pytest.raises(BudgetSpent), CpuBudget(0.2):
        while True:
            try:
                spin(0.01)
            except BaseException:  # as a callback whose errors Python ignores loses it
                if lost:
                    raise
                lost += 1
    assert lost == 1


def test_work_within_budget_is_never_interrupted_later() -> None:
    budget = CpuBudget(0.3)
    with budget:
        spin(0.1)
    spin(0.5)  # after the block, past the budget: nothing is raised here
    time.sleep(0.2)
    assert budget.used > 0.5


def test_where_no_thread_clock_can_be_watched_check_still_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(time, "pthread_getcpuclockid")  # as on Windows
    budget = CpuBudget(0.05)
    with budget:
        spin(0.2)  # no watcher: nothing interrupts it
        with pytest.raises(BudgetSpent) as caught:
            budget.check()
    assert budget.reason(caught.value) == "document"


def test_sleeping_costs_no_cpu() -> None:
    with CpuBudget(0.2) as budget:
        time.sleep(0.5)  # wall time passes, CPU time does not
        budget.check()


def test_each_thread_has_its_own_clock() -> None:
    # another thread burning CPU does not spend this thread's budget
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            pass

    other = threading.Thread(target=burn)
    other.start()
    try:
        with CpuBudget(0.3) as budget:
            time.sleep(0.6)
            budget.check()
    finally:
        stop.set()
        other.join()


def test_a_thread_stuck_in_c_past_its_budget_calls_the_stuck_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pbkdf2 runs in C: BudgetSpent cannot reach the thread until it returns
    monkeypatch.setattr(_cpu_budget, "STUCK_SECONDS", 0.2)
    called: list[tuple[str, float]] = []
    budget = CpuBudget(0.1, name="document")
    on_stuck(lambda name: called.append((name, budget.used)))
    try:
        with pytest.raises(BudgetSpent), budget:
            while not called:  # each call about a second of CPU, all in C
                hashlib.pbkdf2_hmac("sha256", b"x", b"salt", 2_000_000)
    finally:
        on_stuck(None)
    assert [name for name, _ in called] == ["document"]
    assert called[0][1] >= 0.1 + 0.2  # its budget, then STUCK_SECONDS more


def test_a_thread_that_leaves_when_stopped_is_never_stuck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cpu_budget, "STUCK_SECONDS", 0.2)
    called: list[str] = []
    on_stuck(called.append)
    try:
        with pytest.raises(BudgetSpent), CpuBudget(0.1):
            spin(5.0)  # Python: stopped within a poll of its budget
        spin(0.5)
    finally:
        on_stuck(None)
    assert called == []
