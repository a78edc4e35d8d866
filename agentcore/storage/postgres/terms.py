"""PostgreSQL's sentence counts: one ``term_counts`` row per (document, stem), summed by a query.

Every node answers from the database with one indexed ``SUM``, so a document written or
deleted by any node counts at once, with nothing to keep in step in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentcore.storage.sql.database import Connection, Tables
from agentcore.storage.sql.documents import TermCounts
from agentcore.storage.sql.queries import WORKSPACE, marks


class StemRows(Tables):
    """The term-count hooks of ``DocumentTables``, PostgreSQL's way."""

    def _store_terms(
        self,
        conn: Connection,
        organization_id: str,
        environment: str,
        document_id: str,
        document_seq: int,
        version: int,
        counts: TermCounts,
    ) -> None:
        """A document's sentence count (``term = ''``) and per-stem sentence counts; they
        leave with it (the foreign key)."""
        sentences, stems = counts
        scope = (document_id, organization_id, environment)
        rows = [(*scope, "", sentences)]
        rows += [(*scope, stem, count) for stem, count in stems.items() if stem and count > 0]
        conn.executemany(
            "INSERT INTO term_counts (document_id, organization_id, environment, term,"
            " sentences) VALUES (?, ?, ?, ?, ?)",
            rows,
        )

    def _take_terms(self, conn: Connection, document_seq: int) -> dict[str, Any]:
        return {}  # the document's foreign key drops its rows; no tombstone needs them

    def term_counts(
        self, organization_id: str, environment: str, stems: Sequence[str]
    ) -> tuple[int, dict[str, int]]:
        """The workspace's sentences and, per stem of ``stems``, how many hold it
        (stems no sentence holds are left out): sums over its documents' counts."""
        wanted = ["", *sorted({stem for stem in stems if stem})]
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT term, SUM(sentences) AS total FROM term_counts"
                f" WHERE {WORKSPACE} AND term IN ({marks(len(wanted))}) GROUP BY term",
                [organization_id, environment, *wanted],
            ).fetchall()
        found = {row["term"]: int(row["total"]) for row in rows}
        return found.pop("", 0), found
