"""``agentcore ingest`` and ``agentcore search``, run as the installed console script."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import cli_env
from pdfs import filler, make_pdf

pytestmark = pytest.mark.slow  # each test runs the console script in a fresh process

_SCRIPT = Path(sys.executable).with_name("agentcore")
AGENTCORE = str(_SCRIPT) if _SCRIPT.exists() else shutil.which("agentcore") or "agentcore"

CRANES = "Harbour cranes at Port Velmar lift at most forty tonnes in a single hoist."
GLIDERS = "Refunds for cancelled glider lessons are paid within nine working days."
LANTERNS = "The lantern club meets in the boathouse every Thursday evening."
SAFFRON = "Saffron deliveries arrive on Wednesdays at the east gate of the depot."
SUMMARY = re.compile(
    r"Ingested (\d+) file\(s\), (\d+) chunk\(s\); (\d+) failed; (\d+) skipped \(not a format"
)


def run(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [AGENTCORE, "--db", str(db), *args],
        capture_output=True,
        text=True,
        env={**cli_env(), **(env or {})},
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def table_count(db: Path, table: str, where: str = "1") -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}").fetchone()[0])  # noqa: S608
    finally:
        conn.close()


def sources(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {row[0] for row in conn.execute("SELECT source FROM documents")}
    finally:
        conn.close()


def make_folder(root: Path) -> tuple[Path, Path]:
    """A folder with 2 PDFs (one nested), a Markdown file and a file to ignore; a .txt."""
    docs = root / "docs"
    (docs / "archive").mkdir(parents=True)
    (docs / "guide.pdf").write_bytes(
        make_pdf([filler(12, 21), f"{filler(5, 22)} {CRANES} {filler(5, 23)}", filler(12, 24)])
    )
    (docs / "archive" / "policy.pdf").write_bytes(make_pdf([f"{GLIDERS} {filler(6, 25)}"]))
    (docs / "readme.md").write_text(f"# Lantern club\n\n{LANTERNS}\n", encoding="utf-8")
    (docs / "table.xls").write_bytes(b"\xd0\xcf\x11\xe0 old Excel")  # not a supported type
    single = root / "extra.txt"
    single.write_text(SAFFRON, encoding="utf-8")
    return docs, single


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("cli_knowledge")
    docs, single = make_folder(root)
    db = root / "kb.db"
    args = ["--org", "acme", "--create-org", "--env", "test", str(docs), str(single)]
    return {"db": db, "result": run(db, "ingest", *args)}


def test_ingest_folder_and_file(ingested: dict[str, Any]) -> None:
    result, db = ingested["result"], ingested["db"]
    assert result.returncode == 0, result.stderr
    # not a terminal: one plain line per file, in order, each with its time
    lines = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] + "]" for line in lines] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    assert all(re.search(r": \d+ chunk\(s\) \(\d+\.\d s\)$", line) for line in lines), lines
    assert "\r" not in result.stderr  # no bar redrawn over itself in a log
    summary = SUMMARY.search(result.stderr)
    assert summary, result.stderr
    files, chunks, failed, skipped = map(int, summary.groups())
    assert (files, failed, skipped) == (4, 0, 1)
    assert chunks == table_count(db, "chunks") >= 4
    assert table_count(db, "documents") == 4
    assert sources(db) == {"guide.pdf", "policy.pdf", "readme.md", "extra.txt"}
    # the folder's file of another type is named, with the reason, not dropped silently
    skips = [line for line in result.stderr.splitlines() if "agentcore: skipped" in line]
    assert skips == [
        f"agentcore: skipped {Path(str(db)).parent / 'docs' / 'table.xls'}:"
        " not a format agentcore reads (.xls)"
    ]


def test_search_json_finds_the_right_source(ingested: dict[str, Any]) -> None:
    db = ingested["db"]
    query = "How much can the harbour cranes at Port Velmar lift?"
    result = run(db, "search", "--org", "acme", "--env", "test", "--top-k", "3", query, "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["query"] == query
    assert len(body["results"]) == 3
    top = body["results"][0]
    assert top["source"] == "guide.pdf" and 2 in top["pages"] and 3 not in top["pages"], top
    assert "forty tonnes" in top["chunk"]
    assert top["document_id"].startswith("doc_")
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert all(-1 <= score <= 1 for score in scores)


def test_search_plain_output(ingested: dict[str, Any]) -> None:
    db = ingested["db"]
    result = run(db, "search", "--org", "acme", "--env", "test", "When does the lantern club meet?")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = re.match(r"^\s*1\. (-?\d\.\d{3})  (\S+) p\.([\d,]+)$", lines[0])
    assert first, result.stdout
    assert first.group(2) == "readme.md" and first.group(3) == "1"
    assert 0 < float(first.group(1)) <= 1
    assert "lantern club meets in the boathouse" in lines[1]
    ranks = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\. ", result.stdout, re.MULTILINE)]
    assert ranks == [1, 2, 3, 4, 5]  # the default top_k of 5 (7 chunks are stored)
    guide = re.search(r"guide\.pdf p\.(\d+(?:,\d+)*)$", result.stdout, re.MULTILINE)
    assert guide and all(p.isdigit() for p in guide.group(1).split(","))


def test_search_reranks_with_the_configured_reranker(ingested: dict[str, Any]) -> None:
    from openai_provider import serve_provider

    db, query = ingested["db"], "When does the lantern club meet?"
    refused = run(db, "search", "--org", "acme", "--env", "test", "--rerank", query)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "reranker" in refused.stderr, refused.stderr
    plain = run(db, "search", "--org", "acme", "--env", "test", "--json", query)
    first = json.loads(plain.stdout)["results"]
    with serve_provider() as reranker:
        reranker.reply({"results": [{"index": 2, "relevance_score": 0.8}]})
        env = {
            "AGENTCORE_RERANKER_URL": f"{reranker.url}/rerank",
            "AGENTCORE_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
        }
        args = ("search", "--org", "acme", "--env", "test", "--top-k", "1", "--rerank")
        reranked = run(db, *args, "--json", query, env=env)
    assert reranked.returncode == 0, reranked.stderr
    [result] = json.loads(reranked.stdout)["results"]
    assert result["chunk"] == first[2]["chunk"] and result["rerank_score"] == 0.8


def test_search_missing_org_fails_clearly(ingested: dict[str, Any]) -> None:
    db = ingested["db"]
    result = run(db, "search", "--org", "nobody", "--env", "test", "cranes")
    assert result.returncode != 0
    assert "nobody" in result.stderr and "organization" in result.stderr.lower(), result.stderr
    assert result.stdout == ""
    assert table_count(db, "organizations", "name = 'nobody'") == 0  # not created on the way


def test_ingest_with_a_bad_file_counts_it_and_keeps_the_good(tmp_path: Path) -> None:
    docs, single = make_folder(tmp_path)
    (docs / "broken.pdf").write_bytes(b"not a pdf at all, just words")
    db = tmp_path / "kb.db"
    args = ["--org", "acme", "--create-org", "--env", "test", str(docs), str(single)]
    result = run(db, "ingest", *args)
    assert result.returncode == 1, result.stderr
    summary = SUMMARY.search(result.stderr)
    assert summary, result.stderr
    assert (int(summary.group(1)), int(summary.group(3))) == (4, 1)
    assert re.search(r"\] skipped \S*broken\.pdf: .*PDF", result.stderr), result.stderr
    assert "[5/5] " in result.stderr
    assert sources(db) == {"guide.pdf", "policy.pdf", "readme.md", "extra.txt"}
    assert table_count(db, "chunks") == int(summary.group(2))
    assert table_count(db, "vector_segments") >= 4


def test_ingest_missing_path_fails_before_ingesting(tmp_path: Path) -> None:
    docs, _ = make_folder(tmp_path)
    db = tmp_path / "kb.db"
    result = run(db, "ingest", "--org", "acme", "--env", "test", str(docs), str(tmp_path / "nope"))
    assert result.returncode != 0
    assert "nope" in result.stderr
    assert table_count(db, "documents") == 0
