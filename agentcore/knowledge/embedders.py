"""The embedder plugin interface: text in, one float32 row per text out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

EmbedKind = Literal["query", "passage"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    ``name`` identifies the embedder (and so the vector space) in a workspace index;
    ``dimension`` is the length of every vector it returns. ``kind`` lets asymmetric
    models (e5 and friends) prefix queries and passages differently; symmetric
    embedders ignore it.
    """

    name: str
    dimension: int

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> npt.NDArray[np.float32]:
        """Return an array of shape ``(len(texts), dimension)``, dtype float32.

        Rows need not be normalised (the index normalises them). A row may be all
        zeros when a text has no features; callers treat that as "no match".
        Raise ``agentcore.errors.ProviderError``/``ProviderTimeout`` for remote failures.
        """
        ...


def bounded_text(text: str, max_token_chars: int) -> str:
    """``text`` with every run of non-whitespace cut to its first ``max_token_chars``.

    What embedders are fed: a 50 MB run of base64 would otherwise be one "word"
    whose n-grams cost time and memory in proportion to its length, and no real
    word is that long. Linear: matches start only where a run starts.
    """
    if len(text) <= max_token_chars or (
        len(text) <= _SPLIT_CHECK_CHARS
        and max(map(len, text.split()), default=0) <= max_token_chars
    ):
        return text  # no run is too long (split and \s agree on what whitespace is)
    pattern = _long_runs.get(max_token_chars)
    if pattern is None:
        pattern = re.compile(rf"(?<!\S)\S{{{max_token_chars + 1},}}+")
        _long_runs[max_token_chars] = pattern
    return pattern.sub(lambda match: match.group(0)[:max_token_chars], text)


_long_runs: dict[int, re.Pattern[str]] = {}
# Texts up to this long are checked by splitting (quicker than the regex scan); the
# split's copy is then small. Longer ones go straight to the regex.
_SPLIT_CHECK_CHARS = 1 << 16
