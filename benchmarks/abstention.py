"""Knowing when not to answer: abstention on questions the knowledge does not answer.

The SQuAD sample has two articles. Each *fold* ingests ONE article's PDF (printed as
``squad_golden.py`` prints it) into a fresh workspace and asks a draft agent with the
default (extractive) model, through ``agentcore.evaluation.evaluate`` (what ``agentcore
eval`` runs):

- **answerable**: that article's answerable questions (``cites_page``: the answer cites
  the gold page);
- **out of corpus**: the OTHER article's answerable questions, as lines without
  ``source``: their answers are nowhere in the workspace (``abstains``);
- **off topic**: a handful of hand-written questions about nothing in either article,
  like the issue's "How many weeks of parental leave?" (``abstains``);
- **SQuAD impossible**: that article's ``is_impossible`` questions (``abstains``). These
  are adversarial, written from the article's own words to look answerable by it; they
  are reported apart and the gate is not tuned on them.

While each turn runs, the model's evidence is recorded (the best sentence's covered
share of the question, the share some passage holds, the best retrieval cosine), so
``--sweep`` prints what each threshold on one of them would give without asking again:
a gate only turns answers into abstentions, so the simulated figures are the ones a
rerun would measure. ``--calibrate`` asks with the model's gate open (every best
sentence answers) and chooses the embedder's ``Gate`` (``covered + score_weight ×
top_score ≥ min_support``): of the pairs refusing ≥ 90% out of corpus on both folds,
the one citing the gold page most often over both, then refusing most. Run::

    python benchmarks/abstention.py [--squad PATH] [--calibrate] [--sweep FEATURE ...]
        [--json OUT]

The embedder is the core's (``AGENTCORE_EMBEDDER``, ``hashing-v1`` by default).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squad_golden import DEFAULT_SQUAD, PARAGRAPHS_PER_PAGE, REPO, golden_lines, render_pdfs

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OFF_TOPIC = (
    "How many weeks of parental leave do I get?",
    "How do I reset my password?",
    "What is the capital of Australia?",
    "Can I bring my dog to the office?",
    "What time does the cafeteria open?",
    "Who won the football World Cup in 2014?",
    "How much does shipping to Canada cost?",
    "What is the recipe for banana bread?",
    "How do I file an expense report?",
    "What is the boiling point of water at sea level?",
    "Which programming language should I learn first?",
    "Is there a dress code?",
)

FEATURES = ("covered", "share", "top_score", "unknown")


@dataclass
class Row:
    """One question's set, outcome and the model's evidence."""

    kind: str  # answerable | out_of_corpus | off_topic | impossible
    question: str
    answered: bool
    cites_page: bool
    evidence: dict[str, float] | None


HANDBOOK = REPO / "docs" / "handbook.pdf"
HANDBOOK_ANSWERABLE = (
    ("How many vacation days do I get?", 4),
    ("Who do I ask about my pay?", 1),
    ("When do meetings have to be?", 2),
    ("How much notice do I give when I leave?", 5),
    ("Is alcohol reimbursed?", 3),
    ("How many days a week can I work from home?", 2),
    ("When do unused vacation days expire?", 4),
    ("Within how many days must I submit receipts?", 3),
    ("Who takes care of desks and equipment?", 1),
    ("What class do I fly on short flights?", 3),
    ("When do I get my final pay slip?", 5),
    ("Are public holidays counted as vacation days?", 4),
    ("How do I book travel?", 3),
    ("When is the office open?", 2),
    ("Is the exit interview mandatory?", 5),
)
"""Questions ``docs/handbook.pdf`` answers, each with its page, written before the
handbook fold was first run."""
HANDBOOK_UNANSWERED = (
    "How many weeks of parental leave?",
    "Do I get a company car?",
    "What is the maternity policy?",
    "Is there a pension plan?",
    "How much is the yearly bonus?",
    "Where can I park my car?",
    "Does Acme pay for a gym membership?",
    "What is the salary range for engineers?",
    "Who is the CEO of Acme?",
    "When is the company holiday party?",
    "How much do I get paid for overtime?",
    "How many sick days do I get per year?",
    "Can I get my training courses reimbursed?",
    "What is the probation period?",
)
"""Questions an employee might ask that the handbook does not answer (the issue's
"How many weeks of parental leave?" first), written with ``HANDBOOK_ANSWERABLE``."""

Golden = list[tuple[str, Any]]  # (kind, evaluation.GoldenQuestion)


def squad_folds(squad: dict[str, Any]) -> list[tuple[str, bytes, Golden]]:
    """Each article's PDF and the questions asked with it alone ingested (the PDFs
    printed once for all folds)."""
    from agentcore import evaluation

    pdfs = dict(render_pdfs(squad, PARAGRAPHS_PER_PAGE))
    lines = golden_lines(squad, PARAGRAPHS_PER_PAGE)
    folds = []
    for article in squad["data"]:
        source = f"{article['title']}.pdf"
        mine = {q["question"] for p in article["paragraphs"] for q in p["qas"]}
        golden: Golden = []
        for line in lines:
            if line["question"] in mine:
                if "source" in line:
                    item = evaluation.GoldenQuestion(
                        line["question"],
                        line["source"],
                        tuple(line["pages"]),
                        tuple(line.get("answer", ())),
                    )
                    golden.append(("answerable", item))
                else:
                    golden.append(("impossible", evaluation.GoldenQuestion(line["question"])))
            elif "source" in line:
                golden.append(("out_of_corpus", evaluation.GoldenQuestion(line["question"])))
        folds.append((source, pdfs[source], golden))
    return folds


def handbook_fold() -> tuple[str, bytes, Golden]:
    """The docs' five-page handbook and its hand-written questions."""
    from agentcore import evaluation

    golden: Golden = [
        ("answerable", evaluation.GoldenQuestion(q, "handbook.pdf", (page,)))
        for q, page in HANDBOOK_ANSWERABLE
    ]
    golden += [("out_of_corpus", evaluation.GoldenQuestion(q)) for q in HANDBOOK_UNANSWERED]
    return "handbook.pdf", HANDBOOK.read_bytes(), golden


def run_fold(source: str, pdf: bytes, golden: Golden, *, gate_open: bool = False) -> list[Row]:
    """Ingest ``pdf`` alone and ask ``golden`` and the off-topic questions; with
    ``gate_open``, the model answers whatever its best sentence (its evidence still
    recorded)."""
    from agentcore import AgentCore, evaluation
    from agentcore.plugins import extractive

    golden = [*golden, *(("off_topic", evaluation.GoldenQuestion(q)) for q in OFF_TOPIC)]
    seen: dict[str, dict[str, float] | None] = {}
    ranked = extractive.ExtractiveModel._ranked

    asking: list[str] = []  # the question being answered (one turn at a time)

    def record(self: Any, request: Any) -> Any:
        found = ranked(self, request)
        seen[request.message] = None if found is None else _evidence(request, *found)
        asking[:] = [request.message]
        return found

    supports = extractive.ExtractiveModel._supports

    def gate(self: Any, covered: float, score: float) -> bool:
        # what the gate is shown: the best sentence the model chose (for "how many",
        # the best one holding a number), not merely the best scored
        evidence = seen.get(asking[0]) if asking else None
        if evidence is not None:
            evidence.update(covered=covered, top_score=score)
        return True if gate_open else bool(supports(self, covered, score))

    extractive.ExtractiveModel._ranked = record  # type: ignore[method-assign]
    extractive.ExtractiveModel._supports = gate  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        core = AgentCore.open(str(Path(tmp) / "abstain.db"))
        try:
            ws = core.workspace("bench", "test")
            ws.knowledge.ingest_file(pdf, filename=source, content_type="application/pdf")
            agent = ws.agents.create(name="Abstention", role="support")
            report = evaluation.evaluate(ws, [g for _, g in golden], agent_id=agent.id, top_k=5)
        finally:
            core.close()
            extractive.ExtractiveModel._ranked = ranked  # type: ignore[method-assign]
            extractive.ExtractiveModel._supports = supports  # type: ignore[method-assign]
    return [
        Row(
            kind,
            outcome.golden.question,
            not outcome.abstained,
            outcome.cites_page,
            seen.get(outcome.golden.question),
        )
        for (kind, _), outcome in zip(golden, report.outcomes, strict=True)
    ]


def _evidence(request: Any, scored: Any, share: float, sentences: Any) -> dict[str, float]:
    """What the model's gate can look at: the best sentence's covered share of the
    question's weight, the share some passage holds, the best retrieval cosine."""
    (_, coverage), _best = scored[0]
    return {
        "covered": coverage * share,
        "share": share,
        "top_score": max(p.score for p in request.passages),
        "unknown": _unknown(request),
    }


def _unknown(request: Any) -> float:
    """How many of the question's content words no sentence of the knowledge has."""
    from agentcore.plugins.extractive import _question_stems

    stats = request.term_stats
    stems = set(_question_stems(request.message))
    if stats is None or not stats.sentences:
        return 0.0
    return float(sum(1 for s in stems if not stats.counts.get(s)))


Answers = Callable[[dict[str, float]], bool]  # whether a row's evidence is an answer


def figures(rows: list[Row], gate: Answers | None = None) -> dict[str, tuple[int, int]]:
    """``(hits, of)`` per set: cites_page for answerable, abstains for the rest; with
    ``gate`` (true when a row's evidence is an answer), as if the rest had abstained."""

    def passes(row: Row) -> bool:
        if gate is None:
            return True
        return row.evidence is not None and gate(row.evidence)

    out: dict[str, tuple[int, int]] = {}
    for kind in ("answerable", "out_of_corpus", "off_topic", "impossible"):
        these = [r for r in rows if r.kind == kind]
        if kind == "answerable":
            hits = sum(r.cites_page and passes(r) for r in these)
        else:
            hits = sum(not (r.answered and passes(r)) for r in these)
        out[kind] = (hits, len(these))
    refused, of = zip(out["out_of_corpus"], out["off_topic"], strict=True)
    out["unanswerable"] = (sum(refused), sum(of))
    return out


def calibrate(
    folds: dict[str, list[Row]], chosen_on: list[str]
) -> list[tuple[float, float, dict[str, Any]]]:
    """Candidate ``(score_weight, min_support)`` pairs, best first, each with its
    figures per fold: for each weight (0 to 8, step 0.1), the lowest ``min_support``
    (step 0.005) refusing ≥ 90% of the unanswerable questions (out of corpus and off
    topic) on every fold of ``chosen_on``; ranked by gold-page citations over those
    folds, then by refusals of the unanswerable, then by the lower weight. The other
    folds are figures to check the choice with."""
    found = []
    for tenth in range(81):
        weight = tenth / 10
        for step in range(20, 300):
            support = step * 0.005

            def gate(e: dict[str, float], w: float = weight, t: float = support) -> bool:
                return e["covered"] + w * e["top_score"] >= t

            per_fold = {title: figures(rows, gate) for title, rows in folds.items()}
            used = [per_fold[title] for title in chosen_on]
            if all(f["unanswerable"][0] >= 0.9 * f["unanswerable"][1] for f in used):
                cited = sum(f["answerable"][0] for f in used)
                refused = sum(f["unanswerable"][0] for f in used)
                found.append((cited, refused, -weight, weight, round(support, 3), per_fold))
                break
    found.sort(key=lambda item: item[:3], reverse=True)
    return [(weight, support, per_fold) for *_, weight, support, per_fold in found]


COLUMNS = ("answerable", "unanswerable", "out_of_corpus", "off_topic", "impossible")
HEADER = (
    "answerable cites_page | abstains: unanswerable | out of corpus | off topic | SQuAD impossible"
)


def _cells(fig: dict[str, tuple[int, int]]) -> str:
    return " | ".join(f"{h / n:.3f} ({h}/{n})" if n else "—" for h, n in (fig[c] for c in COLUMNS))


def _at_least(feature: str, threshold: float, evidence: dict[str, float]) -> bool:
    return evidence[feature] >= threshold


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD))
    parser.add_argument("--sweep", nargs="*", choices=FEATURES, default=[])
    parser.add_argument(
        "--calibrate", action="store_true", help="ask with the gate open; choose the gate"
    )
    parser.add_argument("--json", help="write every question's row here")
    args = parser.parse_args(argv)
    squad = json.loads(Path(args.squad).read_text(encoding="utf-8"))
    folds = {}
    if args.calibrate:
        print("With the gate open (every best sentence answers):\n")
    print(f"| fold (ingested) | {HEADER} |")
    print("|---|---:|---:|---:|---:|---:|")
    squad_sets = squad_folds(squad)
    sets = [*squad_sets, handbook_fold()]
    for source, pdf, golden in sets:
        rows = run_fold(source, pdf, golden, gate_open=args.calibrate)
        folds[source.removesuffix(".pdf")] = rows
        print(f"| {source.removesuffix('.pdf')} | {_cells(figures(rows))} |")
    if args.calibrate:
        print(
            "\nbest gates (covered + score_weight × top_score ≥ min_support), chosen on"
            " the SQuAD folds; the handbook checks them:\n"
        )
        print(f"| score_weight | min_support | fold | {HEADER} |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|")
        chosen_on = [source.removesuffix(".pdf") for source, _, _ in squad_sets]
        for weight, support, per_fold in calibrate(folds, chosen_on)[:5]:
            for title, fig in per_fold.items():
                print(f"| {weight:.1f} | {support:.3f} | {title} | {_cells(fig)} |")
    for feature in args.sweep:
        values = sorted(
            {round(r.evidence[feature], 2) for rows in folds.values() for r in rows if r.evidence}
        )
        print(f"\nsweep of {feature}\n")
        print(f"| threshold | fold | {HEADER} |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for t in [v for v in values if v <= 0.9][:: max(1, len(values) // 40)]:
            for title, rows in folds.items():
                gate = functools.partial(_at_least, feature, t)
                print(f"| {t:.2f} | {title} | {_cells(figures(rows, gate))} |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({t: [r.__dict__ for r in rows] for t, rows in folds.items()}) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
