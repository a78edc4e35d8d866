"""The compiled kernel of ``hashing-v1`` gives the numpy path's bits, and refuses bad input.

``_hashing_kernel.c`` is built by ``pip install`` where a C compiler is found; the
embedder uses it when it imported (``kernel_active()``), else numpy alone. Both paths
must give identical vectors: stored indexes hold vectors made by either.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest
from embedder_corpus import DATA, DIMENSIONS, fingerprint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcore.plugins import hashing_embedder
from agentcore.plugins.hashing_embedder import _TF_FACTORS, HashingEmbedder, kernel_active

PINNED = json.loads(DATA.read_text(encoding="utf-8"))
TEXTS: list[str] = PINNED["texts"]
kernel = hashing_embedder._kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason="the kernel was not built")


def numpy_path(embedder: HashingEmbedder, texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """``embedder.embed(texts)`` with the kernel switched off for the call."""
    hashing_embedder.USE_KERNEL = False
    try:
        return embedder.embed(texts)
    finally:
        hashing_embedder.USE_KERNEL = True


@pytest.fixture(autouse=True)
def kernel_switched_on() -> Iterator[None]:
    assert hashing_embedder.USE_KERNEL
    yield
    hashing_embedder.USE_KERNEL = True


def test_the_kernel_is_built_where_tests_run() -> None:
    # CI installs with a compiler: a silent fallback to numpy would leave the kernel
    # untested. An install meant to have no compiler says so.
    if os.environ.get("AGENTCORE_NO_KERNEL") == "1":
        pytest.skip("an install without a C compiler, on purpose")
    assert kernel is not None and kernel_active()


def test_the_switch_turns_the_kernel_off() -> None:
    hashing_embedder.USE_KERNEL = False
    assert not kernel_active()


@needs_kernel
@pytest.mark.parametrize("dimension", [*DIMENSIONS, 7, 1000])
def test_both_paths_give_the_same_bits_on_the_pinned_corpus(dimension: int) -> None:
    compiled = HashingEmbedder(dimension=dimension)
    plain = HashingEmbedder(dimension=dimension)
    singles = np.stack([compiled.embed([text])[0] for text in TEXTS])
    assert np.array_equal(singles.view(np.uint32), numpy_path(plain, TEXTS).view(np.uint32))
    batch = compiled.embed(TEXTS)
    assert np.array_equal(batch.view(np.uint32), singles.view(np.uint32))


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_the_numpy_path_still_gives_the_pinned_bits(dimension: int) -> None:
    embedder = HashingEmbedder(dimension=dimension)
    found = [fingerprint(numpy_path(embedder, [text])[0]) for text in TEXTS]
    assert found == PINNED["fingerprints"][str(dimension)]
    assert fingerprint(numpy_path(embedder, TEXTS).ravel()) == PINNED["batch"][str(dimension)]


@needs_kernel
def test_batches_mixing_empty_dropped_and_repeated_texts() -> None:
    texts = ["", "the of and", "blade blade blade turbine", "?!", "x", "Turbine blades."]
    compiled, plain = HashingEmbedder(64), HashingEmbedder(64)
    out = compiled.embed(texts)
    assert np.array_equal(out, numpy_path(plain, texts))
    assert not out[0].any() and not out[1].any() and not out[3].any()  # no features: zero
    assert out[2].any() and out[5].any()


words = st.text(
    alphabet=st.sampled_from(list("abcdeXYZ019'’ é") + ["ß", "ﬁ", "İ", "中"]),
    min_size=1,
    max_size=14,
)


@needs_kernel
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.lists(
            st.one_of(words, st.sampled_from(["blade", "the", "Running", "runs"])), max_size=40
        ).map(" ".join),
        min_size=1,
        max_size=5,
    ),
    dimension=st.sampled_from([1, 3, 64, 1024]),
)
def test_random_texts_give_the_same_bits(texts: list[str], dimension: int) -> None:
    compiled, plain = HashingEmbedder(dimension), HashingEmbedder(dimension)
    assert np.array_equal(
        compiled.embed(texts).view(np.uint32), numpy_path(plain, texts).view(np.uint32)
    )


@needs_kernel
def test_a_text_with_more_features_than_the_tf_table_takes_the_numpy_path() -> None:
    rng = random.Random(14)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choices(letters, k=12)) for _ in range(6000)]
    text = " ".join(vocabulary)  # about 16 features a word: past the 65,536 of the table
    embedder = HashingEmbedder(256)
    vocabulary_state = embedder._vocabulary
    raw = hashing_embedder._raw_tokens(text)
    embedder.embed([text])  # learns the words
    stems = np.empty(len(raw), dtype=np.int64)
    assert kernel is not None and kernel.stem_ids(vocabulary_state.token_ids, raw, stems)
    out = np.empty((1, 256), dtype=np.float32)
    taken = kernel.embed_rows(
        stems,
        [len(raw)],
        vocabulary_state.feature_start.values(),
        vocabulary_state.feature_count.values(),
        vocabulary_state.feature_hashes.values(),
        vocabulary_state.feature_signed.values(),
        _TF_FACTORS,
        HashingEmbedder.PAIR_WEIGHT,
        256,
        out,
    )
    assert taken is False
    assert np.array_equal(embedder.embed([text]), numpy_path(HashingEmbedder(256), [text]))


# bad input: a clear Python exception, never a crash ----------------------------------


def _arguments() -> list[object]:
    """Consistent arguments for ``embed_rows``: one row of two known stems."""
    embedder = HashingEmbedder(8)
    embedder.embed(["blade turbine"])
    vocabulary = embedder._vocabulary
    return [
        np.array([0, 1], dtype=np.int64),
        [2],
        vocabulary.feature_start.values(),
        vocabulary.feature_count.values(),
        vocabulary.feature_hashes.values(),
        vocabulary.feature_signed.values(),
        _TF_FACTORS,
        0.6,
        8,
        np.empty((1, 8), dtype=np.float32),
    ]


@needs_kernel
def test_consistent_arguments_are_accepted() -> None:
    assert kernel is not None and kernel.embed_rows(*_arguments()) is True


@needs_kernel
@pytest.mark.parametrize(
    ("position", "value", "error"),
    [
        (0, np.array([0, 1], dtype=np.int32), TypeError),  # stems of the wrong width
        (0, np.array([0, 99], dtype=np.int64), ValueError),  # a stem not in the vocabulary
        (0, np.array([0, -5], dtype=np.int64), ValueError),
        (1, [3], ValueError),  # lengths that do not add up
        (1, [-1, 3], ValueError),
        (1, "ab", TypeError),
        (4, np.zeros(2, dtype=np.float64), TypeError),  # hashes of the wrong kind
        (6, np.ones(1, dtype=np.float32), ValueError),  # a tf table too short
        (8, 0, ValueError),  # no dimension
        (8, 4, ValueError),  # out does not hold rows * dimension
        (9, np.empty((1, 8), dtype=np.float64), TypeError),
        (9, np.empty((1, 8), dtype=np.float32)[:, ::2], TypeError),  # not contiguous
        (9, np.frombuffer(bytes(32), dtype=np.float32).reshape(1, 8), TypeError),  # read-only
    ],
)
def test_inconsistent_arguments_raise(position: int, value: object, error: type[Exception]) -> None:
    arguments = _arguments()
    arguments[position] = value
    with pytest.raises(error):
        assert kernel is not None
        kernel.embed_rows(*arguments)


@needs_kernel
def test_stem_ids_looks_up_reports_a_missing_token_and_checks_its_arguments() -> None:
    assert kernel is not None
    out = np.empty(2, dtype=np.int64)
    assert kernel.stem_ids({"a": 4, "b": -1}, ["b", "a"], out) is True
    assert out.tolist() == [-1, 4]
    assert kernel.stem_ids({"a": 4}, ["a", "z"], out) is False
    with pytest.raises(ValueError):
        kernel.stem_ids({"a": 4}, ["a"], out)  # one slot per token
    with pytest.raises(TypeError):
        kernel.stem_ids({"a": 4}, ("a", "a"), out)
    with pytest.raises(TypeError):
        kernel.stem_ids({"a": 4}, ["a", 3], out)
    with pytest.raises(TypeError):
        kernel.stem_ids({"a": 4}, ["a", "a"], np.empty(2, dtype=np.float64))
    with pytest.raises(TypeError):
        kernel.embed_rows(1, 2)  # type: ignore[call-arg]
