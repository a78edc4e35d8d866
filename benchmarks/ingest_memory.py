"""Peak memory and duration of 50 MB uploads to a real `agentcore serve`, and verify p99 meanwhile.

Starts `agentcore serve` on a fresh SQLite file in a subprocess, uploads one document
(token-less base64-like text, or prose-like text), samples the server's RSS (and reads
its kernel high-water mark, VmHWM) while `GET /v1/auth/verify` is called every 50 ms,
and waits for the document to be ready (a 201, or a 202 then polling until `ready` or
`failed`). A run that has not finished after `--timeout` seconds is killed and reported
as "> timeout" with the RSS at the kill.

    python benchmarks/ingest_memory.py                      # 50 MB token-less and prose
    python benchmarks/ingest_memory.py --size-mb 5 --kind prose
    # the same against another checkout (e.g. before a change), its server killed at 120 s:
    python benchmarks/ingest_memory.py --code /tmp/before --label before --timeout 120

Prints a Markdown table; writes JSON to benchmarks/results/ingest_memory-<label>.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

MB = 1_000_000
RESULTS = Path(__file__).parent / "results"


def token_less(size: int, seed: int = 1) -> bytes:
    """``size`` bytes of base64 text with no whitespace at all."""
    rng = random.Random(seed)
    raw = rng.randbytes(size * 3 // 4 + 3)
    return base64.b64encode(raw)[:size]


def prose(size: int, seed: int = 2) -> bytes:
    """``size`` bytes of prose-like English: varied sentences in paragraphs."""
    rng = random.Random(seed)
    common = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "was",
        "for",
        "that",
        "with",
        "as",
        "on",
        "by",
        "at",
        "from",
        "this",
        "are",
        "be",
        "it",
        "an",
        "or",
        "which",
        "employees",
        "policy",
        "leave",
        "days",
        "manager",
        "request",
        "approval",
        "annual",
        "holiday",
        "system",
        "data",
        "report",
        "customer",
        "service",
        "support",
        "team",
        "project",
        "office",
        "process",
        "quarter",
        "review",
        "budget",
    ]
    syllables = ["ka", "lo", "mi", "ren", "tor", "sa", "vel", "dun", "pri", "ost", "ar", "ie"]
    rare = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(20_000)]
    out: list[str] = []
    total = 0
    while total < size:
        sentences = []
        for _ in range(rng.randint(3, 8)):
            words = [
                rng.choice(common) if rng.random() < 0.6 else rng.choice(rare)
                for _ in range(rng.randint(6, 28))
            ]
            if rng.random() < 0.2:
                words.insert(rng.randrange(len(words)), str(rng.randint(1, 2000)))
            sentence = " ".join(words)
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".....?!"))
        paragraph = " ".join(sentences) + "\n\n"
        out.append(paragraph)
        total += len(paragraph)
    return "".join(out).encode()[:size]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_key(cli: list[str], organization: str, env: dict[str, str], cwd: str) -> str:
    """``agentcore init --org organization`` with the ``cli`` command; the test key."""
    init = subprocess.run(
        [*cli, "init", "--org", organization, "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    keys = json.loads(init.stdout)["keys"]
    return str(next(k["secret"] for k in keys if k["environment"] == "test"))


def start_server(
    cli: list[str], env: dict[str, str], cwd: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``agentcore serve`` on a free port with the ``cli`` command; the process and its URL."""
    port = free_port()
    server = subprocess.Popen(
        [*cli, "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server, f"http://127.0.0.1:{port}"


def wait_for_server(base: str, headers: dict[str, str]) -> None:
    """Return once the server at ``base`` answers ``verify`` (then half a second more, so
    it is idle), or raise after about 30 s."""
    with httpx.Client(base_url=base, headers=headers, timeout=5) as client:
        for _ in range(300):
            try:
                if client.get("/v1/auth/verify").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the server did not start")
    time.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    values = {"VmRSS": 0, "VmHWM": 0}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in values:
                values[name] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


@dataclass
class Run:
    label: str
    kind: str
    size_mb: float
    outcome: str = ""
    seconds: float = 0.0
    http_status: int | None = None
    baseline_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0  # VmHWM: the kernel's high-water mark, not a sample
    added_rss_mb: float = 0.0
    rss_after_mb: float | None = None  # a few seconds after the document was ready
    verify_p50_ms: float = 0.0
    verify_p99_ms: float = 0.0
    verify_max_ms: float = 0.0
    verify_count: int = 0
    verify_errors: int = 0
    notes: list[str] = field(default_factory=list)


def run_one(args: argparse.Namespace, kind: str, data: bytes) -> Run:
    result = Run(args.label, kind, len(data) / MB)
    env = dict(os.environ)
    if args.code:
        code = str(Path(args.code).resolve())
        env["PYTHONPATH"] = os.pathsep.join([code, os.path.join(code, "adapters")])
    env["AGENTCORE_RATE_LIMIT_TEST"] = "1000000"
    env.pop("AGENTCORE_DB", None)
    cwd = args.code or tempfile.gettempdir()
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.db")
        cli = [sys.executable, "-m", "agentcore.cli", "--db", db]
        key = test_key(cli, "bench", env, cwd)
        server, base = start_server(cli, env, cwd)
        headers = {"Authorization": f"Bearer {key}"}
        try:
            wait_for_server(base, headers)
            result.baseline_rss_mb = rss_kb(server.pid)[0] / 1024
            measure(args, result, server, base, headers, data)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
    return result


def measure(
    args: argparse.Namespace,
    result: Run,
    server: subprocess.Popen[bytes],
    base: str,
    headers: dict[str, str],
    data: bytes,
) -> None:
    stop = threading.Event()
    latencies: list[float] = []
    errors = [0]
    peak = [0]

    def verify() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get("/v1/auth/verify").status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append((time.perf_counter() - started) * 1000)
                errors[0] += not ok
                stop.wait(0.05)

    def sample() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], rss_kb(server.pid)[0])
            except FileNotFoundError:
                return
            stop.wait(0.1)

    outcome: dict[str, object] = {}

    def upload() -> None:
        try:
            with httpx.Client(base_url=base, headers=headers, timeout=args.timeout + 60) as client:
                response = client.post(
                    "/v1/knowledge/documents", files={"file": ("upload.txt", data, "text/plain")}
                )
                outcome["status"] = response.status_code
                outcome["body"] = response.json()
                if response.status_code == 202:
                    doc_id = response.json()["id"]
                    while True:
                        time.sleep(0.5)
                        try:
                            doc = client.get(f"/v1/knowledge/documents/{doc_id}").json()
                        except (httpx.TransportError, ValueError) as exc:
                            outcome["poll_errors"] = f"{outcome.get('poll_errors', '')} {exc!r}"
                            continue
                        if doc.get("status") != "processing":
                            outcome["body"] = doc
                            break
        except Exception as exc:  # reported, not raised: the thread must not die silently
            outcome["error"] = repr(exc)

    threads = [threading.Thread(target=t, daemon=True) for t in (verify, sample)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    uploader = threading.Thread(target=upload, daemon=True)
    uploader.start()
    uploader.join(args.timeout)
    result.seconds = time.monotonic() - started
    failed = "status" in outcome and outcome["status"] not in (201, 202)
    if failed and not uploader.is_alive():
        # an error (a 504) may leave the work running in the server: watch it until the
        # time box ends, then kill it like an unfinished run
        answered = result.seconds
        cpu = cpu_seconds(server.pid)
        time.sleep(max(0.0, args.timeout - answered))
        result.notes.append(
            f"answered {outcome['status']} at {answered:.1f} s; then the server used"
            f" {cpu_seconds(server.pid) - cpu:.1f} s of CPU until the kill"
        )
        result.seconds = time.monotonic() - started
        result.http_status = int(str(outcome["status"]))
    current, hwm = rss_kb(server.pid)
    if uploader.is_alive() or failed:
        result.outcome = f"> {args.timeout:g} s (killed)"
        result.notes.append(f"RSS at kill {current / 1024:.0f} MB")
        server.kill()
    else:
        result.http_status = int(str(outcome["status"])) if "status" in outcome else None
        body = outcome.get("body")
        status = body.get("status") if isinstance(body, dict) else None
        result.outcome = str(status or body.get("code") if isinstance(body, dict) else outcome)
        if isinstance(body, dict) and "chunks" in body:
            result.notes.append(f"{body['chunks']} chunks")
        if isinstance(body, dict) and body.get("last_error"):
            result.notes.append(str(body["last_error"].get("code")))
    for problem in ("error", "poll_errors"):
        if problem in outcome:
            result.notes.append(f"{problem}: {outcome[problem]}"[:200])
    stop.set()
    for thread in threads:
        thread.join()
    result.peak_rss_mb = max(hwm, peak[0]) / 1024
    result.added_rss_mb = result.peak_rss_mb - result.baseline_rss_mb
    if server.poll() is None:
        time.sleep(3)
        result.rss_after_mb = rss_kb(server.pid)[0] / 1024
    if latencies:
        ordered = sorted(latencies)
        result.verify_p50_ms = statistics.median(ordered)
        result.verify_p99_ms = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        result.verify_max_ms = ordered[-1]
        result.verify_count = len(ordered)
        result.verify_errors = errors[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=50)
    parser.add_argument("--kind", choices=["token", "prose", "both"], default="both")
    parser.add_argument("--code", help="a checkout to serve instead of the installed agentcore")
    parser.add_argument("--label", default="after")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    size = int(args.size_mb * MB)
    kinds = ["token", "prose"] if args.kind == "both" else [args.kind]
    runs = []
    for kind in kinds:
        data = token_less(size) if kind == "token" else prose(size)
        runs.append(run_one(args, kind, data))
        del data
    print(
        "| code | input | MB | outcome | HTTP | s | RSS base MB | peak MB | added MB"
        " | RSS 3 s after | verify p50 ms | p99 ms | max ms | n (errors) | notes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        after = "-" if r.rss_after_mb is None else f"{r.rss_after_mb:.0f}"
        print(
            f"| {r.label} | {r.kind} | {r.size_mb:.0f} | {r.outcome} | {r.http_status} "
            f"| {r.seconds:.1f} | {r.baseline_rss_mb:.0f} | {r.peak_rss_mb:.0f} "
            f"| {r.added_rss_mb:.0f} | {after} | {r.verify_p50_ms:.1f} | {r.verify_p99_ms:.1f} "
            f"| {r.verify_max_ms:.1f} | {r.verify_count} ({r.verify_errors}) "
            f"| {'; '.join(r.notes)} |"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ingest_memory-{args.label}.json"
    out.write_text(json.dumps([asdict(r) for r in runs], indent=2))


if __name__ == "__main__":
    main()
