"""The built-in hashing embedder: deterministic, fast, and good enough to rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pluggy
import pytest

from agentcore import hookspecs
from agentcore.config import Settings
from agentcore.knowledge.embedders import Embedder
from agentcore.plugins import hashing_embedder
from agentcore.plugins.hashing_embedder import HashingEmbedder

TEXTS = [
    "The Normans conquered England at the Battle of Hastings in 1066.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar.",
]


def test_shape_dtype_and_normalised_rows() -> None:
    embedder = HashingEmbedder()
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dimension) == ("hashing-v1", 1024)
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (2, 1024)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert HashingEmbedder(dimension=64).embed(TEXTS).shape == (2, 64)
    assert embedder.embed([]).shape == (0, 1024)
    with pytest.raises(ValueError):
        HashingEmbedder(dimension=0)


def test_texts_without_features_are_zero_rows() -> None:
    vectors = HashingEmbedder().embed(["", "   ", "the of and", "?!", TEXTS[0]])
    assert not vectors[:4].any()
    assert vectors[4].any()


@pytest.mark.slow
def test_deterministic_across_processes() -> None:
    # Python salts str hashes per process; a stable hash gives the same vector anyway.
    script = (
        "import json, sys; from agentcore.plugins.hashing_embedder import HashingEmbedder;"
        "print(json.dumps(HashingEmbedder().embed(json.loads(sys.argv[1])).tolist()))"
    )
    here = HashingEmbedder().embed(TEXTS)
    for seed in ("1",):  # the parent runs with a random seed
        out = subprocess.run(
            [sys.executable, "-c", script, json.dumps(TEXTS)],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=Path(__file__).resolve().parents[2],
        ).stdout
        assert np.array_equal(np.array(json.loads(out), dtype=np.float32), here)


def test_batch_independent() -> None:
    embedder = HashingEmbedder()
    together = embedder.embed([*TEXTS, TEXTS[0]])
    assert np.array_equal(together[0], embedder.embed([TEXTS[0]])[0])
    assert np.array_equal(together[0], together[2])


def test_related_texts_score_higher_than_unrelated() -> None:
    embedder = HashingEmbedder()
    passages = embedder.embed(
        [
            "William the Conqueror led the Norman conquest of England in 1066.",
            "Chlorophyll in plant leaves absorbs light for photosynthesis.",
            "The stock market fell sharply after the interest rate announcement.",
        ]
    )
    queries = embedder.embed(
        [
            "Who conquered England?",
            "How do plants absorb light?",
            "Why did the stock markets fall?",
        ],
        kind="query",
    )
    scores = queries @ passages.T
    assert list(scores.argmax(axis=1)) == [0, 1, 2]
    assert (np.diag(scores) > 0.1).all()


def test_inflections_and_case_match() -> None:
    embedder = HashingEmbedder()
    a, b, c = embedder.embed(["Running studies", "the runner STUDIED", "purple ocean"])
    assert float(a @ b) > float(a @ c) + 0.2


def test_registered_through_the_hook() -> None:
    manager = pluggy.PluginManager("agentcore")
    manager.add_hookspecs(hookspecs)
    manager.register(hashing_embedder)
    found: list[Embedder] = []
    manager.hook.agentcore_register_embedders(register=found.append, settings=Settings())
    assert [e.name for e in found] == ["hashing-v1"]
