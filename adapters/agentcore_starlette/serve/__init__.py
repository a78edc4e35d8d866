"""The server: ``agentcore serve`` (``command``), uvicorn's options for the API
(``options``), the bounded request head (``head_guard``), each client's share of the
connections (``connections``) and the access log (``access_log``).

Two names are imported from here by deployments and hosts, and stay here:
``app_from_environment`` (``uvicorn --factory agentcore_starlette.serve:app_from_environment``)
and ``server_options`` (``uvicorn.run(create_app(core), **server_options(core.settings))``).
"""

from __future__ import annotations

from agentcore_starlette.serve.command import app_from_environment, run
from agentcore_starlette.serve.options import server_options

__all__ = ["app_from_environment", "run", "server_options"]
