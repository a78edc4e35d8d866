"""The processes tests start: each reaped with what it started, and none left at the end.

``spawn`` starts a process (a server) in a process group of its own, and ``reap``
stops it with every process of its group (its ingestion workers, uvicorn's worker
processes, multiprocessing's resource tracker), whatever the test did to it before:
a server killed with SIGKILL leaves those behind.

What still escapes is found at the end of the run. The controlling pytest process (not
an xdist worker) puts ``RUN_MARK`` in its environment at the start of the run; xdist
workers, and every process they or their tests start, inherit it. At the end of the
run, after the workers have ended and every fixture has been torn down, a process still
carrying this run's mark was not reaped by the test that started it: conftest kills it
and fails the run, naming its command line and the test running when it was started
(pytest's ``PYTEST_CURRENT_TEST``, inherited with the mark).

PostgreSQL servers get no exception. The session's server (``conftest.postgres_server``,
one per xdist worker, shared by that worker's tests) and a test's own
(``own_postgres.dedicated_postgres``) are stopped by the fixtures that started them,
before the check: one still running is a fixture that did not stop it, and is killed
like any other. A server named by ``AGENTCORE_TEST_POSTGRES_URL`` was not started by
the run and carries no mark. (PostgreSQL's own child processes write their titles over
their environment and cannot be recognised; they end with their postmaster.)

Linux only (``/proc``); elsewhere nothing is checked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RUN_MARK", "Leftover", "kill_leftovers", "mark_run", "reap", "spawn"]


def spawn(argv: Sequence[str], **options: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **options)`` in a process group of its own, so that
    ``reap`` reaches whatever it starts; the caller reaps it."""
    return subprocess.Popen(argv, start_new_session=True, **options)


def reap(process: subprocess.Popen[Any], grace: float = 60.0) -> int:
    """End ``process`` if it still runs (SIGTERM, then SIGKILL after ``grace`` seconds)
    and then every process left in its group (started by ``spawn``); its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
    status = process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # its group outlives it while a member lives
    return status


# not AGENTCORE_*: helpers.cli_env() drops those from a subprocess's environment
RUN_MARK = "PYTEST_AGENTCORE_RUN"
SETTLE_SECONDS = 5.0
"""How long processes already on their way out (signalled, their parent just gone) get to
end before they count as left behind: exiting is slow on a busy machine."""
PROC = Path("/proc")


@dataclass(frozen=True)
class Leftover:
    """A process of this run that outlived it: its id, command line, and the test that
    was running when it (or the process it descends from) was started."""

    pid: int
    command: str
    test: str

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.command}\n    started during: {self.test}"


def mark_run() -> str:
    """Mark this process's environment (inherited by everything it starts); the mark."""
    mark = uuid.uuid4().hex
    os.environ[RUN_MARK] = mark
    return mark


def _environment(pid: int) -> dict[bytes, bytes]:
    """The environment ``pid`` was started with (empty if it is gone, a zombie, or not
    ours to read)."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def _marked(mark: str) -> list[Leftover]:
    """The live processes other than this one that carry ``mark``."""
    found = []
    wanted = mark.encode()
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        environment = _environment(int(entry.name))
        if environment.get(RUN_MARK.encode()) != wanted:
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        test = environment.get(b"PYTEST_CURRENT_TEST", b"(no test: a session fixture?)")
        found.append(Leftover(int(entry.name), command.strip(), test.decode(errors="replace")))
    return found


def kill_leftovers(mark: str) -> list[Leftover]:
    """Kill the processes still carrying ``mark`` once those on their way out have had
    ``SETTLE_SECONDS`` to end; the ones killed."""
    if not PROC.is_dir():
        return []
    give_up = time.monotonic() + SETTLE_SECONDS
    while (leftovers := _marked(mark)) and time.monotonic() < give_up:
        time.sleep(0.1)
    for leftover in leftovers:
        try:
            os.kill(leftover.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        with contextlib.suppress(ChildProcessError):  # a child of ours (no xdist): reap it
            os.waitpid(leftover.pid, 0)
    return leftovers
