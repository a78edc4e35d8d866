"""Every upload format over a real ``agentcore serve`` process, on SQLite and PostgreSQL.

Word, PowerPoint, Excel, CSV and HTML files made in the test are uploaded to a served
core: each becomes the pages its format says (slides, sheets, page breaks), a chunk
from deep in a table still names its columns, a page's scripts are never indexed, and a
chat answer cites the slide it quotes. The three Office bombs (a 2 MB file unpacking to
1.6 GB, a billion-laughs document, and a 400 KB workbook whose 200,000 cells show one
50 KB shared string) are refused with a problem, nothing of them is stored, the
server's memory barely moves, and another organization is answered all the while. How fast each format is read, benchmarks/office_parsers.py measures.
"""

from __future__ import annotations

import csv
import io
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import cli_env, ready, start_serve
from office_files import (
    PAGE,
    SLIDES,
    make_docx,
    make_laughs_docx,
    make_pptx,
    make_shared_strings_bomb,
    make_xlsx,
    make_zip_bomb,
)
from probes import VerifyProbe
from processes import reap

from agentcore import AgentCore

pytestmark = [pytest.mark.both_stores, pytest.mark.timeout(900)]

DOCS = "/v1/knowledge/documents"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
MiB = 1024 * 1024

HANDBOOK = [
    ("h1", "Expenses"),
    "Meals on a business trip are refunded up to thirty euros a day.",
    PAGE,
    ("h1", "Travel"),
    "Trains are booked in second class unless the journey is longer than four hours.",
    [["Item", "Nightly limit"], ["Hotel in Lisbon", "140 euros"], ["Hotel in Porto", "110 euros"]],
]
PAGE_HTML = """<!doctype html><html><head><title>Returns policy</title>
<style>.hidden { display: none }</style>
<script>var tracking = "zqxscriptmarker";</script></head>
<body><nav>Home | Shop | zqxnavmarker</nav>
<main><h1>Returns</h1><p>Unworn shoes may be returned within forty&#8209;five days &amp;
refunded in full.</p><template><p>zqxtemplatemarker</p></template></main>
<footer>Copyright zqxfootermarker</footer></body></html>"""


def keys(store: str, *organizations: str) -> list[str]:
    """A read+write test key of each organization, made before the server starts."""
    with AgentCore.open(store) as core:
        return [
            core.keys.create(core.create_organization(name).name, "test", ["read", "write"]).secret
            for name in organizations
        ]


def client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300)


def refused(http: httpx.Client, response: httpx.Response) -> dict[str, Any]:
    """The problem an upload was refused with: at once, or as its job's ``last_error``."""
    if response.status_code == 202:  # queued: it fails at the same limit as a job
        give_up, body = time.monotonic() + 600, response.json()
        while body["status"] == "processing" and time.monotonic() < give_up:
            time.sleep(0.1)
            body = http.get(f"{DOCS}/{body['id']}").json()
        assert body["status"] == "failed", body
        return dict(body["last_error"])
    assert response.status_code in (413, 422), response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return dict(response.json())


def upload(http: httpx.Client, name: str, data: bytes, content_type: str) -> httpx.Response:
    return http.post(DOCS, files={"file": (name, data, content_type)})


def search(http: httpx.Client, query: str, **extra: Any) -> list[dict[str, Any]]:
    response = http.post("/v1/knowledge/search", json={"query": query, **extra})
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


def table_rows(header: list[str], count: int) -> list[list[str]]:
    rows = [header] + [
        [f"Manager {n}", f"Depot {n}", f"{n * 7 % 997} pallets"] for n in range(1, count)
    ]
    rows[count - 100] = ["Beatriz Fonseca", "Harbour depot in Aveiro", "12 pallets"]
    return rows


def memory_kib(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (the peak) of process ``pid``, in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


def test_every_format_is_read_cited_and_bounded_over_a_served_core(store_url: str) -> None:
    owner, bystander = keys(store_url, "acme", "globex")
    env = {**cli_env(), "AGENTCORE_RATE_LIMIT_TEST": "1000000"}
    process, url = start_serve(store_url, owner, env=env)  # type: ignore[arg-type]
    try:
        with client(url, owner) as http:
            header = ["Manager", "Warehouse", "Stock"]
            # 15,000 rows: a sheet part of more than 1 MiB, which the zip guard inflates on
            # a thread of its own (in the ingestion worker, under its memory limit)
            sheet = make_xlsx(
                {"Cover": [["Sites of 2026"]], "Warehouses": table_rows(header, 15_000)}
            )
            with zipfile.ZipFile(io.BytesIO(sheet)) as archive:
                sizes = [member.file_size for member in archive.infolist()]
                assert max(sizes) > MiB
            text = io.StringIO()
            csv.writer(text).writerows(table_rows(["Driver", "Route", "Load"], 3000))
            files = {
                "review.pptx": (make_pptx(SLIDES), PPTX, 3),
                "handbook.docx": (make_docx(HANDBOOK), DOCX, 2),
                "sites.xlsx": (sheet, XLSX, 2),
                "routes.csv": (text.getvalue().encode(), "text/csv", 1),
                "returns.html": (PAGE_HTML.encode(), "text/html", 1),
            }
            for name, (data, content_type, pages) in files.items():
                document = ready(http, upload(http, name, data, content_type))
                assert (document["content_type"], document["pages"]) == (content_type, pages)

            # the slide, the sheet and the heading a result comes from, with its page
            (slide,) = search(http, "When is the emergency generator tested?", top_k=1)
            assert (slide["source"], slide["pages"], slide["location"]) == (
                "review.pptx",
                [3],
                "Slide 3",
            )
            assert "Notes:" in slide["chunk"]  # speaker notes are read, and marked
            (row,) = search(http, "Beatriz Fonseca Harbour depot Aveiro", top_k=1, mode="keyword")
            assert (row["source"], row["pages"], row["location"]) == (
                "sites.xlsx",
                [2],
                "Sheet Warehouses",
            )
            # row 14,900 of 15,000 still says what its columns are
            assert "Manager: Beatriz Fonseca" in row["chunk"]
            assert "Warehouse: Harbour depot in Aveiro" in row["chunk"]
            travel = search(http, "Are trains booked in second class?", top_k=1)[0]
            assert (travel["source"], travel["pages"], travel["location"]) == (
                "handbook.docx",
                [2],
                "Travel",
            )
            hotel = search(http, "nightly limit hotel in Porto", top_k=1, mode="keyword")[0]
            assert "Item: Hotel in Porto" in hotel["chunk"] and "110 euros" in hotel["chunk"]
            csv_rows = [
                result
                for result in search(http, "Beatriz Fonseca", top_k=5, mode="keyword")
                if result["source"] == "routes.csv"
            ]
            assert csv_rows and "Driver: Beatriz Fonseca" in csv_rows[0]["chunk"]
            returns = search(http, "How long can unworn shoes be returned?", top_k=1)[0]
            assert returns["source"] == "returns.html"
            assert "forty\u2011five days & refunded" in returns["chunk"]  # entities decoded
            for marker in ("script", "nav", "template", "footer"):
                found = search(http, f"zqx{marker}marker", mode="keyword")
                assert all(f"zqx{marker}marker" not in r["chunk"] for r in found), marker

            # a chat answer cites the slide it quotes
            agent = http.post("/v1/agents", json={"name": "Ops", "role": "support"}).json()
            assert http.post(f"/v1/agents/{agent['id']}/deploy").status_code == 200
            answer = http.post(
                "/v1/chat/message",
                json={"agentId": agent["id"], "message": "When is the emergency generator tested?"},
            )
            assert answer.status_code == 200, answer.text
            assert {
                "source": "review.pptx",
                "pages": [3],
                "location": "Slide 3",
            } in [
                {k: c[k] for k in ("source", "pages", "location")}
                for c in answer.json()["citations"]
            ]

            # an image is not a document: 415 naming what is
            png = upload(http, "logo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png")
            assert png.status_code == 415, png.text
            assert png.json()["code"] == "unsupported_file_type"
            assert ".docx" in png.json()["detail"] and ".xlsx" in png.json()["detail"]

            # the three bombs: refused, nothing stored, memory flat, a bystander answered
            before = memory_kib(process.pid, "VmRSS")
            with VerifyProbe(url, bystander) as probe:
                bomb = make_zip_bomb(1600 * MiB)
                assert len(bomb) < 3 * MiB
                problem = refused(http, upload(http, "bomb.docx", bomb, DOCX))
                assert (problem["code"], problem["param"]) == ("too_large", "file")
                laughs = refused(http, upload(http, "laughs.docx", make_laughs_docx(), DOCX))
                assert laughs["param"] == "file" and laughs["code"] in ("invalid_file", "too_large")
                copies = make_shared_strings_bomb()  # 10 GB once calamine copies the string
                problem = refused(http, upload(http, "copies.xlsx", copies, XLSX))
                assert (problem["code"], problem["param"]) == ("too_large", "file")
                assert "shared string" in problem["detail"]
                time.sleep(0.2)  # the probe calls every 50 ms: at least one after the bombs
            assert not probe.failures, probe.failures[:5]
            assert probe.answered
            grown_mib = (memory_kib(process.pid, "VmHWM") - before) / 1024
            assert grown_mib <= 200, f"the server's peak grew by {grown_mib:.0f} MiB"
            listed = http.get(DOCS, params={"limit": 100}).json()["documents"]
            assert sorted(d["source"] for d in listed) == sorted(files)
        with client(url, bystander) as other:  # the bystander's workspace holds nothing
            assert other.get(DOCS).json()["documents"] == []
    finally:
        reap(process)
