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

While each turn runs, the model's evidence is recorded (``ExtractiveModel.evidence``:
the best sentence's covered share of the question, the share some passage holds, the
best retrieval cosine), so ``--sweep`` prints what each threshold on one of them would
give without asking again: a gate only turns answers into abstentions, so the
simulated figures are the ones a rerun would measure. Run::

    python benchmarks/abstention.py [--squad PATH] [--sweep FEATURE ...]
        [--min-support X] [--json OUT]

``--min-support`` sets the model's gate for the run (default: the model's default).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
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


def run_fold(squad: dict[str, Any], fold: int, min_support: float | None) -> list[Row]:
    """Ingest article ``fold`` alone and ask every set's questions."""
    from agentcore import AgentCore, evaluation
    from agentcore.plugins import extractive

    pdfs = dict(render_pdfs(squad, PARAGRAPHS_PER_PAGE))
    lines = golden_lines(squad, PARAGRAPHS_PER_PAGE)
    article = squad["data"][fold]
    source = f"{article['title']}.pdf"
    mine = {q["question"] for p in article["paragraphs"] for q in p["qas"]}
    golden: list[tuple[str, evaluation.GoldenQuestion]] = []
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
    golden += [("off_topic", evaluation.GoldenQuestion(q)) for q in OFF_TOPIC]

    seen: dict[str, dict[str, float] | None] = {}
    ranked = extractive.ExtractiveModel._ranked

    def record(self: Any, request: Any) -> Any:
        found = ranked(self, request)
        seen[request.message] = None if found is None else _evidence(request, *found)
        return found

    extractive.ExtractiveModel._ranked = record  # type: ignore[method-assign]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        core = AgentCore.open(str(Path(tmp) / "abstain.db"))
        try:
            ws = core.workspace("bench", "test")
            ws.knowledge.ingest_file(pdfs[source], filename=source, content_type="application/pdf")
            agent = ws.agents.create(name="SQuAD", role="support")
            report = evaluation.evaluate(ws, [g for _, g in golden], agent_id=agent.id, top_k=5)
        finally:
            core.close()
            extractive.ExtractiveModel._ranked = ranked  # type: ignore[method-assign]
    for (kind, _), outcome in zip(golden, report.outcomes, strict=True):
        rows.append(
            Row(
                kind,
                outcome.golden.question,
                not outcome.abstained,
                outcome.cites_page,
                seen.get(outcome.golden.question),
            )
        )
    return rows


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


def figures(rows: list[Row], gate: tuple[str, float] | None = None) -> dict[str, tuple[int, int]]:
    """``(hits, of)`` per set: cites_page for answerable, abstains for the rest; with
    ``gate`` (feature, threshold) as if answers below it had abstained."""

    def passes(row: Row) -> bool:
        if gate is None:
            return True
        return row.evidence is not None and row.evidence[gate[0]] >= gate[1]

    out: dict[str, tuple[int, int]] = {}
    for kind in ("answerable", "out_of_corpus", "off_topic", "impossible"):
        these = [r for r in rows if r.kind == kind]
        if kind == "answerable":
            hits = sum(r.cites_page and passes(r) for r in these)
        else:
            hits = sum(not (r.answered and passes(r)) for r in these)
        out[kind] = (hits, len(these))
    return out


def _cells(fig: dict[str, tuple[int, int]]) -> str:
    return " | ".join(f"{h / n:.3f} ({h}/{n})" for h, n in fig.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD))
    parser.add_argument("--sweep", nargs="*", choices=FEATURES, default=[])
    parser.add_argument("--min-support", type=float)
    parser.add_argument("--json", help="write every question's row here")
    args = parser.parse_args(argv)
    squad = json.loads(Path(args.squad).read_text(encoding="utf-8"))
    folds = {}
    print(
        "| fold (ingested) | answerable cites_page | abstains: out of corpus | off topic | SQuAD impossible |"
    )
    print("|---|---:|---:|---:|---:|")
    for fold, article in enumerate(squad["data"]):
        rows = run_fold(squad, fold, args.min_support)
        folds[article["title"]] = rows
        print(f"| {article['title']} | {_cells(figures(rows))} |")
    for feature in args.sweep:
        values = sorted(
            {round(r.evidence[feature], 2) for rows in folds.values() for r in rows if r.evidence}
        )
        print(f"\nsweep of {feature}\n")
        print(
            "| threshold | fold | answerable cites_page | out of corpus | off topic | impossible |"
        )
        print("|---:|---|---:|---:|---:|---:|")
        for t in [v for v in values if v <= 0.9][:: max(1, len(values) // 40)]:
            for title, rows in folds.items():
                print(f"| {t:.2f} | {title} | {_cells(figures(rows, (feature, t)))} |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({t: [r.__dict__ for r in rows] for t, rows in folds.items()}) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
