"""Retrieval quality: SQuAD articles as PDFs, page-level recall@1/@5 of knowledge search.

Each article of the SQuAD sample is printed to a PDF, two paragraphs a page, and
ingested through the public API (``AgentCore`` on a temporary SQLite file, all
articles in one workspace). Every answerable question is searched with ``top_k=5``.

    R@k = share of questions where one of the top-k results is from the question's
    document and its pages include the page holding the question's gold paragraph.

A chunk spanning pages counts for each of them. Prints a Markdown table, writes
``benchmarks/results/retrieval_quality.json`` and exits 0. When the public API is
not importable it falls back to the pipeline functions with plain numpy cosine and
says so in the output. Run: ``python benchmarks/retrieval_quality.py [--squad PATH]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SQUAD = REPO / ".." / "shared" / "eval" / "squad-sample.json"
RESULTS = REPO / "benchmarks" / "results" / "retrieval_quality.json"
PARAGRAPHS_PER_PAGE = 2
TOP_K = 5
FONT_CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/Library/Fonts/DejaVuSans.ttf",
)

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PdfCase = tuple[str, bytes, dict[str, int]]
# question -> ranked (document key, pages) of the top-k results
Searcher = Callable[[str], list[tuple[str, list[int]]]]


def build_pdfs(path_to_squad: str | Path) -> list[PdfCase]:
    """Render each SQuAD article as a PDF, ``PARAGRAPHS_PER_PAGE`` paragraphs a page.

    :return: one ``(filename, pdf bytes, {question: gold page})`` per article, for
        the answerable questions; pages are 1-based.
    """
    from fpdf import FPDF

    squad = json.loads(Path(path_to_squad).read_text(encoding="utf-8"))
    font = next((f for f in FONT_CANDIDATES if Path(f).exists()), None)
    cases: list[PdfCase] = []
    for article in squad["data"]:
        pdf = FPDF()
        pdf.set_auto_page_break(auto=True, margin=15)
        if font:
            pdf.add_font("Body", "", font)
            pdf.set_font("Body", size=11)
        else:  # core font: latin-1 only
            pdf.set_font("Helvetica", size=11)
        gold: dict[str, int] = {}
        for number, paragraph in enumerate(article["paragraphs"]):
            if number % PARAGRAPHS_PER_PAGE == 0:
                pdf.add_page()
            page = pdf.page_no()
            text = paragraph["context"]
            if not font:
                text = text.encode("latin-1", "replace").decode("latin-1")
            pdf.multi_cell(0, 6, text)
            pdf.ln(4)
            if pdf.page_no() != page:
                raise RuntimeError(f"a paragraph of {article['title']} overflowed its page")
            for qa in paragraph["qas"]:
                if not qa.get("is_impossible"):
                    gold[qa["question"]] = page
        cases.append((f"{article['title']}.pdf", bytes(pdf.output()), gold))
    return cases


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


def _recall(
    key: str, gold: dict[str, int], search: Searcher
) -> tuple[float, float, list[dict[str, Any]]]:
    hits1 = hits5 = 0
    misses: list[dict[str, Any]] = []
    for question, page in gold.items():
        ranked = search(question)
        hit = [doc == key and page in pages for doc, pages in ranked[:TOP_K]]
        hits1 += bool(hit[:1] and hit[0])
        hits5 += any(hit)
        if not any(hit):
            misses.append({"question": question, "gold_page": page, "top_pages": ranked})
    return hits1 / len(gold), hits5 / len(gold), misses


def run_api(cases: list[PdfCase]) -> tuple[list[ArticleResult], list[dict[str, Any]]]:
    """Ingest and search through ``AgentCore`` (the library's public API)."""
    from agentcore import AgentCore

    results: list[ArticleResult] = []
    misses: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        core = AgentCore.open(str(Path(tmp) / "bench.db"))
        try:
            ws = core.workspace("bench", "test")
            ingested = []
            for filename, data, gold in cases:
                started = time.perf_counter()
                doc = ws.knowledge.ingest_file(
                    data, filename=filename, content_type="application/pdf"
                )
                ingested.append((doc, time.perf_counter() - started, gold))

            def search(question: str) -> list[tuple[str, list[int]]]:
                response = ws.knowledge.search(question, top_k=TOP_K)
                return [(r.document_id, list(r.pages)) for r in response.results]

            for doc, seconds, gold in ingested:
                r1, r5, missed = _recall(doc.id, gold, search)
                misses += missed
                results.append(
                    ArticleResult(doc.source, len(gold), doc.pages, doc.chunks, r1, r5, seconds)
                )
        finally:
            core.close()
    return results, misses


def run_direct(cases: list[PdfCase]) -> tuple[list[ArticleResult], list[dict[str, Any]]]:
    """The same evaluation with parse -> chunk -> embed and numpy cosine, no store."""
    import numpy as np

    from agentcore.config import Settings
    from agentcore.knowledge.chunking import chunk_pages
    from agentcore.knowledge.ingest import parse_document
    from agentcore.plugins.hashing_embedder import HashingEmbedder

    settings = Settings()
    embedder = HashingEmbedder()
    rows: list[tuple[str, list[int]]] = []
    matrices = []
    timings = []
    for filename, data, _gold in cases:
        started = time.perf_counter()
        parsed = parse_document(
            data,
            filename,
            "application/pdf",
            max_bytes=settings.max_upload_bytes,
            max_pages=settings.max_pdf_pages,
        )
        chunks = chunk_pages(
            parsed.pages,
            target_chars=settings.chunk_target_chars,
            overlap_chars=settings.chunk_overlap_chars,
        )
        matrices.append(embedder.embed([c.text for c in chunks]))
        timings.append((time.perf_counter() - started, len(parsed.pages), len(chunks)))
        rows += [(filename, c.pages) for c in chunks]
    matrix = np.vstack(matrices)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)

    def search(question: str) -> list[tuple[str, list[int]]]:
        scores = matrix @ embedder.embed([question], kind="query")[0]
        return [rows[i] for i in np.argsort(-scores, kind="stable")[:TOP_K]]

    results: list[ArticleResult] = []
    misses: list[dict[str, Any]] = []
    for (filename, _data, gold), (seconds, pages, chunks) in zip(cases, timings, strict=True):
        r1, r5, missed = _recall(filename, gold, search)
        misses += missed
        results.append(ArticleResult(filename, len(gold), pages, chunks, r1, r5, seconds))
    return results, misses


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD), help="SQuAD-format JSON file")
    parser.add_argument("--direct", action="store_true", help="skip the API, use the pipeline")
    args = parser.parse_args(argv)
    squad = Path(args.squad)
    if not squad.is_absolute() and not squad.exists():
        squad = REPO / squad
    cases = build_pdfs(squad.resolve())

    mode = "api"
    if args.direct:
        mode = "direct"
    else:
        try:
            import agentcore

            agentcore.AgentCore  # noqa: B018 - fails when the public API is missing
        except (ImportError, AttributeError) as exc:
            print(f"public API unavailable ({exc}); falling back to the direct pipeline")
            mode = "direct"
    results, misses = run_api(cases) if mode == "api" else run_direct(cases)

    total = sum(r.questions for r in results)
    overall_r1 = sum(r.r_at_1 * r.questions for r in results) / total
    overall_r5 = sum(r.r_at_5 * r.questions for r in results) / total
    seconds = sum(r.ingest_seconds for r in results)

    print(
        f"Retrieval quality ({mode}: {'AgentCore search' if mode == 'api' else 'numpy cosine'}, "
        f"{PARAGRAPHS_PER_PAGE} paragraphs a page, page-level recall)\n"
    )
    print("| article | questions | pages | chunks | R@1 | R@5 | ingest s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.article} | {r.questions} | {r.pages} | {r.chunks} | {r.r_at_1:.3f} "
            f"| {r.r_at_5:.3f} | {r.ingest_seconds:.2f} |"
        )
    print(
        f"| **overall** | {total} | {sum(r.pages for r in results)} "
        f"| {sum(r.chunks for r in results)} | {overall_r1:.3f} | {overall_r5:.3f} "
        f"| {seconds:.2f} |"
    )

    from agentcore.config import Settings

    settings = Settings()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "retrieval_quality",
        "mode": mode,
        "squad": str(squad),
        "paragraphs_per_page": PARAGRAPHS_PER_PAGE,
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
        },
        "articles": [asdict(r) for r in results],
        "misses": misses,
    }
    RESULTS.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
