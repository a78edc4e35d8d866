"""A workbook's shared strings: calamine copies one into every cell that shows it, so the
text its cells hold is bounded before a sheet is read (``_sharedstrings``)."""

from __future__ import annotations

import io
import resource
import zipfile

import pytest
from office_files import (
    make_shared_strings_bomb,
    make_xlsx_of_strings,
    shared_cells_xml,
    shared_strings_xml,
    sheet_xml,
)

from agentcore.errors import AgentCoreError, PayloadTooLarge
from agentcore.knowledge.ingest import parse_document
from agentcore.knowledge.ingest._sharedstrings import SharedStrings, is_shared_strings
from agentcore.knowledge.ingest._sheetgrid import PIECE_BYTES
from agentcore.knowledge.ingest._zipguard import ArchiveLimits, verify_archive

MiB = 1024 * 1024
SST = '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{}</sst>'


def _verify(data: bytes, text_bytes: int) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        verify_archive(archive, ArchiveLimits(sheet_text_bytes=text_bytes), workbook=True)


def _copied_by_calamine(data: bytes) -> int | None:
    """The bytes of text calamine puts in the sheet's cells (``None``: it cannot read it)."""
    import python_calamine

    try:
        workbook = python_calamine.CalamineWorkbook.from_filelike(io.BytesIO(data))
        rows = workbook.get_sheet_by_index(0).to_python()
    except python_calamine.CalamineError:
        return None
    return sum(len(value.encode()) for row in rows for value in row if isinstance(value, str))


def _measured(table: bytes, chunk: int) -> SharedStrings:
    strings = SharedStrings()
    for start in range(0, len(table), chunk):
        strings.feed(table[start : start + chunk])
    strings.finish()
    return strings


def test_one_long_string_shown_by_every_cell_is_refused_before_calamine_reads_it() -> None:
    bomb = make_shared_strings_bomb()  # 400 KB; 200,000 cells x 50 KB: 10 GB in calamine
    assert len(bomb) < 500_000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with pytest.raises(AgentCoreError) as caught:
        parse_document(bomb, "bomb.xlsx", None, max_bytes=50 * MiB, max_pages=100)
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        413,
        "too_large",
        "file",
    )
    assert "shared string once for every cell" in caught.value.detail
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - peak < 200


def test_a_long_string_shown_once_is_read_where_the_quick_bound_would_refuse() -> None:
    # 2,001 cells x the longest string (20 KB) is 40 MB; what they show is about 42 KB
    strings = ["note " * 4_000] + [f"item {n}" for n in range(2_000)]
    data = make_xlsx_of_strings(shared_strings_xml(strings), shared_cells_xml(list(range(2_001))))
    copied = _copied_by_calamine(data)
    assert copied is not None and copied < 50_000
    _verify(data, 1 * MiB)  # summed string by string: read
    with pytest.raises(PayloadTooLarge):
        _verify(data, copied - 1)  # never under what calamine copies


RICH = "<si><r><t>bold </t></r><r><rPr><b/></rPr><t>and plain</t></r></si>"
CASES = {
    "plain": shared_strings_xml(["alpha", "beta gamma", "x" * 300]),
    "prefixed": shared_strings_xml(["alpha", "beta gamma", "x" * 300], prefix="x"),
    "pretty": SST.format("\n  <si>\n    <t>alpha</t>\n  </si>\n  <si><t>beta</t></si>\n").encode(),
    "rich runs": SST.format(RICH + "<si><t>second</t></si>").encode(),
    "entities": SST.format("<si><t>a &amp; b &#x10FFFF; &lt;c&gt;</t></si>").encode(),
    "spaced end tag": SST.format("<si><t>alpha</t></si ><si><t>beta</t></si >").encode(),
    "nested": SST.format("<si><t>a</t><si><t>b</t></si><t>c</t></si>" * 3).encode(),
    "cdata": SST.format("<si><t><![CDATA[</si><si>]]>long text</t></si>").encode(),
    "comment": SST.format("<si><t>a</t><!-- </si><si> --></si><si><t>b</t></si>").encode(),
    "instruction": SST.format("<si><t>a</t><?pi </si><si> ?></si><si><t>b</t></si>").encode(),
    "empty element": SST.format("<si/><si><t>after</t></si><si><t>b</t></si>").encode(),
}


@pytest.mark.parametrize("table", CASES.values(), ids=CASES.keys())
def test_the_text_measured_is_never_less_than_calamine_copies(table: bytes) -> None:
    # cells read exactly (quotes either way, a prefix) and string by string
    cells = shared_cells_xml([0, 1, 2, 1, 0, 2, 2], columns=3).replace(b'"s"', b"'s'", 1)
    cells = cells.replace(b"</row>", b'<x:c r="Z9" t="s" xmlns:x="u"><x:v>1</x:v></x:c></row>', 1)
    data = make_xlsx_of_strings(table, cells)
    copied = _copied_by_calamine(data)
    if copied is None:  # calamine refuses the table: no copies to bound
        return
    with pytest.raises(PayloadTooLarge):
        _verify(data, copied - 1)
    _verify(data, 1 * MiB)


CELLS_WRITTEN_OTHERWISE = [
    '<row><c r="A1" t = "s"><v>0</v></c></row>',  # spaces around =
    '<row><c r="A1" t="s"><v> 0 </v></c></row>',
    '<row><c r="A1" t="s"><f>A2</f><v>0</v></c></row>',
    '<row><c r="A1" t="s"><v>0<!-- -->1</v></c></row>',
]


@pytest.mark.parametrize("cells", CELLS_WRITTEN_OTHERWISE)
def test_a_cell_of_type_s_written_otherwise_counts_the_longest_string(cells: str) -> None:
    long = "y" * 1_000
    data = make_xlsx_of_strings(shared_strings_xml(["a", long, "b"]), sheet_xml(cells * 2))
    # each counted at the longest string's bound: 2 x 1,000 bytes and its tags
    with pytest.raises(PayloadTooLarge):
        _verify(data, 2_000)
    copied = _copied_by_calamine(data)
    if copied is not None:
        with pytest.raises(PayloadTooLarge):
            _verify(data, copied - 1)


@pytest.mark.parametrize("prefix", ["", "x", "spreadsheet_ml-2"])
def test_the_lengths_do_not_depend_on_where_the_part_is_cut(prefix: str) -> None:
    # larger than two of the pieces the table is read in, fed as the guard inflates it
    # and in odd sizes
    count = 8_000
    table = shared_strings_xml([f"value {n} " * (n % 7) for n in range(count)], prefix)
    assert len(table) > 2 * PIECE_BYTES
    whole = _measured(table, len(table))
    assert not whole.odd
    lengths = [whole.length(n) for n in range(count)]
    for chunk in (7, 100, 4096, 65536):
        cut = _measured(table, chunk)
        assert [cut.length(n) for n in range(count)] == lengths, chunk
    assert whole.length(count) == 0  # past the table: calamine fails the cell
    assert max(lengths) == whole.longest < len(table)


@pytest.mark.parametrize("name", ["nested", "cdata", "comment", "instruction", "empty element"])
def test_a_table_that_may_hide_a_string_bounds_each_by_the_whole_part(name: str) -> None:
    strings = _measured(CASES[name], 3)
    assert strings.odd or strings.longest == len(CASES[name])
    assert strings.longest == len(CASES[name])


def test_a_long_prefix_and_text_that_looks_like_a_tag() -> None:
    long_prefix = shared_strings_xml(["a", "b"], prefix="p" * 17)
    assert _measured(long_prefix, 64).longest == len(long_prefix)
    # ":si " in a text or a value is no tag: the table is measured as usual
    colon = SST.format('<si><t xml:space="preserve">ratio:si b</t></si><si><t>c</t></si>')
    strings = _measured(colon.encode(), 5)
    assert not strings.odd and strings.length(1) == len("</si><si><t>c</t>")


def test_calamine_reads_the_shared_strings_part_by_its_name_only() -> None:
    assert is_shared_strings("xl/sharedStrings.xml")
    assert is_shared_strings("XL/SHAREDSTRINGS.XML")
    assert is_shared_strings("xl\\sharedStrings.xml")
    assert not is_shared_strings("xl/strings.xml")


def test_a_second_part_named_as_the_table_bounds_each_string_by_both(
    recwarn: pytest.WarningsRecorder,
) -> None:
    # two members named xl/sharedStrings.xml: which one calamine reads (and so which
    # string index 0 names) is not known, so index 0 may be the long one
    short = shared_strings_xml(["a"])
    long = shared_strings_xml(["x" * 5_000]).split(b"?>", 1)[1]  # no declaration
    data = make_xlsx_of_strings(short, shared_cells_xml([0] * 300))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as copy:
        for member in source.infolist():
            copy.writestr(member, source.read(member))
        copy.writestr("xl/sharedStrings.xml", long)  # a duplicate name
    _verify(data, 100 * 1_000)  # one table: 300 cells of "a"
    with pytest.raises(PayloadTooLarge):
        _verify(out.getvalue(), 100 * 1_000)  # 300 x 5,000 bytes would pass it
