"""How SQLite and PostgreSQL spell what the one SQL store says differently.

The store writes each statement once, with ``?`` placeholders (PostgreSQL's connections
translate them) and, where the two databases use other words, with its ``Dialect``'s:
DDL types, two scalar functions, the row lock of a claim, how a segment's ids are
gathered in SQL, a member of JSON text, and text sorted by code point. What differs
beyond spelling (connections, blob I/O, term counts, pgvector, wake-ups) lives in each
database's store class.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """The words one database uses where the other uses different ones."""

    name: str
    #: an auto-numbered 64-bit primary key column: its type and constraint
    serial_key: str
    bigint: str
    real: str
    blob: str
    boolean: str
    #: the table option of tables read only by their primary key
    without_rowid: str
    #: the scalar (not aggregate) maximum and minimum of their arguments
    greatest: str
    least: str
    #: what a claim adds to its SELECT so concurrent claimers skip each other's rows
    skip_locked: str
    #: the most float32 bytes one vector segment holds (a larger write is split)
    segment_bytes: int
    #: an aggregate of an integer column ``{0}``'s values, in the order of column
    #: ``{1}``, as a segment stores its ids (int64, little-endian), so a write can build
    #: the segment of rows it inserted without reading their ids back first, and a
    #: filter of column ``{0}`` by a list bound as one parameter; ``None``: the store
    #: reads the ids
    segment_ids: str | None = None
    any_of: str = ""
    #: member ``{1}`` of the JSON object a TEXT column ``{0}`` holds, as a scalar
    json_member: str = "json_extract({0}, '$.{1}')"
    #: what an ``ORDER BY`` of text adds so that it sorts by code point, as SQLite does
    code_point_order: str = ""

    def member(self, column: str, name: str) -> str:
        """The SQL of member ``name`` of the JSON object in TEXT column ``column``."""
        return self.json_member.format(column, name)

    def lock(self, alias: str) -> str:
        """The claim clause for the rows of the table aliased ``alias`` ("" where the
        whole write transaction is exclusive anyway)."""
        return self.skip_locked.format(alias)

    def external(self, table: str, *columns: str) -> str:
        """Statements that store ``columns`` of ``table`` out of line and uncompressed.

        Vector and upload bytes do not compress: PostgreSQL's default (``EXTENDED``) tries
        on every write and read. SQLite has no such setting.
        """
        if self.name != "postgres":
            return ""
        return "".join(
            f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE EXTERNAL;\n"
            for column in columns
        )

    def either(self, *, sqlite: str, postgres: str) -> str:
        """``sqlite`` or ``postgres``: for a migration whose two histories differ."""
        return postgres if self.name == "postgres" else sqlite


SQLITE = Dialect(
    name="sqlite",
    serial_key="INTEGER PRIMARY KEY AUTOINCREMENT",
    bigint="INTEGER",  # every SQLite integer is up to 64 bits
    real="REAL",
    blob="BLOB",
    boolean="INTEGER",
    without_rowid=" WITHOUT ROWID",
    greatest="MAX",
    least="MIN",
    skip_locked="",  # BEGIN IMMEDIATE: one writer at a time, in every process
    # A re-scored row is read at its offset in its segment's blob, and SQLite reaches
    # that offset by walking the blob's chain of overflow pages from its start (a new
    # blob handle each search, so no page list is cached): ~34,000 page reads and
    # 43-120 ms for the ~28 rows an int8 search re-scores over 64 MB segments, ~500 and
    # about a millisecond over 128 KB ones, for 0.25% more file than 64 MB segments.
    segment_bytes=128 << 10,
)

POSTGRES = Dialect(
    name="postgres",
    serial_key="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    bigint="BIGINT",
    real="DOUBLE PRECISION",
    blob="BYTEA",
    boolean="BOOLEAN",
    without_rowid="",
    greatest="GREATEST",
    least="LEAST",
    # rows another node is claiming right now are passed over, not waited for
    skip_locked=" FOR UPDATE OF {} SKIP LOCKED",
    # ``substring`` of an out-of-line value reads only the TOAST chunks it spans, so a
    # row's offset costs nothing; a bound value is copied, which 64 MB keeps small
    segment_bytes=64 << 20,
    # int8send writes big-endian: the bytes are swapped first (PostgreSQL's bitwise
    # operators share one precedence, hence every parenthesis)
    segment_ids="string_agg(int8send("
    + " | ".join(f"((({{0}} >> {8 * k}) & 255) << {56 - 8 * k})" for k in range(8))
    + "), ''::bytea ORDER BY {1})",
    any_of="{0} = ANY(?)",  # one array parameter: a list of any length
    json_member="(({0})::json ->> '{1}')",
    # the database's collation may sort by a locale's rules; "C" compares the UTF-8
    # bytes, which is code point order
    code_point_order=' COLLATE "C"',
)
