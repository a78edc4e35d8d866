"""Embedding: passages and queries to rows, and the one place rows are normalised.

Ingestion (``Embedding.passages``), re-embedding and search (``Embedding.queries``)
embed here; stored rows are made unit length here (``unit_rows``), queries checked
and normalised here (``unit_queries``), and rows added to an index validated and
normalised here (``RowScales``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agentcore.errors import InvalidRequest, ValidationFailed
from agentcore.knowledge.embedders import Embedder, bounded_text
from agentcore.knowledge.vectors._parts import Matrix

if TYPE_CHECKING:
    from agentcore._cancellation import Cancellation


class Embedding:
    """The core's embedder and how texts become rows: passages for the index, queries
    for search, each cut by ``bounded_text`` first.

    :param embedders: the registered embedders, by name (plugins fill it after this
        object is made: it is looked up when needed).
    :param name: the one that indexes (``Settings.embedder``).
    :param max_token_chars: the longest whitespace-free run an embedder is fed
        (``Settings.max_token_chars``).
    """

    def __init__(
        self, embedders: Mapping[str, Embedder], name: str, *, max_token_chars: int = 64
    ) -> None:
        self._embedders = embedders
        self._name = name
        self.max_token_chars = max_token_chars

    def embedder(self) -> Embedder:
        """The configured embedder, or a 400 naming the ones registered."""
        embedder = self._embedders.get(self._name)
        if embedder is None:
            known = ", ".join(sorted(self._embedders)) or "none"
            raise InvalidRequest(
                f"The configured embedder {self._name!r} is not registered (registered: {known}).",
                code="embedder_unavailable",
            )
        return embedder

    def passages(
        self,
        texts: Sequence[str],
        *,
        cancellation: Cancellation | None = None,
        bounded: bool = False,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], str]:
        """Unit rows of passage ``texts``, the mask of rows fit to index
        (``embed_passages``) and the name of the embedder that made them;
        ``bounded``: the caller already cut the texts (``bounded_text``)."""
        embedder = self.embedder()
        vectors, keep = embed_passages(
            embedder,
            texts,
            max_token_chars=None if bounded else self.max_token_chars,
            cancellation=cancellation,
        )
        return vectors, keep, embedder.name

    def queries(
        self, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """The queries' rows as the embedder returns them (a row each; search normalises
        them) and which embed to something, finite and not all zeros (``nonzero_rows``),
        embedded in one call."""
        cut = [bounded_text(text, self.max_token_chars) for text in texts]
        vectors: npt.NDArray[np.float32] = np.asarray(self.embedder().embed(cut, kind="query"))
        return vectors, nonzero_rows(vectors)


EMBED_BATCH = 256  # texts per embedder call: bounds its temporaries, checks cancellation


def embed_passages(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    max_token_chars: int | None,
    cancellation: Cancellation | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Unit vectors of ``texts`` and the mask of rows fit to index (``nonzero_rows``).

    The embedder is fed ``EMBED_BATCH`` texts at a time, each cut by ``bounded_text``
    (``max_token_chars=None``: the caller already cut them so), into one preallocated
    matrix: memory stays the matrix plus one batch, and ``cancellation`` is checked
    between batches.
    """
    vectors = np.empty((len(texts), embedder.dimension), dtype=np.float32)
    keep = np.empty(len(texts), dtype=bool)
    for start in range(0, len(texts), EMBED_BATCH):
        if cancellation is not None:
            cancellation.check()
        batch = texts[start : start + EMBED_BATCH]
        if max_token_chars is not None:
            batch = [bounded_text(text, max_token_chars) for text in batch]
        rows = np.asarray(embedder.embed(batch, kind="passage"), dtype=np.float32)
        if rows.shape != (len(batch), embedder.dimension):
            raise ValueError(
                f"embedder {embedder.name!r} returned shape {rows.shape},"
                f" expected {(len(batch), embedder.dimension)}"
            )
        end = start + len(batch)
        keep[start:end] = unit_rows_into(rows, vectors[start:end])
    return vectors, keep


def unit_rows_into(
    rows: npt.NDArray[np.float32], out: npt.NDArray[np.float32]
) -> npt.NDArray[np.bool_]:
    """``out[:] = unit_rows(rows)``, and ``nonzero_rows`` of that, from one pass over the
    norms (bit for bit the same). A row's float64 norm is finite and positive exactly
    when the float32 row is finite and not all zeros (float32 squares can neither
    overflow nor vanish in float64), and such a row divided by it stays so. Nothing here
    can raise a floating-point warning (squares of float32 values cannot overflow in
    float64 and are never negative, and NaN stays quiet), so no ``errstate`` is set."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    # every norm finite and positive (the usual case), in two reductions: the least is
    # positive (NaN is not) and the largest finite
    if not len(norms) or (norms.min() > 0 and norms.max() < np.inf):
        np.divide(rows, norms[:, None], out=out, casting="same_kind")
        return np.ones(len(norms), dtype=bool)
    ok: npt.NDArray[np.bool_] = np.isfinite(norms) & (norms > 0)
    out[...] = rows
    out[ok] = (rows[ok] / norms[ok, None]).astype(np.float32)
    return ok


def nonzero_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    """A mask of rows that are finite and not all zeros (the index refuses the others)."""
    finite = np.isfinite(vectors).all(axis=1)
    mask: npt.NDArray[np.bool_] = finite & (np.abs(vectors).sum(axis=1) > 0)
    return mask


def unit_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``vectors`` as float32 with each finite non-zero row scaled to unit length.

    Embedders need not normalise, but the store keeps unit rows: the index loads
    persisted segments as already normalised, so cosine stays a dot product.
    Zero and non-finite rows are left as they are (``nonzero_rows`` drops them).
    """
    rows = np.array(vectors, dtype=np.float32, copy=True)
    if rows.ndim != 2 or rows.size == 0:
        return rows
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
    ok = np.isfinite(norms) & (norms > 0)
    if ok.all():  # the usual case: divide in float64 and round once, without the mask
        np.divide(rows, norms[:, None], out=rows, casting="same_kind")
    else:
        rows[ok] = (rows[ok] / norms[ok, None]).astype(np.float32)
    return rows


def unit_queries(queries: Matrix, dimension: int) -> Matrix:
    """Query rows ``(m, dimension)`` checked (a 422 for another shape, NaN or infinity)
    and normalised (``unit_rows``: a zero row stays zero, and matches nothing)."""
    if queries.ndim != 2 or queries.shape[1] != dimension:
        raise ValidationFailed(
            f"queries must have {dimension} dimensions, not shape {queries.shape}",
            code="dimension_mismatch",
            param="query",
        )
    if not np.isfinite(queries).all():
        raise ValidationFailed(
            "the query holds NaN or infinity", code="non_finite_vector", param="query"
        )
    return unit_rows(queries)


class RowScales:
    """Validated inverse norms of a batch of rows, to normalise them into place.

    Squared norms come from one float32 pass; the rare rows where that is not a normal
    positive number (NaN, infinity, zero, or float32 under/overflow) are re-measured in
    float64, which tells refusals from rows that are merely tiny or huge.
    """

    def __init__(self, rows: Matrix) -> None:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            squares = np.vecdot(rows, rows)
        self.slow = np.flatnonzero(~((squares > 1e-30) & (squares < 1e30)))
        self.inverse = np.zeros(rows.shape[0], dtype=np.float32)
        ok = np.ones(rows.shape[0], dtype=bool)
        ok[self.slow] = False
        np.divide(1.0, np.sqrt(squares), out=self.inverse, where=ok)
        self.slow_norms = np.empty(0, dtype=np.float64)
        if self.slow.size:
            exact = rows[self.slow].astype(np.float64)
            if not np.isfinite(exact).all():
                raise ValidationFailed(
                    "a vector holds NaN or infinity", code="non_finite_vector", param="vectors"
                )
            self.slow_norms = np.sqrt(np.einsum("ij,ij->i", exact, exact))
            if (self.slow_norms == 0).any():
                first = int(self.slow[np.argmin(self.slow_norms)])
                raise ValidationFailed(
                    f"vector {first} is all zeros", code="zero_vector", param="vectors"
                )

    def write(self, rows: Matrix, out: Matrix) -> None:
        """Write the unit-length ``rows`` into ``out`` (no temporary the batch's size)."""
        np.multiply(rows, self.inverse[:, None], out=out)
        if self.slow.size:
            out[self.slow] = rows[self.slow] / self.slow_norms[:, None]
