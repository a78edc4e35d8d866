"""The runtime: supervised loops resume after failures, and stop() leaves no thread behind."""

from __future__ import annotations

import threading
import time

import pytest

from agentcore.runtime import Runtime


def wait_until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
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
    assert gaps[1] > gaps[0] * 1.5  # 0.1 s, 0.2 s, 0.4 s ...
    assert runtime.health()[0].failures >= 4


def test_stop_leaves_no_thread_and_is_bounded() -> None:
    runtime = Runtime()
    release = threading.Event()
    runtime.loop("sleepy", lambda: 0.05)
    pool = runtime.executor("test-pool", 2)
    future = pool().submit(release.wait, 0.2)
    runtime.start()
    before = time.monotonic()
    runtime.stop(1.0)
    assert time.monotonic() - before < 1.5
    assert future.result(timeout=1.0) is False
    names = {t.name for t in threading.enumerate()}
    assert "sleepy" not in names
    assert not any(name.startswith("test-pool") for name in names)


def test_wake_runs_the_next_pass_at_once() -> None:
    runtime = Runtime()
    passes: list[float] = []
    loop = runtime.loop("slow", lambda: (passes.append(time.monotonic()), 60.0)[1])
    runtime.start()
    try:
        wait_until(lambda: len(passes) == 1)
        loop.wake()
        wait_until(lambda: len(passes) == 2, timeout=1.0)
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
