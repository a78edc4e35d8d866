"""The public surface: ``agentcore.__all__`` is sorted, importable and documented."""

from __future__ import annotations

import importlib
import inspect

import pytest

import agentcore

PUBLIC = list(agentcore.__all__)


def test_all_is_sorted_and_unique() -> None:
    assert sorted(PUBLIC) == PUBLIC
    assert len(PUBLIC) == len(set(PUBLIC))


def test_core_names_are_public() -> None:
    assert {"AgentCore", "AgentCoreError", "Workspace", "Settings", "hookimpl"} <= set(PUBLIC)


def test_no_engine_internal_is_public() -> None:
    # the vector engine has its own face, agentcore.knowledge.vectors
    assert not {"VectorIndex", "WorkspaceIndexes", "VectorBackend"} & set(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_name_is_importable(name: str) -> None:
    module = importlib.import_module("agentcore")
    assert hasattr(module, name), f"agentcore.{name} is listed but missing"
    namespace: dict[str, object] = {}
    exec(f"from agentcore import {name}", namespace)  # noqa: S102 - the import statement itself
    assert namespace[name] is getattr(agentcore, name)


@pytest.mark.parametrize("name", PUBLIC)
def test_public_classes_and_functions_are_documented(name: str) -> None:
    obj = getattr(agentcore, name)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return  # e.g. hookimpl, a pluggy marker instance
    doc = inspect.getdoc(obj)
    assert doc and doc.strip(), f"agentcore.{name} has no docstring"
    if inspect.isclass(obj):
        assert obj.__doc__, f"agentcore.{name} only inherits its docstring"
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not (
                inspect.isfunction(member)
                or isinstance(member, (classmethod, staticmethod, property))
            ):
                continue
            func = (
                member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            )
            assert inspect.getdoc(func), f"agentcore.{name}.{attr} has no docstring"


def test_version() -> None:
    assert isinstance(agentcore.__version__, str) and agentcore.__version__.count(".") == 2


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from agentcore import *", namespace)  # noqa: S102
    assert sorted(k for k in namespace if k != "__builtins__") == PUBLIC
