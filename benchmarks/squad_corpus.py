"""The texts the ingestion benchmarks time: SQuAD paragraphs, then seeded shuffles of
their words into passages of the same sizes (the same texts for the same seed).

Standard library only, so any benchmark process may import it before it chooses which
checkout's ``agentcore`` to import.
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def corpus(squad: Path, docs: int, seed: int = 7) -> list[str]:
    """``docs`` texts: the SQuAD sample's paragraphs, then shuffled-word passages."""
    data = json.loads(squad.read_text(encoding="utf-8"))
    paragraphs = [p["context"] for article in data["data"] for p in article["paragraphs"]]
    words = " ".join(paragraphs).split()
    rng = random.Random(seed)
    texts = paragraphs[:docs]
    while len(texts) < docs:
        size = len(rng.choice(paragraphs).split())
        start = rng.randrange(len(words))
        picked = words[start : start + size * 3]
        rng.shuffle(picked)
        texts.append(" ".join(picked[:size]))
    return texts
