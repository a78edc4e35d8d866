"""Strings that are not Unicode text: lone UTF-16 surrogates, which UTF-8 cannot encode.

JSON may spell a lone surrogate (``"\\ud800"``) and Python holds one in a ``str``, but
no UTF-8 store, log line or JSON answer can: each would fail where it writes the
string. So every string a request brings is checked where it comes in (a JSON body as
it is decoded, each argument of the Python API), and refused with a 422 naming the
field (``errors.check_unicode``), instead of failing later as a store error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

Path = tuple[str | int, ...]

# a \uD800-\uDFFF escape in JSON text (a pair, a lone one, or an escaped backslash
# followed by such letters: what the escape decodes to is checked, not this)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(text: str) -> int | None:
    """The code point of the first lone surrogate in ``text``, or ``None``.

    A pair in a ``str`` is always two lone surrogates (Python joins them only when it
    decodes), so every code point in U+D800-U+DFFF counts.
    """
    if text.isascii():
        return None
    try:
        # exactly what UTF-8 cannot encode; faster than a regular expression (C, no scan
        # of a character class)
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ord(text[exc.start])
    return None


def may_decode_to_lone_surrogate(json_text: str) -> bool:
    """Whether JSON text spells a surrogate with an escape (``\\ud800``): only then can
    its decoded strings hold one (a surrogate written as UTF-8 bytes is the decoder's
    to notice). ``False`` spares the walk over the decoded value."""
    return _SURROGATE_ESCAPE.search(json_text) is not None


@dataclass(frozen=True)
class LoneSurrogate:
    """Where a value holds a string with a lone surrogate.

    :param path: the fields and list positions leading to the string; for a key of an
        object, the object's path (the key itself cannot be echoed: it is the bad text).
    :param in_key: whether the string is a key (a field name) rather than a value.
    :param code_point: the surrogate, e.g. ``0xD800``.
    """

    path: Path
    in_key: bool
    code_point: int

    @property
    def param(self) -> str | None:
        """The dotted path, as a problem's ``param`` names a field; ``None`` for a key of
        the top-level object."""
        return ".".join(map(str, self.path)) or None

    @property
    def message(self) -> str:
        """What is wrong, without quoting the string (it cannot be written as UTF-8)."""
        where = "a key" if self.in_key else "the string"
        if self.in_key and not self.path:
            where = "a field name"
        return (
            f"{where} holds a lone UTF-16 surrogate (U+{self.code_point:04X}), which is not"
            " Unicode text: send a character beyond U+FFFF as a surrogate pair"
            " (\\ud83d\\ude00) or as UTF-8"
        )


def find_lone_surrogate(value: Any, *, prefix: Path = ()) -> LoneSurrogate | None:
    """The first string in ``value`` holding a lone surrogate, in document order: ``value``
    itself, or a key or value of the dicts, lists, tuples and pydantic models nested in
    it; ``None`` when there is none. ``prefix`` is where ``value`` sits."""
    for path, text, in_key in _strings(value, prefix):
        code_point = lone_surrogate(text)
        if code_point is not None:
            return LoneSurrogate(path, in_key, code_point)
    return None


def _strings(value: Any, prefix: Path) -> Iterator[tuple[Path, str, bool]]:
    # iterative, so that a deep value cannot exhaust the stack; children are pushed in
    # reverse so that they come out in document order, each key just before its value
    stack: list[tuple[Path, Any, bool]] = [(prefix, value, False)]
    while stack:
        path, item, in_key = stack.pop()
        if isinstance(item, str):
            yield path, item, in_key
        elif isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                stack.append((path + (key,), child, False))
                stack.append((path, key, True))
        elif isinstance(item, list | tuple):
            stack.extend(
                (path + (at,), child, False) for at, child in reversed(list(enumerate(item)))
            )
        elif isinstance(item, BaseModel):
            stack.extend(
                (path + (name,), child, False) for name, child in reversed(vars(item).items())
            )


__all__ = [
    "LoneSurrogate",
    "find_lone_surrogate",
    "lone_surrogate",
    "may_decode_to_lone_surrogate",
]
