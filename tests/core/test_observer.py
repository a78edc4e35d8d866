"""One observer protocol: the host's counts and the core's metrics are told the same."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from agentcore import AgentCore
from agentcore.observer import Observer, Observers, Unobserved, observer_of, unobserved


class Recording(Unobserved):
    """An observer that keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[object, ...]] = []

    def __call__(self, event: str, count: int) -> None:
        self.told.append((event, count))

    def searched(self, seconds: float, queries: int) -> None:
        self.told.append(("searched", queries))


def test_a_plain_callable_is_told_the_counts_only() -> None:
    counts: list[tuple[str, int]] = []
    observer = observer_of(lambda event, count: counts.append((event, count)))
    observer("index.reload", 2)
    observer.searched(0.1, 3)  # not a count: the callable is not told
    assert counts == [("index.reload", 2)]
    assert observer_of(None) is unobserved
    recording = Recording()
    assert observer_of(recording) is recording and isinstance(recording, Observer)


def test_observers_tell_each_in_turn() -> None:
    first, second = Recording(), Recording()
    both = Observers(first)
    both.add(second)
    both("index.merge", 1)
    both.searched(0.5, 4)
    assert first.told == second.told == [("index.merge", 1), ("searched", 4)]


def test_the_hosts_counts_and_the_metrics_see_the_same_events(tmp_path: Path) -> None:
    counts: dict[str, int] = {}
    with AgentCore.open(
        tmp_path / "a.db",
        observer=lambda event, n: counts.__setitem__(event, counts.get(event, 0) + n),
    ) as core:
        ws = core.workspace("acme")
        ws.knowledge.ingest_text("a.txt", "The turbine blades are stored in Rotterdam.")
        ws.knowledge.search("turbine blades")
        scraped = generate_latest(core.metrics.registry).decode()
    assert counts.get("index.reload", 0) >= 1
    assert f'agentcore_core_events_total{{event="index.reload"}} {counts["index.reload"]:.1f}' in (
        scraped
    )
    assert "agentcore_search_seconds_count 1.0" in scraped
