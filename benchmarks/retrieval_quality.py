"""Retrieval and answer quality: SQuAD articles as PDFs, page-level recall and citations.

Each article of the SQuAD sample is printed to a PDF, two paragraphs a page (or
``--paragraphs-per-page N``: the same text paginated differently; ``squad_golden.py``
prints them and finds each question's gold page), and ingested through the public API
(``AgentCore`` on a temporary SQLite file, all articles in one workspace). Every
answerable question goes through ``agentcore.evaluation.evaluate`` (what ``agentcore
eval`` runs), which searches it with ``top_k=5`` and computes the figures:

    R@k = share of questions where one of the top-k results is from the question's
    document and its pages include the page holding the question's gold paragraph
    (``search_page_recall_at_<k>``).

A chunk spanning pages counts for each of them. Every question is also sent to a
chat agent using the default (extractive) model:

    cited = share of answers whose citations name the question's document and gold page
        (``cites_page``)
    answered = share of answers whose text contains one of the gold answers (any case;
        ``answer_contains``)
    pages/answer = mean number of pages an answer cites (a citation that named every
        page would be "cited" always; this shows it does not)
    chat p50 ms = median wall time of one ``ws.chat.send`` (retrieval, the model,
        citations, storing the turn); chat CPU ms = median CPU time of this process
        during one, which other processes' load barely moves

Rows are per article: a method or parameter chosen on one article is checked on the
other (the sample has two). ``--code PATH`` imports ``agentcore`` from another checkout
(e.g. ``main``) to measure the code before a change on the same machine; the figures'
code (``agentcore/evaluation.py``) is still this checkout's, so both are measured
alike, also a checkout from before the module. The JSON's misses name each top result
by its document's source.

Last, a generated 100-page PDF (about 400 words a page) is ingested and timed.
Prints Markdown tables, writes ``benchmarks/results/retrieval_quality.json`` and
exits 0. Run: ``python benchmarks/retrieval_quality.py [--squad PATH] [--skip-chat]
[--paragraphs-per-page N] [--code PATH] [--modes vector keyword hybrid]``.

``--modes`` compares search modes instead: each mode gets a fresh core whose searches
and chat turns (``chat_search_mode``) use it, and prints R@1, R@5 and the chat columns
per mode.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from types import ModuleType
from typing import Any

from squad_golden import (  # standard library only: safe before choosing a checkout
    DEFAULT_SQUAD,
    PARAGRAPHS_PER_PAGE,
    REPO,
    golden_lines,
    render_pdfs,
)

RESULTS = REPO / "benchmarks" / "results" / "retrieval_quality.json"
TOP_K = 5

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PdfCase = tuple[str, bytes, dict[str, "Gold"]]


@dataclass(frozen=True)
class Gold:
    """Where a question's answer is (1-based page) and the accepted answer texts."""

    page: int
    answers: tuple[str, ...]


def build_pdfs(
    path_to_squad: str | Path, paragraphs_per_page: int = PARAGRAPHS_PER_PAGE
) -> list[PdfCase]:
    """Render each SQuAD article as a PDF, ``paragraphs_per_page`` paragraphs a page
    (``squad_golden.py``: the same PDFs and gold pages as ``agentcore eval``'s golden file).

    :return: one ``(filename, pdf bytes, {question: Gold})`` per article, for the
        answerable questions.
    """
    squad = json.loads(Path(path_to_squad).read_text(encoding="utf-8"))
    gold: dict[str, dict[str, Gold]] = {}
    for line in golden_lines(squad, paragraphs_per_page):
        if "source" in line:
            answers = tuple(line.get("answer", ()))
            gold.setdefault(line["source"], {})[line["question"]] = Gold(line["pages"][0], answers)
    return [
        (name, data, gold.get(name, {})) for name, data in render_pdfs(squad, paragraphs_per_page)
    ]


@dataclass
class ArticleResult:
    """Recall of one article's questions."""

    article: str
    questions: int
    pages: int
    chunks: int
    r_at_1: float
    r_at_5: float
    ingest_seconds: float
    cited: float | None = None
    answered: float | None = None
    pages_cited: float | None = None
    chat_p50_ms: float | None = None
    chat_seconds: list[float] = field(default_factory=list, repr=False)
    chat_cpu_seconds: list[float] = field(default_factory=list, repr=False)
    chat_cpu_p50_ms: float | None = None


def _evaluation() -> ModuleType:
    """This checkout's ``agentcore/evaluation.py``, loaded from its file: with ``--code``
    the other checkout (which may predate it) is measured by the same figures."""
    spec = importlib.util.spec_from_file_location(
        "retrieval_quality_evaluation", REPO / "agentcore" / "evaluation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _evaluate(
    evaluation: ModuleType,
    ws: Any,
    ingested: tuple[Any, float, dict[str, Gold]],
    agent_id: str | None,
    mode: str | None,
) -> tuple[ArticleResult, list[dict[str, Any]]]:
    """Search (and chat, given ``agent_id``) each question of an ingested article (its
    document, ingestion seconds and gold) through ``evaluation.evaluate``: the
    article's row, and the questions whose gold page is not in the top ``TOP_K``."""
    doc, seconds, gold = ingested
    golden = [
        evaluation.GoldenQuestion(question, doc.source, (expected.page,), expected.answers)
        for question, expected in gold.items()
    ]
    report = evaluation.evaluate(ws, golden, agent_id=agent_id, top_k=TOP_K, mode=mode)
    outcomes = report.outcomes
    result = ArticleResult(
        doc.source,
        len(golden),
        doc.pages,
        doc.chunks,
        evaluation.recall_at(outcomes, 1, pages=True).value,
        evaluation.recall_at(outcomes, TOP_K, pages=True).value,
        seconds,
    )
    if agent_id is not None:
        figures = report.figures()
        result.cited = figures["cites_page"].value
        result.answered = figures["answer_contains"].value
        result.pages_cited = sum(len(c.pages) for o in outcomes for c in o.answer.citations) / len(
            outcomes
        )
        result.chat_seconds = [o.chat_seconds for o in outcomes]
        result.chat_cpu_seconds = [o.chat_cpu_seconds for o in outcomes]
        result.chat_p50_ms = median(result.chat_seconds) * 1000
        result.chat_cpu_p50_ms = median(result.chat_cpu_seconds) * 1000
    misses = [
        {
            "question": o.golden.question,
            "gold_page": o.golden.pages[0],
            "top_pages": [(r.source, list(r.pages)) for r in o.results],
        }
        for o in outcomes
        if o.page_rank is None
    ]
    return result, misses


def run_api(
    cases: list[PdfCase], *, chat: bool = True, mode: str | None = None
) -> tuple[list[ArticleResult], list[dict[str, Any]]]:
    """Ingest, search and chat through ``AgentCore`` (the library's public API);
    ``mode`` (when given) is both the search mode and the chat's ``chat_search_mode``."""
    from agentcore import AgentCore

    evaluation = _evaluation()
    results: list[ArticleResult] = []
    misses: list[dict[str, Any]] = []
    settings: dict[str, Any] = {} if mode is None else {"chat_search_mode": mode}
    with tempfile.TemporaryDirectory() as tmp:
        core = AgentCore.open(str(Path(tmp) / "bench.db"), **settings)
        try:
            ws = core.workspace("bench", "test")
            ingested = []
            for filename, data, gold in cases:
                started = time.perf_counter()
                doc = ws.knowledge.ingest_file(
                    data, filename=filename, content_type="application/pdf"
                )
                ingested.append((doc, time.perf_counter() - started, gold))
            agent = ws.agents.create(name="SQuAD", role="support")
            for article in ingested:
                result, missed = _evaluate(
                    evaluation, ws, article, agent.id if chat else None, mode
                )
                results.append(result)
                misses += missed
        finally:
            core.close()
    return results, misses


def time_large_pdf(
    squad: Path = DEFAULT_SQUAD, pages: int = 100, words: int = 400
) -> tuple[float, int]:
    """Seconds to ingest a generated ``pages``-page PDF of ``words`` words a page,
    drawn from the vocabulary of ``squad``."""
    import random

    from fpdf import FPDF

    from agentcore import AgentCore

    vocabulary = [w.strip(".,") for w in (squad.read_text(encoding="utf-8").split())]
    vocabulary = [w for w in vocabulary if w.isascii() and w.isalpha()][:5000]
    rng = random.Random(7)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=9)
    for _ in range(pages):
        pdf.add_page()
        sentences = []
        for _ in range(words // 12):
            sentences.append(" ".join(rng.choice(vocabulary) for _ in range(12)).capitalize() + ".")
        pdf.multi_cell(0, 4, " ".join(sentences))
    data = bytes(pdf.output())
    with tempfile.TemporaryDirectory() as tmp:
        core = AgentCore.open(str(Path(tmp) / "large.db"))
        try:
            started = time.perf_counter()
            doc = core.workspace("bench", "test").knowledge.ingest_file(data, filename="large.pdf")
            return time.perf_counter() - started, doc.pages
        finally:
            core.close()


def _weighted(results: list[ArticleResult], name: str) -> float | None:
    values = [(getattr(r, name), r.questions) for r in results]
    if any(value is None for value, _ in values):
        return None
    return round(sum(v * n for v, n in values) / sum(n for _, n in values), 4)


def compare_modes(cases: list[PdfCase], modes: list[str], *, chat: bool) -> dict[str, Any]:
    """Every question searched and chatted in each of ``modes`` (one fresh core each,
    its chat turns retrieving in that mode); prints one row per mode."""
    rows: dict[str, Any] = {}
    print("| mode | R@1 | R@5 | chat cited | chat answered | pages/answer | chat p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        results, _ = run_api(cases, chat=chat, mode=mode)
        turns = [t for r in results for t in r.chat_seconds]
        row = {
            name: _weighted(results, name)
            for name in ("r_at_1", "r_at_5", "cited", "answered", "pages_cited")
        }
        row["chat_p50_ms"] = round(median(turns) * 1000, 2) if turns else None
        rows[mode] = row
        cells = [
            "-" if row[n] is None else f"{row[n]:.3f}"
            for n in ("r_at_1", "r_at_5", "cited", "answered", "pages_cited")
        ]
        p50 = "-" if row["chat_p50_ms"] is None else f"{row['chat_p50_ms']:.1f}"
        print(f"| {mode} | {' | '.join(cells)} | {p50} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD), help="SQuAD-format JSON file")
    parser.add_argument("--skip-chat", action="store_true", help="measure retrieval only")
    parser.add_argument(
        "--paragraphs-per-page",
        type=int,
        default=PARAGRAPHS_PER_PAGE,
        help="paragraphs printed on each PDF page",
    )
    parser.add_argument(
        "--code", help="import agentcore from this checkout instead (e.g. /work/main)"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["vector", "keyword", "hybrid"],
        help="compare these search modes (search and chat retrieval) instead; prints one"
        " row per mode and writes retrieval_modes.json",
    )
    args = parser.parse_args(argv)
    if args.code:
        sys.path.insert(0, str(Path(args.code).resolve()))
        sys.modules.pop("agentcore", None)
    squad = Path(args.squad)
    if not squad.is_absolute() and not squad.exists():
        squad = REPO / squad
    per_page = args.paragraphs_per_page
    cases = build_pdfs(squad.resolve(), per_page)

    chat = not args.skip_chat
    if args.modes:
        print(f"Search modes ({per_page} paragraphs a page, page-level, top_k={TOP_K})\n")
        rows = compare_modes(cases, args.modes, chat=chat)
        written = RESULTS.with_name("retrieval_modes.json")
        written.parent.mkdir(parents=True, exist_ok=True)
        written.write_text(
            json.dumps({"squad": str(squad), "paragraphs_per_page": per_page, "modes": rows})
            + "\n",
            encoding="utf-8",
        )
        print(f"\nwrote {written.relative_to(REPO)}")
        return 0
    results, misses = run_api(cases, chat=chat)
    large_seconds, large_pages = time_large_pdf(squad.resolve())

    total = sum(r.questions for r in results)
    overall_r1 = sum(r.r_at_1 * r.questions for r in results) / total
    overall_r5 = sum(r.r_at_5 * r.questions for r in results) / total
    seconds = sum(r.ingest_seconds for r in results)

    cited = _weighted(results, "cited")
    answered = _weighted(results, "answered")
    pages_cited = _weighted(results, "pages_cited")
    turns = [t for r in results for t in r.chat_seconds]
    chat_p50 = median(turns) * 1000 if turns else None
    cpu_turns = [t for r in results for t in r.chat_cpu_seconds]
    chat_cpu_p50 = median(cpu_turns) * 1000 if cpu_turns else None

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    print(f"Retrieval and answer quality (AgentCore, {per_page} paragraphs a page, page-level)\n")

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    print(
        "| article | questions | pages | chunks | R@1 | R@5 | chat cited | chat answered "
        "| pages/answer | chat p50 ms | chat CPU ms | ingest s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.article} | {r.questions} | {r.pages} | {r.chunks} | {r.r_at_1:.3f} "
            f"| {r.r_at_5:.3f} | {share(r.cited)} | {share(r.answered)} "
            f"| {share(r.pages_cited)} | {ms(r.chat_p50_ms)} | {ms(r.chat_cpu_p50_ms)} "
            f"| {r.ingest_seconds:.2f} |"
        )
    print(
        f"| **overall** | {total} | {sum(r.pages for r in results)} "
        f"| {sum(r.chunks for r in results)} | {overall_r1:.3f} | {overall_r5:.3f} "
        f"| {share(cited)} | {share(answered)} | {share(pages_cited)} | {ms(chat_p50)} "
        f"| {ms(chat_cpu_p50)} | {seconds:.2f} |"
    )
    print(f"\n{large_pages}-page PDF ingested in {large_seconds:.2f} s (target < 5 s)")
    import agentcore

    print(f"agentcore imported from {Path(agentcore.__file__).parent}")

    from agentcore.config import Settings

    settings = Settings()
    results_file = RESULTS
    if per_page != PARAGRAPHS_PER_PAGE:
        results_file = RESULTS.with_name(f"{RESULTS.stem}_{per_page}pp.json")
    if args.code:
        results_file = results_file.with_name(f"{results_file.stem}_code.json")
    results_file.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "retrieval_quality",
        "squad": str(squad),
        "paragraphs_per_page": per_page,
        "code": args.code or str(REPO),
        "top_k": TOP_K,
        "embedder": settings.embedder,
        "chunk_target_chars": settings.chunk_target_chars,
        "chunk_overlap_chars": settings.chunk_overlap_chars,
        "python": platform.python_version(),
        "overall": {
            "questions": total,
            "r_at_1": round(overall_r1, 4),
            "r_at_5": round(overall_r5, 4),
            "ingest_seconds": round(seconds, 3),
            "chat_cited": cited,
            "chat_answered": answered,
            "chat_pages_per_answer": pages_cited,
            "chat_p50_ms": chat_p50,
            "chat_cpu_p50_ms": chat_cpu_p50,
        },
        "large_pdf": {"pages": large_pages, "ingest_seconds": round(large_seconds, 3)},
        "articles": [
            {k: v for k, v in asdict(r).items() if k not in {"chat_seconds", "chat_cpu_seconds"}}
            for r in results
        ],
        "misses": misses,
    }
    results_file.write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"\nwrote {results_file.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
