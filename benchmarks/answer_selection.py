"""What each of the extractive model's question-reading rules adds, per article.

The SQuAD sample has two articles; a rule found on one must be checked on the other.
This prints the same PDFs as ``retrieval_quality.py`` (2 and 3 paragraphs a page),
ingests them once per pagination through the public API, keeps for every answerable
question the ``chat_top_k`` passages chat retrieves and the workspace's word counts
(``ChatRequest.term_stats``), then answers offline with the model as it is and with
one rule switched off at a time (and all five: the selection before them), and
prints per article and pagination:

    cited = answers whose citations name the gold page (as in ``retrieval_quality``)
    answered = answers whose text holds a gold answer
    pages/answer = pages an answer cites

The "as is" rows equal ``retrieval_quality.py``'s chat columns. Run:

    python benchmarks/answer_selection.py [--squad PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retrieval_quality import DEFAULT_SQUAD, build_pdfs  # noqa: E402

from agentcore import AgentCore  # noqa: E402
from agentcore.chat import build_citations, passages_of  # noqa: E402
from agentcore.chat_models import ChatRequest  # noqa: E402
from agentcore.plugins.extractive import GATES, ExtractiveModel  # noqa: E402

Case = tuple[str, int, tuple[str, ...], ChatRequest]  # article, gold page, answers, request


def retrieve_all(squad: Path, paragraphs_per_page: int) -> list[Case]:
    """Ingest the articles; keep each answerable question's request as chat builds it."""
    cases: list[Case] = []
    with tempfile.TemporaryDirectory() as tmp:
        core = AgentCore.open(str(Path(tmp) / "selection.db"))
        try:
            ws = core.workspace("selection", "test")
            k = core.settings.chat_top_k
            ingested = [
                (
                    ws.knowledge.ingest_file(data, filename=name, content_type="application/pdf"),
                    gold,
                )
                for name, data, gold in build_pdfs(squad, paragraphs_per_page)
            ]
            for doc, gold in ingested:
                for question, expected in gold.items():
                    passages = passages_of(ws.knowledge.retrieve(question, k))
                    request = ChatRequest(
                        system_prompt="",
                        message=question,
                        passages=passages,
                        term_stats=ws.knowledge.term_stats(question),
                    )
                    cases.append((doc.source, expected.page, expected.answers, request))
        finally:
            core.close()
    return cases


class _NoCountWords(ExtractiveModel):
    COUNT_WORDS_ARE_CONTENT = True


class _NoNameCase(ExtractiveModel):
    NAMES_MATCH_LOWER_CASE = True


class _NoCounting(ExtractiveModel):
    ANY_SENTENCE_ANSWERS_A_COUNT = True


class _NoKind(ExtractiveModel):
    THE_KIND_ALONE_ANSWERS = True


class _NoRules(ExtractiveModel):
    COUNT_WORDS_ARE_CONTENT = True
    NAMES_MATCH_LOWER_CASE = True
    ANY_SENTENCE_ANSWERS_A_COUNT = True
    THE_KIND_ALONE_ANSWERS = True


# label, model, whether the request keeps the workspace's word counts; each model has the
# gate the core registers for the embedder retrieving here (``hashing-v1``)
GATE = GATES["hashing-v1"]
VARIANTS: list[tuple[str, ExtractiveModel, bool]] = [
    ("as is", ExtractiveModel(gate=GATE), True),
    ("without workspace rarity", ExtractiveModel(gate=GATE), False),
    ("without the number rule", _NoCountWords(gate=GATE), True),
    ("without the name-case rule", _NoNameCase(gate=GATE), True),
    ("without the counting rule", _NoCounting(gate=GATE), True),
    ("without the answer-kind rule", _NoKind(gate=GATE), True),
    ("without all five (before)", _NoRules(gate=GATE), False),
]


def score(
    model: ExtractiveModel, cases: list[Case], rarity: bool
) -> dict[str, tuple[int, int, int, int]]:
    """Per article: ``(questions, cited, answered, pages cited)``."""
    totals: dict[str, list[int]] = {}
    for article, page, answers, request in cases:
        asked = request if rarity else replace(request, term_stats=None)
        result = model.complete(asked)
        citations = build_citations(request.passages, result.used_passage_ids, result.text)
        row = totals.setdefault(article, [0, 0, 0, 0])
        row[0] += 1
        row[1] += any(c.source == article and page in c.pages for c in citations)
        text = result.text.casefold()
        row[2] += any(answer.casefold() in text for answer in answers)
        row[3] += sum(len(c.pages) for c in citations)
    return {article: (r[0], r[1], r[2], r[3]) for article, r in totals.items()}


def main(argv: list[str] | None = None) -> int:
    """Print one Markdown row per variant, pagination and article (and overall)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD), help="SQuAD-format JSON file")
    args = parser.parse_args(argv)
    squad = Path(args.squad).resolve()
    print("| variant | pp | article | questions | cited | answered | pages/answer |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for per_page in (2, 3):
        cases = retrieve_all(squad, per_page)
        for label, model, rarity in VARIANTS:
            rows = score(model, cases, rarity)
            total = [sum(column) for column in zip(*rows.values(), strict=True)]
            for article, (n, cited, answered, pages) in [*rows.items(), ("overall", total)]:
                print(
                    f"| {label} | {per_page} | {article} | {n} | {cited / n:.3f} ({cited}) "
                    f"| {answered / n:.3f} | {pages / n:.2f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
