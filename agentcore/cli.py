"""The ``agentcore`` command: init, keys, serve, ingest, search."""

# Plugins add commands through the agentcore_register_commands hook; the HTTP adapter
# adds `serve` that way (agentcore_starlette.commands), so the core never imports a server.

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import pluggy

from agentcore.config import database_url
from agentcore.core import AgentCore, make_plugin_manager
from agentcore.errors import AgentCoreError, ValidationFailed
from agentcore.schema import ApiKey, IssuedKey

MAX_GRACE_HOURS = 24 * 365 * 10  # ten years: far enough, and far from datetime's limits
MAX_EXPIRY_DAYS = 365 * 100
USAGE_ERROR = 2  # the arguments are wrong (argparse's status for the same)
FAILED = 1  # the arguments are fine but the command could not be done

Command = Callable[[AgentCore, argparse.Namespace], int]
"""A command: runs with the opened core and the parsed arguments, returns the exit status."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``agentcore: <what is wrong> (see ... --help)``."""

    def error(self, message: str) -> NoReturn:
        """Print one line and exit 2 (argparse prints the whole usage block)."""
        self.exit(USAGE_ERROR, f"agentcore: {message} (see '{self.prog} --help')\n")


def _number(name: str, low: float, high: float, *, low_inclusive: bool) -> Callable[[str], float]:
    """An argparse type: a finite number in ``[low, high]`` (``(low, high]``), or an error."""

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, not {raw!r}") from None
        above_low = value >= low if low_inclusive else value > low
        if not (math.isfinite(value) and above_low and value <= high):
            bracket = "[" if low_inclusive else "("
            raise argparse.ArgumentTypeError(
                f"{name} must be a number in {bracket}{low:g}, {high:g}], not {raw!r}"
            )
        return value

    return parse


def int_in(name: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]``, or an error."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {raw!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{name} must be between {low} and {high}, not {raw!r}"
            )
        return value

    return parse


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _key_json(key: ApiKey | IssuedKey) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": key.id,
        "organization": key.organization,
        "environment": key.environment,
        "scopes": key.scopes,
    }
    if isinstance(key, IssuedKey):
        data["secret"] = key.secret
    else:
        data.update(
            prefix=key.prefix,
            last4=key.last4,
            created_at=key.created_at.isoformat(),
            expires_at=key.expires_at.isoformat() if key.expires_at else None,
            revoked_at=key.revoked_at.isoformat() if key.revoked_at else None,
            last_used_at=key.last_used_at.isoformat() if key.last_used_at else None,
        )
    return data


def cmd_init(core: AgentCore, args: argparse.Namespace) -> int:
    """Create the database and organization if missing; mint one test and one live key."""
    org = core.create_organization(args.org)
    keys = [core.keys.create(org.name, env, ["read", "write"]) for env in ("test", "live")]
    if args.json:
        _print_json({"organization": org.name, "keys": [_key_json(k) for k in keys]})
    else:
        print(f"Organization {org.name!r} is ready in {args.db}.")
        print("Keys (shown once; store them now):")
        for key in keys:
            print(f"  {key.environment:<4}  {key.secret}  (id {key.id}, scopes read,write)")
    return 0


def cmd_keys_create(core: AgentCore, args: argparse.Namespace) -> int:
    """Mint a key; its secret is printed once."""
    expires = timedelta(days=args.expires_in) if args.expires_in is not None else None
    key = core.keys.create(args.org, args.env, args.scope or ["read"], expires_in=expires)
    if not args.scope:  # least privilege by default, but never silently
        print(
            "agentcore: no --scope given: the key gets the read scope only"
            " (add --scope write to let it change data)",
            file=sys.stderr,
        )
    if args.json:
        _print_json(_key_json(key))
    else:
        print(f"{key.secret}\n(id {key.id}; {key.environment}; scopes {','.join(key.scopes)})")
    return 0


def cmd_keys_list(core: AgentCore, args: argparse.Namespace) -> int:
    """List an organization's keys (never their secrets)."""
    keys = core.keys.list(args.org)
    if args.json:
        _print_json([_key_json(k) for k in keys])
        return 0
    now = datetime.now(UTC)
    for key in keys:
        state = "active"
        if key.revoked_at:
            state = "revoked"
        elif key.expires_at and key.expires_at <= now:
            state = "expired " + key.expires_at.isoformat(timespec="seconds")
        elif key.expires_at:
            state = "expires " + key.expires_at.isoformat(timespec="seconds")
        print(
            f"{key.id}  {key.prefix}…{key.last4}  {key.environment:<4}  {','.join(key.scopes):<10}  {state}"
        )
    return 0


def cmd_keys_revoke(core: AgentCore, args: argparse.Namespace) -> int:
    """Revoke a key at once."""
    key = core.keys.revoke(args.key_id)
    print(f"Revoked {key.id} ({key.prefix}…{key.last4}).")
    return 0


def cmd_keys_rotate(core: AgentCore, args: argparse.Namespace) -> int:
    """Replace a key; the old one works for the grace period."""
    new = core.keys.rotate(args.key_id, grace=timedelta(hours=args.grace_hours))
    if args.json:
        _print_json(_key_json(new))
    else:
        print(
            f"{new.secret}\n(new id {new.id}; {args.key_id} keeps working for {args.grace_hours} h)"
        )
    return 0


def _files(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix.lower() in {".pdf", ".txt", ".md", ".markdown"}
            )
        elif path.is_file():
            found.append(path)
        else:
            raise ValidationFailed(f"No such file or folder: {raw}", param="paths")
    return found


def cmd_ingest(core: AgentCore, args: argparse.Namespace) -> int:
    """Ingest files and folders into a workspace's knowledge core, with progress."""
    ws = core.workspace(args.org, args.env)
    files = _files(args.paths)
    done = failed = chunks = 0
    for number, path in enumerate(files, 1):
        _progress(number, len(files), path.name)
        try:
            doc = ws.knowledge.ingest_file(path.read_bytes(), filename=path.name, wait=True)
        except AgentCoreError as error:
            failed += 1
            print(f"\n  skipped {path}: {error.detail}", file=sys.stderr)
            continue
        done += 1
        chunks += doc.chunks
    print(f"\nIngested {done} file(s), {chunks} chunk(s); {failed} failed.", file=sys.stderr)
    return 1 if failed else 0


def _progress(number: int, total: int, name: str) -> None:
    width = 30
    filled = int(width * number / max(total, 1))
    bar = "#" * filled + "-" * (width - filled)
    sys.stderr.write(f"\r[{bar}] {number}/{total} {name[:40]:<40}")
    sys.stderr.flush()


def cmd_search(core: AgentCore, args: argparse.Namespace) -> int:
    """Search a workspace's knowledge core."""
    ws = core.workspace(args.org, args.env, create=False)
    response = ws.knowledge.search(args.query, top_k=args.top_k)
    if args.json:
        print(response.model_dump_json(indent=2))
        return 0
    for rank, result in enumerate(response.results, 1):
        pages = ",".join(str(p) for p in result.pages)
        snippet = " ".join(result.chunk.split())[:160]
        print(f"{rank:>2}. {result.score:.3f}  {result.source} p.{pages}\n    {snippet}")
    if not response.results:
        print("No results.")
    return 0


def build_parser(pm: pluggy.PluginManager | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``agentcore`` command: the built-in commands, then
    those plugins register (``pm``: built-in plugins and entry points by default)."""
    parser = Parser(prog="agentcore", description=__doc__)
    parser.add_argument(
        "--db",
        default=database_url(),
        help="SQLite file or postgresql:// URL (default ./agentcore.db or $AGENTCORE_DB)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, func: Callable[..., int], help_text: str, parent: Any = sub
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = command(
        "init", cmd_init, "create the database and organization; mint a test and a live key"
    )
    p.add_argument("--org", required=True)
    p.add_argument("--json", action="store_true")

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(
        dest="keys_command", required=True
    )
    p = command("create", cmd_keys_create, "mint a key", keys)
    p.add_argument("--org", required=True)
    p.add_argument("--env", required=True, choices=["test", "live"])
    p.add_argument(
        "--scope",
        action="append",
        choices=["read", "write"],
        help="repeat for several (default: read only, and a note says so)",
    )
    p.add_argument(
        "--expires-in",
        type=_number("--expires-in", 0, MAX_EXPIRY_DAYS, low_inclusive=False),
        metavar="DAYS",
    )
    p.add_argument("--json", action="store_true")
    p = command("list", cmd_keys_list, "list keys", keys)
    p.add_argument("--org", required=True)
    p.add_argument("--json", action="store_true")
    p = command("revoke", cmd_keys_revoke, "revoke a key", keys)
    p.add_argument("key_id")
    p = command("rotate", cmd_keys_rotate, "rotate a key", keys)
    p.add_argument("key_id")
    p.add_argument(
        "--grace-hours",
        type=_number("--grace-hours", 0, MAX_GRACE_HOURS, low_inclusive=True),
        default=24.0,
        help="how long the old key keeps working (default 24)",
    )
    p.add_argument("--json", action="store_true")

    p = command("ingest", cmd_ingest, "ingest files and folders into the knowledge core")
    p.add_argument("--org", required=True)
    p.add_argument("--env", required=True, choices=["test", "live"])
    p.add_argument("paths", nargs="+")

    p = command("search", cmd_search, "search the knowledge core")
    p.add_argument("--org", required=True)
    p.add_argument("--env", required=True, choices=["test", "live"])
    p.add_argument("--top-k", type=int_in("--top-k", 1, 1_000_000), default=5)
    p.add_argument("--json", action="store_true")
    p.add_argument("query")

    def register(name: str, run: Command, help_text: str) -> argparse.ArgumentParser:
        if name in sub.choices:
            raise ValueError(f"a plugin registers the command {name!r}, which exists already")
        return command(name, run, help_text)

    (pm or make_plugin_manager()).hook.agentcore_register_commands(register=register)
    return parser


def _without_password(db: str) -> str:
    """``db`` for messages: a URL's password replaced by ``***``."""
    parts = urlsplit(db)
    if "://" not in db or not parts.password:
        return db
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0: done. 1: the command could not be done (no such organization or key, a revoked
    or expired key, files that failed to ingest). 2: the arguments are wrong (one
    line on stderr says which; no traceback).
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    for raw in arguments:
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes in argv (surrogate escapes)
            print(f"agentcore: arguments must be valid UTF-8 text: {raw!r}", file=sys.stderr)
            return USAGE_ERROR
    try:
        args = build_parser().parse_args(arguments)
    except SystemExit as exit_:  # --help (0) or a usage error (2, already printed)
        return exit_.code if isinstance(exit_.code, int) else USAGE_ERROR
    try:
        core = AgentCore.open(args.db)
    except AgentCoreError as error:  # e.g. PostgreSQL unreachable: names host and database
        print(f"agentcore: {error.detail}", file=sys.stderr)
        return 2
    except Exception as exc:  # a clear line, not a traceback, for a bad --db
        print(f"agentcore: cannot open {_without_password(args.db)}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        result: int = args.func(core, args)
        return result
    except ValidationFailed as error:  # a value the core refuses: the arguments are wrong
        print(f"agentcore: {error.detail}", file=sys.stderr)
        return USAGE_ERROR
    except AgentCoreError as error:
        print(f"agentcore: {error.detail}", file=sys.stderr)
        return FAILED
    except ValueError as error:  # e.g. a blank --org: a clear line, not a traceback
        print(f"agentcore: {error}", file=sys.stderr)
        return USAGE_ERROR
    finally:
        core.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
