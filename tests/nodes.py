"""Real ``agentcore serve`` processes on one store, for the multi-node tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from conftest import free_port
from helpers import cli_env

WEBHOOK_TIMEOUT = 2  # seconds per attempt; a lease is this plus 10 s


class Node:
    """One ``agentcore serve`` process on the shared store."""

    def __init__(self, url: str, log: Path, *, workers: int = 1, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        environ = cli_env()
        environ.update(
            AGENTCORE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
            AGENTCORE_WEBHOOK_TIMEOUT=str(WEBHOOK_TIMEOUT),
            AGENTCORE_RATE_LIMIT_TEST="1000000",
        )
        environ.update(env)
        argv = [sys.executable, "-m", "agentcore.cli", "--db", url, "serve"]
        argv += ["--port", str(self.port), "--log-level", "warning", "--workers", str(workers)]
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"node exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.base + "/v1/openapi.json", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"node did not start:\n{self.log.read_text()[-3000:]}")

    def request(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.base + path, headers=headers, timeout=30, **kwargs)

    def stop(self) -> int:
        """SIGTERM and wait; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=30)
