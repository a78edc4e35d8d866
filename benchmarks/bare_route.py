"""The framework floor: a bare Starlette route under ``agentcore serve``'s uvicorn settings.

One ``POST`` route (by default at the search path, so a benchmark's clients need no
change) whose handler reads the body, decodes it with ``json.loads`` and answers a
fixed JSON body (a real answer saved to a file, so the bytes on the wire match the
API's). No auth, no validation, no search: what any Starlette app under the same
uvicorn settings (protocol, event loop, concurrency cap, keep-alive, access log) costs
per request. ``benchmarks/http_overhead.py`` subtracts it from the API's HTTP overhead.

Run: ``python benchmarks/bare_route.py --port 8001 --answer answer.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentcore.config import Settings
from agentcore_starlette.serve import server_options


def bare_app(answer: bytes, path: str) -> Starlette:
    """A Starlette app with one trivial JSON ``POST`` route at ``path``."""

    async def handler(request: Request) -> Response:
        json.loads(await request.body())
        return Response(answer, media_type="application/json")

    return Starlette(routes=[Route(path, handler, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answer", type=Path, required=True, help="the JSON body to answer")
    parser.add_argument("--path", default="/v1/knowledge/search")
    args = parser.parse_args()
    app = bare_app(args.answer.read_bytes(), args.path)
    uvicorn.run(app, host="127.0.0.1", port=args.port, **server_options(Settings()))


if __name__ == "__main__":
    main()
