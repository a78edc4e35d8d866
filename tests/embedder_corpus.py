"""The corpus and fingerprints that pin the vectors of ``hashing-v1``.

``tests/data/hashing_v1_pinned.json`` holds the texts (hand-picked edge cases, seeded
random mixes of words, numbers, punctuation and non-ASCII letters, and SQuAD prose)
with the fingerprints the ORIGINAL implementation gave them
(``benchmarks/hashing_embedder_reference.py``). ``test_hashing_embedder_pinned.py``
asserts the package's embedder still gives exactly those. Only characters that have
been in Unicode for decades are used, so NFKC and ``\\w`` agree across Pythons.

Regenerate (only from the reference implementation, never from the code under test):
``python tests/embedder_corpus.py /path/to/squad-sample.json``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

DATA = Path(__file__).resolve().parent / "data" / "hashing_v1_pinned.json"
DIMENSIONS = (1024, 64, 1)
EXACT_ROWS = (11, 13, 19, 31, 33)  # texts whose 1024-d rows are stored value by value

EDGE_CASES = [
    "",
    " ",
    "\n\t  \n",
    "the of and",
    "?!...,;:",
    "a",
    "A",
    "x y z",
    "X Y Z",
    "I",
    "Mr. X met class P and the U.S. Army.",
    "The Normans conquered England at the Battle of Hastings in 1066.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar.",
    "Running studies; the runner STUDIED; ran, runs, running, stopped, stopping.",
    "classes glasses bosses ladies cried tied dies lies flies studies",
    "focus campus analysis bus gas yes this",
    "hopping hopped filling filled buzzing buzzed passing passed",
    "It's John's book; they're here, we'd go, you'll see, I'm sure, we've won.",
    "It\u2019s John\u2019s book \u2014 \u201cquoted\u201d \u2018single\u2019.",
    "rock'n'roll o'clock don't can't won't 'tis y'all ma'am",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate Stra\u00dfe STRASSE stra\u00dfe",
    "\u0130stanbul ISTANBUL \u0131s\u0131k I\u0307",
    "\ufb01nancial \ufb02ow e\ufb03cient \ufb00ect",
    "\uff21\uff22\uff23 \uff11\uff12\uff13 \uff41\uff42\uff43",
    "\u2460 \u2461 \u00bd \u00b2 \u2075 \u2168 \u33a1",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ba\u03b5\u03af\u03bc\u03b5\u03bd\u03bf \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442 \u041c\u043e\u0441\u043a\u0432\u0430",
    "\u4e2d\u6587\u5206\u8bcd \u65e5\u672c\u8a9e\u306e\u6587\u7ae0 \ud55c\uad6d\uc5b4",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0939\u093f\u0928\u094d\u0926\u0940",
    "e\u0301 n\u0303 a\u030a combining marks",
    "emoji \U0001f600 \U0001f680 stars \u2605\u2606 arrows \u2192",
    "snake_case_name CamelCaseName kebab-case-name dotted.name.here",
    "3.14159 2,718 1e10 0x1F 100% $5 #42 @user v2.0 COVID-19 abc123 123abc",
    "1066 1066 1066 year year",
    "Supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
    "a" * 300,
    "word " * 200,
    "Antidisestablishmentarianism " * 3 + "floccinaucinihilipilification",
    "Hello\u00a0world\u200bzero\u00adsoft\u2009thin",
    "tab\tseparated\nnew\r\nlines\x0bvertical\x0cfeed",
    "<html><body>Some <b>bold</b> text &amp; entities</body></html>",
    "def f(x): return x ** 2  # comment",
    "E = mc\u00b2, \u03c0 \u2248 3.14, \u221e \u2260 0, \u00b5s \u00c5ngstr\u00f6m \u2126 \u212b",
    "The the THE tHe",
    "Nothing new, however: also may might must shall upon yet within.",
]

_WORDS = [
    "normans",
    "england",
    "battle",
    "hastings",
    "computational",
    "complexity",
    "theory",
    "problem",
    "solved",
    "algorithm",
    "running",
    "time",
    "space",
    "turing",
    "machine",
    "class",
    "polynomial",
    "studies",
    "stopped",
    "cities",
    "ladies",
    "passing",
    "filled",
    "café",
    "naïve",
    "straße",
    "история",
    "λόγος",
    "数学",
    "x",
    "y",
    "Z",
    "I",
    "it's",
    "John's",
    "don't",
    "the",
    "of",
    "and",
    "a",
    "an",
]
_PUNCT = [".", ",", ";", ":", "!", "?", "\u2019", "'", '"', "(", ")", "-", "\u2014", "_", "/"]


def random_texts(count: int = 120, seed: int = 20261123) -> list[str]:
    """Seeded random mixes of words, numbers, punctuation and case changes."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 60)):
            roll = rng.random()
            if roll < 0.7:
                word = rng.choice(_WORDS)
                if rng.random() < 0.2:
                    word = word.upper()
                elif rng.random() < 0.2:
                    word = word.capitalize()
                parts.append(word)
            elif roll < 0.85:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
            else:
                parts.append(rng.choice(_PUNCT))
        texts.append(rng.choice([" ", "", "\n"]).join(parts))
    return texts


def squad_texts(path: Path, limit: int = 60) -> list[str]:
    """Paragraphs and questions of a SQuAD-format file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    texts = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"])
            texts.extend(qa["question"] for qa in paragraph["qas"][:2])
    return texts[:limit]


def fingerprint(row: npt.NDArray[np.float32]) -> str:
    """sha256 of a row's float32 bytes (little-endian): equal only when bit-identical."""
    return hashlib.sha256(np.ascontiguousarray(row, dtype="<f4").tobytes()).hexdigest()


def exact_row(row: npt.NDArray[np.float32]) -> dict[str, Any]:
    """A row as its non-zero positions and the hex of their float32 values."""
    nonzero = np.flatnonzero(row)
    return {
        "indices": nonzero.tolist(),
        "values": row[nonzero].astype("<f4").tobytes().hex(),
    }


def build(squad: Path) -> dict[str, Any]:
    """Fingerprint the corpus with the reference (pre-vectorisation) implementation."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    from hashing_embedder_reference import HashingEmbedder

    texts = EDGE_CASES + random_texts() + squad_texts(squad)
    out: dict[str, Any] = {"texts": texts, "fingerprints": {}, "batch": {}}
    for dimension in DIMENSIONS:
        embedder = HashingEmbedder(dimension=dimension)
        rows = np.stack([embedder.embed([text])[0] for text in texts])
        out["fingerprints"][str(dimension)] = [fingerprint(row) for row in rows]
        batch = HashingEmbedder(dimension=dimension).embed(texts)
        out["batch"][str(dimension)] = fingerprint(batch.ravel())
        if dimension == 1024:
            out["exact_rows"] = {str(i): exact_row(rows[i]) for i in EXACT_ROWS}
    out["tokens"] = [HashingEmbedder(dimension=1).tokens(text) for text in texts]
    return out


if __name__ == "__main__":
    DATA.parent.mkdir(exist_ok=True)
    pinned = build(Path(sys.argv[1]))
    DATA.write_text(json.dumps(pinned, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {DATA} ({len(pinned['texts'])} texts)")
