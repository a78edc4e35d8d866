"""Plugins add ``agentcore`` commands through ``agentcore_register_commands``; the HTTP
adapter adds ``serve`` that way (its entry point), so the core never imports a server."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agentcore import AgentCore, hookimpl
from agentcore._plugin_manager import make_plugin_manager
from agentcore.cli import build_parser, main


class Hello:
    """A plugin with one command: ``agentcore hello --name N``."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    @hookimpl
    def agentcore_register_commands(self, register):  # type: ignore[no-untyped-def]
        parser = register("hello", self.hello, "greet an organization")
        parser.add_argument("--name", required=True)

    def hello(self, core: AgentCore, args: argparse.Namespace) -> int:
        self.ran.append((args.name, type(core).__name__))
        return 3


def test_a_plugin_command_is_parsed_and_run_with_the_core(tmp_path: Path) -> None:
    plugin = Hello()
    parser = build_parser(make_plugin_manager([plugin], entry_points=False))
    assert "hello" in parser.format_help()
    args = parser.parse_args(["--db", str(tmp_path / "h.db"), "hello", "--name", "acme"])
    with AgentCore.open(args.db) as core:
        assert args.func(core, args) == 3
    assert plugin.ran == [("acme", "AgentCore")]


def test_a_plugin_cannot_take_a_commands_name() -> None:
    class Clash:
        @hookimpl
        def agentcore_register_commands(self, register):  # type: ignore[no-untyped-def]
            register("search", lambda core, args: 0, "another search")

    with pytest.raises(ValueError, match="'search'"):
        build_parser(make_plugin_manager([Clash()], entry_points=False))


def test_serve_comes_from_the_adapters_entry_point() -> None:
    pm = make_plugin_manager()
    plugin = pm.get_plugin("agentcore_starlette")
    assert plugin is not None and plugin.__name__ == "agentcore_starlette.plugin"
    assert "serve" in _commands(build_parser(pm))
    without = build_parser(make_plugin_manager(entry_points=False))
    assert "serve" not in _commands(without)  # the core alone has no server command


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_serve_help_and_argument_errors_are_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--host", "--port", "--log-level", "--workers"):
        assert option in out
    assert main(["serve", "--port", "0"]) == 2
    assert "--port" in capsys.readouterr().err
