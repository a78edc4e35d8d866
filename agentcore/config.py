"""Settings: every limit and default of the core in one typed, documented place."""

from __future__ import annotations

import ipaddress
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

MiB = 1024 * 1024


class Settings(BaseModel):
    """Configuration of one ``AgentCore``; each field may also come from the environment.

    ``Settings.from_env(**overrides)`` reads ``AGENTCORE_<FIELD>`` variables (upper
    case), then applies the overrides. The README lists every limit.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # HTTP request limits
    max_body_bytes: int = Field(1 * MiB, ge=1, description="Largest JSON request body.")
    max_upload_bytes: int = Field(50 * MiB, ge=1, description="Largest uploaded file.")
    max_json_depth: int = Field(32, ge=2, description="Deepest nesting of a JSON body.")
    request_deadline: float = Field(60.0, gt=0, description="Seconds a request may take.")

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
    chunk_target_chars: int = Field(700, ge=50)
    chunk_overlap_chars: int = Field(150, ge=0)
    max_pdf_pages: int = Field(5_000, ge=1)

    # Chat
    default_chat_model: str = Field("extractive")
    chat_top_k: int = Field(5, ge=1)
    history_turns: int = Field(10, ge=0, description="Earlier messages passed to the model.")
    max_tool_steps: int = Field(4, ge=0)
    model_timeout: float = Field(30.0, gt=0, description="Seconds a model call may take.")

    # OpenAI-compatible provider (OpenAI, Ollama, vLLM, llama.cpp)
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_model: str | None = None
    openai_embedding_model: str | None = None
    openai_embedding_dimension: int | None = None

    # Webhooks
    webhook_allowed_networks: tuple[str, ...] = Field(
        (), description="CIDRs exempt from the SSRF guard (tests allow 127.0.0.0/8)."
    )
    webhook_timeout: float = Field(15.0, gt=0)
    webhook_workers: int = Field(8, ge=1)
    webhook_disable_after: float = Field(5 * 86_400, gt=0, description="Seconds of failure.")
    start_workers: bool = Field(True, description="Whether `start()` runs webhook delivery.")

    # Keys and rate limits
    rate_limit_live: float = Field(100.0, gt=0, description="Requests per second per live key.")
    rate_limit_test: float = Field(25.0, gt=0, description="Requests per second per test key.")
    key_touch_interval: float = Field(60.0, ge=0, description="Resolution of last_used_at.")
    idempotency_ttl: float = Field(86_400.0, gt=0)

    @field_validator("webhook_allowed_networks", mode="before")
    @classmethod
    def _split_networks(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        for cidr in value:
            ipaddress.ip_network(cidr, strict=False)
        return tuple(value)

    @model_validator(mode="after")
    def _check_chunking(self) -> Settings:
        if self.chunk_overlap_chars * 2 > self.chunk_target_chars:
            raise ValueError("chunk_overlap_chars must be at most half of chunk_target_chars")
        if self.default_top_k > self.max_top_k:
            raise ValueError("default_top_k cannot exceed max_top_k")
        if self.default_page_size > self.max_page_size:
            raise ValueError("default_page_size cannot exceed max_page_size")
        return self

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``AGENTCORE_*`` variables, then ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(f"AGENTCORE_{name.upper()}")
            if raw is not None:
                values[name] = raw
        if "openai_api_key" not in values and env.get("OPENAI_API_KEY"):
            values["openai_api_key"] = env["OPENAI_API_KEY"]
        values.update(overrides)
        return cls.model_validate(values)
