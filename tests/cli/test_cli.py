"""The real ``agentcore`` command in subprocesses: init, keys, and serve with signals."""

from __future__ import annotations

import importlib.metadata
import json
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import cli_env, cli_json, run_cli, start_serve
from processes import reap

from agentcore import AgentCore, AuthenticationError
from agentcore.cli import main

SCRIPT = Path(sys.executable).parent / "agentcore"


class InProcess:
    """``agentcore.cli.main`` in this process (same parser and commands, no start-up cost)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str, db: Path) -> subprocess.CompletedProcess[str]:
        self.capsys.readouterr()
        try:
            code = main(["--db", str(db), *args])
        except SystemExit as exit_:  # argparse errors
            code = int(exit_.code or 0)
        out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    def json(self, *args: str, db: Path) -> Any:
        result = self(*args, db=db)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> InProcess:
    return InProcess(capsys)


def _auth_code(db: Path, secret: str) -> str:
    with AgentCore.open(db) as core:
        with pytest.raises(AuthenticationError) as caught:
            core.authenticate(secret)
        return caught.value.code


@pytest.fixture
def initialised(tmp_path: Path, cli: InProcess) -> tuple[Path, dict]:
    db = tmp_path / "x.db"
    return db, cli.json("init", "--org", "acme", "--json", db=db)


def test_init_mints_again_only_when_asked_or_when_no_key_works(cli: InProcess, initialised) -> None:
    db, first = initialised
    plain = cli("init", "--org", "acme", db=db)
    assert plain.returncode == 0 and "ak_" not in plain.stdout
    assert "none were minted" in plain.stdout and "--new-keys" in plain.stdout
    again = cli.json("init", "--org", "acme", "--new-keys", "--json", db=db)
    assert sorted(k["environment"] for k in again["keys"]) == ["live", "test"]
    with AgentCore.open(db) as core:
        assert len(core.keys.list("acme")) == 4
        for key in core.keys.list("acme"):
            core.keys.revoke(key.id)
    # every key revoked: the organization has no usable key, so init mints two
    revived = cli.json("init", "--org", "acme", "--json", db=db)
    assert len(revived["keys"]) == 2 and revived["existing_keys"] == 0


@pytest.mark.slow
def test_console_script_is_installed() -> None:
    assert SCRIPT.exists()
    result = subprocess.run(
        [str(SCRIPT), "--help"], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert result.returncode == 0
    for command in ("init", "keys", "serve"):
        assert command in result.stdout


def test_init_mints_a_test_and_a_live_key(initialised) -> None:
    db, out = initialised
    assert out["organization"] == "acme"
    assert len(out["keys"]) == 2
    assert sorted(k["environment"] for k in out["keys"]) == ["live", "test"]
    with AgentCore.open(db) as core:
        for key in out["keys"]:
            assert set(key) == {"id", "secret", "organization", "environment", "scopes"}
            assert key["scopes"] == ["read", "write"]
            assert key["secret"].startswith(f"ak_{key['environment']}_")
            ws = core.authenticate(key["secret"])
            assert ws.organization == "acme"
            assert ws.environment == key["environment"]
            assert ws.scopes == frozenset({"read", "write"})
            assert ws.key_id == key["id"]


@pytest.mark.slow
def test_init_human_output_and_agentcore_db_env(tmp_path: Path) -> None:
    db = tmp_path / "from-env.db"
    result = run_cli("init", "--org", "acme", env_db=db)
    assert result.returncode == 0, result.stderr
    assert db.exists()
    assert "acme" in result.stdout
    assert "ak_test_" in result.stdout and "ak_live_" in result.stdout
    with AgentCore.open(db) as core:
        assert len(core.keys.list("acme")) == 2


def test_second_init_keeps_the_same_organization(cli: InProcess, initialised) -> None:
    db, first = initialised
    second = cli.json("init", "--org", "acme", "--json", db=db)
    assert second["organization"] == "acme"
    assert second["keys"] == [] and second["existing_keys"] == 2  # no more keys minted
    conn = sqlite3.connect(db)
    try:
        orgs = conn.execute("SELECT name FROM organizations").fetchall()
    finally:
        conn.close()
    assert orgs == [("acme",)]
    with AgentCore.open(db) as core:
        for key in first["keys"] + second["keys"]:  # the first keys still work
            assert core.authenticate(key["secret"]).organization == "acme"


@pytest.mark.slow
def test_keys_create_exact_shape(initialised) -> None:
    db, _ = initialised
    out = cli_json(
        "keys", "create", "--org", "acme", "--env", "live", "--scope", "read", "--json", db=db
    )
    assert set(out) == {"id", "secret", "organization", "environment", "scopes"}
    assert out["organization"] == "acme"
    assert out["environment"] == "live"
    assert out["scopes"] == ["read"]
    assert out["id"].startswith("key_")
    assert out["secret"].startswith("ak_live_")
    with AgentCore.open(db) as core:
        ws = core.authenticate(out["secret"])
        assert ws.scopes == frozenset({"read"}) and ws.environment == "live"
        assert core.keys.get(out["id"]).expires_at is None


def test_keys_create_with_expiry(cli: InProcess, initialised) -> None:
    db, _ = initialised
    before = datetime.now(UTC)
    out = cli.json(
        "keys",
        "create",
        "--org",
        "acme",
        "--env",
        "test",
        "--scope",
        "read",
        "--scope",
        "write",
        "--expires-in",
        "2",
        "--json",
        db=db,
    )
    assert out["scopes"] == ["read", "write"]
    with AgentCore.open(db) as core:
        expires = core.keys.get(out["id"]).expires_at
    assert expires is not None
    assert before + timedelta(days=2) - timedelta(minutes=1) < expires
    assert expires < datetime.now(UTC) + timedelta(days=2, minutes=1)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_keys_create_bad_expiry(cli: InProcess, initialised, value: str) -> None:
    db, _ = initialised
    result = cli("keys", "create", "--org", "acme", "--env", "test", "--expires-in", value, db=db)
    assert result.returncode != 0
    assert "--expires-in" in result.stderr
    assert "Traceback" not in result.stderr


def test_keys_list_shows_no_secrets(cli: InProcess, initialised) -> None:
    db, out = initialised
    result = cli("keys", "list", "--org", "acme", "--json", db=db)
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert {k["id"] for k in listed} == {k["id"] for k in out["keys"]}
    for key in out["keys"]:
        assert key["secret"] not in result.stdout
        assert key["secret"][8:40] not in result.stdout
    for key in listed:
        assert "secret" not in key
        assert key["prefix"].startswith("ak_") and len(key["last4"]) == 4
        assert key["revoked_at"] is None
    human = cli("keys", "list", "--org", "acme", db=db)
    assert human.returncode == 0
    for key in out["keys"]:
        assert key["id"] in human.stdout and key["secret"] not in human.stdout


def test_keys_revoke(cli: InProcess, initialised) -> None:
    db, out = initialised
    test_key = next(k for k in out["keys"] if k["environment"] == "test")
    result = cli("keys", "revoke", test_key["id"], db=db)
    assert result.returncode == 0, result.stderr
    assert test_key["id"] in result.stdout
    assert test_key["secret"] not in result.stdout
    assert _auth_code(db, test_key["secret"]) == "api_key_revoked"
    listed = cli.json("keys", "list", "--org", "acme", "--json", db=db)
    revoked = {k["id"]: k["revoked_at"] for k in listed}
    assert revoked[test_key["id"]] is not None
    live = next(k for k in out["keys"] if k["environment"] == "live")
    assert revoked[live["id"]] is None


def test_keys_rotate(cli: InProcess, initialised) -> None:
    db, out = initialised
    old = out["keys"][0]
    new = cli.json("keys", "rotate", old["id"], "--grace-hours", "1", "--json", db=db)
    assert new["id"] != old["id"] and new["secret"] != old["secret"]
    assert new["environment"] == old["environment"] and new["scopes"] == old["scopes"]
    with AgentCore.open(db) as core:
        assert core.authenticate(new["secret"]).key_id == new["id"]
        assert core.authenticate(old["secret"]).key_id == old["id"]  # grace period
        ends = core.keys.get(old["id"]).expires_at
        assert ends is not None
        assert timedelta(minutes=55) < ends - datetime.now(UTC) <= timedelta(hours=1)
        assert core.keys.get(new["id"]).rotated_from == old["id"]


def test_rotating_a_revoked_key_fails_cleanly(cli: InProcess, initialised) -> None:
    db, out = initialised
    key_id = out["keys"][0]["id"]
    assert cli("keys", "revoke", key_id, db=db).returncode == 0
    result = cli("keys", "rotate", key_id, db=db)
    assert result.returncode == 1
    assert "revoked" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("keys", "create", "--org", "nobody", "--env", "test"),
        ("keys", "list", "--org", "nobody"),
        ("keys", "revoke", "key_doesnotexist"),
        ("keys", "rotate", "key_doesnotexist"),
        ("init", "--org", "   "),
    ],
    ids=["create", "list", "revoke", "rotate", "blank-init"],
)
def test_bad_input_exits_nonzero_with_a_clear_message(cli: InProcess, initialised, args) -> None:
    db, _ = initialised
    result = cli(*args, db=db)  # an uncaught exception would fail the test here
    assert result.returncode != 0
    assert result.stderr.startswith("agentcore: "), result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    if "nobody" in args:
        assert "nobody" in result.stderr


@pytest.mark.slow
def test_bad_org_in_a_real_process(initialised) -> None:
    db, _ = initialised
    result = run_cli("keys", "create", "--org", "nobody", "--env", "test", "--json", db=db)
    assert result.returncode == 1
    assert result.stderr == "agentcore: No organization named 'nobody'.\n"
    assert result.stdout == ""


def test_version_is_the_installed_distributions(cli: InProcess, tmp_path: Path) -> None:
    result = cli("--version", db=tmp_path / "x.db")
    assert result.returncode == 0
    assert result.stdout == f"agentcore {importlib.metadata.version('agentcore-service')}\n"
    assert not (tmp_path / "x.db").exists()  # nothing opened


@pytest.mark.slow
def test_python_m_agentcore_is_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentcore", "--version"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"agentcore {importlib.metadata.version('agentcore-service')}\n"


def test_argparse_errors_exit_2(cli: InProcess, tmp_path: Path) -> None:
    result = cli("keys", "create", "--org", "acme", "--env", "prod", db=tmp_path / "x.db")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "prod" in result.stderr


# serve -----------------------------------------------------------------------------


def _start_server(db: Path) -> tuple[subprocess.Popen[str], str]:
    """The installed ``agentcore serve`` on ``db`` once it answers, and its URL."""
    process, url = start_serve(
        db,
        command=[str(SCRIPT)],
        extra=["--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    response = httpx.get(url + "/v1/auth/verify", timeout=30)
    assert response.status_code == 401  # up, and asking for a key
    return process, url


def _stop(process: subprocess.Popen[str], sig: signal.Signals) -> tuple[int, str, str]:
    process.send_signal(sig)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"agentcore serve ignored {sig.name} for 120 s") from None
    finally:
        reap(process)
    return process.returncode, stdout, stderr


@pytest.mark.slow
def test_serve_revocation_takes_effect_at_once_and_sigterm_exits_0(initialised) -> None:
    db, out = initialised
    secret = out["keys"][0]["secret"]
    process, url = _start_server(db)
    try:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=url, timeout=10, verify=False) as client:
            verify = client.get("/v1/auth/verify", headers=headers)
            assert verify.status_code == 200, verify.text
            assert verify.json()["organization"] == "acme"
            created = client.post("/v1/agents", headers=headers, json={"name": "cli"})
            assert created.status_code == 201
            revoke = run_cli("keys", "revoke", out["keys"][0]["id"], db=db)
            assert revoke.returncode == 0, revoke.stderr
            refused = client.get("/v1/auth/verify", headers=headers)
            assert refused.status_code == 401
            assert refused.json()["code"] == "api_key_revoked"
            other = out["keys"][1]["secret"]
            assert (
                client.get(
                    "/v1/auth/verify", headers={"Authorization": f"Bearer {other}"}
                ).status_code
                == 200
            )
    finally:
        code, stdout, stderr = _stop(process, signal.SIGTERM)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert secret not in stderr and secret not in stdout
    assert f"{url}/v1" in stdout


@pytest.mark.slow
def test_serve_sigint_exits_cleanly(initialised) -> None:
    db, out = initialised
    process, _ = _start_server(db)
    code, _, stderr = _stop(process, signal.SIGINT)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr


@pytest.mark.both_stores
def test_init_run_by_several_nodes_at_once_mints_one_pair(
    pair: tuple[AgentCore, AgentCore], capsys: pytest.CaptureFixture[str]
) -> None:
    # every container's entrypoint runs `init`: two nodes running it at once for a new
    # organization mint one test and one live key between them (each once saw no key,
    # then minted a pair)
    import argparse
    import threading

    from agentcore.cli import cmd_init

    for round_ in range(20):
        org = f"acme-{round_}"
        barrier = threading.Barrier(2)

        def init(core: AgentCore, org: str = org, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            args = argparse.Namespace(org=org, new_keys=False, json=True, db="test")
            assert cmd_init(core, args) == 0

        threads = [threading.Thread(target=init, args=(core,)) for core in pair]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        environments = sorted(k.environment for k in pair[0].keys.list(org))
        assert environments == ["live", "test"], f"round {round_}: {environments}"
    capsys.readouterr()
