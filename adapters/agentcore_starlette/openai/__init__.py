"""The OpenAI-compatible surface: ``/v1/chat/completions`` and ``/v1/models`` in
OpenAI's shapes (``requests``, ``responses``), and their routes (``routes``)."""

__all__: list[str] = []  # its modules: requests, responses, routes
