"""A bystander's view of a server under load: ``GET /v1/auth/verify`` every 50 ms.

Shared by ``tests/http/test_ingest_safety.py`` and ``benchmarks/ingest_safety.py``.
"""

from __future__ import annotations

import statistics
import threading
import time

import httpx


class VerifyProbe:
    """Calls ``GET /v1/auth/verify`` with ``key`` every 50 ms on a thread while in use;
    ``latencies`` in milliseconds, ``answered`` when each 200 call was sent and answered
    (``time.monotonic()``), ``failures`` the non-200 answers and errors."""

    def __init__(self, url: str, key: str) -> None:
        self._client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120
        )
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self.answered: list[tuple[float, float]] = []
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent, began = time.monotonic(), time.perf_counter()
            try:
                response = self._client.get("/v1/auth/verify")
                if response.status_code == 200:
                    self.answered.append((sent, time.monotonic()))
                else:
                    self.failures.append(str(response.status_code))
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
            self.latencies.append((time.perf_counter() - began) * 1000)
            self._stop.wait(0.05)

    def __enter__(self) -> VerifyProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(150)
        self._client.close()

    def percentile(self, share: float) -> float:
        """The latency (ms) below which ``share`` of the calls fell (nearest rank)."""
        ordered = sorted(self.latencies) or [float("nan")]
        return ordered[min(len(ordered) - 1, int(len(ordered) * share))]

    def summary(self) -> dict[str, float]:
        """p50, p99 and max latency (ms), the number of calls and of failures."""
        return {
            "verify_p50_ms": statistics.median(self.latencies or [float("nan")]),
            "verify_p99_ms": self.percentile(0.99),
            "verify_max_ms": self.percentile(1.0),
            "verify_n": len(self.latencies),
            "verify_errors": len(self.failures),
        }
