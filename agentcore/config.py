"""Settings: every limit and default of the core in one typed, documented place.

The core's ``Settings`` and each plugin's own settings model (declared through the
``agentcore_register_settings`` hook) are pydantic-settings models read from the same
places, highest priority first: keyword arguments (``AgentCore.open(path, name=value)``),
``AGENTCORE_*`` environment variables, then a ``.env`` file in the working directory.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, overload

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agentcore.errors import ValidationFailed

MiB = 1024 * 1024
GiB = 1024 * MiB
#: The share of the machine's memory (or its container's limit) a process's index
#: cache may keep when ``index_cache_bytes`` is unset.
INDEX_CACHE_SHARE = 4

#: The dotenv file read by ``Settings`` and by plugin settings, relative to the working
#: directory; a missing file is skipped. Variables set in the environment win over it.
ENV_FILE = ".env"

#: The variable naming the store of ``agentcore`` commands and of ``serve``'s worker
#: processes (not a ``Settings`` field: the store is opened before settings apply).
DATABASE_VARIABLE = "AGENTCORE_DB"
DEFAULT_DATABASE = "./agentcore.db"

M = TypeVar("M", bound=BaseSettings)

METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""The variable that turns on prometheus-client's multiprocess mode (read at its import)."""

_NAMESPACE = re.compile(r"[a-z][a-z0-9]*\Z")
ENV_PREFIX = "AGENTCORE_"
"""What the name of every setting's variable starts with, the core's and plugins'."""


class PluginSettings(BaseSettings):
    """A convenient base for a plugin's settings model (any ``BaseSettings`` will do).

    Frozen, unknown names refused, and the ``.env`` file read like the core's (only
    its lines naming a field of this model). A subclass sets its own
    ``env_prefix="AGENTCORE_<NAMESPACE>_"`` in ``model_config`` (or ``"AGENTCORE_"``
    for settings named without the namespace: ``setting_prefix``).
    """

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_file=ENV_FILE,
        dotenv_filtering="only_existing",
        populate_by_name=True,
    )

    node_shares: ClassVar[Mapping[str, int]] = {}
    """Integer fields whose default is a whole node's budget (the PostgreSQL store's
    ``pool_size``), each with the least share one process may get: ``serve --workers N``
    gives each of its N processes the value divided by N (at least that share), unless
    the operator set the field, which then holds for each process
    (``Settings.settings_for_processes``)."""


def database_url() -> str:
    """The store named by ``AGENTCORE_DB``, else ``./agentcore.db``."""
    return os.environ.get(DATABASE_VARIABLE, DEFAULT_DATABASE)


WORKERS_VARIABLE = "WEB_CONCURRENCY"
"""The variable platforms (Heroku, Render, Dokku) and servers (uvicorn, gunicorn) read for
the number of worker processes; ``agentcore serve`` reads it when ``--workers`` is not
given (``web_concurrency``)."""


def web_concurrency() -> int | None:
    """The number of processes ``$WEB_CONCURRENCY`` asks for; ``None`` when it is unset or
    empty.

    :raises ValueError: it is not an integer from 1 to 64 (the message names it).
    """
    raw = os.environ.get(WORKERS_VARIABLE, "").strip()
    if not raw:
        return None
    if not raw.isdecimal() or not 1 <= int(raw) <= 64:
        raise ValueError(f"{WORKERS_VARIABLE} must be an integer from 1 to 64, not {raw!r}")
    return int(raw)


def export_to_children(database: str, *, known: Collection[str] = (), **settings: str) -> None:
    """Name ``database`` and set ``settings`` in this process's environment, for the
    processes it starts next: they open that store with those settings (``serve
    --workers``: uvicorn's workers import an app factory and read nothing else).

    A setting is named as ``Settings.load`` takes it: a ``Settings`` field, or one of
    ``known`` (``Settings.keywords``: a plugin's, such as ``postgres_pool_size``); its
    variable is ``AGENTCORE_`` and the name in capitals.

    :raises ValueError: a name is no setting's.
    """
    os.environ[DATABASE_VARIABLE] = database
    for name, value in settings.items():
        if name not in Settings.model_fields and name not in known:
            raise ValueError(f"no setting is named {name!r}")
        os.environ[f"AGENTCORE_{name.upper()}"] = value


def cache_directory() -> Path:
    """Where agentcore keeps this machine's caches when no setting says where:
    ``$XDG_CACHE_HOME/agentcore``, else ``~/.cache/agentcore``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentcore"


WEBHOOK_KEY_BYTES = 32  # AES-256: the size of each ``webhook_secret_key``


def command_environment(**variables: str) -> dict[str, str]:
    """The environment of a process the library starts: this one's, with ``variables``
    set (e.g. ``OMP_THREAD_LIMIT`` for an OCR command)."""
    return {**os.environ, **variables}


def worker_environment() -> dict[str, str]:
    """The environment of an ingestion worker process: this one's, with one malloc arena
    (``MALLOC_ARENA_MAX=1``). Under a small address-space limit, glibc's try at a new
    64 MiB arena per thread failed, and the worker crawled at full CPU until its job's
    time-out instead of failing its allocation at once."""
    return command_environment(MALLOC_ARENA_MAX="1")


def parse_keys(value: str) -> list[bytes]:
    """The AES keys of a ``webhook_secret_key`` value: comma-separated base64 (standard
    or URL-safe) of 32 bytes each, the sealing key first. ``ValueError`` (never echoing
    a key) otherwise. ``webhooks.sealing.SecretBox`` seals with them."""
    keys: list[bytes] = []
    for number, part in enumerate((p.strip() for p in value.split(",")), start=1):
        if not part:
            continue
        text = part.replace("-", "+").replace("_", "/").rstrip("=")
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"webhook secret key {number} is not base64") from None
        if len(raw) != WEBHOOK_KEY_BYTES:
            raise ValueError(
                f"webhook secret key {number} holds {len(raw)} bytes;"
                f" AES-256 needs {WEBHOOK_KEY_BYTES}"
                ' (make one with: python -c "import base64, os;'
                ' print(base64.b64encode(os.urandom(32)).decode())")'
            )
        keys.append(raw)
    if not keys:
        raise ValueError("the webhook secret key setting names no key")
    return keys


class Settings(BaseSettings):
    """Configuration of one ``AgentCore``; each field may also come from the environment.

    ``Settings(**values)`` reads ``AGENTCORE_<FIELD>`` variables (case-insensitive)
    and the ``.env`` file of the working directory (see ``ENV_FILE``; pass
    ``_env_file=None`` to skip it, or another path), then applies ``values``.
    Plugins' settings travel with it: ``settings.plugin(Model)``; ``Settings.load``
    builds both (``AgentCore.open`` calls it). docs/operations.md lists every setting.
    """

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="AGENTCORE_",
        env_file=ENV_FILE,
        # the .env file is shared with plugins (AGENTCORE_OPENAI_*) and the CLI
        # (AGENTCORE_DB): only its lines naming a field of this model are ours
        dotenv_filtering="only_existing",
        # an error names the setting and the rule, never the value: one may be a key
        # (webhook_secret_key), and errors end up in logs
        hide_input_in_errors=True,
    )

    # HTTP request limits the core checks too (the HTTP adapter's own limits are its
    # settings: agentcore_starlette.settings.HttpSettings)
    max_upload_bytes: int = Field(50 * MiB, ge=1, description="Largest uploaded file.")

    # Field limits
    max_message_chars: int = Field(32_000, ge=1, description="Longest chat message.")
    max_query_chars: int = Field(2_000, ge=1, description="Longest knowledge search query.")
    max_text_chars: int = Field(
        200_000,
        ge=1,
        description="Longest text of a {source, text} document (files may be larger).",
    )
    default_top_k: int = Field(5, ge=1)
    max_top_k: int = Field(100, ge=1)
    max_page_size: int = Field(100, ge=1, description="Largest `limit` of a list.")
    default_page_size: int = Field(10, ge=1)

    # Knowledge
    embedder: str = Field("hashing-v1", description="Embedder that indexes the knowledge core.")
    reranker: str | None = Field(
        None,
        description="Reranker of searches with `rerank`; unset: `http` when"
        " AGENTCORE_RERANKER_URL is set, else the only one a plugin registers.",
    )
    rerank_candidates: int = Field(
        50, ge=1, le=1_000, description="Chunks a reranked search hands the reranker (≥ top_k)."
    )
    rerank_timeout: float = Field(
        10.0, gt=0, description="Seconds a reranker may take; then the first order is kept."
    )
    ocr: str | None = Field(
        None,
        description="OCR engine reading scanned PDF pages: `tesseract` (the `ocr` extra and"
        " the tesseract command) or a plugin's; unset, such pages are only listed in the"
        " document's `warnings`. An engine no plugin registers stops the core opening.",
    )
    chunk_target_chars: int = Field(700, ge=50)
    chunk_overlap_chars: int = Field(150, ge=0)
    max_pdf_pages: int = Field(5_000, ge=1)
    index_catchup_max_rows: int = Field(
        100_000,
        ge=0,
        description="Most rows a cached index adds from the change log to catch up with"
        " other processes' writes; a larger gap reloads the workspace.",
    )
    index_dir: str = Field(
        "auto",
        description="Where each machine keeps the index files its processes share (vector"
        " segments, keyword indexes): `auto` (`<database>.index/` next to a SQLite file; for"
        " PostgreSQL, under the machine's cache directory, `$XDG_CACHE_HOME/agentcore` or"
        " `~/.cache/agentcore`; none for `:memory:`), `off` (each process holds its indexes"
        " in RAM), or a directory.",
    )
    max_token_chars: int = Field(
        64,
        ge=8,
        description="Longest run without whitespace that embedders see whole; longer runs"
        " (base64, hex dumps) are embedded by their first characters only.",
    )
    max_document_chunks: int = Field(
        100_000, ge=1, description="Most chunks one document may make (413 beyond)."
    )
    index_cache_bytes: int | None = Field(
        None,
        ge=0,
        description="Most bytes of workspace indexes one process keeps loaded (vector and"
        " keyword indexes, the document tables filters read, the word counts chat reads);"
        " past it the least recently used are evicted (never one a search is using) and load"
        " again at their next use. Unset: a quarter of the machine's memory (or of its"
        " container's limit). Each process has its own: `serve --workers N` divides the"
        " unset default by N. See Deployment, 'Sizing a node for N tenants'.",
    )
    index_dtype: Literal["float32", "float16", "int8"] = Field(
        "float32",
        description="How a workspace's in-memory index stores its rows: `float32` (exact),"
        " `float16` (half the memory) or `int8` (scalar quantisation, a quarter);"
        " the approximate ones re-score their best candidates against the float32 rows,"
        " so results stay exact in practice. Fixed per workspace by its first write:"
        " changing it affects new workspaces only.",
    )
    max_pdf_page_chars: int = Field(
        1_000_000,
        ge=1,
        description="Most characters of text one PDF page may extract to (413 `too_large`"
        " beyond); a whole PDF may extract to `max_document_chunks` x `chunk_target_chars`.",
    )
    ingest_sync_max_bytes: int = Field(
        1 * MiB,
        ge=0,
        description="Larger uploads are ingested in the background: 202, status processing."
        " Smaller ones are waited for (201 ready) while a worker is free and the request's"
        " deadline allows.",
    )
    ingest_inline_max_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="Plain-text, Markdown and CSV documents up to this size are ingested in"
        " the calling thread (no parser risk, bounded work); larger ones and every PDF,"
        " Office file and HTML page go to a worker process.",
    )
    ingest_workers: int | None = Field(
        None,
        ge=0,
        description="Worker processes that parse and embed uploads, per core (so per"
        " `serve --workers` process); unset: half the usable CPUs (1 to 4), divided among"
        " `serve`'s worker processes (at least 1 each), and one more each, kept for"
        " the organizations whose jobs wait while another holds its share"
        " (`ingest_workers_per_organization`). 0: ingest on a thread of the core's own"
        " process instead.",
    )
    ingest_workers_per_organization: int | None = Field(
        None,
        ge=1,
        description="Most of a core's ingestion workers one organization's jobs may hold at"
        " once; its other jobs wait while the rest stay free for other organizations."
        " Unset: all workers but one (at least one).",
    )
    ingest_cpu_seconds: float = Field(
        10.0,
        gt=0,
        description="CPU seconds reading one uploaded file (parsing it into pages) may"
        " take, plus `ingest_cpu_seconds_per_mib` for each MiB of the file; past it the"
        " document fails with 413 `too_complex`. Counted as the reading thread's own CPU"
        " time, so a busy machine does not fail a file sooner.",
    )
    ingest_cpu_seconds_per_mib: float = Field(
        10.0, ge=0, description="CPU seconds added to `ingest_cpu_seconds` per MiB of a file."
    )
    ingest_page_cpu_seconds: float = Field(
        5.0,
        gt=0,
        description="CPU seconds reading one page of a PDF may take (413 `too_complex` beyond).",
    )
    max_pdf_page_operators: int = Field(
        200_000,
        ge=1,
        description="Most content-stream operators one PDF page may draw, counted before"
        " it is parsed and in the forms it draws (413 `too_complex` beyond).",
    )
    max_pdf_page_xobjects: int = Field(
        1_000,
        ge=1,
        description="Most XObjects (forms, images) one PDF page may draw, forms drawn by"
        " forms included (413 `too_complex` beyond).",
    )
    ingest_worker_memory_mb: int = Field(
        2048,
        ge=64,
        description="MiB of address space a worker process may add over its size at start"
        " (RLIMIT_AS, Linux); a job that needs more fails `too_large` and the worker is"
        " replaced.",
    )
    ingest_prestart: bool = Field(
        True,
        description="Boot one ingestion worker process when the core starts, so the first"
        " upload after a start or deploy does not wait about a second for one; false: the"
        " first job that needs a worker starts it.",
    )
    ingest_worker_recycle_mb: int = Field(
        64,
        ge=1,
        description="A worker process whose resident memory grew by more than this many MiB"
        " since its start (measured after each job) is replaced, returning the memory.",
    )
    ingest_worker_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="How much lower than the API process a worker process is scheduled"
        " (added to its nice value), so requests keep their CPU while uploads are indexed.",
    )
    ingest_stop_grace: float = Field(
        2.0,
        ge=0,
        description="Seconds running ingestion jobs get to finish on `stop()` before their"
        " workers are killed and the jobs go back to the queue.",
    )
    ingest_job_lease: float = Field(
        30.0, gt=0, description="Seconds a background ingestion job is leased, renewed while alive."
    )
    ingest_job_attempts: int = Field(
        3, ge=1, description="Tries of a background ingestion job before it is marked failed."
    )
    ingest_job_timeout: float = Field(
        3600.0,
        gt=0,
        description="Seconds one try of an ingestion job may take; a worker past it is"
        " killed and the document `failed` with `deadline_exceeded`.",
    )

    # Chat
    default_chat_model: str = Field("extractive")
    chat_top_k: int = Field(
        8, ge=1, description="Passages retrieved for each chat turn (search keeps its own top_k)."
    )
    chat_search_mode: Literal["vector", "keyword", "hybrid"] = Field(
        "vector",
        description="How a chat turn retrieves its passages: vector (cosine), keyword (BM25)"
        " or hybrid (both, fused by reciprocal rank); see docs/benchmarks.md.",
    )
    history_turns: int = Field(10, ge=0, description="Earlier messages passed to the model.")
    max_tool_steps: int = Field(
        4, ge=0, description="Tool steps one chat turn may take, counted across its pauses."
    )
    model_timeout: float = Field(30.0, gt=0, description="Seconds a model call may take.")
    tool_call_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds a turn waits for the outputs of the tools the caller runs;"
        " after it the conversation takes messages again.",
    )
    max_tool_output_chars: int = Field(
        100_000,
        ge=1,
        description="Longest output of a tool the caller runs, and longest arguments of a"
        " call handed to the caller (JSON text).",
    )

    # Remote MCP servers an agent's tools come from (``mcp_servers``)
    mcp_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds one exchange with an agent's MCP server (listing its tools, or"
        " one tool call) may take; then the call is a tool error.",
    )
    mcp_tools_ttl: float = Field(
        300.0,
        ge=0,
        description="Seconds an MCP server's tool list is reused before it is listed again"
        " (a change of the agent's servers lists them again at once).",
    )
    mcp_max_response_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        description="Bytes an MCP server's responses to one exchange may bring.",
    )

    # Outbound calls (webhooks, MCP servers)
    # NoDecode: the environment gives a comma-separated string, not JSON
    outbound_allowed_networks: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="CIDRs exempt from the SSRF guard of every outbound call (webhooks, MCP"
        " servers); tests allow 127.0.0.0/8.",
    )

    # Webhooks
    webhook_allowed_networks: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="The older name of outbound_allowed_networks (both apply)."
    )
    webhook_timeout: float = Field(15.0, gt=0)
    webhook_workers: int = Field(8, ge=1)
    webhook_disable_after: float = Field(5 * 86_400, gt=0, description="Seconds of failure.")
    webhook_secret_key: SecretStr | None = Field(
        None,
        description="AES-256 key(s) sealing webhook signing secrets at rest: base64 of 32"
        " random bytes, comma-separated to rotate keys (the first seals, all open). Unset:"
        " secrets are stored in plaintext (docs/operations.md, 'Webhook secrets at rest').",
    )
    start_workers: bool = Field(True, description="Whether `start()` runs webhook delivery.")

    # Operations
    metrics: bool | None = Field(
        None,
        description="Prometheus metrics at `GET /metrics`: unset, `agentcore serve` serves"
        " them and a mounted app does with `create_app(core, metrics=True)`; `false` turns"
        " them off everywhere (the core then records none).",
    )

    # Where search runs: the core picks it (``core._vector_backend``), so it is the
    # core's; the PostgreSQL store's own settings (postgres_*) are its plugin's
    vector_search: Literal["memory", "pgvector"] = Field(
        "memory",
        description="Where knowledge search runs: this node's RAM, or PostgreSQL (pgvector).",
    )

    # Keys and rate limits
    rate_limit_live: float = Field(100.0, gt=0, description="Requests per second per live key.")
    rate_limit_test: float = Field(25.0, gt=0, description="Requests per second per test key.")
    rate_limit_backend: Literal["auto", "local", "host", "store"] = Field(
        "auto",
        description="Where token buckets live: `local` (per process, no store write),"
        " `host` (a file beside the SQLite database, shared by every process on it; a"
        " file lock per request), `store` (shared by every process and node on the store;"
        " one small write per request) or `auto`: `store` on a store shared by nodes"
        " (PostgreSQL), `host` under `serve --workers N` on a SQLite file, else `local`.",
    )
    client_token_rate_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Each client token's own rate limit, as a share of its key's (0.25 of a"
        " live key's 100/s is 25/s): one end user cannot spend the organization's budget.",
    )
    key_touch_interval: float = Field(60.0, ge=0, description="Resolution of last_used_at.")
    idempotency_ttl: float = Field(86_400.0, gt=0)
    idempotency_lease: float = Field(
        30.0,
        gt=0,
        description="Seconds an Idempotency-Key claim lasts unless its process renews it"
        " (every third of it, while the request's work runs): a claim not renewed for"
        " this long lost its process or its store and is taken over by a retry.",
    )

    @property
    def ingest_pool_size(self) -> int:
        """How many ingestion worker processes a core runs: ``ingest_workers``, or when
        it is unset half the CPUs it may use (``usable_cpus``), at least 1 and at most 4
        (ingestion is CPU-bound; the other half stays with the API process, whose
        requests also win the CPU: workers run at a lower priority), and one more: the
        worker one organization's jobs cannot take (``ingest_organization_share``)."""
        return self.ingest_pool_size_of(1)

    def ingest_pool_size_of(self, processes: int) -> int:
        """The ingestion pool of each of ``processes`` processes serving together
        (``serve --workers``): ``ingest_workers`` when set (it is per process), else the
        default's CPU-bound half (half the usable CPUs, 1 to 4) divided among them, at
        least 1 each, and each process's one more (its organizations' reserve)."""
        if self.ingest_workers is not None:
            return self.ingest_workers
        node = max(1, min(4, usable_cpus() // 2))
        return max(1, node // max(1, processes)) + 1

    @property
    def ingest_organization_share(self) -> int:
        """How many of the ``ingest_pool_size`` workers one organization's jobs may hold
        at once: ``ingest_workers_per_organization``, or all but one (at least one)."""
        if self.ingest_workers_per_organization is not None:
            return self.ingest_workers_per_organization
        return max(1, self.ingest_pool_size - 1)

    @property
    def index_cache_budget(self) -> int:
        """The index cache's budget in bytes: ``index_cache_bytes``, or when it is unset
        ``machine_memory() // INDEX_CACHE_SHARE``."""
        if self.index_cache_bytes is not None:
            return self.index_cache_bytes
        return machine_memory() // INDEX_CACHE_SHARE

    def index_cache_budget_of(self, processes: int) -> int:
        """The budget of each of ``processes`` processes serving together (``serve
        --workers``): ``index_cache_bytes`` when set (it is per process), else the
        default divided among them, so the node keeps its share whatever N is."""
        if self.index_cache_bytes is not None:
            return self.index_cache_bytes
        return self.index_cache_budget // max(1, processes)

    def keywords(self) -> frozenset[str]:
        """The setting names these settings take (``Settings.load``'s keywords): the
        core's fields and those of each plugin's settings they carry
        (``postgres_pool_size``)."""
        models = {namespace: type(model) for namespace, model in self._plugins.items()}
        return frozenset(Settings.model_fields) | frozenset(_plugin_routes(Settings, models))

    def settings_for_processes(self, processes: int) -> dict[str, str]:
        """The settings (``keywords``, as text) that give each of ``processes`` processes
        serving one node together (``serve --workers``, whose workers read only the
        environment: ``export_to_children``) its share of the node's defaults: the
        index cache (``index_cache_budget_of``), the ingestion pool
        (``ingest_pool_size_of``) and each plugin's ``node_shares`` fields the operator
        did not set."""
        shares = {
            "index_cache_bytes": str(self.index_cache_budget_of(processes)),
            "ingest_workers": str(self.ingest_pool_size_of(processes)),
        }
        for namespace, model in self._plugins.items():
            fields: Mapping[str, int] = getattr(type(model), "node_shares", {})
            prefix = setting_prefix(namespace, type(model))
            for field, least in fields.items():
                if field not in model.model_fields_set:
                    share = max(least, getattr(model, field) // max(1, processes))
                    shares[prefix + field] = str(share)
        return shares

    def page_size(self, limit: int | None) -> int:
        """``limit`` checked against ``max_page_size`` (``default_page_size`` if None)."""
        if limit is None:
            return self.default_page_size
        if not 1 <= limit <= self.max_page_size:
            raise ValidationFailed(
                f"limit must be between 1 and {self.max_page_size}.",
                code="limit_out_of_range",
                param="limit",
            )
        return limit

    @field_validator("outbound_allowed_networks", "webhook_allowed_networks", mode="before")
    @classmethod
    def _split_networks(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        for cidr in value:
            ipaddress.ip_network(cidr, strict=False)
        return tuple(value)

    @field_validator("ocr", mode="before")
    @classmethod
    def _blank_is_no_ocr(cls, value: Any) -> Any:
        # AGENTCORE_OCR= (set, empty) turns OCR off, as leaving it unset does
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("webhook_secret_key", mode="after")
    @classmethod
    def _check_secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_keys(value.get_secret_value())  # its message never quotes a key
        return value

    @model_validator(mode="after")
    def _check_chunking(self) -> Settings:
        if self.chunk_overlap_chars * 2 > self.chunk_target_chars:
            raise ValueError("chunk_overlap_chars must be at most half of chunk_target_chars")
        if self.default_top_k > self.max_top_k:
            raise ValueError("default_top_k cannot exceed max_top_k")
        if self.default_page_size > self.max_page_size:
            raise ValueError("default_page_size cannot exceed max_page_size")
        return self

    @property
    def allowed_networks(self) -> tuple[str, ...]:
        """The CIDRs exempt from the SSRF guard: ``outbound_allowed_networks`` and those
        given under its older name, ``webhook_allowed_networks``."""
        return tuple(dict.fromkeys(self.outbound_allowed_networks + self.webhook_allowed_networks))

    # settings of plugins: by namespace (``load``/``with_plugins``), and models read
    # from the environment on demand (``plugin``), by class
    _plugins: dict[str, BaseSettings] = PrivateAttr(default_factory=dict)
    _on_demand: dict[type[BaseSettings], BaseSettings] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """``Settings(**overrides)``: kept for callers written before pydantic-settings.

        The environment and the ``.env`` file are read by the constructor itself.
        """
        return cls(**overrides)

    @classmethod
    def load(
        cls,
        models: Mapping[str, type[BaseSettings]] = {},  # noqa: B006 - never mutated
        *,
        base: Settings | None = None,
        **overrides: Any,
    ) -> Settings:
        """The core's settings with the settings of each plugin in ``models``, validated.

        ``models`` maps a plugin's namespace to its settings model (what plugins
        declare through ``agentcore_register_settings``). A keyword argument
        ``<namespace>_<field>`` sets that field of that plugin (``openai_model=...``),
        or ``<field>`` for a model declared without the namespace (``setting_prefix``:
        ``max_body_bytes=...`` sets the HTTP adapter's); any other goes to the core,
        which refuses names it does not know. Each model reads its own variables
        (``AGENTCORE_<NAMESPACE>_*``, or ``AGENTCORE_<FIELD>``) and the ``.env`` file.
        ``base`` replaces reading the core's settings from the environment.

        :raises pydantic.ValidationError: naming the bad or unknown setting (as its
            keyword argument) and, for a plugin's, the plugin's namespace.
        :raises ValueError: when two declarations claim the same setting name.
        """
        routes = _plugin_routes(cls, models)
        core_values: dict[str, Any] = {}
        plugin_values: dict[str, dict[str, Any]] = {namespace: {} for namespace in models}
        for name, value in overrides.items():
            if name in routes:
                namespace, field = routes[name]
                plugin_values[namespace][field] = value
            else:
                core_values[name] = value
        if base is None:
            settings = cls(**core_values)
        elif core_values:
            settings = cls.model_validate({**base.model_dump(), **core_values})
        else:
            settings = base.model_copy()
        plugins = dict(base._plugins) if base is not None else {}
        for namespace, model in models.items():
            plugins[namespace] = _load_plugin(
                namespace, model, plugins.get(namespace), plugin_values[namespace]
            )
        settings._plugins = plugins
        settings._on_demand = {}
        return settings

    def with_plugins(self, **plugins: BaseSettings) -> Settings:
        """A copy carrying the given plugin settings, by namespace (for tests and hosts
        that build settings in code): ``settings.with_plugins(openai=OpenAISettings(...))``."""
        copy = self.model_copy()
        copy._plugins = {**self._plugins, **plugins}
        copy._on_demand = {}
        return copy

    @overload
    def plugin(self, key: type[M]) -> M: ...

    @overload
    def plugin(self, key: str) -> BaseSettings: ...

    def plugin(self, key: type[M] | str) -> M | BaseSettings:
        """A plugin's settings: by its model class (typed) or by its namespace.

        Settings built by ``AgentCore.open``/``Settings.load`` carry every declared
        model, validated. Asked by class for one they do not carry (settings built
        directly with ``Settings(...)``), the model is read from the environment
        and ``.env`` on first use, with defaults for the rest.

        :raises LookupError: for a namespace no plugin declared.
        """
        if isinstance(key, str):
            try:
                return self._plugins[key]
            except KeyError:
                raise LookupError(f"no plugin declared settings named {key!r}") from None
        for found in self._plugins.values():
            if type(found) is key:
                return found
        if key not in self._on_demand:
            self._on_demand[key] = key()  # a race only reads the same environment twice
        loaded = self._on_demand[key]
        assert isinstance(loaded, key)
        return loaded


def usable_cpus(
    cgroup_files: tuple[str, str, str] = (
        "/sys/fs/cgroup/cpu.max",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
    ),
) -> int:
    """CPUs this process may use: those it may run on (its affinity), or the CPU quota of
    its container (cgroup v2 ``cpu.max``, or v1's quota and period), rounded up, when
    that is lower; at least 1. ``cgroup_files`` are where the quotas are read (tests
    name their own)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(*cgroup_files)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, cpus)


def _cgroup_quota(v2: str, v1_quota: str, v1_period: str) -> int | None:
    """The container's CPU quota in whole CPUs (rounded up), ``None`` when unlimited or
    unknown."""
    try:
        with open(v2) as f:
            fields = f.read().split()
    except OSError:
        try:
            with open(v1_quota) as f, open(v1_period) as g:
                fields = [f.read().strip(), g.read().strip()]
        except OSError:
            return None
    if len(fields) != 2 or not all(field.isdigit() for field in fields):
        return None  # "max 100000" (v2) or "-1" (v1): no quota
    quota, period = int(fields[0]), int(fields[1])
    if quota <= 0 or period <= 0:
        return None
    return max(1, -(-quota // period))


def machine_memory() -> int:
    """Bytes of memory this process's machine has: the physical memory, or the memory
    limit of its container (cgroup v2 or v1) when that is lower; 4 GiB when unknown."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX
        return 4 * GiB
    for limit_file in (
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ):
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
        except OSError:
            continue
        if limit.isdigit() and 0 < int(limit) < total:
            total = int(limit)
    return total


def _plugin_routes(
    core: type[Settings], models: Mapping[str, type[BaseSettings]]
) -> dict[str, tuple[str, str]]:
    """``{keyword: (namespace, field)}`` of every plugin setting; refuses clashes."""
    routes: dict[str, tuple[str, str]] = {}
    for namespace, model in models.items():
        prefix = setting_prefix(namespace, model)
        for field in model.model_fields:
            keyword = prefix + field
            if keyword in core.model_fields or keyword in routes:
                raise ValueError(f"setting {keyword!r} of plugin {namespace!r} is declared twice")
            routes[keyword] = (namespace, field)
    return routes


def setting_prefix(namespace: str, model: type[BaseSettings]) -> str:
    """What the names of a plugin's settings put before their field names: its keyword
    arguments and, after ``AGENTCORE_``, its variables.

    ``"<namespace>_"`` for a model whose ``env_prefix`` is ``AGENTCORE_<NAMESPACE>_``
    (``openai_model``, ``AGENTCORE_OPENAI_MODEL``); nothing for one whose ``env_prefix``
    is ``AGENTCORE_``: its settings keep their bare names (the HTTP adapter's
    ``max_body_bytes``, once the core's own, whose name deployments set), and a name
    that clashes with the core's or another plugin's is refused (``Settings.load``).

    :raises ValueError: the namespace is not lower-case letters and digits, or the
        model's ``env_prefix`` is neither of those.
    """
    if not _NAMESPACE.match(namespace):
        raise ValueError(
            f"plugin settings namespace {namespace!r} must be lower-case letters and digits"
        )
    namespaced = f"{ENV_PREFIX}{namespace.upper()}_"
    declared = str(model.model_config.get("env_prefix") or "")
    if declared.upper() == namespaced:
        return f"{namespace}_"
    if declared.upper() == ENV_PREFIX:
        return ""
    raise ValueError(
        f"settings model {model.__qualname__} of plugin {namespace!r} must set"
        f" env_prefix={namespaced!r}, or {ENV_PREFIX!r} for settings named without the"
        f" namespace (it has {declared!r})"
    )


def _load_plugin(
    namespace: str, model: type[M], current: BaseSettings | None, values: dict[str, Any]
) -> M:
    """One plugin's settings: ``current`` (or the environment) updated with ``values``."""
    try:
        if isinstance(current, model):
            return model.model_validate({**current.model_dump(), **values}) if values else current
        return model(**values)
    except ValidationError as exc:
        # name each setting as the keyword argument that sets it, and say whose it is
        prefix = setting_prefix(namespace, model)
        raise ValidationError.from_exception_data(
            f"settings of plugin {namespace!r} ({model.__qualname__},"
            f" environment {ENV_PREFIX}{prefix.upper()}*)",
            [
                {
                    "type": PydanticCustomError(error["type"], error["msg"]),
                    "loc": _plugin_loc(namespace, prefix, model, error["loc"]),
                    # a bad secret (an API key) must not end up in a log with the error
                    "input": "**********" if _is_secret(model, error["loc"]) else error["input"],
                }
                for error in exc.errors()
            ],
        ) from None


def _is_secret(model: type[BaseSettings], loc: tuple[int | str, ...]) -> bool:
    field = model.model_fields.get(str(loc[0])) if loc else None
    return field is not None and "Secret" in repr(field.annotation)


def _plugin_loc(
    namespace: str, prefix: str, model: type[BaseSettings], loc: tuple[int | str, ...]
) -> tuple[int | str, ...]:
    if not loc:
        return (namespace,)
    head, *rest = loc
    return (f"{prefix}{head}" if head in model.model_fields else head, *rest)


def metrics_multiprocess_dir() -> str | None:
    """The directory prometheus-client's multiprocess mode keeps its files in
    (``PROMETHEUS_MULTIPROC_DIR``), or ``None`` when the mode is off."""
    return os.environ.get(METRICS_DIR) or None


def export_metrics_multiprocess_dir(path: str) -> None:
    """Turn multiprocess metrics on for the worker processes this process starts from
    now on (``agentcore serve --workers N``): they read the variable at import."""
    os.environ[METRICS_DIR] = path
