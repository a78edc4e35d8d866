"""``/v1/mcp``: the Model Context Protocol endpoint (``endpoint``), its tools (``tools``,
which import the MCP SDK, loaded when the app's lifespan starts) and its OpenAPI
declaration (``openapi``)."""

__all__: list[str] = []  # its modules: endpoint, tools, openapi
