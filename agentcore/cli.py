"""The ``agentcore`` command: init, keys, serve, ingest, search."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from agentcore.core import AgentCore
from agentcore.errors import AgentCoreError
from agentcore.models import ApiKey, IssuedKey

DEFAULT_DB = "./agentcore.db"


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
    for key in keys:
        state = (
            "revoked"
            if key.revoked_at
            else ("expires " + str(key.expires_at) if key.expires_at else "active")
        )
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


def cmd_serve(core: AgentCore, args: argparse.Namespace) -> int:
    """Serve the /v1 API with uvicorn until SIGTERM or SIGINT."""
    try:
        import uvicorn

        from agentcore_starlette import create_app
    except ImportError:
        print(
            "agentcore serve needs the server extra: pip install 'agentcore[server]'",
            file=sys.stderr,
        )
        return 2
    app = create_app(core)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on"
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown; this handler makes that
    # a clean exit 0 instead of death by signal or a KeyboardInterrupt traceback
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    print(f"agentcore serving {args.db} on http://{args.host}:{args.port}/v1", flush=True)
    server.run()  # uvicorn handles SIGTERM/SIGINT: stops accepting, drains, runs shutdown
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
            raise AgentCoreError(f"No such file or folder: {raw}")
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentcore`` command."""
    parser = argparse.ArgumentParser(prog="agentcore", description=__doc__)
    parser.add_argument(
        "--db",
        default=os.environ.get("AGENTCORE_DB", DEFAULT_DB),
        help="SQLite database file (default ./agentcore.db or $AGENTCORE_DB)",
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
    p.add_argument("--scope", action="append", choices=["read", "write"], help="repeat for several")
    p.add_argument("--expires-in", type=float, metavar="DAYS")
    p.add_argument("--json", action="store_true")
    p = command("list", cmd_keys_list, "list keys", keys)
    p.add_argument("--org", required=True)
    p.add_argument("--json", action="store_true")
    p = command("revoke", cmd_keys_revoke, "revoke a key", keys)
    p.add_argument("key_id")
    p = command("rotate", cmd_keys_rotate, "rotate a key", keys)
    p.add_argument("key_id")
    p.add_argument("--grace-hours", type=float, default=24.0)
    p.add_argument("--json", action="store_true")

    p = command("serve", cmd_serve, "serve the /v1 API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info")

    p = command("ingest", cmd_ingest, "ingest files and folders into the knowledge core")
    p.add_argument("--org", required=True)
    p.add_argument("--env", required=True, choices=["test", "live"])
    p.add_argument("paths", nargs="+")

    p = command("search", cmd_search, "search the knowledge core")
    p.add_argument("--org", required=True)
    p.add_argument("--env", required=True, choices=["test", "live"])
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.add_argument("query")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        core = AgentCore.open(args.db)
    except Exception as exc:  # a clear line, not a traceback, for a bad --db
        print(f"agentcore: cannot open {args.db}: {exc}", file=sys.stderr)
        return 2
    try:
        result: int = args.func(core, args)
        return result
    except AgentCoreError as error:
        print(f"agentcore: {error.detail}", file=sys.stderr)
        return 1
    except ValueError as error:  # e.g. a blank --org: a clear line, not a traceback
        print(f"agentcore: {error}", file=sys.stderr)
        return 1
    finally:
        core.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
