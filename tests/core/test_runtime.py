"""The runtime: supervised loops resume after failures, and stop() leaves no thread behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agentcore._background import BACKOFF_FIRST, Runtime
from agentcore.errors import ServiceUnavailable


def wait_until(condition, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition`` until it holds (``timeout`` only guards a hang)."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_a_failing_loop_is_logged_and_resumes(caplog: pytest.LogCaptureFixture) -> None:
    runtime = Runtime()
    passes: list[int] = []

    def step() -> float:
        passes.append(1)
        if len(passes) <= 2:
            raise RuntimeError("database is restarting")
        return 0.01

    loop = runtime.loop("test-loop", step)
    runtime.start()
    try:
        wait_until(lambda: len(passes) >= 5)
        health = {h.name: h for h in runtime.health()}["test-loop"]
        assert health.running
        assert health.failures == 0  # the last passes succeeded
        assert health.last_error == "RuntimeError: database is restarting"
        assert loop.health().last_error_at is not None
    finally:
        runtime.stop(2.0)
    assert "background loop test-loop failed" in caplog.text
    assert not runtime.health()[0].running


def test_consecutive_failures_back_off() -> None:
    runtime = Runtime()
    times: list[float] = []

    def step() -> None:
        times.append(time.monotonic())
        raise ValueError("always")

    runtime.loop("failing", step)
    runtime.start()
    try:
        wait_until(lambda: len(times) >= 4)
    finally:
        runtime.stop(2.0)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # 0.1 s, 0.2 s, 0.4 s ...: at least that (a busy machine only adds to each wait)
    for n, gap in enumerate(gaps[:3]):
        assert gap >= 0.95 * BACKOFF_FIRST * 2**n, gaps
    assert runtime.health()[0].failures >= 4


def test_stop_leaves_no_thread() -> None:
    runtime = Runtime()
    release = threading.Event()
    runtime.loop("sleepy", lambda: 3600.0)  # stop() wakes it from its hour's sleep
    pool = runtime.executor("test-pool", 2)
    future = pool().submit(release.wait, 0.2)
    runtime.start()
    runtime.stop(60)  # the running task ends within the grace period
    assert future.result(timeout=0) is False
    names = {t.name for t in threading.enumerate()}
    assert "sleepy" not in names
    assert not any(name.startswith("test-pool") for name in names)


def test_stop_is_bounded_by_its_grace_period() -> None:
    runtime = Runtime()
    release = threading.Event()
    pool = runtime.executor("test-pool", 2)
    held = pool().submit(release.wait, 600)  # runs until released
    runtime.start()
    runtime.stop(0.2)
    assert not held.done()  # stop() returned without waiting the task out
    release.set()
    assert held.result(timeout=60) is True
    wait_until(lambda: not any(t.name.startswith("test-pool") for t in threading.enumerate()))


def test_wake_runs_the_next_pass_at_once() -> None:
    runtime = Runtime()
    passes: list[float] = []
    # an hour between passes: only the wake runs the second within the wait
    loop = runtime.loop("slow", lambda: (passes.append(time.monotonic()), 3600.0)[1])
    runtime.start()
    try:
        wait_until(lambda: len(passes) == 1)
        loop.wake()
        wait_until(lambda: len(passes) == 2)
    finally:
        runtime.stop(1.0)


def test_components_start_in_order_and_stop_in_reverse() -> None:
    events: list[str] = []

    class Part:
        def __init__(self, name: str) -> None:
            self.name = name

        def start(self) -> None:
            events.append(f"start {self.name}")

        def stop(self, timeout: float) -> None:
            assert timeout > 0
            events.append(f"stop {self.name}")

    runtime = Runtime()
    runtime.own(Part("a"))
    runtime.own(Part("b"))
    runtime.start()
    runtime.start()  # idempotent
    runtime.stop(1.0)
    assert events == ["start a", "start b", "stop b", "stop a"]


def test_two_runtimes_share_nothing() -> None:
    one, two = Runtime(), Runtime()
    one.loop("one-loop", lambda: 0.05)
    one.start()
    try:
        assert [h.name for h in two.health()] == []
        assert one.health()[0].running
    finally:
        one.stop(1.0)


def test_a_restart_after_a_stop_the_pass_outlived_runs_the_loop_again() -> None:
    """A pass longer than the grace period: the restarted loop runs again, after it."""
    runtime = Runtime()
    release = threading.Event()
    running = threading.Lock()  # held by a pass: two at once would fail to take it
    passes: list[str] = []

    def step() -> float:
        if not running.acquire(blocking=False):
            passes.append("overlap")
            return 0.01
        try:
            passes.append("pass")
            if len(passes) == 1:
                release.wait(600)  # the first pass outlives stop()'s grace period
        finally:
            running.release()
        return 0.01

    loop = runtime.loop("slow-pass", step)
    runtime.start()
    try:
        wait_until(lambda: len(passes) == 1)
        runtime.stop(0.05)
        assert loop.stopping
        runtime.start()  # while the first pass still runs
        assert loop.health().running
        time.sleep(0.1)
        assert passes == ["pass"]  # the new run waits for the old pass to end
        release.set()
        wait_until(lambda: len(passes) >= 4)
        assert "overlap" not in passes
        assert loop.health().running
        assert [t.name for t in threading.enumerate()].count("slow-pass") == 1
    finally:
        release.set()
        runtime.stop(2.0)


def test_a_stopped_run_stays_stopping_after_a_restart() -> None:
    """A pass of the old run that checks ``stopping`` still ends early after a restart."""
    runtime = Runtime()
    seen: list[bool] = []
    first = threading.Event()
    restarted = threading.Event()
    loop: list[object] = []

    def step() -> float:
        if not seen:
            seen.append(False)
            first.set()
            restarted.wait(600)
            seen.append(loop[0].stopping)  # type: ignore[attr-defined]
        return 0.01

    loop.append(runtime.loop("checks-stopping", step))
    runtime.start()
    try:
        assert first.wait(60)
        runtime.stop(0.01)
        runtime.start()
        restarted.set()
        wait_until(lambda: len(seen) == 2)
        assert seen[1] is True
    finally:
        restarted.set()
        runtime.stop(2.0)


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
def test_a_pass_ending_the_process_is_recorded_and_logged(
    exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime()
    loop = runtime.loop("ends", lambda: (_ for _ in ()).throw(exc))
    hook, threading.excepthook = threading.excepthook, lambda args: None  # re-raised: quiet
    try:
        with caplog.at_level("ERROR", logger="agentcore._background"):
            runtime.start()
            wait_until(lambda: not loop.health().running or loop.failures)
            wait_until(lambda: not loop.health().running)
    finally:
        threading.excepthook = hook
        runtime.stop(1.0)
    health = loop.health()
    assert health.failures == 1
    assert health.last_error_type == type(exc).__name__
    assert health.last_error_at is not None
    assert f"background loop ends ended by {type(exc).__name__}" in caplog.text


def test_a_pool_refuses_work_after_stop_until_the_next_start() -> None:
    runtime = Runtime()
    pool = runtime.executor("refusing", 1)
    assert pool.submit(lambda: 1).result(timeout=60) == 1  # before start(): threads start
    runtime.start()
    runtime.stop(1.0)
    with pytest.raises(ServiceUnavailable) as refused:
        pool.submit(lambda: 2)
    assert refused.value.code == "server_shutting_down"
    assert not any(t.name.startswith("refusing") for t in threading.enumerate())
    runtime.start()  # a restart takes work again
    try:
        assert pool.submit(lambda: 3).result(timeout=60) == 3
    finally:
        runtime.stop(1.0)


def test_pools_close_last_declared_first() -> None:
    """Work on a later pool (the HTTP handlers) may use the earlier pools while it ends."""
    runtime = Runtime()
    inner = runtime.executor("inner", 1)
    outer = runtime.executor("outer", 1)
    started = threading.Event()
    answers: list[object] = []

    def handler() -> None:
        started.set()
        time.sleep(0.2)  # still running when stop() begins
        try:
            answers.append(inner.submit(lambda: "inner ran").result(timeout=60))
        except ServiceUnavailable as exc:
            answers.append(exc)

    runtime.start()
    outer.submit(handler)
    assert started.wait(60)
    runtime.stop(60)
    assert answers == ["inner ran"]
    assert not any(t.name.startswith(("inner", "outer")) for t in threading.enumerate())


def test_work_offered_to_a_closed_pool_runs_on_the_calling_thread(tmp_path: Path) -> None:
    """A search's scan offers blocks to the index's helper pool and does the rest itself
    when the pool refuses: a closed pool's refusal (a handler outliving the HTTP pool's
    grace period at shutdown) is such a refusal, not an error."""
    from agentcore import AgentCore
    from agentcore.knowledge.vectors import _kernels as kernels

    core = AgentCore.open(tmp_path / "a.db", entry_points=False)
    try:
        helpers = core.runtime.executor("agentcore-index", kernels.default_helpers() or 1)
        core.start()
        core.stop()
        assert kernels.run_blocks(4, lambda i, state: i * i, helpers) == [0, 1, 4, 9]
    finally:
        core.close()
