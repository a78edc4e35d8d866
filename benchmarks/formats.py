"""Reading Office files, CSV and HTML: agentcore's ``parse_document`` against the bare parser.

Issue #40 asks for pages/s and peak RSS per format against the bare library in the same
run (target: at most 1.3x its time, at most 300 MB peak). A script of its own rather than
a mode of ``office_parsers.py``: that one compares candidate libraries per format (with
DTD probes and installed sizes), this one compares agentcore with the library it chose,
one row per format. It imports ``office_parsers``' file builders, bare extractors and
fresh-process measuring (``measure``, ``run_python``) rather than copying them.

The files, built in a temporary folder:

- docx: about 10 MB: ``--docx-pages`` pages of text (headings, paragraphs of about 100
  words, a table every 20 pages, a page break after each page) and as many
  photo-sized pictures of random pixels as bring it to ``--docx-mb`` (a Word file of
  10 MB is mostly pictures; ``--docx-pictures 0 --docx-pages 8000`` makes one of text);
- pptx: ``--slides`` slides (title, five bullets, notes, a table every 10th);
- xlsx: one sheet of ``--rows`` rows x 8 columns (XlsxWriter, shared strings);
- csv: the same ``--rows`` rows x 8 columns;
- html: a page of ``--html-mb`` MB (nav, script and style blocks among the sections).

Each side reads the same file in a fresh Python process: the bare library extracts all
its text as ``office_parsers.py`` does (python-docx, python-pptx, python-calamine, the
standard library's ``csv``, selectolax), and agentcore calls ``parse_document`` with the
limits ``IngestPipeline`` passes from ``Settings()`` defaults (size, pages, text budget,
work budget; the zip guard and the sheet-grid measurement run inside it). Imports happen
before the baseline: the peak RSS shown is what parsing added above it (VmHWM). The
median of ``--runs`` runs is shown; the two sides alternate which goes first. A format
whose ratio is over 1.3x is run once more under cProfile in a fresh process, and the
top functions by own time are printed.

Run: ``nice python benchmarks/formats.py [--runs 3] [--formats docx,pptx,xlsx,csv,html]
[--docx-mb 10] [--docx-pages 1000] [--slides 100] [--rows 50000] [--html-mb 2]
[--keep DIR] [--json PATH]``. The libraries come from the ``office`` and ``bench`` extras.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import datetime
import io
import json
import os
import pstats
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import office_parsers as op

MB = op.MB
TARGET_RATIO = 1.3
TARGETS = ("docx", "pptx", "xlsx")  # the files the issue names; csv and html shown beside
TARGET_PEAK_MB = 300.0
FORMATS = ("docx", "pptx", "xlsx", "csv", "html")
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# ---------------------------------------------------------------------------------------
# The files (docx, pptx, xlsx and html from office_parsers)


def build_csv(path: Path, rows: int) -> dict[str, int]:
    """``rows`` rows of the columns ``office_parsers.build_xlsx`` writes, as CSV."""
    rng, mark = random.Random(3), op.Markers()
    names = [f"{a} {b}".title() for a, b in zip(op.WORDS, reversed(op.WORDS), strict=True)]
    categories = op.WORDS[20:40]
    start = datetime.date(2020, 1, 1)
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(
            ["id", "sku", "name", "category", "amount", "date", "quantity", "description"]
        )
        for i in range(rows):
            description = op.sentence(rng, rng.randint(3, 8))
            if i % 1000 == 999 or i == rows - 1:
                description += f" {mark('row')}"
            writer.writerow(
                [
                    i + 1,
                    f"SKU-{i:07d}",
                    rng.choice(names),
                    rng.choice(categories),
                    round(rng.uniform(1, 5000), 2),
                    (start + datetime.timedelta(days=rng.randrange(2000))).isoformat(),
                    rng.randint(1, 500),
                    description,
                ]
            )
    return mark.counts


# about 1.2 KB zipped per page of text, 0.79 MB per 512 x 512 picture of random pixels
DOCX_PAGE_BYTES = 1_200
DOCX_PICTURE_BYTES = 3 * 512 * 512 + 1_000


def docx_pictures(megabytes: float, pages: int) -> int:
    return max(0, round((megabytes * MB - pages * DOCX_PAGE_BYTES) / DOCX_PICTURE_BYTES))


# ---------------------------------------------------------------------------------------
# The two sides (each runs in its own process)


def csv_bare(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as file:
        return "\n".join("\t".join(row) for row in csv.reader(file))


BARE: dict[str, tuple[str, Callable[[Path], str], tuple[str, ...]]] = {
    "docx": ("python-docx", op.docx_python_docx, ("docx",)),
    "pptx": ("python-pptx", op.pptx_python_pptx, ("pptx",)),
    "xlsx": ("python-calamine", op.xlsx_calamine, ("python_calamine",)),
    "csv": ("stdlib csv", csv_bare, ("csv",)),
    "html": ("selectolax (lexbor)", op.html_selectolax, ("selectolax.lexbor",)),
}
# agentcore's modules for each format, imported before the baseline as the bare side's are
AGENTCORE_MODULES: dict[str, tuple[str, ...]] = {
    "docx": ("docx", "agentcore.knowledge.ingest._office"),
    "pptx": ("pptx", "agentcore.knowledge.ingest._office"),
    "xlsx": ("python_calamine", "agentcore.knowledge.ingest._office"),
    "csv": ("agentcore.knowledge.ingest._tables",),
    "html": ("selectolax.lexbor", "agentcore.knowledge.ingest._markup"),
}


def agentcore_reader(pages_seen: list[int]) -> Callable[[Path], str]:
    """``parse_document`` with ``IngestPipeline``'s limits from ``Settings()`` defaults
    (built here, before the baseline); appends the page count to ``pages_seen``."""
    from agentcore.config import Settings
    from agentcore.knowledge.ingest._pipeline import parse_with_limits

    settings = Settings()

    def read(path: Path) -> str:
        data = path.read_bytes()
        parsed = parse_with_limits(settings, data, path.name, None)
        pages_seen.append(len(parsed.pages))
        return "\n".join(parsed.pages)

    return read


def child(side: str, fmt: str, path: Path, profile: bool) -> None:
    """Read ``path`` with one side in this (fresh) process; print a JSON line."""
    pages: list[int] = []
    if side == "bare":
        _, extract, modules = BARE[fmt]
    else:
        extract = agentcore_reader(pages)
        modules = ("agentcore.knowledge.ingest._parsing", *AGENTCORE_MODULES[fmt])
    stats = io.StringIO()
    if profile:
        plain = extract

        def extract(path: Path) -> str:
            profiler = cProfile.Profile()
            text = profiler.runcall(plain, path)
            pstats.Stats(profiler, stream=stats).sort_stats("tottime").print_stats(15)
            return str(text)

    result = op.measure(extract, modules, path)
    if pages:
        result["pages"] = pages[0]
    if profile:
        result["profile"] = stats.getvalue()
    print(json.dumps(result))


def run_side(side: str, fmt: str, path: Path, profile: bool = False) -> dict[str, Any]:
    command = [__file__, "--child", side, fmt, str(path)] + (["--profile"] if profile else [])
    return op.run_python(command)


def profile_lines(text: str, top: int = 12) -> list[str]:
    """The table rows of a ``pstats`` printout, paths shortened to the package."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    out = []
    for line in lines[start : start + top + 1]:
        line = re.sub(r"\S*(?:site-packages|python3\.\d+)/", "", line)
        out.append(line.replace(str(REPO) + "/", "").rstrip())
    return out


# ---------------------------------------------------------------------------------------
# The report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is shown")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--docx-mb", type=float, default=10.0, help="docx size, with pictures")
    parser.add_argument("--docx-pages", type=int, default=1000, help="docx pages of text")
    parser.add_argument("--docx-pictures", type=int, help="default: as many as reach --docx-mb")
    parser.add_argument("--slides", type=int, default=100)
    parser.add_argument("--rows", type=int, default=50_000, help="xlsx and csv rows")
    parser.add_argument("--html-mb", type=float, default=2.0)
    parser.add_argument("--keep", type=Path, help="build the files here and keep them")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        side, fmt, path = args.child
        child(side, fmt, Path(path), args.profile)
        return 0

    formats = [f for f in args.formats.split(",") if f]
    if unknown := set(formats) - set(FORMATS):
        parser.error(f"unknown formats: {', '.join(sorted(unknown))}")
    pictures = (
        args.docx_pictures
        if args.docx_pictures is not None
        else docx_pictures(args.docx_mb, args.docx_pages)
    )
    builders: dict[str, Callable[[Path], dict[str, int]]] = {
        "docx": lambda p: op.build_docx(p, args.docx_pages, page_breaks=True, pictures=pictures),
        "pptx": lambda p: op.build_pptx(p, args.slides),
        "xlsx": lambda p: op.build_xlsx(p, args.rows),
        "csv": lambda p: build_csv(p, args.rows),
        "html": lambda p: op.build_html(p, int(args.html_mb * 1_000_000)),
    }
    with tempfile.TemporaryDirectory(prefix="formats-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        files, expected = {}, {}
        for fmt in formats:
            files[fmt] = folder / f"sample.{fmt}"
            expected[fmt] = builders[fmt](files[fmt])

        load_before = os.getloadavg()
        started = time.perf_counter()
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for number in range(args.runs):
            for fmt in formats:
                sides = ("bare", "agentcore") if number % 2 == 0 else ("agentcore", "bare")
                for side in sides:
                    results.setdefault((fmt, side), []).append(run_side(side, fmt, files[fmt]))

        rows: list[dict[str, Any]] = []
        for fmt in formats:
            row: dict[str, Any] = {
                "format": fmt,
                "library": BARE[fmt][0],
                "file_mb": files[fmt].stat().st_size / MB,
                "markers": expected[fmt],
            }
            for side in ("bare", "agentcore"):
                runs = results[(fmt, side)]
                good = [r for r in runs if "error" not in r]
                if not good:
                    row[f"{side}_error"] = runs[0]["error"]
                    continue
                for key in ("wall_ms", "cpu_ms", "peak_mb"):
                    row[f"{side}_{key}"] = statistics.median(r[key] for r in good)
                row[f"{side}_chars"] = good[0]["chars"]
                row[f"{side}_found"] = op.found_text(good[0], expected[fmt])
                if side == "agentcore":
                    row["pages"] = good[0].get("pages", 0)
            if "bare_wall_ms" in row and "agentcore_wall_ms" in row:
                row["ratio"] = row["agentcore_wall_ms"] / row["bare_wall_ms"]
                row["pages_per_s"] = row["pages"] / (row["agentcore_wall_ms"] / 1000)
                row["met"] = row["ratio"] <= TARGET_RATIO and (
                    row["agentcore_peak_mb"] <= TARGET_PEAK_MB
                )
            rows.append(row)
        for row in rows:
            if row["format"] in TARGETS and row.get("ratio", 0) > TARGET_RATIO:
                profiled = run_side("agentcore", row["format"], files[row["format"]], profile=True)
                row["profile"] = profile_lines(profiled.get("profile", profiled.get("error", "")))
        load_after = os.getloadavg()
        elapsed = time.perf_counter() - started

    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, median of {args.runs} runs, "
        f"each a fresh process; load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after; {elapsed:.0f} s\n"
    )
    print(
        "| format | file MB | pages | bare ms | agentcore ms | ratio (agentcore/bare) | pages/s "
        "| bare peak MB | agentcore peak MB | target met (≤1.3×, ≤300 MB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        name = f"{row['format']} ({row['library']})"
        if "ratio" not in row:
            error = row.get("bare_error") or row.get("agentcore_error")
            print(f"| {name} | {row['file_mb']:.1f} | failed: {error} |||||||")
            continue
        met = "yes" if row["met"] else "**no**"
        if row["format"] not in TARGETS:
            met = "(not a target)"
        print(
            f"| {name} | {row['file_mb']:.1f} | {row['pages']:,} | {row['bare_wall_ms']:,.0f} "
            f"| {row['agentcore_wall_ms']:,.0f} | {row['ratio']:.2f}× | {row['pages_per_s']:,.1f} "
            f"| {row['bare_peak_mb']:,.0f} | {row['agentcore_peak_mb']:,.0f} | {met} |"
        )
    print()
    for row in rows:
        for side in ("bare", "agentcore"):
            found = row.get(f"{side}_found", "all")
            if found != "all":
                print(f"{row['format']}, {side}: marker words missing or kept: {found}")
    for row in rows:
        if "profile" in row:
            print(f"\n{row['format']}: agentcore under cProfile, top functions by own time\n")
            print("\n".join(row["profile"]))
    if args.json is not None:
        report = {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "runs": args.runs,
            "load_average": [load_before[0], load_after[0]],
            "rows": rows,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
