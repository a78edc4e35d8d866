"""The first upload after a core starts, with an ingestion worker booted at the start
(``ingest_prestart = true``, the default) and without (``false``: the first job starts
its worker, as every core did before).

Each figure comes from a fresh child process (this script with ``--child``): it opens a
core on a new SQLite file in a temporary directory, calls ``core.start()`` (what
``agentcore serve`` does), waits ``--idle`` seconds (a server is seldom sent a file in the
second it starts), then times ``ws.knowledge.ingest_file(pdf, wait=True)`` for a one-page
PDF (fpdf2, about 2 KB of text, so the figure is the path, not the parsing), then
``--later`` more uploads of other one-page PDFs (their median is the "later" figure).
The two settings alternate, ``--runs`` children each; the table gives medians and each
run's first upload.

Run: ``python benchmarks/first_upload.py [--runs 7] [--idle 2] [--later 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def pdf(seed: int) -> bytes:
    """A one-page PDF of about 2 KB of text."""
    from fpdf import FPDF

    page = FPDF()
    page.add_page()
    page.set_font("Helvetica", size=11)
    page.multi_cell(0, 6, f"Policy {seed}. The warranty lasts {seed % 5 + 2} years. " * 30)
    return bytes(page.output())


def child(prestart: bool, idle: float, later: int) -> dict[str, Any]:
    from agentcore import AgentCore

    with tempfile.TemporaryDirectory() as folder:
        core = AgentCore.open(os.path.join(folder, "upload.db"), ingest_prestart=prestart)
        try:
            core.start()
            time.sleep(idle)
            ws = core.workspace("bench", "test")
            times = []
            for n in range(1 + later):
                data = pdf(n)
                began = time.perf_counter()
                document = ws.knowledge.ingest_file(data, filename=f"p{n}.pdf", wait=True)
                times.append((time.perf_counter() - began) * 1000)
                if document.status != "ready":
                    raise RuntimeError(f"upload {n} ended {document.status}")
        finally:
            core.stop()
            core.close()
    return {"first_ms": times[0], "later_ms": statistics.median(times[1:])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per setting")
    parser.add_argument("--idle", type=float, default=2.0, help="seconds between start and upload")
    parser.add_argument("--later", type=int, default=5, help="uploads timed after the first")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "AGENTCORE_INGEST_PRESTART"}
    rows: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    load_before = os.getloadavg()
    for run in range(args.runs):
        for prestart in (True, False) if run % 2 == 0 else (False, True):
            spec = json.dumps([prestart, args.idle, args.later])
            done = subprocess.run(
                [sys.executable, __file__, "--child", spec],
                capture_output=True,
                text=True,
                check=True,
                env=env,
                timeout=600,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rows[prestart].append(result)
            print(
                f"  run {run + 1} prestart={str(prestart).lower():5}: first"
                f" {result['first_ms']:7.1f} ms, later {result['later_ms']:6.1f} ms",
                flush=True,
            )
    load_after = os.getloadavg()
    print()
    print(
        f"{os.cpu_count()} CPUs; load average {load_before[0]:.1f} before, {load_after[0]:.1f}"
        f" after; median of {args.runs} fresh processes per row; upload {args.idle:g} s after"
        f" start; later: median of {args.later} uploads after the first"
    )
    print()
    print("| ingest_prestart | first upload ms | later uploads ms | each run's first upload, ms |")
    print("|---|---:|---:|---|")
    for prestart in (True, False):
        firsts = [r["first_ms"] for r in rows[prestart]]
        later = statistics.median(r["later_ms"] for r in rows[prestart])
        each = ", ".join(f"{f:.0f}" for f in sorted(firsts))
        print(
            f"| {str(prestart).lower()} | {statistics.median(firsts):.1f} | {later:.1f} | {each} |"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        prestart, idle, later = json.loads(sys.argv[2])
        print(json.dumps(child(prestart, idle, later)))
        sys.exit(0)
    sys.exit(main())
