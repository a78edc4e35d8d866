"""Vector segment files: a per-machine, memory-mapped, rebuildable cache of a workspace's vectors.

The store stays the source of truth. A workspace's directory holds immutable segment
files (sorted ids, the codec's codes and params, float32 rows) and a ``manifest.json``
naming the live segments, a tombstone file (their deleted rows) and the store's
change-log version they reflect. Every process on the machine maps the same files
read-only, so the OS page cache holds one copy of the vectors however many workers
serve them; a process applies ``changes_since(manifest.version)`` on top.

Crash safety
    Every file is written under a temporary name, fsynced, renamed into place with
    ``os.replace`` and the directory fsynced; files are never modified afterwards. A
    new manifest is published the same way, so a reader sees the old manifest or the
    new one, each naming only complete files. A process killed mid-write leaves at
    most an unnamed file (collected later); the previous manifest stays valid.
    Writers (merge, compaction, garbage collection) serialise across processes with
    ``flock`` on the directory's lock file; readers take no lock (a file unlinked
    after they mapped it stays valid on POSIX, and a file gone before they open it
    makes them read the manifest again).

Validation
    Headers carry a magic, a format version and a CRC-32; the ids carry a CRC-32 and
    must be strictly ascending; sizes must match the header. Anything unusable raises
    ``SegmentError``, and the caller loads from the store instead. The vector bytes are
    not checksummed at load (that would read every page, defeating the mapping); files
    are only ever published complete and fsynced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors._parts import Part, encode_labels
from agentcore.knowledge.vectors._plan import RowSource

FORMAT = 2  # 2: each row's label (its document's number), for filtered searches
SEGMENT_MAGIC = b"ACVSEG\x00\x01"
TOMBSTONE_MAGIC = b"ACVTMB\x00\x01"
HEADER_BYTES = 4096  # sections start page-aligned
MANIFEST = "manifest.json"
LOCK = "lock"
# Files no manifest names and older than this are leftovers of a crash: deleted.
ORPHAN_SECONDS = 3600.0
WRITE_BYTES = 8 << 20  # one write call
# Rows a segment writer copies (and encodes) at a time: each block is one numpy call
# that runs without the GIL (~1 ms), so a request thread waiting for the GIL behind a
# compaction waits for at most one block's few Python steps, not a whole copy.
BLOCK_BYTES = 4 << 20
# Written bytes between two flushes to disk: a store commit that must wait for the
# disk (a WAL checkpoint's fsync) then waits behind at most this much of ours.
SYNC_BYTES = 16 << 20
# Segment files smaller than this are read into memory instead of mapped: a mapping
# holds an open file and a memory map for as long as its workspace is loaded, which the
# few bytes of a small file do not repay (a process may have 1,024 files open and 65,530
# mappings by default).
MAP_MIN_BYTES = 1 << 20

IdArray = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]


class SegmentError(Exception):
    """A segment directory, manifest or file is missing, damaged or of another format."""


@dataclass(frozen=True)
class Manifest:
    """What a workspace's segment directory holds, as of store version ``version``."""

    version: int
    dimension: int
    embedder: str | None
    store: str  # identity of the store the files were built from
    segments: tuple[str, ...]
    tombstones: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def files(self) -> set[str]:
        """The file names this manifest needs."""
        return set(self.segments) | ({self.tombstones} if self.tombstones else set())


def _no_stage(stage: str) -> None:
    """The default ``WriteStages``: nothing to do."""


def align(offset: int) -> int:
    """``offset`` rounded up to a page (``HEADER_BYTES``): where a file's next section starts."""
    return -(-offset // HEADER_BYTES) * HEADER_BYTES


def read_or_map(path: Path, map_min_bytes: int = MAP_MIN_BYTES) -> mmap.mmap | bytes:
    """The bytes of the file at ``path``: read into memory when it is smaller than
    ``map_min_bytes`` (no file kept open, no mapping made), else mapped read-only.
    ``SegmentError`` when it is shorter than a header."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < HEADER_BYTES:
            raise SegmentError(f"{path.name}: truncated ({size} bytes)")
        if size >= map_min_bytes:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        data = f.read()
    if len(data) != size:
        raise SegmentError(f"{path.name}: truncated while read")
    return data


_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_header(magic: bytes, meta: dict[str, Any]) -> bytes:
    """A ``HEADER_BYTES`` header: ``magic``, the JSON ``meta`` and a CRC-32 of both."""
    body = json.dumps(meta, sort_keys=True).encode()
    head = magic + struct.pack("<I", len(body)) + body
    head += struct.pack("<I", zlib.crc32(head))
    if len(head) > HEADER_BYTES:
        raise ValueError("segment header too large")
    return head.ljust(HEADER_BYTES, b"\0")


def read_file_header(
    magic: bytes, data: mmap.mmap | bytes, name: str, *, format: int = FORMAT
) -> dict[str, Any]:
    """The meta of ``file_header``, checked: ``SegmentError`` unless ``data`` opens
    with ``magic``, its checksum holds and its ``format`` is ``format``."""
    if len(data) < HEADER_BYTES or data[:8] != magic:
        raise SegmentError(f"{name}: not a segment file of this format")
    (length,) = struct.unpack_from("<I", data, 8)
    if 12 + length + 4 > HEADER_BYTES:
        raise SegmentError(f"{name}: header length out of range")
    (crc,) = struct.unpack_from("<I", data, 12 + length)
    if zlib.crc32(data[: 12 + length]) != crc:
        raise SegmentError(f"{name}: header checksum mismatch")
    meta: dict[str, Any] = json.loads(bytes(data[12 : 12 + length]))
    if meta.get("format") != format:
        raise SegmentError(f"{name}: format {meta.get('format')} is not {format}")
    return meta


def write_file_atomically(
    directory: Path,
    name: str,
    pieces: Iterable[tuple[int, memoryview]],
    *,
    size: int | None = None,
) -> None:
    """Write ``(offset, bytes)`` pieces to ``directory/name`` atomically and durably.

    ``pieces`` may be produced lazily (each is written before the next is asked for,
    so a producer may reuse its buffer). Large files are written in slices, flushed to
    disk every ``SYNC_BYTES``, and after each flush the writer pauses as long as the
    flush took (at most half the disk's time is ours): the page cache never holds
    gigabytes of dirty pages of ours, whose write-back would stall the store's own
    small writes (a DELETE's commit).
    """
    tmp = directory / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        unsynced = 0
        for offset, data in pieces:
            for start in range(0, len(data), WRITE_BYTES):
                chunk = data[start : start + WRITE_BYTES]
                written = 0
                while written < len(chunk):
                    written += os.pwrite(fd, chunk[written:], offset + start + written)
                unsynced += len(chunk)
                if unsynced >= SYNC_BYTES:
                    began = time.monotonic()
                    _datasync(fd)
                    time.sleep(min(time.monotonic() - began, 1.0))
                    unsynced = 0
        if size is not None:
            os.ftruncate(fd, size)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, directory / name)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)


def _bytes(array: npt.NDArray[Any]) -> memoryview:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def _matrix_source(vectors: Matrix) -> RowSource:
    matrix = np.ascontiguousarray(vectors, dtype="<f4")
    if matrix.ndim != 2:
        raise ValueError(f"segment rows must be a matrix, not shape {matrix.shape}")
    return RowSource(((matrix, None),), None, int(matrix.shape[1]))


def _stream_params(
    codec: kernels.Codec, source: RowSource, pace: Callable[[], object] | None = None
) -> npt.NDArray[np.float32] | None:
    """The codec's parameters for ``source``'s rows, found block by block; ``None`` for
    a codec whose fit is not known here (the rows are then encoded as one matrix).

    float32 and float16 codes are the rows rounded one by one (no parameters); int8's
    grid depends only on each dimension's minimum and maximum over the rows, so it is
    fitted to a two-row matrix of those, which gives the very same grid.
    """
    d = source.dimension
    if codec.name in ("float32", "float16"):
        return codec.encode(np.empty((0, d), dtype=np.float32))[1]
    if codec.name != "int8" or source.rows == 0:
        return None
    step = max(1, BLOCK_BYTES // (d * 4))
    buffer = np.empty((min(step, source.rows), d), dtype=np.float32)
    low = np.full(d, np.inf, dtype=np.float32)
    high = np.full(d, -np.inf, dtype=np.float32)
    for start in range(0, source.rows, step):
        if pace is not None:
            pace()
        rows = source.block(start, min(start + step, source.rows), buffer)
        np.minimum(low, rows.min(axis=0), out=low)
        np.maximum(high, rows.max(axis=0), out=high)
    return codec.encode(np.stack([low, high]))[1]


def max_mapped_files() -> int:
    """How many segment files one process may keep mapped (``WorkspaceIndexes``' bound): a
    quarter of its open-file limit and a sixteenth of the system's limit of mappings per
    process (Linux ``vm.max_map_count``), at least 16. Each mapped file holds one open
    file and at least one mapping; the rest is left to sockets, the database and numpy."""
    limits: list[int] = []
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY:
            limits.append(soft // 4)
    with contextlib.suppress(OSError, ValueError):
        limits.append(int(Path("/proc/sys/vm/max_map_count").read_text()) // 16)
    return max(16, min(limits, default=256))


#: Called with the name of each stage a write reaches: ``"segment"`` (half a segment
#: file's rows written) and ``"manifest"`` (its files complete, the manifest not yet
#: published). A fault-injection point: a crash test stops the process there.
WriteStages = Callable[[str], object]


class SegmentDirectory:
    """One workspace's segment files on this machine (created on first write).

    :param path: the workspace's directory.
    :param write_stages: called at each stage of a write (``WriteStages``); none by
        default.
    :param map_min_bytes: segment files smaller than this are read into memory
        instead of mapped (default ``MAP_MIN_BYTES``).
    """

    def __init__(
        self,
        path: Path,
        *,
        write_stages: WriteStages | None = None,
        map_min_bytes: int | None = None,
    ) -> None:
        self.path = Path(path)
        self._stage = write_stages or _no_stage
        self.map_min_bytes = MAP_MIN_BYTES if map_min_bytes is None else map_min_bytes

    # -- writing (call with ``lock()`` held) -------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive across processes and threads (``flock`` on a fresh descriptor)."""
        import fcntl  # POSIX only: segment_root() never gives a directory elsewhere

        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def write_segment(
        self,
        ids: IdArray,
        vectors: Matrix | RowSource,
        codec: kernels.Codec,
        *,
        pace: Callable[[], object] | None = None,
        labels: IdArray | None = None,
    ) -> Part:
        """Write sorted ``ids`` and their unit rows as a new segment file; the mapped part.

        Each row's label (its document's number) goes with it: ``labels``, else a
        ``RowSource``'s own, else none (``NO_LABEL``).

        ``vectors`` is a matrix or a ``RowSource`` (a maintenance step's rows, never
        gathered into one matrix): the rows and their codes go to the file
        ``BLOCK_BYTES`` at a time through one reused buffer, so a compaction of any size
        needs a few MB of memory, and holds the GIL only between blocks. ``pace`` is
        called before each block (it may wait: the cache's waits while a request writes).
        """
        ids = np.ascontiguousarray(ids, dtype="<i8")
        if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            raise ValueError("segment ids must be strictly ascending")
        source = vectors if isinstance(vectors, RowSource) else _matrix_source(vectors)
        n, d = source.rows, source.dimension
        if n != ids.shape[0]:
            raise ValueError(f"{ids.shape[0]} ids for {n} rows")
        if labels is None and isinstance(vectors, RowSource):
            label_codes, label_values = vectors.label_codes()
        else:
            label_codes, label_values = encode_labels(labels)
        if label_codes is None or label_values is None:
            label_codes, label_values = np.zeros(n, np.int32), np.full(1, -1, np.int64)
        label_codes = np.ascontiguousarray(label_codes, dtype="<i4")
        label_values = np.ascontiguousarray(label_values, dtype="<i8")
        params = _stream_params(codec, source, pace)
        if params is None:  # a codec fitted to all rows in a way not known here
            matrix = source.fill(0, n, np.empty((n, d), dtype=np.float32))
            source, params = _matrix_source(matrix), codec.encode(matrix)[1]
        params = np.ascontiguousarray(params, dtype="<f4")
        own_codes = codec.name != "float32"  # float32 codes are the rows: stored once
        codes_dtype = np.dtype(codec.dtype)
        sections: dict[str, list[int]] = {}
        offset = HEADER_BYTES
        for key, nbytes in (
            ("ids", ids.nbytes),
            ("vectors", n * d * 4),
            ("params", params.nbytes),
            ("label_values", label_values.nbytes),
            ("label_codes", label_codes.nbytes),
            *((("codes", n * d * codes_dtype.itemsize),) if own_codes else ()),
        ):
            sections[key] = [offset, int(nbytes)]
            offset = align(offset + nbytes)
        meta = {
            "format": FORMAT,
            "rows": int(n),
            "dimension": int(d),
            "codec": codec.name,
            "codes_dtype": codes_dtype.str,
            "sections": sections,
            "ids_crc32": zlib.crc32(_bytes(ids)),
            "size": offset,
        }
        name = f"seg-{uuid.uuid4().hex}.vec"
        self.path.mkdir(parents=True, exist_ok=True)

        def pieces() -> Iterator[tuple[int, memoryview]]:
            yield 0, memoryview(file_header(SEGMENT_MAGIC, meta))
            yield sections["ids"][0], _bytes(ids)
            yield sections["params"][0], _bytes(params)
            yield sections["label_values"][0], _bytes(label_values)
            yield sections["label_codes"][0], _bytes(label_codes)
            step = max(1, BLOCK_BYTES // (d * 4))
            buffer = np.empty((min(step, n), d), dtype=np.float32)
            starts = range(0, n, step)
            for i, start in enumerate(starts):
                if pace is not None:
                    pace()
                stop = min(start + step, n)
                rows = source.block(start, stop, buffer)
                yield sections["vectors"][0] + start * d * 4, _bytes(rows)
                if own_codes:
                    codes = np.ascontiguousarray(codec.encode(rows, params)[0])
                    at = sections["codes"][0] + start * d * codes_dtype.itemsize
                    yield at, _bytes(codes)
                if i == len(starts) // 2:
                    self._stage("segment")  # half the rows written
            if n == 0:
                self._stage("segment")

        write_file_atomically(self.path, name, pieces(), size=offset)
        return self.open_segment(name)

    def write_tombstones(self, dead: Sequence[IdArray]) -> str | None:
        """Write each segment's sorted dead row numbers (in manifest order) as a
        tombstone file; its name (``None`` if no row is dead)."""
        if not any(rows.size for rows in dead):
            return None
        rows = np.ascontiguousarray(np.concatenate(list(dead)), dtype="<i8")
        meta = {
            "format": FORMAT,
            "counts": [int(r.size) for r in dead],
            "crc32": zlib.crc32(_bytes(rows)),
        }
        name = f"tomb-{uuid.uuid4().hex}.rows"
        write_file_atomically(
            self.path,
            name,
            [(0, memoryview(file_header(TOMBSTONE_MAGIC, meta))), (HEADER_BYTES, _bytes(rows))],
        )
        return name

    def publish(self, manifest: Manifest) -> None:
        """Make ``manifest`` the current one (atomic; every file it names must exist)."""
        missing = [n for n in manifest.files() if not (self.path / n).is_file()]
        if missing:
            raise SegmentError(f"the manifest names missing files: {missing}")
        self._stage("manifest")
        body = {
            "format": FORMAT,
            "id": manifest.id,
            "version": manifest.version,
            "dimension": manifest.dimension,
            "embedder": manifest.embedder,
            "store": manifest.store,
            "segments": list(manifest.segments),
            "tombstones": manifest.tombstones,
        }
        data = json.dumps(body, sort_keys=True).encode()
        envelope = json.dumps({"crc32": zlib.crc32(data), "manifest": body}, sort_keys=True)
        write_file_atomically(self.path, MANIFEST, [(0, memoryview(envelope.encode()))])

    def collect(self, keep: set[str]) -> int:
        """Delete segment and tombstone files not in ``keep``; how many were deleted.

        Files named by the manifest being replaced go at once (a process that mapped
        them keeps its mapping); other unnamed files (a crash's leftovers, or a file
        another writer has not published yet) only once ``ORPHAN_SECONDS`` old.
        """
        deleted = 0
        now = time.time()
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return 0
        for entry in entries:
            name = entry.name
            if name in keep or not name.startswith(("seg-", "tomb-", ".seg-", ".tomb-")):
                continue
            try:
                if now - entry.stat().st_mtime < ORPHAN_SECONDS:
                    continue
                os.unlink(entry.path)
                deleted += 1
            except FileNotFoundError:
                continue
        return deleted

    def remove(self, names: set[str]) -> None:
        """Delete these files (those the replaced manifest named, now unused)."""
        for name in names:
            (self.path / name).unlink(missing_ok=True)

    # -- reading -----------------------------------------------------------------

    def read_manifest(self) -> Manifest | None:
        """The current manifest; ``None`` if there is none; ``SegmentError`` if damaged."""
        try:
            raw = (self.path / MANIFEST).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SegmentError(f"manifest unreadable: {exc}") from exc
        try:
            envelope = json.loads(raw)
            body = envelope["manifest"]
            data = json.dumps(body, sort_keys=True).encode()
            if zlib.crc32(data) != envelope["crc32"] or body["format"] != FORMAT:
                raise SegmentError("manifest checksum or format mismatch")
            return Manifest(
                version=int(body["version"]),
                dimension=int(body["dimension"]),
                embedder=body["embedder"],
                store=str(body["store"]),
                segments=tuple(str(s) for s in body["segments"]),
                tombstones=body["tombstones"],
                id=str(body["id"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SegmentError(f"manifest damaged: {exc}") from exc

    def load(self) -> tuple[Manifest, list[Part]] | None:
        """The current manifest and its segments mapped, tombstones applied.

        ``None`` if there is no manifest; ``SegmentError`` if anything is unusable.
        """
        for _ in range(3):
            manifest = self.read_manifest()
            if manifest is None:
                return None
            try:
                parts = [self.open_segment(name) for name in manifest.segments]
                dead = self.read_tombstones(manifest.tombstones, [p.rows for p in parts])
            except FileNotFoundError:
                continue  # a writer replaced the manifest and collected its files: again
            return manifest, [
                p.with_dead(d) if d.size else p for p, d in zip(parts, dead, strict=True)
            ]
        raise SegmentError("the manifest kept changing under the reader")

    def open_segment(self, name: str) -> Part:
        """Map segment file ``name`` read-only: a frozen part over the mapping (no copy).
        A file smaller than ``map_min_bytes`` is read into memory instead (no file is
        kept open and no mapping made)."""
        mapped = read_or_map(self.path / name, self.map_min_bytes)
        size = len(mapped)
        try:
            meta = read_file_header(SEGMENT_MAGIC, mapped, name)
            if size != meta["size"]:
                raise SegmentError(f"{name}: {size} bytes, expected {meta['size']}")
            codec = kernels.CODECS.get(meta["codec"])
            if codec is None:
                raise SegmentError(f"{name}: unknown codec {meta['codec']!r}")
            n, d = int(meta["rows"]), int(meta["dimension"])
            sections = meta["sections"]

            def section(key: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Any:
                offset, nbytes = sections[key]
                count = int(np.prod(shape))
                if nbytes != count * dtype.itemsize or offset + nbytes > size:
                    raise SegmentError(f"{name}: section {key} out of range")
                return np.frombuffer(mapped, dtype=dtype, count=count, offset=offset).reshape(shape)

            ids = section("ids", np.dtype("<i8"), (n,))
            if zlib.crc32(_bytes(ids)) != meta["ids_crc32"]:
                raise SegmentError(f"{name}: ids checksum mismatch")
            if n > 1 and not bool(np.all(ids[1:] > ids[:-1])):
                raise SegmentError(f"{name}: ids are not strictly ascending")
            vectors = section("vectors", np.dtype("<f4"), (n, d))
            params = section("params", np.dtype("<f4"), (sections["params"][1] // 4,))
            values = section("label_values", np.dtype("<i8"), (sections["label_values"][1] // 8,))
            label_codes = section("label_codes", np.dtype("<i4"), (n,))
            if n and (
                values.size == 0
                or not 0 <= int(label_codes.min()) <= int(label_codes.max()) < values.size
            ):
                raise SegmentError(f"{name}: label codes out of range")
            codes = (
                section("codes", np.dtype(meta["codes_dtype"]), (n, d))
                if "codes" in sections
                else vectors
            )
        except (KeyError, TypeError, ValueError) as exc:
            # the mapping goes with the last array over it (closing it now would fail)
            raise SegmentError(f"{name}: header damaged: {exc}") from exc
        return Part(
            ids,
            codes,
            params,
            vectors,
            np.empty(0, np.int64),
            codec,
            name,
            mapped,
            label_codes,
            values,
        )

    def read_tombstones(self, name: str | None, rows: Sequence[int]) -> list[IdArray]:
        """Each segment's dead rows from a tombstone file (``rows``: the segments' sizes)."""
        if name is None:
            return [np.empty(0, dtype=np.int64) for _ in rows]
        raw = (self.path / name).read_bytes()
        meta = read_file_header(TOMBSTONE_MAGIC, raw, name)
        try:
            counts = [int(c) for c in meta["counts"]]
            if len(counts) != len(rows):
                raise SegmentError(
                    f"{name}: {len(counts)} segments, the manifest names {len(rows)}"
                )
            dead = np.frombuffer(raw, dtype="<i8", count=sum(counts), offset=HEADER_BYTES)
            if zlib.crc32(_bytes(dead)) != meta["crc32"]:
                raise SegmentError(f"{name}: checksum mismatch")
        except (KeyError, TypeError, ValueError) as exc:
            raise SegmentError(f"{name}: damaged: {exc}") from exc
        out: list[IdArray] = []
        start = 0
        for count, n in zip(counts, rows, strict=True):
            part = dead[start : start + count].astype(np.int64)
            start += count
            if part.size and (
                part[0] < 0 or part[-1] >= n or not bool(np.all(part[1:] > part[:-1]))
            ):
                raise SegmentError(f"{name}: dead rows out of order or range")
            out.append(part)
        return out


def segment_root(
    url: str | None, index_dir: str, cache: Path | None = None
) -> tuple[Path | None, str]:
    """Where a store's segment files go (``Settings.index_dir``), and the store's identity.

    ``"auto"``: ``<database file>.index/`` next to a SQLite file; for PostgreSQL (a
    ``postgresql://`` URL), ``cache/index/<digest of the URL>`` when a ``cache``
    directory is given (the core gives ``config.cache_directory()``), else none; none
    for ``:memory:`` and other stores. ``"off"``: none. Else that directory, one subdirectory per store
    URL. The identity (a SQLite file's device and inode; another store's URL without its
    password) keeps a manifest from being applied to another database at the same path.
    """
    if index_dir.strip().lower() in ("", "off", "none") or os.name != "posix":
        return None, ""  # (file locks and mapping semantics used here are POSIX)
    if not url or url in (":memory:", "sqlite://", "sqlite:///:memory:"):
        return None, ""
    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else url
    sqlite_file = Path(path) if "://" not in path and Path(path).is_file() else None
    if sqlite_file is not None:
        info = sqlite_file.stat()
        identity = f"sqlite:{info.st_dev}:{info.st_ino}"
    else:
        identity = _URL_PASSWORD.sub(r"\1:***@", url)
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    if index_dir.strip().lower() == "auto":
        if sqlite_file is not None:
            return sqlite_file.with_name(sqlite_file.name + ".index"), identity
        if cache is None or not url.startswith(("postgresql://", "postgres://")):
            return None, ""  # (another plugin's store may not outlive the process)
        return Path(cache) / "index" / digest, identity
    return Path(index_dir) / digest, identity


# the password of a URL (``scheme://user:PASSWORD@host``): never in a manifest or a path
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*):[^@/\s]*@")
