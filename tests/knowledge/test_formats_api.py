"""Office, CSV and HTML uploads over HTTP (uvicorn and ASGI, SQLite and PostgreSQL): search
results and chat citations name the slide, sheet or heading they come from, with its
pages, in every place citations appear; hostile files are refused before anything is
stored."""

from __future__ import annotations

import json
from typing import Any

import helpers
from helpers import assert_problem
from office_files import (
    PAGE,
    SLIDES,
    make_docx,
    make_pptx,
    make_xlsx,
    make_xlsx_of_sheet,
    make_zip_bomb,
    sheet_xml,
)

api = helpers.api  # uvicorn (with worker processes) and ASGI (inline), both stores

DOCS = "/v1/knowledge/documents"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def upload(api: Any, name: str, data: bytes, content_type: str) -> Any:
    return api.post(DOCS, files={"file": (name, data, content_type)})


def uploaded(api: Any, name: str, data: bytes, content_type: str) -> dict[str, Any]:
    response = upload(api, name, data, content_type)
    assert response.status_code == 201, response.text
    return dict(response.json())


def top_result(api: Any, query: str) -> dict[str, Any]:
    response = api.post("/v1/knowledge/search", json={"query": query})
    assert response.status_code == 200, response.text
    return dict(response.json()["results"][0])


def test_search_results_name_the_slide_sheet_and_heading_they_come_from(api: Any) -> None:
    deck = uploaded(api, "review.pptx", make_pptx(SLIDES), PPTX)
    assert (deck["content_type"], deck["pages"]) == (PPTX, 3)
    rows = [["Manager", "Warehouse", "City"]] + [
        [f"Manager {n}", f"Depot {n}", "Coimbra"] for n in range(1, 200)
    ]
    rows[150] = ["Beatriz Fonseca", "Harbour depot", "Aveiro"]
    sheet = uploaded(
        api, "sites.xlsx", make_xlsx({"Notes": [["Nothing here"]], "Warehouses": rows}), XLSX
    )
    assert (sheet["content_type"], sheet["pages"]) == (XLSX, 2)
    policy = make_docx(
        [
            ("h1", "Travel policy"),
            "Trips abroad need the approval of a director.",
            PAGE,
            ("h2", "Expenses"),
            "Dinners during a trip are refunded up to thirty five euros.",
        ]
    )
    word = uploaded(api, "policy.docx", policy, DOCX)
    assert (word["content_type"], word["pages"]) == (DOCX, 2)
    page = b"<!doctype html><title>Canteen</title><nav>Home</nav><h1>Menu</h1><p>Soup of the day is lentil.</p>"
    assert uploaded(api, "canteen.html", page, "text/html")["content_type"] == "text/html"
    csv = b"Room;Capacity\nOrion;12\nVega;40\n"
    assert uploaded(api, "rooms.csv", csv, "text/csv")["content_type"] == "text/csv"

    found = top_result(api, "When is the emergency generator tested?")
    assert (found["source"], found["pages"], found["location"]) == ("review.pptx", [3], "Slide 3")
    found = top_result(api, "Which manager runs the Harbour depot in Aveiro?")
    assert (found["source"], found["location"], found["pages"]) == (
        "sites.xlsx",
        "Sheet Warehouses",
        [2],
    )
    assert "Manager: Beatriz Fonseca; Warehouse: Harbour depot; City: Aveiro" in found["chunk"]
    found = top_result(api, "How much are dinners refunded on a trip?")
    assert (found["source"], found["pages"], found["location"]) == ("policy.docx", [2], "Expenses")
    found = top_result(api, "What is the soup of the day?")
    assert (found["source"], found["location"]) == ("canteen.html", "Menu")
    assert "Home" not in found["chunk"]
    found = top_result(api, "What is the capacity of the Vega room?")
    assert found["source"] == "rooms.csv" and "location" not in found  # absent, not null
    assert "Room: Vega; Capacity: 40" in found["chunk"]


def test_chat_citations_carry_the_location_everywhere_they_appear(api: Any) -> None:
    uploaded(api, "review.pptx", make_pptx(SLIDES), PPTX)
    response = api.post("/v1/agents", json={"name": "Ops", "role": "support"})
    agent = response.json()["id"]
    assert api.post(f"/v1/agents/{agent}/deploy").status_code == 200
    question = "When is the emergency generator tested?"
    cited = {"source": "review.pptx", "pages": [3], "location": "Slide 3"}

    def where(citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{key: c.get(key) for key in cited} for c in citations]

    response = api.post("/v1/chat/message", json={"agentId": agent, "message": question})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert "Tuesday" in answer["response"]
    assert where(answer["citations"]) == [cited]
    # the stored message
    messages = api.get(f"/v1/conversations/{answer['conversationId']}/messages").json()
    assert where(messages["messages"][-1]["citations"]) == [cited]
    # streamed: the completed event
    response = api.post(
        "/v1/chat/message", json={"agentId": agent, "message": question, "stream": True}
    )
    events = response.text.replace("\r\n", "\n").split("\n\n")
    (completed,) = [e for e in events if e.startswith("event: response.completed")]
    assert where(json.loads(completed.split("data: ", 1)[1])["citations"]) == [cited]
    # the OpenAI-compatible route: agentcore's citations and OpenAI's annotations
    response = api.post(
        "/v1/chat/completions",
        json={"model": agent, "messages": [{"role": "user", "content": question}]},
    )
    assert response.status_code == 200, response.text
    completion = response.json()
    assert where(completion["citations"]) == [cited]
    (annotation,) = completion["choices"][0]["message"]["annotations"]
    assert annotation["url_citation"]["title"] == "review.pptx, Slide 3, page 3"


def test_hostile_and_unknown_files_are_refused_and_nothing_is_stored(api: Any) -> None:
    response = upload(api, "bomb.docx", make_zip_bomb(), DOCX)  # 2 MB of 1.6 GB XML
    assert_problem(response, 413, "too_large", param="file")
    # two cells far apart: calamine would ask for 550 GB and abort the process
    far = sheet_xml(
        '<row r="1"><c r="A1"><v>1</v></c></row><row r="1048576"><c r="XFD1048576"><v>2</v></c></row>'
    )
    response = upload(api, "far.xlsx", make_xlsx_of_sheet(far), XLSX)
    assert_problem(response, 413, "too_large", param="file")
    response = upload(api, "pic.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "image/png")
    assert_problem(response, 415, "unsupported_file_type", param="file")
    assert "Word (.docx), PowerPoint (.pptx), Excel (.xlsx), CSV, HTML" in response.json()["detail"]
    response = upload(api, "broken.xlsx", make_xlsx({"A": [["a", "b"]]})[:-200], XLSX)
    assert_problem(response, 422, "invalid_file", param="file")
    assert api.get(DOCS).json()["documents"] == []
