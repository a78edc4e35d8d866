"""Ingestion: uploads become searchable documents, through one pipeline.

``IngestPipeline`` parses (``parse_document``), chunks, embeds, counts terms and writes,
wherever it runs: the caller's thread, a thread of the core, or a worker process
(``agentcore._ingest_worker`` builds it there, without a core). ``Uploads`` decides where a
workspace's upload runs and what its caller is answered; ``IngestionJobs`` runs the
store's queue of jobs in killable worker processes under time, memory and work limits.
A PDF's scanned pages are found as it is parsed, and read by OCR when an engine is set
(``_scans.py``). Everything else is private (``_parsing.py``, ``_jobs.py``, ...).
"""

from agentcore.knowledge.ingest._cpu_budget import BudgetSpent, CpuBudget
from agentcore.knowledge.ingest._jobs import IngestionJobs, WorkersUnavailable
from agentcore.knowledge.ingest._parsing import (
    MARKDOWN,
    PDF,
    PLAIN,
    ParsedDocument,
    TextBudget,
    WorkBudget,
    check_text,
    check_upload,
    parse_document,
    parse_text,
    text_kind,
)
from agentcore.knowledge.ingest._pipeline import IngestPipeline, Labels, Writer
from agentcore.knowledge.ingest._scans import Ocr
from agentcore.knowledge.ingest._uploads import Upload, Uploads
from agentcore.knowledge.ingest._workers import Completed, WorkerSpec

__all__ = [
    "MARKDOWN",
    "PDF",
    "PLAIN",
    "BudgetSpent",
    "Completed",
    "CpuBudget",
    "IngestPipeline",
    "IngestionJobs",
    "Labels",
    "Ocr",
    "ParsedDocument",
    "TextBudget",
    "Upload",
    "Uploads",
    "WorkBudget",
    "WorkerSpec",
    "WorkersUnavailable",
    "Writer",
    "check_text",
    "check_upload",
    "parse_document",
    "parse_text",
    "text_kind",
]
