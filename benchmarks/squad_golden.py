"""The SQuAD sample as a golden file for ``agentcore eval``, and the PDFs it asks about.

Each article is printed to ``<title>.pdf``, ``--paragraphs-per-page`` paragraphs a page
(2 by default, as ``retrieval_quality.py`` prints them). Each answerable question becomes
a line with ``source`` (that PDF's name, as ``agentcore ingest`` names the document),
``pages`` (the page its paragraph is printed on) and ``answer`` (its gold answers, of
which the answer must hold one); each ``is_impossible`` question a line with its
``question`` only, which the agent should not answer. Run::

    python benchmarks/squad_golden.py OUT [--squad PATH] [--paragraphs-per-page N]

It writes ``OUT/golden.jsonl`` and ``OUT/pdfs/<title>.pdf`` (fpdf2, the ``bench`` extra),
then ``agentcore ingest ... OUT/pdfs`` and ``agentcore eval OUT/golden.jsonl ...``
measure them (docs/evaluation.md). ``golden_lines`` needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SQUAD = REPO / ".." / "shared" / "eval" / "squad-sample.json"
PARAGRAPHS_PER_PAGE = 2
FONT_CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/Library/Fonts/DejaVuSans.ttf",
)


def page_of(paragraph: int, paragraphs_per_page: int) -> int:
    """The 1-based page an article's ``paragraph``-th paragraph (from 0) is printed on:
    each page starts with a new group of paragraphs, and none runs over its page."""
    return paragraph // paragraphs_per_page + 1


def source_of(article: dict[str, Any]) -> str:
    """The name of an article's PDF, which is its document's ``source`` once ingested."""
    return f"{article['title']}.pdf"


def golden_lines(
    squad: dict[str, Any], paragraphs_per_page: int = PARAGRAPHS_PER_PAGE
) -> list[dict[str, Any]]:
    """One golden line per question of ``squad`` (SQuAD 2.0's JSON), in the file's order."""
    lines: list[dict[str, Any]] = []
    for article in squad["data"]:
        for number, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                line: dict[str, Any] = {"question": qa["question"]}
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", [])))
                if not qa.get("is_impossible"):
                    line["source"] = source_of(article)
                    line["pages"] = [page_of(number, paragraphs_per_page)]
                    if answers:
                        line["answer"] = answers
                lines.append(line)
    return lines


def render_pdfs(
    squad: dict[str, Any], paragraphs_per_page: int = PARAGRAPHS_PER_PAGE
) -> list[tuple[str, bytes]]:
    """Each article of ``squad`` as ``(source, pdf bytes)``, paragraphs laid out as
    ``page_of`` says (a paragraph that runs over its page is an error)."""
    from fpdf import FPDF

    font = next((f for f in FONT_CANDIDATES if Path(f).exists()), None)
    pdfs: list[tuple[str, bytes]] = []
    for article in squad["data"]:
        pdf = FPDF()
        pdf.set_auto_page_break(auto=True, margin=15)
        if font:
            pdf.add_font("Body", "", font)
            pdf.set_font("Body", size=11)
        else:  # core font: latin-1 only
            pdf.set_font("Helvetica", size=11)
        for number, paragraph in enumerate(article["paragraphs"]):
            if number % paragraphs_per_page == 0:
                pdf.add_page()
            page = pdf.page_no()
            text = paragraph["context"]
            if not font:
                text = text.encode("latin-1", "replace").decode("latin-1")
            pdf.multi_cell(0, 6, text)
            pdf.ln(4)
            if pdf.page_no() != page or page != page_of(number, paragraphs_per_page):
                raise RuntimeError(f"a paragraph of {article['title']} overflowed its page")
        pdfs.append((source_of(article), bytes(pdf.output())))
    return pdfs


def main(argv: list[str] | None = None) -> int:
    """Write the golden file and the PDFs; print what was written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", help="the folder to write golden.jsonl and pdfs/ into")
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD), help="SQuAD-format JSON file")
    parser.add_argument(
        "--paragraphs-per-page",
        type=int,
        default=PARAGRAPHS_PER_PAGE,
        help="paragraphs printed on each PDF page",
    )
    args = parser.parse_args(argv)
    squad = json.loads(Path(args.squad).read_text(encoding="utf-8"))
    out = Path(args.out)
    (out / "pdfs").mkdir(parents=True, exist_ok=True)
    for name, data in render_pdfs(squad, args.paragraphs_per_page):
        (out / "pdfs" / name).write_bytes(data)
    lines = golden_lines(squad, args.paragraphs_per_page)
    with (out / "golden.jsonl").open("w", encoding="utf-8") as golden:
        for line in lines:
            golden.write(json.dumps(line, ensure_ascii=False) + "\n")
    answerable = sum(1 for line in lines if "source" in line)
    print(
        f"wrote {out / 'golden.jsonl'} ({len(lines)} questions, {answerable} answerable)"
        f" and {len(squad['data'])} PDFs in {out / 'pdfs'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
