"""``/v1/mcp``: the Model Context Protocol endpoint (``endpoint``), its tools (``tools``,
which import the MCP SDK, loaded on the first MCP request) and its OpenAPI
declaration (``openapi``)."""

__all__: list[str] = []  # its modules: endpoint, tools, openapi
