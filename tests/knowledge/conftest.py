"""Fixtures shared by the knowledge tests."""

from __future__ import annotations

import pytest

from agentcore.knowledge import kernels


@pytest.fixture(params=["numpy", "numkong"])
def widen(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Score int8/float16 codes by widening them in numpy, or with numkong's kernels."""
    if request.param == "numkong":
        pytest.importorskip("numkong")
    monkeypatch.setattr(kernels, "USE_NUMKONG", request.param == "numkong")
    return str(request.param)
