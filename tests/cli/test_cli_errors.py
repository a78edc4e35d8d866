"""CLI input errors: one clear line and exit 2, never a traceback — fuzzed in-process
with hypothesis over argument lists, plus a few real subprocess runs."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import cli_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcore import AgentCore
from agentcore.cli import main

SCRIPT = Path(sys.executable).parent / "agentcore"


def run(*argv: str) -> tuple[int, str, str]:
    """``agentcore.cli.main(argv)`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "cli.db"
    with AgentCore.open(path) as core:
        core.create_organization("acme")
        core.keys.create("acme", "test", ["read", "write"], name="fuzzed")
    return path


def _key_id(db: Path) -> str:
    with AgentCore.open(db) as core:
        return core.keys.list("acme")[-1].id


def _assert_usage_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert err.startswith("agentcore: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("hours", ["1e12", "nan", "inf", "-inf", "-1", "87601", "abc", ""])
def test_rotate_with_an_out_of_range_grace_is_a_usage_error(db: Path, hours: str) -> None:
    key_id = _key_id(db)
    with AgentCore.open(db) as core:
        before = len(core.keys.list("acme"))
    code, out, err = run("--db", str(db), "keys", "rotate", key_id, "--grace-hours", hours)
    _assert_usage_error(code, out, err, "--grace-hours")
    with AgentCore.open(db) as core:
        assert len(core.keys.list("acme")) == before  # nothing minted


@pytest.mark.parametrize("days", ["0", "-1", "1e12", "nan", "inf", "x"])
def test_create_with_an_out_of_range_expiry_is_a_usage_error(db: Path, days: str) -> None:
    args = ["--db", str(db), "keys", "create", "--org", "acme", "--env", "test", "--scope", "read"]
    code, out, err = run(*args, "--expires-in", days)
    _assert_usage_error(code, out, err, "--expires-in")


def test_python_api_refuses_a_grace_past_the_calendar(db: Path) -> None:
    from agentcore import ValidationFailed

    with AgentCore.open(db) as core:
        key = core.keys.create("acme", "test", ["read"])
        with pytest.raises(ValidationFailed) as caught:
            core.keys.rotate(key.id, grace=timedelta(days=999_999_999))
        assert caught.value.param == "grace"
        with pytest.raises(ValidationFailed):
            core.keys.create("acme", "test", ["read"], expires_in=timedelta(days=999_999_999))


def test_rotating_an_expired_key_says_it_expired(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    with AgentCore.open(db) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read"], expires_in=timedelta(microseconds=1))
    code, out, err = run("--db", str(db), "keys", "rotate", key.id)
    assert code == 1, (out, err)
    assert err.startswith("agentcore: ") and err.count("\n") == 1, err
    assert "expired" in err and "create a new key" in err and "expires_in" not in err
    code, out, _ = run("--db", str(db), "keys", "list", "--org", "acme")
    assert code == 0 and "expired " in out, out


def test_create_without_scope_says_the_key_is_read_only(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    run("--db", str(db), "init", "--org", "acme")
    code, out, err = run(
        "--db", str(db), "keys", "create", "--org", "acme", "--env", "test", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["scopes"] == ["read"]
    assert "no --scope given" in err and "read scope only" in err
    code, out, err = run(
        "--db", str(db), "keys", "create", "--org", "acme", "--env", "test", "--scope", "write"
    )
    assert code == 0 and err == ""


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["serve", "--port", "99999"], "--port"),
        (["serve", "--port", "http"], "--port"),
        (["serve", "--log-level", "loud"], "--log-level"),
        (["search", "--org", "acme", "--env", "test", "--top-k", "0", "q"], "--top-k"),
        (["keys", "create", "--org", "acme", "--env", "prod"], "prod"),
        (["keys"], "COMMAND"),
        ([], "COMMAND"),
        (["nonsense"], "nonsense"),
        (["init", "--org", "   "], "organization"),
        (["ingest", "--org", "acme", "--env", "test", "/no/such/file.pdf"], "/no/such/file.pdf"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(db: Path, argv: list[str], needle: str) -> None:
    code, out, err = run("--db", str(db), *argv)
    _assert_usage_error(code, out, err, needle)


def test_help_exits_0(db: Path) -> None:
    code, out, _ = run("--db", str(db), "keys", "rotate", "--help")
    assert code == 0 and "--grace-hours" in out


WORDS = st.sampled_from(
    [
        "init", "keys", "create", "list", "revoke", "rotate", "search", "--org", "acme",
        "--env", "test", "live", "--scope", "read", "write", "--json", "--grace-hours",
        "--expires-in", "--top-k", "key_nope", "1", "0", "-1", "1e12", "1e308", "nan",
        "inf", "-0", "0x10", "", " ", "--", "-", "--help", "=", "--org=", "--env=prod",
    ]
)  # fmt: skip
ARG = st.one_of(
    WORDS, WORDS, st.text(max_size=12), st.from_regex(r"-?[0-9.e+-]{1,8}", fullmatch=True)
)


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=st.lists(ARG, max_size=9))
def test_fuzzed_arguments_never_give_a_traceback(db: Path, argv: list[str]) -> None:
    if "serve" in argv or "ingest" in argv:  # not in the vocabulary; text() could still hit
        return
    code, out, err = run("--db", str(db), *argv)
    assert code in {0, 1, 2}, (argv, code, out, err)
    assert "Traceback" not in out + err, (argv, err)
    if code == 2:
        assert err.startswith("agentcore: ") and err.endswith("\n"), (argv, err)
        assert err.count("\n") == 1, (argv, err)


# real processes ---------------------------------------------------------------------


def _process(*args: str | bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=cli_env(), timeout=60
    )


@pytest.mark.slow
def test_subprocess_grace_1e12(db: Path) -> None:
    result = _process("--db", str(db), "keys", "rotate", _key_id(db), "--grace-hours", "1e12")
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and "--grace-hours" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.slow
def test_subprocess_undecodable_argument(db: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT).encode(), b"--db", str(db).encode(), b"init", b"--org", b"\xff\xfe"],
        capture_output=True,
        env=cli_env(),
        timeout=60,
    )
    assert result.returncode == 2, result
    assert b"Traceback" not in result.stderr and result.stderr.count(b"\n") == 1
    assert b"UTF-8" in result.stderr


@pytest.mark.slow
def test_subprocess_bad_port_and_missing_command(db: Path) -> None:
    for args in (("serve", "--port", "0"), ()):
        result = _process("--db", str(db), *args)
        assert result.returncode == 2, result
        assert result.stderr.startswith("agentcore: ") and result.stderr.count("\n") == 1
