"""Reranking: which reranker a search uses, and one bounded call to it that may fail.

A search with ``rerank`` asks ``Reranking.order`` to order its candidates' texts. The
call runs on the core's model threads and is waited for at most ``rerank_timeout``
seconds; a reranker that raises, hangs or answers nonsense is logged and counted
(``Observer.rerank_failed``), and the search keeps its first order: reranking refines
a ranking that is already useful, so its failure must not fail the search.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from agentcore._logs import get_logger
from agentcore.errors import AgentCoreError, InvalidRequest
from agentcore.knowledge.rerankers import Reranker
from agentcore.observer import Observer, unobserved

if TYPE_CHECKING:
    from agentcore.config import Settings

__all__ = ["DEFAULT_RERANKER", "InvalidRanking", "Reranking"]

log = get_logger("agentcore.rerank")

DEFAULT_RERANKER = "http"
"""The reranker used when the ``reranker`` setting names none and it is registered (the
built-in ``/rerank`` client registers under this name when its URL is set)."""


class InvalidRanking(ValueError):
    """A reranker answered something that is not a ranking of the candidates."""


class Reranking:
    """The core's rerankers and how a search calls one.

    :param rerankers: the registered rerankers by name (filled in by the plugin hook
        once the core is built; read when a search needs one).
    :param settings: ``reranker``, ``rerank_candidates`` and ``rerank_timeout``.
    :param pool: where calls run, so a hung reranker is abandoned after
        ``rerank_timeout``; ``None``: in the calling thread, unbounded.
    :param observer: told of each failure (``rerank_failed``).
    """

    def __init__(
        self,
        rerankers: Mapping[str, Reranker],
        settings: Settings,
        *,
        pool: Executor | None = None,
        observer: Observer = unobserved,
    ) -> None:
        self._rerankers = rerankers
        self._settings = settings
        self._pool = pool
        self._observer = observer

    def chosen(self) -> Reranker | None:
        """The reranker searches use: the one the ``reranker`` setting names; unset,
        ``http`` when registered, else the only one registered; else ``None``."""
        name = self._settings.reranker
        if name is not None:
            return self._rerankers.get(name)
        if DEFAULT_RERANKER in self._rerankers:
            return self._rerankers[DEFAULT_RERANKER]
        if len(self._rerankers) == 1:
            return next(iter(self._rerankers.values()))
        return None

    def required(self) -> Reranker:
        """The chosen reranker, or a 400 ``reranker_unavailable`` naming ``rerank``."""
        reranker = self.chosen()
        if reranker is None:
            raise InvalidRequest(
                f"This core has no reranker, so rerank is unavailable ({self._why()}).",
                code="reranker_unavailable",
                param="rerank",
            )
        return reranker

    def for_chat(self) -> Reranker | None:
        """The chosen reranker for an agent that asks for one; when there is none the
        turn goes on without (logged and counted as a failure)."""
        reranker = self.chosen()
        if reranker is None:
            log.warning("an agent asks for reranking, but %s; not reranked", self._why())
            self._observer.rerank_failed(self._settings.reranker or "none", "unavailable")
        return reranker

    def _why(self) -> str:
        name = self._settings.reranker
        if name is not None:
            return f"no reranker is named {name!r}"
        if self._rerankers:
            return "several rerankers are registered: set AGENTCORE_RERANKER to one of them"
        return "set AGENTCORE_RERANKER_URL, or install a reranker plugin"

    def depth(self, k: int) -> int:
        """How many candidates a reranked search of ``k`` results ranks first."""
        return max(k, self._settings.rerank_candidates)

    def order(
        self, reranker: Reranker, query: str, documents: Sequence[str], top_n: int
    ) -> list[tuple[int, float]] | None:
        """The best ``top_n`` of ``documents`` by ``reranker``, as ``(index, score)``
        best first; ``None`` when it failed, timed out or answered nonsense."""
        if not documents:
            return []
        try:
            return _checked(self._call(reranker, query, documents, top_n), len(documents), top_n)
        except Exception as exc:
            code = _code_of(exc)
            detail = str(exc)[:300] or type(exc).__name__
            log.warning(
                "reranker %r failed (%s): %s; kept the first order", reranker.name, code, detail
            )
            self._observer.rerank_failed(reranker.name, code)
            return None

    def _call(
        self, reranker: Reranker, query: str, documents: Sequence[str], top_n: int
    ) -> list[tuple[int, float]]:
        if self._pool is None:
            return reranker.rerank(query, documents, top_n)
        future = self._pool.submit(reranker.rerank, query, documents, top_n)
        try:
            return future.result(timeout=self._settings.rerank_timeout)
        except FutureTimeout:
            future.cancel()  # still queued: never runs; running: abandoned
            raise TimeoutError(
                f"no answer within rerank_timeout ({self._settings.rerank_timeout:g} s)"
            ) from None


def _checked(answer: object, candidates: int, top_n: int) -> list[tuple[int, float]]:
    """``answer`` as a ranking of ``candidates`` texts, cut to ``top_n``.

    :raises InvalidRanking: not a list of ``(index, score)`` with each index in range
        and given once, each score a finite number.
    """
    if not isinstance(answer, list):
        raise InvalidRanking(f"answered a {type(answer).__name__}, not a list")
    ranking: list[tuple[int, float]] = []
    seen: set[int] = set()
    for item in answer[:top_n]:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise InvalidRanking("an item is not an (index, score) pair")
        index, score = item
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidRanking("an index is not an integer")
        if not 0 <= index < candidates or index in seen:
            raise InvalidRanking(f"index {index} is out of range or repeated")
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            raise InvalidRanking("a score is not a finite number")
        seen.add(index)
        ranking.append((index, float(score)))
    return ranking


def _code_of(exc: Exception) -> str:
    """The failure's code as metrics count it."""
    if isinstance(exc, InvalidRanking):
        return "invalid_answer"
    if isinstance(exc, TimeoutError):
        return "provider_timeout"
    if isinstance(exc, AgentCoreError):
        return exc.code
    return "provider_error"
