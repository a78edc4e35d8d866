"""Storage: the ``Store`` protocol, and one SQL store for SQLite and PostgreSQL."""

__all__: list[str] = []  # an internal interface: its modules are named (base, records, sql, ...)
