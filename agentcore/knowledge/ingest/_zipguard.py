"""ZIP archives from strangers (Word, PowerPoint and Excel files): bounded before and while
they are unpacked.

A few megabytes of ZIP can inflate to gigabytes (a zip bomb), and a directory of a
million members costs gigabytes to list. ``open_archive`` checks the end-of-directory
record before ``zipfile`` reads the directory, then every member's declared size, their
total and their compression ratio; ``verify_archive`` inflates every member once, without
keeping it, counting the bytes that really come out against the same limits (a declared
size can lie) and refusing XML that declares a DTD (entity expansion: billion laughs),
before any parser reads a byte of it. A workbook's parts are measured as they inflate too:
python-calamine makes a sheet one dense grid, which a few cells far apart would make
billions of cells (``_sheetgrid``), and copies a shared string into every cell that shows
it, which a long string shown by many cells makes gigabytes (``_sharedstrings``).
"""

from __future__ import annotations

import contextlib
import io
import queue
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import IO

from agentcore.errors import PayloadTooLarge, ValidationFailed
from agentcore.knowledge.ingest._extraction import invalid_file
from agentcore.knowledge.ingest._sharedstrings import (
    SharedStrings,
    is_shared_strings,
    shared_text_bytes,
)
from agentcore.knowledge.ingest._sheetgrid import QuickGrid, exact_grid

__all__ = ["DEFAULT_LIMITS", "ArchiveLimits", "open_archive", "verify_archive"]

MiB = 1024 * 1024
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_DIRECTORY_ENTRY_BYTES = 1024  # a generous directory entry: its name and extra fields
_READ_BYTES = 64 * 1024
# a member this large is inflated on a thread of its own, this many bytes at a time and
# at most this many reads ahead of its measuring (1 MiB held)
_AHEAD_FROM_BYTES = 1024 * 1024
_AHEAD_READ_BYTES = 128 * 1024
_AHEAD_CHUNKS = 8
# A DTD is the only way to declare entities; Office files never carry one. Lowercased,
# in the encodings an XML part may use.
_UTF16 = b"<\x00!\x00d\x00o\x00c\x00t\x00y\x00p\x00e\x00"  # little-endian
_DOCTYPES = (b"<!doctype", _UTF16, b"\x00" + _UTF16[:-1])
_XML_SUFFIXES = (".xml", ".rels", ".vml")


@dataclass(frozen=True)
class ArchiveLimits:
    """What an archive may hold: members, bytes inflated (each and all) and the ratio of a
    large member's inflated to its compressed size (deflate's own ceiling is about 1,000;
    XML, even of a repetitive sheet, stays far below 200)."""

    members: int = 10_000
    member_bytes: int = 256 * MiB
    total_bytes: int = 512 * MiB
    ratio: int = 200
    ratio_floor: int = 1 * MiB  # members smaller than this inflate as they like
    # a workbook part's cells, its grid's rows x columns (calamine's 32 bytes each: 320
    # MB); the text budget's default stops a sheet near as many filled cells
    sheet_cells: int = 10_000_000
    # the bytes of shared strings a workbook's cells hold, each string counted once per
    # cell that shows it (calamine copies it into each)
    sheet_text_bytes: int = 256 * MiB


DEFAULT_LIMITS = ArchiveLimits()


def open_archive(data: bytes, limits: ArchiveLimits) -> zipfile.ZipFile | None:
    """``data`` as a ZIP archive whose directory passes ``limits`` (413 ``too_large``
    otherwise), or ``None`` when it is no readable ZIP archive."""
    entries, directory_bytes = _directory_size(data)
    if entries is None:
        return None
    if entries > limits.members or directory_bytes > limits.members * _DIRECTORY_ENTRY_BYTES:
        raise _too_large(f"holds more than {limits.members:,} members")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
        return None
    members = archive.infolist()
    if len(members) > limits.members:
        raise _too_large(f"holds more than {limits.members:,} members")
    total = 0
    for member in members:
        size, packed = member.file_size, member.compress_size
        total += size
        if size > limits.member_bytes:
            raise _too_large(f"has a member of {size:,} bytes unpacked ({member.filename})")
        if total > limits.total_bytes:
            raise _too_large(f"unpacks to more than {limits.total_bytes:,} bytes")
        if size > limits.ratio_floor and size > limits.ratio * max(packed, 1):
            raise _too_large(
                f"has a member compressed more than {limits.ratio}:1 ({member.filename})"
            )
    return archive


def verify_archive(
    archive: zipfile.ZipFile,
    limits: ArchiveLimits,
    check: Callable[[], None] | None = None,
    *,
    workbook: bool = False,
) -> None:
    """Inflate every member of ``archive`` once, keeping nothing: 413 ``too_large`` as soon
    as the bytes that come out pass a member's declared size or ``limits``; 422
    ``invalid_file`` for a corrupt, encrypted or oddly compressed member, or an XML part
    that declares a DTD. For a ``workbook``, also 413 for a member whose cells span more
    than ``limits.sheet_cells`` (a member the quick bound cannot settle is inflated
    again and measured exactly), and for cells that hold more than
    ``limits.sheet_text_bytes`` of shared strings. ``check`` runs between reads (a
    cancellation's)."""
    total = 0
    strings = SharedStrings()
    cells_of: list[tuple[int, Callable[[], IO[bytes]]]] = []  # a workbook's parts' cells
    for member in archive.infolist():
        if member.is_dir():
            continue
        if member.flag_bits & 0x1:
            raise invalid_file("The file is encrypted; upload an unencrypted copy.")
        if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise invalid_file(f"The file's member {member.filename} is compressed oddly.")
        xml = member.filename.lower().endswith(_XML_SUFFIXES)
        grid = QuickGrid() if workbook else None
        table = strings if workbook and is_shared_strings(member.filename) else None
        if table is not None:
            table.begin()
        seen = 0
        tail = b""
        try:
            with _inflating(archive, member) as chunks:
                for chunk in chunks:
                    seen += len(chunk)
                    total += len(chunk)
                    if seen > min(member.file_size, limits.member_bytes):
                        raise _too_large(
                            f"has a member larger than it declares ({member.filename})"
                        )
                    if total > limits.total_bytes:
                        raise _too_large(f"unpacks to more than {limits.total_bytes:,} bytes")
                    if xml and _declares_dtd(tail, chunk):
                        raise invalid_file(
                            f"The file's part {member.filename} declares a DTD, which"
                            " Office files never do; it is refused."
                        )
                    tail = chunk[-24:]
                    if grid is not None:
                        grid.feed(chunk)
                    if table is not None:
                        table.feed(chunk)
                    if check is not None:
                        check()
            if grid is not None:
                cells = grid.result()
                if cells is None or cells.size > limits.sheet_cells:  # not settled by the
                    # bound (written unusually, or large): measured again, exactly
                    cells = exact_grid(partial(archive.open, member), check)
                if cells.size > limits.sheet_cells:
                    raise _too_large(
                        f"has a sheet of more than {limits.sheet_cells:,} cells, counting the"
                        f" empty ones between its first and last ({member.filename})"
                    )
                if cells.cells:
                    cells_of.append((cells.cells, partial(archive.open, member)))
        except _UNREADABLE:
            raise _unreadable() from None
    if workbook:
        strings.finish()
        _check_shared_text(cells_of, strings, limits, check)


@contextlib.contextmanager
def _inflating(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> Iterator[Iterator[bytes]]:
    """A member's inflated bytes, chunk by chunk. A large member is inflated on a thread
    of its own (zlib lets go of the GIL as it inflates), at most ``_AHEAD_CHUNKS`` chunks
    ahead of the reader, so inflating and measuring run at once; it stops when the reader
    does, and what inflating raised is raised to the reader. Where no thread can start
    (an address-space limit reached), the reader inflates it itself."""
    ahead = None
    if member.file_size >= _AHEAD_FROM_BYTES:
        with contextlib.suppress(RuntimeError):  # "can't start new thread"
            ahead = _Ahead(partial(archive.open, member))
    if ahead is None:
        with archive.open(member) as stream:
            yield iter(partial(stream.read, _READ_BYTES), b"")
        return
    try:
        yield ahead.chunks()
    finally:
        ahead.close()


class _Ahead:
    """Reads a stream on a thread of its own into a short queue (see ``_inflating``)."""

    def __init__(self, open_stream: Callable[[], IO[bytes]]) -> None:
        self._open = open_stream
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(_AHEAD_CHUNKS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentcore-inflate", daemon=True)
        self._thread.start()

    def chunks(self) -> Iterator[bytes]:
        while True:
            chunk = self._queue.get()
            if isinstance(chunk, BaseException):
                raise chunk
            if not chunk:
                return
            yield chunk

    def close(self) -> None:
        """Stop reading (the thread ends within one chunk) and wait for the thread."""
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)  # room for a put it is blocked in
        self._thread.join()

    def _run(self) -> None:
        try:
            with self._open() as stream:
                while not self._stop.is_set():
                    chunk = stream.read(_AHEAD_READ_BYTES)
                    self._put(chunk)
                    if not chunk:
                        return
        except BaseException as exc:  # the reader's to raise
            self._put(exc)

    def _put(self, item: bytes | BaseException) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.05)
                return


def _check_shared_text(
    cells: list[tuple[int, Callable[[], IO[bytes]]]],
    strings: SharedStrings,
    limits: ArchiveLimits,
    check: Callable[[], None] | None,
) -> None:
    """413 ``too_large`` for a workbook whose cells hold more than
    ``limits.sheet_text_bytes`` of shared strings."""
    try:
        text = shared_text_bytes(cells, strings, limits.sheet_text_bytes, check)
    except _UNREADABLE:
        raise _unreadable() from None
    if text > limits.sheet_text_bytes:
        raise _too_large(
            f"has cells that hold more than {limits.sheet_text_bytes:,} bytes of text, counting"
            " a shared string once for every cell that shows it"
        )


# what inflating a member raises when the archive is corrupt or truncated
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError)


def _unreadable() -> ValidationFailed:
    return invalid_file("The file is not a readable archive (corrupt or truncated).")


def _declares_dtd(tail: bytes, chunk: bytes) -> bool:
    """Whether ``chunk`` (after ``tail``, the end of the chunk before it) opens a DTD: a
    search for the byte ``!`` first (memchr: ``<`` is everywhere in XML, a search for
    ``<!`` stops at each), then for ``<!`` in each encoding, so the usual part costs no
    copy."""
    if b"!" not in chunk and b"!" not in tail:
        return False
    edge = tail + chunk[:24]
    if not any(b"<!" in part or b"<\x00!" in part for part in (chunk, edge)):
        return False
    window = (tail + chunk).lower()
    return any(doctype in window for doctype in _DOCTYPES)


def _directory_size(data: bytes) -> tuple[int | None, int]:
    """The member count and directory size the end-of-directory record declares
    (``None`` without one), read before ``zipfile`` lists every member."""
    at = data.rfind(_EOCD, max(0, len(data) - 65_557))
    if at < 0 or at + 22 > len(data):
        return None, 0
    entries, directory_bytes = struct.unpack_from("<HI", data, at + 10)
    if entries == 0xFFFF or directory_bytes == 0xFFFFFFFF:  # ZIP64: the real counts are there
        locator = at - 20
        if locator < 0 or data[locator : locator + 4] != _EOCD64_LOCATOR:
            return None, 0
        (record,) = struct.unpack_from("<Q", data, locator + 8)
        if record + 56 > len(data) or data[record : record + 4] != _EOCD64:
            return None, 0
        entries, directory_bytes = struct.unpack_from("<QQ", data, record + 32)
    return entries, directory_bytes


def _too_large(detail: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The file {detail}: more than an upload may unpack to.", code="too_large", param="file"
    )
