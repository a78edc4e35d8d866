"""``embed_passages``: unit rows and the keep mask for any float32 rows, without warnings
(the test run turns warnings into errors), and texts cut by ``bounded_text`` unless the
caller already did (``max_token_chars=None``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from agentcore.knowledge.vectors import embed_passages, nonzero_rows, unit_rows

BIG = np.finfo(np.float32).max
TINY = np.finfo(np.float32).smallest_subnormal
ROWS = np.array(
    [
        [3.0, 4.0, 0.0],  # an ordinary row
        [0.0, 0.0, 0.0],  # no features
        [np.inf, 1.0, 0.0],
        [-np.inf, np.inf, 0.0],
        [np.nan, 1.0, 0.0],
        [BIG, BIG, -BIG],  # squares overflow float32, not float64
        [TINY, 0.0, TINY],  # squares vanish in float32, not in float64
        [1e-20, 2e-20, 0.0],
    ],
    dtype=np.float32,
)


class Fixed:
    """An embedder returning ``ROWS`` (by text number) and remembering what it was fed."""

    name = "fixed"
    dimension = 3

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        self.seen += texts
        return np.array([ROWS[int(text.split()[0])] for text in texts], dtype=np.float32)


def test_rows_of_every_kind_are_normalised_and_masked_without_warnings() -> None:
    texts = [f"{n} text" for n in range(len(ROWS))]
    vectors, keep = embed_passages(Fixed(), texts, max_token_chars=64)
    assert keep.tolist() == [True, False, False, False, False, True, True, True]
    assert keep.tolist() == nonzero_rows(unit_rows(ROWS)).tolist()
    # kept rows: unit length, the same bits as unit_rows gives
    assert np.array_equal(vectors[keep], unit_rows(ROWS)[keep])
    assert np.allclose(np.linalg.norm(vectors[keep].astype(np.float64), axis=1), 1.0)
    assert vectors[0].tolist() == pytest.approx([0.6, 0.8, 0.0])
    # rows left out of the index come back as they were
    assert np.array_equal(vectors[~keep], ROWS[~keep], equal_nan=True)


@pytest.mark.parametrize("limit", [8, None])
def test_texts_are_cut_unless_the_caller_did(limit: int | None) -> None:
    embedder = Fixed()
    long = "0 " + "x" * 20
    embed_passages(embedder, [long], max_token_chars=limit)
    assert embedder.seen == (["0 " + "x" * 8] if limit else [long])


def test_no_texts() -> None:
    vectors, keep = embed_passages(Fixed(), [], max_token_chars=None)
    assert vectors.shape == (0, 3) and keep.shape == (0,)
