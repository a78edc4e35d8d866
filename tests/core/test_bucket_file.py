"""Token buckets in a file beside a SQLite database (``rate_limit_backend = "host"``):
one limit per key for every process and thread that maps it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers import json_of_processes

from agentcore import AgentCore
from agentcore._bucket_file import PROBES, BucketFile, _hash, bucket_file_for
from agentcore._rate_limits import RateLimiter
from agentcore.config import Settings


@pytest.fixture
def buckets(tmp_path: Path) -> BucketFile:
    made = BucketFile(tmp_path / "a.db.rate-limits")
    yield made
    made.close()


def test_a_bucket_starts_full_spends_and_refills(buckets: BucketFile) -> None:
    takes = [buckets.take("key_1", rate=4, burst=4, now=100.0) for _ in range(5)]
    assert takes == [(True, 3.0), (True, 2.0), (True, 1.0), (True, 0.0), (False, 0.0)]
    # a quarter of a second refills one token at 4/s: exactly one more take
    assert buckets.take("key_1", rate=4, burst=4, now=100.25) == (True, 0.0)
    assert buckets.take("key_1", rate=4, burst=4, now=100.25) == (False, 0.0)
    # a long pause refills only up to the burst
    assert buckets.take("key_1", rate=4, burst=4, now=1_000.0) == (True, 3.0)


def test_keys_have_buckets_of_their_own(buckets: BucketFile) -> None:
    assert buckets.take("key_1", rate=1, burst=1, now=0.0)[0]
    assert not buckets.take("key_1", rate=1, burst=1, now=0.0)[0]
    assert buckets.take("key_2", rate=1, burst=1, now=0.0)[0]


def test_a_clock_that_goes_back_refills_nothing(buckets: BucketFile) -> None:
    assert buckets.take("key_1", rate=1, burst=2, now=50.0) == (True, 1.0)
    # another process whose clock is 10 s behind: no negative refill, no free token
    assert buckets.take("key_1", rate=1, burst=2, now=40.0) == (True, 0.0)
    assert buckets.take("key_1", rate=1, burst=2, now=40.0) == (False, 0.0)
    # and its clock does not count as the last refill: half a second after the
    # latest take refills half a token, not the 10.5 s since the lagging one
    assert buckets.take("key_1", rate=1, burst=2, now=50.5) == (False, 0.5)


def test_the_buckets_outlive_the_process_that_wrote_them(tmp_path: Path) -> None:
    path = tmp_path / "a.db.rate-limits"
    first = BucketFile(path)
    assert first.take("key_1", rate=1, burst=2, now=10.0) == (True, 1.0)
    first.close()
    again = BucketFile(path)
    try:
        assert again.take("key_1", rate=1, burst=2, now=10.0) == (True, 0.0)
    finally:
        again.close()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "content", [b"", b"not a bucket file", b"\0" * 5_000_000], ids=["empty", "text", "zeros"]
)
def test_a_file_that_is_not_a_bucket_file_is_laid_out_again(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "a.db.rate-limits"
    path.write_bytes(content)
    buckets = BucketFile(path)
    try:
        assert buckets.take("key_1", rate=1, burst=3, now=0.0) == (True, 2.0)
    finally:
        buckets.close()
    assert path.read_bytes().startswith(b"agentcore token buckets v1 65536\n")


def test_a_table_of_another_size_is_laid_out_again(tmp_path: Path) -> None:
    path = tmp_path / "a.db.rate-limits"
    small = BucketFile(path, slots=64)
    small.take("key_1", rate=1, burst=1, now=0.0)
    small.close()
    default = BucketFile(path)
    try:
        assert default.take("key_1", rate=1, burst=1, now=0.0) == (True, 0.0)  # a new bucket
    finally:
        default.close()


def test_slots_must_be_a_power_of_two(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="power of two"):
        BucketFile(tmp_path / "x", slots=100)


def _same_window(slots: int, count: int) -> list[str]:
    """``count`` keys whose buckets share one home slot of a table of ``slots``."""
    found: dict[int, list[str]] = {}
    n = 0
    while True:
        key = f"key_{n}"
        home = found.setdefault(_hash(key) & (slots - 1), [])
        home.append(key)
        if len(home) == count:
            return home
        n += 1


def test_a_full_window_gives_up_the_bucket_nearest_to_full(tmp_path: Path) -> None:
    buckets = BucketFile(tmp_path / "b", slots=64)
    try:
        keys = _same_window(64, PROBES + 1)
        # every bucket of the window empty and refilling; the first one soonest full
        for n, key in enumerate(keys[:PROBES]):
            rate = 2.0 if n == 0 else 1.0
            assert buckets.take(key, rate=rate, burst=1, now=0.0) == (True, 0.0)
        # one more key: the first key's bucket is given up for it, every other key is
        # still limited, and the new key's bucket is its own
        assert buckets.take(keys[PROBES], rate=1, burst=1, now=0.1) == (True, 0.0)
        assert not any(buckets.take(key, rate=1, burst=1, now=0.1)[0] for key in keys[1:])
        # the first key starts again with a full bucket (giving up the next nearest)
        assert buckets.take(keys[0], rate=1, burst=1, now=0.1) == (True, 0.0)
    finally:
        buckets.close()


def test_a_bucket_full_again_leaves_its_slot_to_another_key(tmp_path: Path) -> None:
    buckets = BucketFile(tmp_path / "b", slots=64)
    try:
        keys = _same_window(64, PROBES + 1)
        for key in keys[:PROBES]:
            buckets.take(key, rate=1, burst=1, now=0.0)
        # a second later every bucket is full again: the new key takes a slot and the
        # old keys' buckets (reused or not) still start full
        assert buckets.take(keys[PROBES], rate=1, burst=1, now=1.0) == (True, 0.0)
        assert all(buckets.take(key, rate=1, burst=1, now=1.0)[0] for key in keys[:PROBES])
    finally:
        buckets.close()


def test_threads_taking_at_once_never_exceed_the_burst(buckets: BucketFile) -> None:
    allowed: list[bool] = []

    def take() -> None:
        got = [buckets.take("key_1", rate=0.001, burst=50, now=5.0)[0] for _ in range(40)]
        allowed.extend(got)  # list.extend is atomic

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(allowed) == 50


TAKE_SCRIPT = """
import json, sys
from pathlib import Path
from agentcore._bucket_file import BucketFile

buckets = BucketFile(Path(sys.argv[1]))
print(json.dumps([buckets.take("key_1", rate=20, burst=20, now=500.0)[0] for _ in range(200)]))
buckets.close()
"""


@pytest.mark.slow
def test_processes_taking_at_once_never_exceed_the_burst(tmp_path: Path) -> None:
    results = json_of_processes(TAKE_SCRIPT, str(tmp_path / "a.db.rate-limits"), count=3)
    # 600 takes at one instant, from three processes that created the file together
    assert sum(sum(r) for r in results) == 20


def test_the_file_is_beside_a_sqlite_file_only() -> None:
    assert bucket_file_for("/data/a.db") == Path("/data/a.db.rate-limits")
    assert bucket_file_for(":memory:") is None
    assert bucket_file_for(None) is None


def test_the_host_backend_needs_a_file() -> None:
    with pytest.raises(ValueError, match="beside a SQLite"):
        RateLimiter(Settings(rate_limit_backend="host"))


def test_two_limiters_on_one_file_share_a_limit(tmp_path: Path) -> None:
    settings = Settings(rate_limit_backend="host", rate_limit_test=2)
    path = tmp_path / "a.db.rate-limits"
    one = RateLimiter(settings, bucket_file=path, clock=lambda: 7.0)
    two = RateLimiter(settings, bucket_file=path, clock=lambda: 7.0)
    try:
        assert one.backend == two.backend == "host"
        assert [(one, two)[n % 2].check("key_1", "test").allowed for n in range(3)] == [
            True,
            True,
            False,
        ]
        refused = one.check("key_1", "test")
        assert refused.retry_after == pytest.approx(0.5) and refused.remaining == 0
    finally:
        one.close()
        two.close()


def test_workers_of_a_sqlite_file_share_a_file_and_of_postgres_the_store(
    tmp_path: Path,
) -> None:
    class Shared:
        shared_by_nodes = True

    local = RateLimiter(Settings(), bucket_file=tmp_path / "a.db.rate-limits")
    assert local.backend == "local" and local.backend_for_processes() == "host"
    assert not (tmp_path / "a.db.rate-limits").exists()  # one process: no file
    assert RateLimiter(Settings()).backend_for_processes() == "store"  # no file possible
    on_postgres = RateLimiter(Settings(), store=Shared())  # type: ignore[arg-type]
    assert on_postgres.backend == on_postgres.backend_for_processes() == "store"


def test_a_core_on_a_sqlite_file_keeps_host_buckets_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with AgentCore.open(str(db), start_workers=False, rate_limit_backend="host") as core:
        assert core.rate_limiter.backend == "host"
        assert (tmp_path / "a.db.rate-limits").exists()
    with pytest.raises(ValueError, match="beside a SQLite"):
        AgentCore.open(":memory:", start_workers=False, rate_limit_backend="host")


def test_a_closed_file_refuses_takes_and_closes_once(tmp_path: Path) -> None:
    buckets = BucketFile(tmp_path / "a.db.rate-limits")
    buckets.close()
    buckets.close()
    with pytest.raises(ValueError):
        buckets.take("key_1", rate=1, burst=1, now=0.0)
