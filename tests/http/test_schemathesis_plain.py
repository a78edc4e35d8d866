"""The plain schemathesis command a new user runs, without the project's configuration or
hooks (``tests/schemathesis.toml`` and ``fuzz_fixups`` keep their extra checks for
``test_fuzz.py``)::

    st run http://127.0.0.1:8000/v1/openapi.json --checks all -H "Authorization: Bearer $KEY"

against a real ``agentcore serve`` on SQLite and on PostgreSQL (the test key's rate limit
raised), with a read+write key:
the document must declare what the server enforces. Bounded here by ``--max-examples``
and a fixed ``--seed``. Five findings are by design, and only they may be reported
(docs/operations.md, "Fuzzing", says why): an upload whose file is not a parseable PDF,
Markdown or UTF-8 text (the document cannot describe a file's content, so generated
bytes are refused with 415 or 422 ``param: file``), an archived agent that stays
readable after ``DELETE /v1/agents/{id}`` (the spec's DELETE archives), a negative
case whose over-long string makes the body larger than ``max_body_bytes`` (413: no
OpenAPI keyword states a body's size in bytes), a Chat Completions request whose
tool messages or tools break a rule no keyword states (``TOOL_RULES``: 400, as at
OpenAI), and an agent's stats window whose ``until`` is before its ``since`` (422
naming ``until``: no keyword compares two parameters)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_env, cli_json, start_serve

pytestmark = [pytest.mark.both_stores, pytest.mark.slow]  # minutes of fuzzing per store

_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$", re.MULTILINE)
_CASE = re.compile(r"^\d+\. Test Case ID: \w+$", re.MULTILINE)
_CHECK = re.compile(r"^- (ST\d+) ", re.MULTILINE)


def findings(report: str) -> list[tuple[str, str, str]]:
    """``(section, check, case text)`` for each failure a schemathesis report lists."""
    failures = report.split("=== WARNINGS ===")[0].split("=== SUMMARY ===")[0]
    parts = _SECTION.split(failures)
    found = []
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        for case in _CASE.split(body)[1:]:
            found += [(title, check, case) for check in _CHECK.findall(case)]
    return found


TOOL_RULES = (
    "unknown_tool_call",
    "missing_tool_output",
    "invalid_tool_arguments",
    "duplicate_tool_name",
    "unknown_tool",
)
"""The 400s of a Chat Completions request whose tools or tool messages break a rule no
JSON Schema keyword states (a tool message answers a call of the assistant message
before it; a call's arguments text holds a JSON object; tool names are unique;
``tool_choice`` names an offered tool): OpenAI answers them with 400 too."""


def by_design(section: str, check: str, case: str) -> bool:
    """Whether a finding is one of those the module docstring names."""
    if check == "ST202" and re.search(r"/v1/knowledge/documents\b(?!/)", case):
        return '"param":"file"' in case and re.search(r"\[(415|422)\]", case) is not None
    if check == "ST202" and "/v1/chat/completions" in case:
        return "[400]" in case and any(f'"code":"{code}"' in case for code in TOOL_RULES)
    if check == "ST202" and re.search(r"/v1/agents/[^/ ]+/stats\?", case):
        return "[422]" in case and '"param":"until"' in case and "before 'since'" in case
    if check == "ST301":
        return "-X DELETE" in case and "/v1/agents/agt_" in case
    if check == "ST201":  # a negative case past max_body_bytes: 413 is the right answer
        return "[413]" in case and '"code":"body_too_large"' in case
    return False


def test_the_report_parser_reads_findings() -> None:
    report = (
        "_____ POST /v1/agents _____\n1. Test Case ID: Ab1\n\n- ST202 Schema-valid request"
        ' rejected\n\n[422] Unprocessable Content:\n\n    `{"param":"tools"}`\n'
        "_____ POST /v1/knowledge/documents _____\n1. Test Case ID: Cd2\n\n- ST202 Schema-"
        'valid request rejected\n\n[415] Unsupported Media Type:\n\n    `{"param":"file"}`\n'
        "    curl -X POST http://127.0.0.1:1/v1/knowledge/documents\n"
        "_____ GET /v1/agents/{agent_id}/stats _____\n1. Test Case ID: Ef3\n\n- ST202 Schema-"
        'valid request rejected\n\n[422] Unprocessable Content:\n\n    `{"detail":"\'until\''
        ' must not be before \'since\'.","param":"until"}`\n'
        "    curl -X GET 'http://127.0.0.1:1/v1/agents/agt_1/stats?until=1484-09-28T21%3A48Z'\n"
        "=================== SUMMARY ===================\n- ST999 not a finding\n"
    )
    found = findings(report)
    assert [(s, c) for s, c, _ in found] == [
        ("POST /v1/agents", "ST202"),
        ("POST /v1/knowledge/documents", "ST202"),
        ("GET /v1/agents/{agent_id}/stats", "ST202"),
    ]
    assert [by_design(*finding) for finding in found] == [False, True, True]


@pytest.mark.timeout(900)  # minutes of generated requests, at the start of a loaded run
def test_the_plain_command_finds_nothing_undeclared(store_url: str, tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    assert st is not None, "the test extra installs schemathesis"
    keys = cli_json("init", "--org", "demo", "--json", db=store_url)["keys"]  # type: ignore[arg-type]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    # the test key's rate limit raised, so generated requests reach the API, not a 429
    limits = {**cli_env(), "AGENTCORE_RATE_LIMIT_TEST": "1000000"}
    process, url = start_serve(store_url, key, env=limits)  # type: ignore[arg-type]
    try:
        env = {k: v for k, v in cli_env().items() if not k.startswith("SCHEMATHESIS_")}
        run = subprocess.run(
            [st, "run", f"{url}/v1/openapi.json", "--checks", "all"]
            + ["-H", f"Authorization: Bearer {key}", "--max-examples", "10", "--seed", "7"],
            cwd=tmp_path,  # no schemathesis.toml here: the plain command
            env={**env, "NO_COLOR": "1", "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    report = run.stdout + run.stderr
    assert re.search(r"Tested: 4\d", report), report[-3000:]  # every operation was run
    unexpected = [
        f"{s}: {c}\n{case}" for s, c, case in findings(report) if not by_design(s, c, case)
    ]
    assert not unexpected, "\n".join(unexpected)
    assert run.returncode in (0, 1), report[-3000:]  # 1: by-design findings only
