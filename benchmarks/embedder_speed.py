"""Hashing-embedder speed: docs/s of the original implementation and the package's.

The corpus is the SQuAD sample's paragraphs (about 700 characters, one chunk each)
plus seeded shuffles of their words into paragraph-sized passages, ``--docs`` in all.
Each run embeds the whole corpus with a FRESH embedder (so the vocabulary is learnt
inside the timing, as in a first ingestion) in batches of ``--batch`` texts (a
document's chunks are embedded in one call), then again with the now warm embedder.
The original implementation is ``hashing_embedder_reference.py`` (a verbatim copy of
the code before vectorisation, kept only for this comparison); both run in the same
process, alternately, and the script checks that their vectors are bit-identical.
Prints the median docs/s of ``--runs`` runs and the package's ratio to the original;
``--batch 1`` embeds one text per call, as ingesting one short document does.

Run: ``python benchmarks/embedder_speed.py [--squad PATH] [--docs 1000] [--batch 16]
[--runs 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SQUAD = REPO / ".." / "shared" / "eval" / "squad-sample.json"
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from hashing_embedder_reference import HashingEmbedder as ReferenceEmbedder  # noqa: E402
from squad_corpus import corpus  # noqa: E402

from agentcore.plugins.hashing_embedder import HashingEmbedder  # noqa: E402

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


def run(embed: Embed, texts: list[str], batch: int) -> tuple[float, npt.NDArray[np.float32]]:
    """Seconds to embed ``texts`` in batches, and the vectors."""
    started = time.perf_counter()
    rows = [embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    return time.perf_counter() - started, np.concatenate(rows)


def main(argv: list[str] | None = None) -> int:
    """Time both implementations, cold and warm, and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--squad", default=str(DEFAULT_SQUAD), help="SQuAD-format JSON file")
    parser.add_argument("--docs", type=int, default=1000, help="texts in the corpus")
    parser.add_argument("--batch", type=int, default=16, help="texts per embed call")
    parser.add_argument("--runs", type=int, default=5, help="runs; the median is shown")
    args = parser.parse_args(argv)
    texts = corpus(Path(args.squad), args.docs)
    chars = sum(map(len, texts)) / len(texts)
    timings: dict[tuple[str, str], list[float]] = {}
    names = ["old", "numpy"]
    for number in range(args.runs):
        # Rotate which goes first, so none always meets a warmer machine.
        order = names[number % len(names) :] + names[: number % len(names)]
        outputs = {}
        for name in order:
            embedder = ReferenceEmbedder() if name == "old" else HashingEmbedder()
            cold, vectors = run(embedder.embed, texts, args.batch)
            warm, again = run(embedder.embed, texts, args.batch)
            assert np.array_equal(vectors, again)
            timings.setdefault((name, "cold"), []).append(cold)
            timings.setdefault((name, "warm"), []).append(warm)
            outputs[name] = vectors
        if any(outputs[name].tobytes() != outputs["old"].tobytes() for name in names):
            raise SystemExit("the implementations disagree: vectors are not bit-identical")

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"hashing-v1 embedding, {len(texts)} docs of {chars:.0f} chars on average, "
        f"batches of {args.batch}, median of {args.runs} runs (load average {load:.1f})\n"
    )
    print("| pass | " + " | ".join(f"{name} docs/s" for name in names) + " | ÷ old |")
    print("|---|" + "---:|" * (len(names) + 1))
    for mode in ("cold", "warm"):
        rates = [len(texts) / statistics.median(timings[(name, mode)]) for name in names]
        ratios = " / ".join(f"{rate / rates[0]:.1f}×" for rate in rates[1:])
        print(f"| {mode} | " + " | ".join(f"{rate:,.0f}" for rate in rates) + f" | {ratios} |")
    print("\nvectors: bit-identical in every run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
