"""The built-in default embedder: signed feature hashing of words and n-grams, in numpy."""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from agentcore.hookspecs import hookimpl
from agentcore.knowledge.embedders import EmbedKind
from agentcore.knowledge.text import raw_tokens, stem_of

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.knowledge.embedders import Embedder

__all__ = ["HashingEmbedder", "agentcore_register_embedders"]


def _stable_hash(feature: str) -> int:
    # blake2b, not hash(): Python salts str hashes per process, vectors must not change.
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


class _Column:
    """A growable 1-D numpy array: appends are amortised, and a snapshot taken with
    ``values()`` stays valid (its first ``len`` items never change) while others append."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self._data = np.empty(256, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values: npt.ArrayLike) -> None:
        array = np.asarray(values, dtype=self._data.dtype)
        needed = self._size + len(array)
        if needed > len(self._data):
            grown = np.empty(max(needed, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown  # readers holding the old array keep a valid copy
        self._data[self._size : needed] = array
        self._size = needed

    def values(self) -> npt.NDArray[Any]:
        return self._data


class _Vocabulary:
    """What the embedder has learnt about the words it has seen, as flat arrays.

    Raw tokens map to stem ids (``-1`` for dropped tokens); stem ``i`` has its
    features (its word feature first, then its character n-grams) at
    ``feature_hashes[feature_start[i] : feature_start[i] + feature_count[i]]``, and
    their signed weights at the same places of ``feature_signed``.
    """

    def __init__(self) -> None:
        self.token_ids: dict[str, int] = {}
        self.stem_ids: dict[str, int] = {}
        self.stems: list[str] = []
        self.gram_hashes: dict[str, int] = {}
        self.feature_start = _Column(np.int64)
        self.feature_count = _Column(np.int64)
        self.feature_hashes = _Column(np.uint64)
        self.feature_weights = _Column(np.float32)
        # derived from the two above: each feature's weight with its sign (the hash's
        # lowest bit) applied
        self.feature_signed = _Column(np.float32)


class HashingEmbedder:
    """Deterministic bag-of-features embeddings that need no model and no download.

    Each text becomes lowercased NFKC word tokens without stop words, lightly stemmed.
    Features are the stems, adjacent stem pairs and the character 3- to 5-grams of
    each word (which match inflections and compounds the stemmer misses). Each
    feature is hashed with a stable 64-bit hash to a bucket and a sign, weighted by
    its type and by ``1 + log(tf)``; rows are L2-normalised. Text with no features
    embeds as a zero row. Queries and passages are embedded alike.

    The Python work is done once per distinct token: a token's stem and the hashes
    and weights of the stem's features are kept in flat arrays (emptied past
    ``_CACHE_LIMIT`` stems), and a batch is assembled, counted and bucketed with
    whole-array numpy operations. Thread-safe.

    :param dimension: the vector length.
    """

    name = "hashing-v1"

    #: Weights of word, word-pair and character-n-gram features. A word's n-grams
    #: share ``CHAR_WEIGHT`` so long words do not drown short ones.
    WORD_WEIGHT = 1.0
    PAIR_WEIGHT = 0.6
    CHAR_WEIGHT = 1.0
    CHAR_SIZES = (3, 4, 5)
    _CACHE_LIMIT = 200_000
    _BATCH_ROWS = 64

    def __init__(self, dimension: int = 1024) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        self.dimension = dimension
        pair_weight = np.float32(self.PAIR_WEIGHT)
        # a pair feature's signed weight, by its hash's lowest bit (0: negative)
        self._pair_signs = np.array([-pair_weight, pair_weight], dtype=np.float32)
        self._lock = threading.Lock()
        self._vocabulary = _Vocabulary()

    def tokens(self, text: str) -> list[str]:
        """The stems that ``embed`` uses for ``text``, in order."""
        with self._lock:
            vocabulary = self._current_vocabulary()
            ids = self._stem_ids(vocabulary, raw_tokens(text))
            return [vocabulary.stems[i] for i in ids if i >= 0]

    def tokens_of(self, texts: Sequence[str]) -> list[list[str]]:
        """``tokens(text)`` of each of ``texts``, in one pass (one lock, one lookup)."""
        raw: list[str] = []
        lengths: list[int] = []
        for text in texts:
            found = raw_tokens(text)
            raw += found
            lengths.append(len(found))
        with self._lock:
            vocabulary = self._current_vocabulary()
            ids = self._stem_ids(vocabulary, raw)
            stems = vocabulary.stems
            out: list[list[str]] = []
            start = 0
            for length in lengths:
                out.append([stems[i] for i in ids[start : start + length] if i >= 0])
                start += length
            return out

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> npt.NDArray[np.float32]:
        """Embed ``texts`` as rows of a ``(len(texts), dimension)`` float32 array."""
        if len(texts) <= self._BATCH_ROWS:
            return self._embed_batch(texts)
        step = self._BATCH_ROWS  # rows are independent: bounded work arrays, same bits
        parts = [self._embed_batch(texts[i : i + step]) for i in range(0, len(texts), step)]
        return np.concatenate(parts)

    def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raw: list[str] = []
        lengths: list[int] = []
        for text in texts:
            found = raw_tokens(text)
            raw += found
            lengths.append(len(found))
        with self._lock:
            vocabulary = self._current_vocabulary()
            token_stems = self._stem_array(vocabulary, raw)
            # Snapshots: later appends by other threads leave these prefixes alone.
            start = vocabulary.feature_start.values()
            count = vocabulary.feature_count.values()
            feature_hashes = vocabulary.feature_hashes.values()
            feature_signed = vocabulary.feature_signed.values()
        kept = token_stems >= 0
        stems = token_stems[kept]
        if not stems.size:  # no features: zero rows
            return np.zeros((len(texts), self.dimension), dtype=np.float32)
        # Each stem's features, in text order: gather index ranges without a loop (in
        # place where it can: each numpy call on arrays this small costs about a µs).
        counts = count[stems]
        firsts = start[stems]
        ends = np.cumsum(counts)
        gather = firsts - ends
        gather += counts
        gather = gather.repeat(counts)
        gather += _int_positions(int(ends[-1]))
        word_hashes = feature_hashes[firsts]
        if len(texts) == 1:
            all_rows = None
            pair_hashes = _mix(word_hashes[:-1], word_hashes[1:])
        else:
            rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)[kept]
            same_row = rows[1:] == rows[:-1]
            pair_hashes = _mix(word_hashes[:-1][same_row], word_hashes[1:][same_row])
            all_rows = np.concatenate([np.repeat(rows, counts), rows[1:][same_row]])
        # Per row, stem features come before pair features, as they always have: a
        # feature repeated in a row takes the weight of its first occurrence.
        pair_signed = self._pair_signs.take(pair_hashes & _ONE)  # the hash's low bit
        flat = _bucket_sums(
            all_rows,
            np.concatenate([feature_hashes[gather], pair_hashes]),
            np.concatenate([feature_signed[gather], pair_signed]),
            len(texts),
            self.dimension,
        )
        return _normalised(flat.reshape(len(texts), self.dimension).astype(np.float32))

    def _current_vocabulary(self) -> _Vocabulary:
        """The vocabulary, started afresh once it holds ``_CACHE_LIMIT`` stems. Locked.

        Also once its n-gram cache holds ``8 * _CACHE_LIMIT`` grams: text of random
        words (base64) makes new grams with every word, and that cache would
        otherwise grow past a gigabyte on a 50 MB upload.
        """
        vocabulary = self._vocabulary
        limit = self._CACHE_LIMIT
        if (
            len(vocabulary.stems) >= limit
            or len(vocabulary.token_ids) >= 4 * limit
            or len(vocabulary.gram_hashes) >= 8 * limit
        ):
            vocabulary = self._vocabulary = _Vocabulary()
        return vocabulary

    def _stem_array(self, vocabulary: _Vocabulary, raw: list[str]) -> npt.NDArray[np.int64]:
        """``_stem_ids`` as an array, looked up in one call when every token is known."""
        try:
            if len(raw) > 1:  # itemgetter of several keys: one C loop, a tuple
                return np.array(itemgetter(*raw)(vocabulary.token_ids), dtype=np.int64)
            return np.array([vocabulary.token_ids[token] for token in raw], dtype=np.int64)
        except KeyError:
            return np.array(self._stem_ids(vocabulary, raw), dtype=np.int64)

    def _stem_ids(self, vocabulary: _Vocabulary, raw: list[str]) -> list[int]:
        """The stem id of each raw token (``-1`` when dropped), learning new ones. Locked."""
        table = vocabulary.token_ids
        try:
            return [table[token] for token in raw]
        except KeyError:
            new = _NewStems(len(vocabulary.feature_hashes))
            for token in set(raw).difference(table):
                table[token] = self._learn(vocabulary, token, new)
            # One append per column for all the new stems of this call.
            vocabulary.feature_start.extend(new.starts)
            vocabulary.feature_count.extend(new.counts)
            hashes = np.array(new.hashes, dtype=np.uint64)
            weights = np.array(new.weights, dtype=np.float32)
            vocabulary.feature_hashes.extend(hashes)
            vocabulary.feature_weights.extend(weights)
            vocabulary.feature_signed.extend(_signed(hashes, weights))
            return [table[token] for token in raw]

    def _learn(self, vocabulary: _Vocabulary, token: str, new: _NewStems) -> int:
        """The stem id of a token not seen before (``-1`` when it is dropped). Locked."""
        stem = stem_of(token)
        if stem is None:
            return -1
        known = vocabulary.stem_ids.get(stem)
        if known is not None:
            return known
        padded = f"<{stem}>"
        grams = [padded[i : i + n] for n in self.CHAR_SIZES for i in range(len(padded) - n + 1)]
        new.starts.append(new.offset + len(new.hashes))
        new.counts.append(1 + len(grams))
        new.hashes.append(_stable_hash("w\x00" + stem))
        new.weights.append(self.WORD_WEIGHT)
        if grams:
            # math.sqrt and numpy's are both IEEE correctly rounded: the same share.
            share = self.CHAR_WEIGHT / math.sqrt(len(grams))
            cache = vocabulary.gram_hashes
            for gram in grams:
                value = cache.get(gram)
                if value is None:
                    value = cache[gram] = _stable_hash("c\x00" + gram)
                new.hashes.append(value)
            new.weights += [share] * len(grams)
        number = len(vocabulary.stems)
        vocabulary.stems.append(stem)
        vocabulary.stem_ids[stem] = number
        return number


class _NewStems:
    """Features of the stems learnt in one call, appended to the vocabulary at its end."""

    def __init__(self, offset: int) -> None:
        self.offset = offset  # where the first new feature will be
        self.starts: list[int] = []
        self.counts: list[int] = []
        self.hashes: list[int] = []
        self.weights: list[float] = []


def _normalised(out: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``out``'s rows divided by their L2 norms (zero rows left as they are), in place."""
    # np.linalg.norm(out, axis=1, keepdims=True) without its Python layer: the same
    # float32 squares and pairwise sum, so the same bits
    norms = np.sqrt(np.add.reduce(out * out, axis=1, keepdims=True))
    if len(out) == 1:  # one row: a scalar division, the same quotients, no mask
        if norms[0, 0] > 0:
            out /= norms[0, 0]
        return out
    np.divide(out, norms, out=out, where=norms > 0)
    return out


# The most bits a packed sort key gives the row and the position: at least 24 are left
# for the hash (0: always sort exactly, in two passes).
_KEY_SHIFT_LIMIT = 40


def _buckets(hashes: npt.NDArray[np.uint64], dimension: int) -> npt.NDArray[np.int64]:
    """The bucket of each feature hash (its bits above the sign bit, modulo ``dimension``)."""
    high = hashes >> _ONE
    if dimension & (dimension - 1) == 0:  # a power of two: the same remainder, quicker
        high &= np.uint64(dimension - 1)
    else:
        high %= np.uint64(dimension)
    buckets: npt.NDArray[np.int64] = high.view(np.int64)
    return buckets


def _signed(
    hashes: npt.NDArray[np.uint64], weights: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """``weights`` negated where the hash's lowest bit is 0 (a sign flip is exact, so
    ``signed * factor`` equals ``weight * factor * sign`` bit for bit)."""
    signed: npt.NDArray[np.float32] = np.where(hashes & _ONE, weights, -weights).astype(
        np.float32, copy=False
    )
    return signed


def _bucket_sums(
    rows: npt.NDArray[np.int64] | None,
    hashes: npt.NDArray[np.uint64],
    signed: npt.NDArray[np.float32],
    count: int,
    dimension: int,
) -> npt.NDArray[np.float64]:
    """The flat ``(count * dimension)`` sums of the signed, tf-weighted features.

    ``rows`` says which text each feature belongs to (``None``: all to one text).
    Features repeated in a row are counted once, weighted by their first
    occurrence's weight times ``1 + log(repeats)``. Each bucket adds its features in
    ascending hash order, as it always has, so the float64 sums are bit-identical.
    """
    if not len(hashes):
        return np.zeros(count * dimension)
    repeats, first = _first_occurrences(rows, hashes, count)
    values = signed[first]  # a new array: scaled in place below
    if repeats is not None:
        # a single feature's factor 1 + log(1) is exactly 1: multiplying every value
        # by its factor changes only the repeated ones, as scaling just those did
        values *= _tf_factors(repeats, len(hashes))
    # the buckets of the distinct features only (a bucket never exceeds the dimension)
    bins = _buckets(hashes[first], dimension)
    if rows is not None:
        bins = bins + rows[first] * dimension
    # bincount adds each bin's values in input order, here ascending hash order.
    sums = np.bincount(bins, weights=values, minlength=count * dimension)
    return cast("npt.NDArray[np.float64]", sums)  # float64 with weights: typed, not copied


def _tf_factors(repeats: npt.NDArray[np.intp], most: int) -> npt.NDArray[np.float32]:
    """``float32(1 + log(repeats))``, from a table when no count can pass it (``most``
    bounds them): the same float64 ``log`` of each count, rounded once."""
    if most < len(_TF_FACTORS):
        factors: npt.NDArray[np.float32] = _TF_FACTORS[repeats]
        return factors
    return (1.0 + np.log(repeats)).astype(np.float32)


# ``float32(1 + log(n))`` for every count n a text of up to 64k features can hold
# (index 0 is unused), computed as ``_tf_factors`` would: 256 KiB.
_TF_FACTORS = np.concatenate(
    [
        np.zeros(1, np.float32),
        (1.0 + np.log(np.arange(1, 1 << 16, dtype=np.intp))).astype(np.float32),
    ]
)


def _first_occurrences(
    rows: npt.NDArray[np.int64] | None, hashes: npt.NDArray[np.uint64], count: int
) -> tuple[npt.NDArray[np.intp] | None, npt.NDArray[np.intp]]:
    """Where each distinct (row, hash) first occurs, ordered by (row, hash), and how
    many times it occurs (``None`` when nothing repeats). ``rows`` are in
    ``range(count)`` (``None``: all 0).

    Sorting by (row, hash) orders every bucket of a row by hash. One sort of packed
    64-bit keys does it: the row in the top bits, then the hash's top bits, then the
    feature's position (so equal hashes keep their order and the first is first),
    unless two different hashes of a row could tie in it: then an exact, slower sort.
    """
    size = len(hashes)
    position_bits = max(1, (size - 1).bit_length())
    row_bits = 0 if rows is None else max(1, (count - 1).bit_length())
    shift = row_bits + position_bits  # bits of the key that are not the hash's
    if shift <= _KEY_SHIFT_LIMIT and rows is None:
        return _first_occurrences_in_one(hashes, position_bits)
    if shift <= _KEY_SHIFT_LIMIT:
        key = (hashes >> np.uint64(shift)) << np.uint64(position_bits)
        key |= np.arange(size, dtype=np.uint64)
        if rows is not None:
            key |= rows.astype(np.uint64) << np.uint64(64 - row_bits)
        key.sort()
        order = (key & np.uint64((1 << position_bits) - 1)).astype(np.intp)
        key >>= np.uint64(position_bits)
        same = key[1:] == key[:-1]
        if not same.any():
            return None, order  # no feature repeats in its row
        ordered = hashes[order]
        if not (same & (ordered[1:] != ordered[:-1])).any():
            new = np.empty(size, dtype=bool)
            new[0] = True
            np.logical_not(same, out=new[1:])
            starts = np.flatnonzero(new)
            return _run_lengths(starts, size), order[starts]
    return _exact_first(rows, hashes)  # two hashes of a row tie in the key (or keys are too short)


def _first_occurrences_in_one(
    hashes: npt.NDArray[np.uint64], position_bits: int
) -> tuple[npt.NDArray[np.intp] | None, npt.NDArray[np.intp]]:
    """``_first_occurrences`` of one text's features, with fewer array operations (each
    costs microseconds, the features of a short text far less).

    The key is the hash with its low ``position_bits`` bits replaced by the position
    (the same key as ``(hash >> bits) << bits | position``). The order it sorts to is
    the exact (hash, position) order exactly when the hashes it lists never decrease
    (two different hashes tying in the key, listed out of order, would show as a
    decrease; listed in order they are in the exact order too): checked, else the
    exact sort. The runs of equal hashes are then found on the hashes themselves.
    """
    size = len(hashes)
    low = (1 << position_bits) - 1
    key = hashes & np.uint64(~low & _ALL_BITS)
    key |= _positions(size)
    key.sort()
    key &= np.uint64(low)
    order = key.view(np.intp)  # positions: far below 2**63
    ordered = hashes[order]
    later, earlier = ordered[1:], ordered[:-1]
    if (later < earlier).any():
        return _exact_first(None, hashes)
    edges = np.concatenate((_TRUE, later != earlier, _TRUE)).nonzero()[0]  # 1-D: no ravel
    if len(edges) == size + 1:
        return None, order  # no feature repeats
    starts = edges[:-1]
    return np.subtract(edges[1:], starts), order[starts]


def _exact_first(
    rows: npt.NDArray[np.int64] | None, hashes: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.intp] | None, npt.NDArray[np.intp]]:
    """``_first_occurrences`` by two stable sorts (of the hashes, then the rows)."""
    size = len(hashes)
    order = np.lexsort((hashes,) if rows is None else (hashes, rows))
    sorted_hashes = hashes[order]
    new = np.ones(size, dtype=bool)
    new[1:] = sorted_hashes[1:] != sorted_hashes[:-1]
    if rows is not None:
        sorted_rows = rows[order]
        new[1:] |= sorted_rows[1:] != sorted_rows[:-1]
    starts = np.flatnonzero(new)
    return _run_lengths(starts, size), order[starts]


def _run_lengths(starts: npt.NDArray[np.intp], size: int) -> npt.NDArray[np.intp]:
    """The length of each run, from where the runs start in ``size`` items."""
    repeats = np.empty(len(starts), dtype=np.intp)
    np.subtract(starts[1:], starts[:-1], out=repeats[:-1])
    repeats[-1] = size - starts[-1]
    return repeats


def _positions(size: int) -> npt.NDArray[np.uint64]:
    """``arange(size)`` as uint64, a view of a shared read-only array when it is short."""
    if size <= len(_POSITIONS):
        return _POSITIONS[:size]
    return np.arange(size, dtype=np.uint64)


def _int_positions(size: int) -> npt.NDArray[np.int64]:
    """``arange(size)`` as int64, a view of a shared read-only array when it is short."""
    if size <= len(_INT_POSITIONS):
        return _INT_POSITIONS[:size]
    return np.arange(size, dtype=np.int64)


_POSITIONS = np.arange(1 << 14, dtype=np.uint64)
_POSITIONS.flags.writeable = False
_INT_POSITIONS = np.arange(1 << 14, dtype=np.int64)
_INT_POSITIONS.flags.writeable = False
_TRUE = np.ones(1, dtype=bool)
_ALL_BITS = (1 << 64) - 1


_ONE = np.uint64(1)
_MIX_A = np.uint64(0x9E3779B97F4A7C15)
_MIX_B = np.uint64(0x632BE59BD9B4E019)
_MIX_C = np.uint64(0xBF58476D1CE4E5B9)
_SHIFT_31 = np.uint64(31)
_SHIFT_29 = np.uint64(29)


def _mix(left: npt.NDArray[np.uint64], right: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Combine two feature hashes into a well-spread, order-sensitive third."""
    # array arithmetic on unsigned integers wraps silently (no overflow warning)
    value = left * _MIX_A + (right ^ _MIX_B)
    value ^= value >> _SHIFT_31
    value *= _MIX_C
    value ^= value >> _SHIFT_29
    return value


@hookimpl
def agentcore_register_embedders(register: Callable[[Embedder], None], settings: Settings) -> None:
    """Register ``hashing-v1``, the default embedder of the knowledge core."""
    register(HashingEmbedder())
