"""schemathesis' hooks for ``schemathesis run`` against the /v1 API
(``SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH=tests``, docs/operations.md): each
case gets the fix-ups ``tests/http/test_fuzz.py`` applies (``fuzz_fixups``)."""

from __future__ import annotations

from typing import Any

import schemathesis
from fuzz_fixups import fix_negative, fix_positive


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Make a positive case valid where JSON Schema cannot say how, and a negative
    multipart case invalid."""
    fix_positive(case)
    fix_negative(case)
