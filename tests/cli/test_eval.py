"""``agentcore eval``: a golden file's questions searched and asked on a real SQLite file,
its figures as a table and as JSON, and the files it refuses before doing anything."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import CLI, cli_env, read_terminal
from pdfs import filler, make_pdf
from processes import reap, spawn

from agentcore import AgentCore
from agentcore._plugin_manager import make_plugin_manager
from agentcore.cli import build_parser, main
from agentcore.config import Settings
from agentcore.evaluation import read_golden

CRANES = "Harbour cranes at Port Velmar lift at most forty tonnes in a single hoist."
GLIDERS = "Refunds for cancelled glider lessons are paid within nine working days."
LANTERNS = "The lantern club meets in the boathouse every Thursday evening."

GOLDEN = [
    # found first, on its page; cited on it; the answer holds "forty tonnes"
    {
        "question": "How much can the harbour cranes at Port Velmar lift?",
        "source": "guide.pdf",
        "pages": [2],
        "answer": "forty tonnes",
    },
    # found and cited, but not on page 3 (it has one page); the second answer is held
    {
        "question": "When are refunds for cancelled glider lessons paid?",
        "source": "policy.txt",
        "pages": [3],
        "answer": ["eleven days", "nine working days"],
    },
    # the wrong source: only club.md has these words, so it is neither found nor cited
    {"question": "When does the lantern club meet?", "source": "policy.txt"},
    # not to be answered: nothing matches, and the agent says so (abstains)
    {"question": "What colour is the moon on Tuesdays?"},
    # not to be answered, but the agent answers it from guide.pdf (does not abstain)
    {"question": "How much can the harbour cranes lift?"},
]


def run(*argv: str) -> tuple[int, str, str]:
    """``agentcore.cli.main(argv)`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def write_golden(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def count(db: Path, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608
    finally:
        conn.close()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A SQLite file with three documents (a 3-page PDF, a text, a Markdown file) and a
    draft agent in acme's test environment, and the golden file above."""
    root = tmp_path_factory.mktemp("eval")
    db = root / "kb.db"
    code, out, err = run("--db", str(db), "init", "--org", "acme", "--json")
    assert code == 0, err
    with AgentCore.open(db) as core:
        ws = core.workspace("acme", "test", create=False)
        pages = [filler(12, 21), f"{filler(5, 22)} {CRANES} {filler(5, 23)}", filler(12, 24)]
        ws.knowledge.ingest_file(make_pdf(pages), filename="guide.pdf")
        ws.knowledge.ingest_text("policy.txt", GLIDERS)
        ws.knowledge.ingest_text("club.md", LANTERNS)
    code, out, err = run(
        "--db", str(db), "agents", "create", "--org", "acme", "--env", "test", "--json"
    )
    assert code == 0, err
    golden = write_golden(root / "golden.jsonl", GOLDEN)
    return {"db": db, "agent": json.loads(out)["id"], "golden": golden, "root": root}


def evaluate(workspace: dict[str, Any], *options: str) -> tuple[int, str, str]:
    db, golden = workspace["db"], workspace["golden"]
    return run("--db", str(db), "eval", str(golden), "--org", "acme", *options)


def test_the_figures_of_a_constructed_case(workspace: dict[str, Any]) -> None:
    # keyword ranking: a question's words are in one document only, so its ranks are plain
    agent = workspace["agent"]
    code, out, err = evaluate(workspace, "--agent", agent, "--mode", "keyword", "--json")
    assert code == 0, err
    assert err == ""  # not a terminal: no bar; every source names a document
    report = json.loads(out)
    cost = report.pop("cost_per_question")
    assert report == {
        "questions": 5,
        "mode": "keyword",
        "reranked": False,
        "top_k": 5,
        "agent": agent,
        "search_recall_at_5": {"value": 0.6667, "hits": 2, "of": 3},
        "search_mrr": {"value": 0.6667, "of": 3},  # (1 + 1 + 0) / 3
        "search_page_recall_at_5": {"value": 0.5, "hits": 1, "of": 2},
        "search_page_mrr": {"value": 0.5, "of": 2},  # (1 + 0) / 2
        "cites_source": {"value": 0.6667, "hits": 2, "of": 3},
        "cites_page": {"value": 0.5, "hits": 1, "of": 2},
        "answer_contains": {"value": 1.0, "hits": 2, "of": 2},
        "abstains": {"value": 0.5, "hits": 1, "of": 2},
    }
    assert cost.keys() == {
        "search_ms_p50",
        "chat_ms_p50",
        "chat_cpu_ms_p50",
        "input_tokens_mean",
        "output_tokens_mean",
    }
    assert cost["search_ms_p50"] > 0 and cost["chat_ms_p50"] > 0 and cost["chat_cpu_ms_p50"] >= 0
    # the extractive model reports no tokens
    assert cost["input_tokens_mean"] is None and cost["output_tokens_mean"] is None
    # each question's conversation is deleted once its answer is read
    assert count(workspace["db"], "conversations") == 0


def test_the_table(workspace: dict[str, Any]) -> None:
    agent = workspace["agent"]
    code, out, err = evaluate(workspace, "--agent", agent, "--mode", "keyword")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:-1] == [
        f"5 questions (3 answerable, 2 not); keyword search, top 5; agent {agent}",
        "figure                   value  of",
        "search_recall_at_5       0.667  2/3",
        "search_mrr               0.667  3",
        "search_page_recall_at_5  0.500  1/2",
        "search_page_mrr          0.500  2",
        "cites_source             0.667  2/3",
        "cites_page               0.500  1/2",
        "answer_contains          1.000  2/2",
        "abstains                 0.500  1/2",
    ]
    assert lines[-1].startswith("cost per question (p50): search ")
    assert " ms, chat " in lines[-1] and lines[-1].endswith(" ms CPU)")


def test_default_mode_is_vector_and_ranks_the_right_source_first(
    workspace: dict[str, Any],
) -> None:
    code, out, err = evaluate(workspace, "--agent", workspace["agent"], "--json")
    assert code == 0, err
    report = json.loads(out)
    assert (report["mode"], report["top_k"]) == ("vector", 5)
    # every document is among the top 5 of the 6 chunks: the source is always found,
    # the two right ones first and policy.txt for the lantern question below club.md
    assert report["search_recall_at_5"] == {"value": 1.0, "hits": 3, "of": 3}
    assert 2 / 3 < report["search_mrr"]["value"] < 1
    assert report["cites_page"] == {"value": 0.5, "hits": 1, "of": 2}
    assert report["abstains"] == {"value": 0.5, "hits": 1, "of": 2}


def test_top_k_1(workspace: dict[str, Any]) -> None:
    code, out, err = evaluate(
        workspace, "--agent", workspace["agent"], "--top-k", "1", "--mode", "vector", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["top_k"] == 1
    assert "search_recall_at_5" not in report  # named for the k used
    # the first result only: the lantern question's policy.txt (second) no longer counts
    assert report["search_recall_at_1"] == {"value": 0.6667, "hits": 2, "of": 3}
    assert report["search_mrr"] == {"value": 0.6667, "of": 3}
    assert report["search_page_recall_at_1"] == {"value": 0.5, "hits": 1, "of": 2}
    assert report["search_page_mrr"] == {"value": 0.5, "of": 2}


@pytest.mark.parametrize("k", ["0", "101"])
def test_top_k_out_of_range_is_a_usage_error(workspace: dict[str, Any], k: str) -> None:
    code, out, err = evaluate(workspace, "--top-k", k)
    assert code == 2 and out == ""
    assert err == (
        f"agentcore: argument --top-k: --top-k must be between 1 and 100, not '{k}'"
        " (see 'agentcore eval --help')\n"
    )


def test_without_an_agent_only_search_is_measured(workspace: dict[str, Any]) -> None:
    code, out, err = evaluate(workspace, "--mode", "keyword", "--json")
    assert code == 0, err
    assert err == (
        "agentcore: no --agent: search figures only (the answers' figures need an agent to ask)\n"
    )
    report = json.loads(out)
    assert report["agent"] is None
    assert report["search_recall_at_5"] == {"value": 0.6667, "hits": 2, "of": 3}
    for name in ("cites_source", "cites_page", "answer_contains", "abstains"):
        assert report[name] is None, name
    assert report["cost_per_question"]["chat_ms_p50"] is None
    code, out, _ = evaluate(workspace, "--mode", "keyword")
    assert code == 0
    assert "search only" in out.splitlines()[0]
    assert "abstains                     -  (no agent)" in out.splitlines()


def test_only_unanswerable_questions(workspace: dict[str, Any], tmp_path: Path) -> None:
    golden = write_golden(
        tmp_path / "none.jsonl", [line for line in GOLDEN if "source" not in line]
    )
    code, out, err = run(
        "--db",
        str(workspace["db"]),
        "eval",
        str(golden),
        "--org",
        "acme",
        "--agent",
        workspace["agent"],
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["questions"] == 2
    assert report["abstains"] == {"value": 0.5, "hits": 1, "of": 2}
    for name in ("search_recall_at_5", "search_mrr", "cites_source", "cites_page"):
        assert report[name]["value"] is None and report[name]["of"] == 0, name


def test_a_source_no_document_has_is_named(workspace: dict[str, Any], tmp_path: Path) -> None:
    lines = [{"question": "How much can the cranes lift?", "source": "gide.pdf"}] * 2
    golden = write_golden(tmp_path / "typo.jsonl", lines)
    code, out, err = run("--db", str(workspace["db"]), "eval", str(golden), "--org", "acme")
    assert code == 0, err
    assert (
        "agentcore: no document is named 'gide.pdf': its 2 question(s) will count as misses\n"
    ) in err
    assert "search_recall_at_5       0.000  0/2" in out.splitlines()


def test_unknown_organization_or_agent(workspace: dict[str, Any]) -> None:
    db, golden = str(workspace["db"]), str(workspace["golden"])
    code, out, err = run("--db", db, "eval", golden, "--org", "nobody")
    assert (code, out) == (1, "")
    assert err == (
        "agentcore: No organization named 'nobody': create it with 'agentcore init --org nobody'.\n"
    )
    assert count(workspace["db"], "organizations") == 1  # not created on the way
    code, out, err = evaluate(workspace, "--agent", "agt_nope")
    assert (code, out) == (1, "")
    assert err == "agentcore: No agent with id 'agt_nope'.\n"  # before any question


BAD_LINES = [
    ('{"question": "a"', "not JSON (Expecting ',' delimiter)"),
    ('["question"]', "not a JSON object but an array"),
    ('"How many days?"', "not a JSON object but a string"),
    ('{"source": "guide.pdf"}', "no 'question'"),
    ('{"question": 3}', "'question' must be a non-empty string"),
    ('{"question": "  "}', "'question' must be a non-empty string"),
    (
        '{"question": "q", "source": null}',
        "'source' must be a document's name (leave it out for a question not to answer)",
    ),
    (
        '{"question": "q", "source": "guide.pdf", "pages": 2}',
        "'pages' must be a non-empty list of page numbers (1, 2, ...)",
    ),
    (
        '{"question": "q", "source": "guide.pdf", "pages": [0]}',
        "'pages' must be a non-empty list of page numbers (1, 2, ...)",
    ),
    (
        '{"question": "q", "source": "guide.pdf", "pages": [true]}',
        "'pages' must be a non-empty list of page numbers (1, 2, ...)",
    ),
    (
        '{"question": "q", "source": "guide.pdf", "answer": 25}',
        "'answer' must be a non-empty string or a non-empty list of them",
    ),
    (
        '{"question": "q", "source": "guide.pdf", "answer": []}',
        "'answer' must be a non-empty string or a non-empty list of them",
    ),
    ('{"question": "q", "pages": [1]}', "'pages' needs a 'source'"),
    ('{"question": "q", "answer": "25"}', "'answer' needs a 'source'"),
    (
        '{"question": "q", "id": "56dd", "Source": "guide.pdf"}',
        "unknown field 'id', 'Source' (a line has question, source, pages, answer)",
    ),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES)
def test_a_malformed_line_is_refused_before_anything_is_opened(
    tmp_path: Path, line: str, reason: str
) -> None:
    golden = tmp_path / "golden.jsonl"
    # a good line, a blank one (skipped, but counted), then the bad one: line 3
    golden.write_text(f'{{"question": "ok?"}}\n\n{line}\n{{"question": "after"}}\n')
    db = tmp_path / "fresh.db"
    code, out, err = run("--db", str(db), "eval", str(golden), "--org", "acme")
    assert (code, out) == (2, "")
    assert (
        err == f"agentcore: argument GOLDEN: {golden}:3: {reason} (see 'agentcore eval --help')\n"
    )
    assert not db.exists()  # refused while parsing: no database opened, nothing asked


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path: Path) -> None:
    golden = tmp_path / "windows.jsonl"
    golden.write_bytes(b'\xef\xbb\xbf{"question": "a?"}\r\n{"question": "b?"}\r\n')
    assert [item.question for item in read_golden(golden)] == ["a?", "b?"]


def test_a_line_that_is_not_utf8(tmp_path: Path) -> None:
    golden = tmp_path / "latin1.jsonl"
    golden.write_bytes(b'{"question": "ok?"}\n{"question": "caf\xe9?"}\n')
    db = tmp_path / "fresh.db"
    code, out, err = run("--db", str(db), "eval", str(golden), "--org", "acme")
    assert (code, out) == (2, "")
    assert f"{golden}:2: not UTF-8 text" in err
    assert not db.exists()


@pytest.mark.parametrize("text", ["", "\n", "  \n\n"])
def test_an_empty_file_is_refused(tmp_path: Path, text: str) -> None:
    golden = tmp_path / "empty.jsonl"
    golden.write_text(text)
    db = tmp_path / "fresh.db"
    code, out, err = run("--db", str(db), "eval", str(golden), "--org", "acme")
    assert (code, out) == (2, "")
    assert err == (
        f"agentcore: argument GOLDEN: {golden}: no questions (the file is empty)"
        " (see 'agentcore eval --help')\n"
    )
    assert not db.exists()


def test_a_missing_file_or_a_folder_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    missing = tmp_path / "nope.jsonl"
    code, out, err = run("--db", str(db), "eval", str(missing), "--org", "acme")
    assert (code, out) == (2, "")
    assert err == (
        f"agentcore: argument GOLDEN: No such file: {missing} (see 'agentcore eval --help')\n"
    )
    code, out, err = run("--db", str(db), "eval", str(tmp_path), "--org", "acme")
    assert (code, out) == (2, "")
    assert f"Cannot read {tmp_path}: Is a directory" in err
    assert not db.exists()


def test_mode_sets_the_chat_turns_retrieval_and_defaults_to_chat_search_mode(
    workspace: dict[str, Any],
) -> None:
    argv = ["eval", str(workspace["golden"]), "--org", "acme"]
    parser = build_parser(make_plugin_manager(), Settings.load(chat_search_mode="hybrid"))
    args = parser.parse_args(argv)
    assert (args.mode, args.env, args.top_k) == ("hybrid", "test", 5)
    assert [item.question for item in args.golden] == [line["question"] for line in GOLDEN]
    args = parser.parse_args([*argv, "--mode", "keyword"])
    # the core eval opens: its chat turns retrieve as its searches do
    assert args.opens_with(Settings.load(), args).chat_search_mode == "keyword"


@pytest.mark.slow
def test_on_a_terminal_a_bar_counts_the_questions(workspace: dict[str, Any]) -> None:
    main_fd, secondary = pty.openpty()
    argv = [*CLI, "--db", str(workspace["db"]), "eval", str(workspace["golden"])]
    process = spawn(
        [*argv, "--org", "acme", "--agent", workspace["agent"]],
        stdout=subprocess.PIPE,
        stderr=secondary,
        text=True,
        env={**cli_env(), "COLUMNS": "120"},
    )
    os.close(secondary)
    seen = read_terminal(main_fd, process, 120)
    try:
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0
    finally:
        reap(process)
    bar = seen.decode("utf-8", "replace")
    assert "\r" in bar and "5 question(s)" in bar and "100%" in bar and "5/5" in bar
    assert out.splitlines()[0].startswith("5 questions (3 answerable, 2 not)")  # stdout: the table
    assert "question(s)" not in out


def test_rerank_without_a_reranker_is_refused(workspace: dict[str, Any]) -> None:
    code, out, err = evaluate(workspace, "--rerank")
    assert code == 1 and out == ""
    assert "reranker" in err


def test_eval_reranks_its_searches_when_asked(tmp_path: Path) -> None:
    """``evaluate(rerank=True)``: each search is reordered by the core's reranker (here
    one that puts the last candidate first), and the report says it was reranked."""
    from agentcore import AgentCore, hookimpl
    from agentcore.evaluation import evaluate as run_eval
    from agentcore.evaluation import parse_golden

    calls: list[str] = []

    class LastFirst:
        name = "last-first"

        def rerank(self, query: str, documents: Any, top_n: int) -> list[tuple[int, float]]:
            calls.append(query)
            return [(i, float(i)) for i in reversed(range(len(documents)))][:top_n]

    class Registers:
        @hookimpl
        def agentcore_register_rerankers(self, register: Any, settings: Any) -> None:
            register(LastFirst())

    with AgentCore.open(tmp_path / "r.db", plugins=[Registers()], entry_points=False) as core:
        ws = core.workspace("acme")
        ws.knowledge.ingest_text("parking.txt", "Visitors park on level 2 of the garage.")
        ws.knowledge.ingest_text("lunch.txt", "Lunch is served in the cafeteria at noon.")
        golden = parse_golden(
            b'{"question": "Where do visitors park in the garage?", "source": "parking.txt"}\n',
            "g.jsonl",
        )
        plain = run_eval(ws, golden, top_k=2)
        reranked = run_eval(ws, golden, top_k=2, rerank=True)
    assert plain.figures()["search_mrr"].value == 1.0  # type: ignore[union-attr]
    assert reranked.figures()["search_mrr"].value == 0.5  # type: ignore[union-attr]
    assert len(calls) == 1 and reranked.reranked and not plain.reranked
    assert reranked.as_json()["reranked"] is True
    assert ", reranked, top 2;" in reranked.table()[0]
