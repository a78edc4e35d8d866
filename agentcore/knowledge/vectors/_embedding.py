"""Embedding: texts to unit rows, and the one place rows are normalised."""

from __future__ import annotations

import numpy as np

from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors._parts import Matrix


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
