"""One-step dispatch of the API's own operations: the request path's hot end.

Starlette's router tries each route's regular expression in turn, and each route wraps
the endpoint in two more ASGI layers (``request_response``, its exception wrapper),
each wrapping ``send`` again; under uvicorn that costs about as much as the rest of a
small request. ``RouteTable.match`` finds the operation of a request in one dictionary
lookup (a path without parameters) or one expression per parameterised path, so
``ProblemMiddleware`` calls the endpoint directly. Whatever it does not match
(unknown paths, a method the path does not allow, ``/openapi.json``, trailing
slashes) goes to Starlette's router as before, so 404s, 405s with ``Allow`` and
redirects are Starlette's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.types import Scope

Endpoint = Callable[[Request], Any]
"""An endpoint: a coroutine function, the request in, a Starlette ``Response`` out."""

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def path_pattern(path: str) -> re.Pattern[str]:
    """The expression matching a route path whose ``{name}`` parts are single segments
    (Starlette's default ``str`` parameters: one or more characters other than ``/``)."""
    parts: list[str] = []
    last = 0
    for found in _PARAM.finditer(path):
        parts.append(re.escape(path[last : found.start()]))
        parts.append(f"(?P<{found.group(1)}>[^/]+)")
        last = found.end()
    parts.append(re.escape(path[last:]))
    return re.compile("".join(parts))


def route_path(scope: Scope) -> str:
    """The request's path below the app's mount point (``root_path``), as Starlette
    routes it: a host that mounts the app at ``/api`` hands it ``/api/v1/...``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path != root and path[len(root)] == "/":
        return path[len(root) :]
    return path


class RouteTable:
    """The API's operations by path and method, matched without Starlette's router.

    :param by_path: endpoints by full path (``{name}`` for a parameter) and method.
        A path with ``GET`` answers ``HEAD`` with the same endpoint, as its Starlette
        route does.
    """

    def __init__(self, by_path: Mapping[str, Mapping[str, Endpoint]]) -> None:
        self.static: dict[str, dict[str, Endpoint]] = {}
        self.patterns: list[tuple[re.Pattern[str], dict[str, Endpoint]]] = []
        for path, handlers in by_path.items():
            methods = dict(handlers)
            if "GET" in methods:
                methods.setdefault("HEAD", methods["GET"])
            if _PARAM.search(path):
                self.patterns.append((path_pattern(path), methods))
            else:
                self.static[path] = methods

    def match(self, scope: Scope) -> tuple[Endpoint, dict[str, str]] | None:
        """The endpoint for the request and its path parameters; ``None`` when the
        path is not one of the table's or the method is not among the path's."""
        path = route_path(scope)
        methods = self.static.get(path)
        params: dict[str, str] = {}
        if methods is None:
            for pattern, candidates in self.patterns:
                found = pattern.fullmatch(path)
                if found is not None:
                    methods, params = candidates, found.groupdict()
                    break
            else:
                return None
        endpoint = methods.get(scope["method"])
        return None if endpoint is None else (endpoint, params)
