"""Crash safety: SIGKILL a serving process mid-delivery, restart it, lose nothing.

1,000 events are committed (with their deliveries) by this process, whose core runs no
worker; then ``agentcore serve`` on the same file delivers them to a receiver here
that answers in ~20 ms. Once some but not all have arrived the server is SIGKILLed and
started again; every event must then arrive at least once (duplicates are allowed:
deliveries leased by the killed process are re-sent when their lease lapses).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers import cli_env, delivery_counts, start_serve
from processes import reap
from webhook_receiver import Receiver, Reply

from agentcore import AgentCore

EVENTS = 1_000
pytestmark = pytest.mark.slow


def _serve(db: Path, log: Path) -> subprocess.Popen[str]:
    env = cli_env()
    env["AGENTCORE_WEBHOOK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    env["AGENTCORE_WEBHOOK_TIMEOUT"] = "2"
    process, _ = start_serve(db, env=env, stdout=log, stderr=subprocess.STDOUT)
    return process


def test_sigkill_mid_delivery_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    log = tmp_path / "server.log"
    with Receiver(default=Reply(delay=0.02)) as receiver:
        with AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8") as core:
            ws = core.workspace("acme", "test")
            ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
            published = {ws.publish("agent.action", {"n": n}).id for n in range(EVENTS)}
            assert delivery_counts(core.store) == {"pending": EVENTS}
        assert receiver.count() == 0  # committed, not sent: no worker ran here

        first = _serve(db, log)
        try:
            assert receiver.wait_for(50), (
                f"server delivered {receiver.count()} in 60 s; log:\n{log.read_text()[-2000:]}"
            )
            first.kill()  # SIGKILL: no shutdown, leases stay held
            first.wait(timeout=10)
        finally:
            reap(first)
        before = receiver.distinct_ids()
        assert 0 < len(before) < EVENTS, "the kill must land mid-delivery"

        second = _serve(db, log)
        try:
            complete = receiver.wait_for_ids(EVENTS)
            got = receiver.distinct_ids()
            assert complete, f"{len(got)}/{EVENTS} delivered after restart"
            assert got == published
            assert receiver.count() >= EVENTS  # at least once; duplicates allowed
            deadline = time.monotonic() + 60  # the last attempts get recorded
            with AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8") as reader:
                while delivery_counts(reader.store) != {"succeeded": EVENTS}:
                    assert time.monotonic() < deadline, delivery_counts(reader.store)
                    time.sleep(0.1)
        finally:
            reap(second)
    assert os.path.exists(db)
