"""The webhook key file: the AES-256 key that seals webhook signing secrets when
``webhook_secret_key`` is unset, kept beside a SQLite database as
``<database>.webhook-key`` (mode 0600).

Secrets are sealed by default: the first core to open a SQLite file creates the key
file (``agentcore init`` does, and so does ``AgentCore.open``), and every later one
reads it, so a copy of the database alone (a backup, a stolen file, a read-only SQL
injection) holds no secret that signs. The file holds the key as
``webhook_secret_key`` spells it (base64 of 32 random bytes), so it can be moved into
that setting. Where no file can be kept (PostgreSQL, ``:memory:``, a folder the
process cannot write) secrets are stored as they are, and the core says so in its
log when it starts (``SecretKeys.plaintext_reason``). With ``webhook_secret_key`` set,
the setting's keys seal, and a key file found beside the database still opens what
it sealed.
"""

from __future__ import annotations

import base64
import contextlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from agentcore.config import WEBHOOK_KEY_BYTES, parse_keys
from agentcore.outbound import SecretBox

KEY_FILE_SUFFIX = ".webhook-key"
SETTING_HINT = (
    "set webhook_secret_key (AGENTCORE_WEBHOOK_SECRET_KEY: base64 of 32 random bytes) to"
    " seal them; see docs/operations.md, 'Webhook secrets at rest'"
)


class KeyFileError(ValueError):
    """The key file exists but holds no key this process can read: opening the core
    stops (storing new secrets in plaintext, or with a new key, would lose the ones it
    sealed). The message names the file, never its contents."""


@dataclass(frozen=True)
class SecretKeys:
    """How a core seals webhook secrets: its box, and why it does not seal, if it does not.

    :param box: seals secrets for the store and opens them to sign.
    :param plaintext_reason: why secrets are stored in plaintext (the start-up
        warning says it); ``None`` when they are sealed.
    :param warning: anything else to say at start-up (a key file others may read).
    :param key_file: the key file whose key seals, when one does.
    """

    box: SecretBox
    plaintext_reason: str | None = None
    warning: str | None = None
    key_file: Path | None = None


def key_file_for(database: str | None) -> Path | None:
    """``<database>.webhook-key`` for a SQLite database file; ``None`` for ``:memory:``
    and for a store that is not a file (``database`` is then ``None``)."""
    if database is None or database == ":memory:":
        return None
    return Path(database + KEY_FILE_SUFFIX)


def secret_keys(setting: SecretStr | None, database: str | None) -> SecretKeys:
    """The keys of a core opening ``database`` (a SQLite path, ``:memory:`` or ``None``
    for another store) with ``webhook_secret_key`` = ``setting``.

    The setting's keys when it is set, and a key file beside the database opens too;
    else the key file's key, the file created if missing; else none (plaintext).

    :raises KeyFileError: the key file exists but cannot be read, or holds no key.
    """
    path = key_file_for(database)
    if setting is not None:
        keys = parse_keys(setting.get_secret_value())
        found = read_key_file(path) if path is not None else None
        if found is not None and found not in keys:
            keys.append(found)  # opens what it sealed; the setting's first key seals
        return SecretKeys(SecretBox(keys))
    if path is None:
        where = "the database is in memory" if database == ":memory:" else "the store is not a file"
        return SecretKeys(SecretBox(), f"{where}, so there is no key file beside it")
    key = read_key_file(path)
    if key is None:
        try:
            key = create_key_file(path)
        except OSError as exc:
            reason = f"the key file {path} cannot be created ({exc.strerror or exc})"
            return SecretKeys(SecretBox(), reason)
    return SecretKeys(SecretBox([key]), warning=_exposed(path), key_file=path)


def read_key_file(path: Path) -> bytes | None:
    """The key in ``path``, or ``None`` if there is no such file.

    :raises KeyFileError: it exists but cannot be read or holds no single key.
    """
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        if isinstance(exc, OSError) and not os.path.lexists(path):
            return None  # a name no file can have (too long): there is none to read
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not base64"
        raise KeyFileError(f"cannot read the webhook key file {path}: {reason}") from None
    try:
        keys = parse_keys(text)
    except ValueError as exc:  # its message never quotes the key
        raise KeyFileError(f"the webhook key file {path} holds no key: {exc}") from None
    if len(keys) != 1:
        raise KeyFileError(f"the webhook key file {path} holds {len(keys)} keys, not one")
    return keys[0]


def create_key_file(path: Path) -> bytes:
    """A new random key in ``path`` (mode 0600), or the key another process put there
    first: the file appears whole (written beside it, then linked into place, which
    fails if the name exists), so a process reading it never sees it half written.

    :raises OSError: the folder cannot be written.
    """
    key = os.urandom(WEBHOOK_KEY_BYTES)
    # mkstemp creates the file readable and writable by its owner only, whatever the umask
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(base64.b64encode(key) + b"\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:  # another process opening the same database won
            found = read_key_file(path)
            if found is None:  # it was removed again meanwhile: nothing to agree with
                raise
            return found
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return key


def _exposed(path: Path) -> str | None:
    """A warning if users other than the owner may read or change the key file."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return (
            f"the webhook key file {path} has mode {mode:04o}: other users may read it;"
            f" restrict it with: chmod 600 {path}"
        )
    return None


__all__ = [
    "KEY_FILE_SUFFIX",
    "KeyFileError",
    "SecretKeys",
    "create_key_file",
    "key_file_for",
    "read_key_file",
    "secret_keys",
]
