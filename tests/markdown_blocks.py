"""Reading the project's Markdown (README.md, docs/*.md) in tests: sections and code blocks.

``blocks_of(page)`` gives each fenced block with its language and the marker comment on
the line before it (``<!-- not-run: reason -->``, ``<!-- output -->``), as
``tests/docs/test_docs_examples.py`` runs them; ``section(page, title)`` gives the text
of one ``## title`` section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None = None  # the reason given by <!-- not-run: ... -->
    output: bool = False  # marked <!-- output -->: what the block before it prints

    @property
    def where(self) -> str:
        """``page:line``, relative to the repository."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not-run: (.+?) -->$")


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, with the marker comment on the line before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        before = lines[index - 1].strip() if index else ""
        not_run = _NOT_RUN.match(before)
        found.append(
            Block(
                page=page,
                line=index + 1,
                lang=opening.group(1),
                code="\n".join(lines[index + 1 : end]) + "\n",
                not_run=not_run.group(1) if not_run else None,
                output=before == "<!-- output -->",
            )
        )
        index = end + 1
    return found


def section(page: Path, title: str) -> str:
    """The text of ``page``'s section from its ``## title`` heading to the next ``## ``."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]
