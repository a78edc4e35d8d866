"""The environment is read in one place: ``agentcore/config.py`` (settings, ``AGENTCORE_DB``)
and ``agentcore/cli.py``. No other module of the core or the adapter reads or writes a
variable, so no test can steer the library through one: faults are injected through
parameters."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {ROOT / "agentcore" / "config.py", ROOT / "agentcore" / "cli.py"}
ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_uses(source: str) -> list[int]:
    """Lines of ``source`` that touch the process environment through ``os``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in ENVIRONMENT for alias in node.names)
        ):
            lines.append(node.lineno)
    return lines


def test_the_finder_sees_each_way_in() -> None:
    source = (
        "import os\nfrom os import environ\n"
        "os.environ.get('A')\nos.getenv('B')\nos.environ['C'] = '1'\nos.path.join('x')\n"
    )
    assert sorted(environment_uses(source)) == [2, 3, 4, 5]


@pytest.mark.parametrize(
    "path",
    sorted([*(ROOT / "agentcore").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_only_the_settings_and_the_cli_read_the_environment(path: Path) -> None:
    if path in ALLOWED:
        return
    assert environment_uses(path.read_text()) == [], f"{path.relative_to(ROOT)} uses os.environ"
