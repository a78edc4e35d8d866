"""The ``agentcore`` command: init, keys, serve, ingest, search, agents, chat, eval."""

# Plugins add commands through the agentcore_register_commands hook; the HTTP adapter
# adds `serve` that way (agentcore_starlette.commands), so the core never imports a server.

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import pluggy
from pydantic import ValidationError
from tqdm import tqdm

from agentcore import __version__
from agentcore._logs import hide_passwords, redact
from agentcore._plugin_manager import make_plugin_manager, plugin_settings_models
from agentcore._workspace_services import WorkspaceServices
from agentcore.config import DEFAULT_DATABASE, Settings, database_url
from agentcore.core import AgentCore
from agentcore.errors import AgentCoreError, NotFound, ValidationFailed
from agentcore.evaluation import GoldenQuestion, evaluate, read_golden, unknown_sources
from agentcore.schema import Agent, ApiKey, IssuedKey
from agentcore.storage.sqlite import path_for_url
from agentcore.webhooks import SETTING_HINT

MAX_GRACE_HOURS = 24 * 365 * 10  # ten years: far enough, and far from datetime's limits
MAX_EXPIRY_DAYS = 365 * 100
USAGE_ERROR = 2  # the arguments are wrong (argparse's status for the same)
FAILED = 1  # the arguments are fine but the command could not be done
START_FAILED = 3  # `serve` could not start: its port is taken or cannot be bound

Command = Callable[[AgentCore, argparse.Namespace], int]
"""A command: runs with the opened core and the parsed arguments, returns the exit status."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``agentcore: <what is wrong> (see ... --help)``."""

    def error(self, message: str) -> NoReturn:
        """Print one line and exit 2 (argparse prints the whole usage block)."""
        self.exit(USAGE_ERROR, f"agentcore: {redact(message)} (see '{self.prog} --help')\n")


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default (``(default: 5)``) unless it says it
    already or has none worth showing; a default never shows a password."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "(default:" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: {hide_passwords(str(default))})"


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


def say(message: str) -> None:
    """``agentcore: <message>`` on stderr as one line (its line breaks made spaces), with
    any secret in it masked (a database URL's password, a key)."""
    print(f"agentcore: {redact(' '.join(message.split()))}", file=sys.stderr)


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
    """Create the database and organization if missing; mint one test and one live key
    when the organization has no usable key yet (or with ``--new-keys``)."""
    org = core.create_organization(args.org)
    if args.new_keys:
        keys = [core.keys.create(org.name, env, ["read", "write"]) for env in ("test", "live")]
    else:  # checked and minted at once: of several nodes' first `init`, one mints
        keys = core.keys.create_first(org.name)
    now = datetime.now(UTC)
    minted = {key.id for key in keys}
    usable = [
        key
        for key in core.keys.list(org.name)
        if key.revoked_at is None
        and (key.expires_at is None or key.expires_at > now)
        and key.id not in minted
    ]
    where = hide_passwords(args.db)
    webhook_keys = core.webhook_keys
    key_file = str(webhook_keys.key_file) if webhook_keys.key_file else None
    if args.json:
        _print_json(
            {
                "organization": org.name,
                "keys": [_key_json(k) for k in keys],
                "existing_keys": len(usable),
                "webhook_key_file": key_file,
            }
        )
    elif keys:
        print(f"Organization {org.name!r} is ready in {where}.")
        print("Keys (shown once; store them now):")
        for key in keys:
            print(f"  {key.environment:<4}  {key.secret}  (id {key.id}, scopes read,write)")
    else:
        print(
            f"Organization {org.name!r} is ready in {where}; it has {len(usable)} usable"
            " key(s) already, so none were minted ('agentcore keys list' shows them,"
            " 'agentcore init --new-keys' mints a test and a live key)."
        )
    if not args.json and key_file is not None:
        print(
            f"Webhook signing secrets are sealed with the key in {key_file}:"
            " back it up, apart from the database's backups."
        )
    elif not args.json and webhook_keys.plaintext_reason is not None:
        print(
            "Webhook signing secrets and MCP server headers are stored in plaintext"
            f" ({webhook_keys.plaintext_reason}); {SETTING_HINT}."
        )
    return 0


def cmd_keys_create(core: AgentCore, args: argparse.Namespace) -> int:
    """Mint a key; its secret is printed once."""
    expires = timedelta(days=args.expires_in) if args.expires_in is not None else None
    key = core.keys.create(args.org, args.env, args.scope or ["read"], expires_in=expires)
    if not args.scope:  # least privilege by default, but never silently
        say(
            "no --scope given: the key gets the read scope only"
            " (add --scope write to let it change data)"
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


INGESTED_SUFFIXES = (
    *(".pdf", ".txt", ".md", ".markdown", ".csv", ".html", ".htm"),
    *(".docx", ".pptx", ".xlsx"),
)
"""The files a folder given to ``ingest`` contributes (a file named alone is always tried)."""


def _files(paths: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """The files to ingest, and those of the folders of a format not read (a suffix not
    in ``INGESTED_SUFFIXES``)."""
    found: list[Path] = []
    others: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                wanted = file.suffix.lower() in INGESTED_SUFFIXES
                (found if wanted else others).append(file)
        elif path.is_file():
            found.append(path)
        else:
            raise ValidationFailed(f"No such file or folder: {raw}", param="paths")
    return found, others


def _workspace(core: AgentCore, args: argparse.Namespace) -> WorkspaceServices:
    """The workspace ``--org``/``--env`` name; an unknown organization is refused (made
    only with ``--create-org``, where the command has it), not guessed."""
    create = bool(getattr(args, "create_org", False))
    try:
        return core.workspace(args.org, args.env, create=create)
    except NotFound:
        extra = " or pass --create-org" if hasattr(args, "create_org") else ""
        raise NotFound(
            f"No organization named {args.org!r}: create it with 'agentcore init --org"
            f" {args.org}'{extra}.",
            param="org",
        ) from None


def cmd_ingest(core: AgentCore, args: argparse.Namespace) -> int:
    """Ingest files and folders into a workspace's knowledge core, with progress: a bar
    with the rate and time left on a terminal, one line per file otherwise. Files of a
    folder of a format not read are listed as skipped; the exit status
    is 1 when a file failed or nothing was ingested."""
    files, others = _files(args.paths)  # a missing path is refused before anything else
    ws = _workspace(core, args)
    for path in others:
        say(f"skipped {path}: not a format agentcore reads ({path.suffix or 'no suffix'})")
    done = failed = chunks = 0
    with _progress(files) as report:
        for path in files:
            try:
                doc = ws.knowledge.ingest_file(
                    path.read_bytes(),
                    filename=path.name,
                    external_id=path.as_posix() if args.replace else None,
                    wait=True,
                )
            except AgentCoreError as error:
                failed += 1
                report(path, f"skipped {path}: {error.detail}")
                continue
            done += 1
            chunks += doc.chunks
            report(path, f"{path.name}: {doc.chunks} chunk(s)")
    print(
        f"Ingested {done} file(s), {chunks} chunk(s); {failed} failed;"
        f" {len(others)} skipped (not a format agentcore reads).",
        file=sys.stderr,
    )
    if not done:
        say("nothing was ingested")
    return 1 if failed or not done else 0


Report = Callable[[Path, str], None]
"""Told each file once it is done (or skipped), with a line saying how it went."""


@contextmanager
def _progress(files: Sequence[Path]) -> Iterator[Report]:
    """How ingestion shows its progress on stderr.

    On a terminal, a tqdm bar over the files' bytes (files differ in size, so bytes give
    a truer rate and time left than a file count), with skipped files written above it.
    Otherwise (a pipe, a log file, CI) one plain line per file, ``[3/10] name: ...``,
    which stays readable where a bar's carriage returns would not.
    """
    total = len(files)
    if not sys.stderr.isatty():
        count = 0
        last = time.monotonic()

        def line(path: Path, text: str) -> None:
            nonlocal count, last
            count += 1
            now = time.monotonic()
            print(f"[{count}/{total}] {text} ({now - last:.1f} s)", file=sys.stderr, flush=True)
            last = now

        yield line
        return
    sizes = {path: path.stat().st_size for path in files}
    with _bar(
        sum(sizes.values()), f"{total} file(s)", unit="B", unit_scale=True, unit_divisor=1024
    ) as bar:

        def advance(path: Path, text: str) -> None:
            if text.startswith("skipped"):
                bar.write(text, file=sys.stderr)
            bar.set_postfix_str(path.name[:40], refresh=False)
            bar.update(sizes[path])

        yield advance


@contextmanager
def _bar(total: float, desc: str, **options: Any) -> Iterator[tqdm]:
    """A tqdm bar on stderr, as wide as the terminal."""
    # COLUMNS and LINES, else the terminal's size, else 80 x 24 (a new pseudo-terminal
    # says 0 x 0, which tqdm takes for a screen with no room for a bar)
    screen = shutil.get_terminal_size()
    with tqdm(
        total=total,
        file=sys.stderr,
        desc=desc,
        ncols=screen.columns,
        nrows=screen.lines,
        **options,
    ) as bar:
        yield bar


def cmd_search(core: AgentCore, args: argparse.Namespace) -> int:
    """Search a workspace's knowledge core."""
    ws = _workspace(core, args)
    response = ws.knowledge.search(args.query, top_k=args.top_k, rerank=args.rerank)
    if args.json:
        print(response.model_dump_json(indent=2))
        return 0
    for rank, result in enumerate(response.results, 1):
        pages = ",".join(str(p) for p in result.pages)
        snippet = " ".join(result.chunk.split())[:160]
        where = f" ({result.location})" if result.location else ""
        print(f"{rank:>2}. {result.score:.3f}  {result.source}{where} p.{pages}\n    {snippet}")
    if not response.results:
        print("No results.")
    return 0


def _agent_line(agent: Agent) -> str:
    return f"{agent.id}  {agent.status:<8}  {agent.role:<12}  {agent.name}"


def cmd_agents_create(core: AgentCore, args: argparse.Namespace) -> int:
    """Create an agent (in draft; ``--deploy`` deploys it too)."""
    ws = _workspace(core, args)
    fields = {"name": args.name, "role": args.role, "system_prompt": args.system_prompt}
    agent = ws.agents.create(model=args.model, **fields)
    if args.deploy:
        agent = ws.agents.deploy(agent.id)
    if args.json:
        print(agent.model_dump_json(indent=2))
    else:
        print(_agent_line(agent))
    return 0


def cmd_agents_list(core: AgentCore, args: argparse.Namespace) -> int:
    """List a workspace's agents (draft and deployed; archived with ``--status``)."""
    ws = _workspace(core, args)
    agents: list[Agent] = []
    after: str | None = None
    while True:  # every page: a command line lists them all
        page = ws.agents.list(limit=100, starting_after=after, status=args.status)
        agents += page.agents
        if not page.has_more:
            break
        after = page.agents[-1].id
    if args.json:
        _print_json([agent.model_dump(mode="json") for agent in agents])
        return 0
    for agent in agents:
        print(_agent_line(agent))
    if not agents:
        print("No agents ('agentcore agents create' makes one).")
    return 0


def cmd_agents_deploy(core: AgentCore, args: argparse.Namespace) -> int:
    """Deploy a draft agent: live keys can chat with it."""
    agent = _workspace(core, args).agents.deploy(args.agent_id)
    print(_agent_line(agent))
    return 0


def cmd_chat(core: AgentCore, args: argparse.Namespace) -> int:
    """Ask an agent a question; its answer is streamed as it is written on a terminal,
    printed whole otherwise, then its citations."""
    ws = _workspace(core, args)
    if args.json:
        answer = ws.chat.send(args.agent_id, args.message, args.conversation)
        print(answer.model_dump_json(indent=2, exclude_none=True))
        return 0
    if sys.stdout.isatty():
        with ws.chat.stream(args.agent_id, args.message, args.conversation) as stream:
            for delta in stream:
                print(delta, end="", flush=True)
        print()
        answer = stream.response
    else:
        answer = ws.chat.send(args.agent_id, args.message, args.conversation)
        print(answer.response)
    for citation in answer.citations:
        pages = ", ".join(str(page) for page in citation.pages)
        where = f", {citation.location}" if citation.location else ""
        print(f"  [{citation.source}{where}, p. {pages}]")
    if answer.status == "handed_off":
        say("a person has this conversation: the message was kept for them, no agent answered")
    for call in answer.tool_calls or ():
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        wanted = "approval" if call.type == "approval" else "the output"
        say(f"the agent waits for {wanted} of {call.name}({arguments}), call {call.id}")
    say(f"conversation {answer.conversationId} (continue it with --conversation)")
    return 0


def cmd_eval(core: AgentCore, args: argparse.Namespace) -> int:
    """Search once per question of a golden file (and, with ``--agent``, chat once) and
    print the figures (``agentcore.evaluation``): a table, or JSON with ``--json``; a bar
    on stderr while it runs when stderr is a terminal."""
    golden: list[GoldenQuestion] = args.golden  # read and checked while parsing
    ws = _workspace(core, args)
    for source, count in unknown_sources(ws, golden).items():
        say(f"no document is named {source!r}: its {count} question(s) will count as misses")
    if args.agent is None:
        say("no --agent: search figures only (the answers' figures need an agent to ask)")
    with _questions_bar(len(golden)) as advance:
        report = evaluate(
            ws,
            golden,
            agent_id=args.agent,
            top_k=args.top_k,
            mode=args.mode,
            rerank=args.rerank,
            progress=advance,
        )
    if args.json:
        _print_json(report.as_json())
    else:
        print("\n".join(report.table()))
    return 0


@contextmanager
def _questions_bar(total: int) -> Iterator[Callable[[], None] | None]:
    """What ``eval`` tells after each question: a bar's step on a terminal; nothing
    otherwise (a log gets the table, not a line per question)."""
    if not sys.stderr.isatty():
        yield None
        return
    with _bar(total, f"{total} question(s)", unit="q") as bar:
        yield lambda: bar.update(1)


def _golden_file(raw: str) -> list[GoldenQuestion]:
    """An argparse type: the questions of the golden file ``raw``, checked whole before
    anything is opened; a missing, empty or malformed file is a usage error naming the
    file and the line."""
    try:
        return read_golden(raw)
    except ValidationFailed as error:
        raise argparse.ArgumentTypeError(error.detail) from None


def _eval_settings(settings: Settings, args: argparse.Namespace) -> Settings:
    """``eval`` opens its core with ``chat_search_mode`` set to ``--mode``, so that the
    chat turns it measures retrieve as its searches do."""
    return settings.model_copy(update={"chat_search_mode": args.mode})


def build_parser(
    pm: pluggy.PluginManager | None = None, settings: Settings | None = None
) -> argparse.ArgumentParser:
    """The argument parser of the ``agentcore`` command: the built-in commands, then
    those plugins register (``pm``: built-in plugins and entry points by default).

    Numeric options are bounded by the ``settings`` they feed (default: read from the
    environment), so ``search --top-k`` beyond ``max_top_k`` is refused while parsing.
    """
    settings = settings or Settings.load()
    parser = Parser(prog="agentcore", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--version", action="version", version=f"agentcore {__version__}", help="print the version"
    )
    parser.add_argument(
        "--db",
        default=database_url(),
        metavar="PATH_OR_URL",
        help=f"the store: a SQLite file (its folder must exist) or a postgresql:// URL"
        f" (default: $AGENTCORE_DB, else {DEFAULT_DATABASE})",
    )
    commands = _Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    _add_init_and_keys(commands)
    _add_knowledge(commands, settings)
    _add_agents(commands)
    _add_eval(commands, settings)

    def register(name: str, run: Command, help_text: str) -> argparse.ArgumentParser:
        if name in commands.sub.choices:
            raise ValueError(f"a plugin registers the command {name!r}, which exists already")
        return commands.add(name, run, help_text)

    (pm or make_plugin_manager()).hook.agentcore_register_commands(register=register)
    return parser


class _Commands:
    """Adds commands and their common options to a group of subcommands."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub

    def add(self, name: str, func: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        """A command ``name`` running ``func``."""
        p: argparse.ArgumentParser = self.sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        p.set_defaults(func=func)
        return p

    def group(self, name: str, help_text: str, dest: str) -> _Commands:
        """A command ``name`` whose subcommands the returned ``_Commands`` adds."""
        parser = self.sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        return _Commands(parser.add_subparsers(dest=dest, required=True, metavar="COMMAND"))

    @staticmethod
    def org(p: argparse.ArgumentParser, help_text: str = "the organization's name") -> None:
        """The ``--org`` option."""
        p.add_argument("--org", required=True, help=help_text)

    @staticmethod
    def env(p: argparse.ArgumentParser) -> None:
        """The ``--env`` option."""
        p.add_argument(
            "--env", required=True, choices=["test", "live"], help="the environment of its keys"
        )

    @staticmethod
    def top_k(p: argparse.ArgumentParser, settings: Settings, what: str) -> None:
        """The ``--top-k`` option: 1 to the settings' ``max_top_k``, their
        ``default_top_k`` by default."""
        p.add_argument(
            "--top-k",
            type=int_in("--top-k", 1, settings.max_top_k),
            default=settings.default_top_k,
            metavar="K",
            help=f"{what}, 1 to max_top_k ({settings.max_top_k})",
        )

    @staticmethod
    def as_json(p: argparse.ArgumentParser) -> None:
        """The ``--json`` option."""
        p.add_argument("--json", action="store_true", help="print JSON instead of text")

    def scoped(
        self, name: str, func: Callable[..., int], help_text: str
    ) -> argparse.ArgumentParser:
        """A command of one workspace: ``--org`` and ``--env``."""
        p = self.add(name, func, help_text)
        self.org(p)
        self.env(p)
        return p


def _add_init_and_keys(commands: _Commands) -> None:
    """``init`` and ``keys create|list|revoke|rotate``."""
    p = commands.add(
        "init",
        cmd_init,
        "create the database and organization; mint a test and a live key (once)",
    )
    commands.org(p, "the organization to create (or to find, when it exists)")
    p.add_argument(
        "--new-keys",
        action="store_true",
        help="mint a test and a live key even when the organization has usable keys",
    )
    commands.as_json(p)

    keys = commands.group("keys", "manage API keys", "keys_command")
    p = keys.scoped("create", cmd_keys_create, "mint a key")
    p.add_argument(
        "--scope",
        action="append",
        choices=["read", "write"],
        help="a scope of the key; repeat for several (default: read only, and a note says so)",
    )
    p.add_argument(
        "--expires-in",
        type=_number("--expires-in", 0, MAX_EXPIRY_DAYS, low_inclusive=False),
        metavar="DAYS",
        help=f"days until the key expires, more than 0 and at most {MAX_EXPIRY_DAYS}"
        " (default: never)",
    )
    keys.as_json(p)
    p = keys.add("list", cmd_keys_list, "list keys")
    keys.org(p)
    keys.as_json(p)
    p = keys.add("revoke", cmd_keys_revoke, "revoke a key")
    p.add_argument("key_id", help="the key's id (key_...)")
    p = keys.add("rotate", cmd_keys_rotate, "rotate a key")
    p.add_argument("key_id", help="the key's id (key_...)")
    p.add_argument(
        "--grace-hours",
        type=_number("--grace-hours", 0, MAX_GRACE_HOURS, low_inclusive=True),
        default=24.0,
        metavar="HOURS",
        help=f"how long the old key keeps working, 0 to {MAX_GRACE_HOURS}",
    )
    keys.as_json(p)


def _add_knowledge(commands: _Commands, settings: Settings) -> None:
    """``ingest`` and ``search``."""
    p = commands.scoped("ingest", cmd_ingest, "ingest files and folders into the knowledge core")
    p.add_argument(
        "--create-org",
        action="store_true",
        help="create the organization if it does not exist (else an unknown one is refused)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="each file's path (as given) is its document's external_id: ingesting it again"
        " replaces the earlier version instead of adding a second document",
    )
    p.add_argument(
        "paths",
        nargs="+",
        help="files, or folders whose PDF, Word, PowerPoint, Excel, CSV, HTML, text and"
        " Markdown files to ingest",
    )

    p = commands.scoped("search", cmd_search, "search the knowledge core")
    commands.top_k(p, settings, "how many results")
    p.add_argument(
        "--rerank",
        action="store_true",
        help="reorder the top candidates with the configured reranker (AGENTCORE_RERANKER_URL)",
    )
    commands.as_json(p)
    p.add_argument("query", help="what to search for")


def _add_agents(commands: _Commands) -> None:
    """``agents create|list|deploy`` and ``chat``."""
    agents = commands.group("agents", "create, list and deploy agents", "agents_command")
    p = agents.scoped("create", cmd_agents_create, "create an agent (in draft)")
    p.add_argument("--name", default="", help="the agent's display name")
    p.add_argument("--role", default="assistant", help="the agent's role label")
    p.add_argument("--system-prompt", default="", metavar="TEXT", help="the agent's system prompt")
    p.add_argument("--model", help="its chat model (default: the core's default_chat_model)")
    p.add_argument("--deploy", action="store_true", help="deploy the agent at once")
    agents.as_json(p)
    p = agents.scoped("list", cmd_agents_list, "list agents")
    p.add_argument(
        "--status",
        choices=["draft", "deployed", "archived"],
        help="only agents in this status (default: draft and deployed)",
    )
    agents.as_json(p)
    p = agents.scoped("deploy", cmd_agents_deploy, "deploy a draft agent")
    p.add_argument("agent_id", help="the agent's id (agt_...)")

    p = commands.scoped("chat", cmd_chat, "ask an agent a question (streamed on a terminal)")
    p.add_argument("--conversation", metavar="ID", help="continue this conversation (conv_...)")
    commands.as_json(p)
    p.add_argument("agent_id", help="the agent's id (agt_...)")
    p.add_argument("message", help="the question")


def _add_eval(commands: _Commands, settings: Settings) -> None:
    """``eval``."""
    p = commands.add(
        "eval",
        cmd_eval,
        "measure search and answers against a golden file of questions (JSON Lines)",
    )
    p.set_defaults(opens_with=_eval_settings)
    p.add_argument(
        "golden",
        type=_golden_file,
        metavar="GOLDEN",
        help="a JSON Lines file, one {question, source, pages?, answer?} a line (no source:"
        " a question the agent should not answer)",
    )
    commands.org(p)
    p.add_argument(
        "--env",
        choices=["test", "live"],
        default="test",
        help="the environment whose documents and agent to evaluate",
    )
    p.add_argument(
        "--agent",
        metavar="ID",
        help="ask this agent each question too (default: search only, no answers' figures)",
    )
    commands.top_k(p, settings, "search results per question")
    p.add_argument(
        "--mode",
        choices=["vector", "keyword", "hybrid"],
        default=settings.chat_search_mode,
        help="how search ranks, and how the agent's turns retrieve (the chat_search_mode setting)",
    )
    p.add_argument(
        "--rerank",
        action="store_true",
        help="rerank each search with the configured reranker (an agent reranks its turns"
        " when its knowledge.rerank says so)",
    )
    commands.as_json(p)


def _missing_folder(db: str) -> str | None:
    """The folder a SQLite ``--db`` would be created in, if it does not exist."""
    path = path_for_url(db)
    if path is None or path == ":memory:":
        return None
    folder = Path(path).expanduser().parent
    return None if folder.is_dir() else str(folder)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0: done. 1: the command could not be done (no such organization or key, a revoked
    or expired key, files that failed to ingest). 2: the arguments are wrong (one
    line on stderr says which; no traceback). 3: ``serve`` could not start. Nothing
    printed names a database password or a key that is not being minted.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    for raw in arguments:
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes in argv (surrogate escapes)
            say(f"arguments must be valid UTF-8 text: {raw!r}")
            return USAGE_ERROR
    pm = make_plugin_manager()
    try:
        settings = Settings.load(plugin_settings_models(pm))
    except ValidationError as error:  # names the setting, never its value
        say(" ".join(str(error).split()))
        return USAGE_ERROR
    try:
        args = build_parser(pm, settings).parse_args(arguments)
    except SystemExit as exit_:  # --help (0) or a usage error (2, already printed)
        return exit_.code if isinstance(exit_.code, int) else USAGE_ERROR
    if not args.db.strip():  # SQLite would open a throwaway temporary database
        say(
            "--db and AGENTCORE_DB must not be empty: name a SQLite file or a postgresql://"
            f" URL (unset AGENTCORE_DB for {DEFAULT_DATABASE})"
        )
        return USAGE_ERROR
    opens_with = getattr(args, "opens_with", None)
    if opens_with is not None:  # a command whose core needs settings of its own (eval)
        settings = opens_with(settings, args)
    folder = _missing_folder(args.db)
    if folder is not None:  # refused before anything (a database, its folders) is made
        say(f"the folder of --db does not exist: {folder} (create it first)")
        return USAGE_ERROR
    try:
        core = AgentCore.open(args.db, settings=settings)
    except AgentCoreError as error:  # e.g. PostgreSQL unreachable: names host and database
        say(error.detail)
        return USAGE_ERROR
    except Exception as exc:  # a clear line, not a traceback, for a bad --db
        say(f"cannot open {args.db}: {exc}")
        return USAGE_ERROR
    try:
        with _quiet_broken_pipe():
            result: int = args.func(core, args)
            sys.stdout.flush()
        return result
    except ValidationFailed as error:  # a value the core refuses: the arguments are wrong
        say(error.detail)
        return USAGE_ERROR
    except AgentCoreError as error:
        say(error.detail)
        return FAILED
    except ValueError as error:  # e.g. a blank --org: a clear line, not a traceback
        say(str(error))
        return USAGE_ERROR
    except _PipeClosed:  # the reader stopped reading (`... | head -1`): not a failure
        return 0
    except Exception as exc:  # a bug: its traceback, with any secret in it masked
        sys.stderr.write(redact("".join(traceback.format_exception(exc))))
        return FAILED
    finally:
        core.close()


class _PipeClosed(Exception):
    """Whoever read stdout closed it (``agentcore keys list --json | head -1``)."""


@contextmanager
def _quiet_broken_pipe() -> Iterator[None]:
    """Turn a closed stdout into ``_PipeClosed``, and point stdout at /dev/null so that
    the interpreter's own flush at exit does not fail again (Python's documented way)."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise _PipeClosed from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
