"""Real ``agentcore serve`` processes on one store, for the multi-node tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
from helpers import cli_env, start_serve
from processes import reap

WEBHOOK_TIMEOUT = 2  # seconds per attempt; a lease is this plus 10 s


class Node:
    """One ``agentcore serve`` process on the shared store (``helpers.start_serve``)."""

    def __init__(self, url: str, log: Path, *, workers: int = 1, **env: str) -> None:
        environ = cli_env()
        environ.update(
            AGENTCORE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
            AGENTCORE_WEBHOOK_TIMEOUT=str(WEBHOOK_TIMEOUT),
            AGENTCORE_RATE_LIMIT_TEST="1000000",
        )
        environ.update(env)
        self.log = log
        self.process, self.base = start_serve(
            url,
            env=environ,
            extra=["--log-level", "warning", "--workers", str(workers)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.port = int(self.base.rsplit(":", 1)[1])

    def request(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.base + path, headers=headers, timeout=30, **kwargs)

    def stop(self) -> int:
        """SIGTERM, wait (then SIGKILL), and end what it started (``processes.reap``);
        the exit status."""
        return reap(self.process)
