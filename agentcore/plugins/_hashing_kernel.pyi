"""Types of the optional compiled kernel of hashing-v1 (``_hashing_kernel.c``)."""

from collections.abc import Sequence

from typing_extensions import Buffer

def embed_rows(
    stems: Buffer,
    lengths: Sequence[int],
    start: Buffer,
    count: Buffer,
    hashes: Buffer,
    signed: Buffer,
    tf_factors: Buffer,
    pair_weight: float,
    dimension: int,
    out: Buffer,
    /,
) -> bool:
    """Write each row's bucket sums (before normalisation) into ``out``; False when a
    row is too long for the tf table (nothing useful written)."""

def stem_ids(table: dict[str, int], tokens: list[str], out: Buffer, /) -> bool:
    """Write ``table[token]`` of each token into ``out``; False at a missing token."""
