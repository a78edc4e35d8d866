"""Storage: the ``Store`` protocol, and one SQL store for SQLite and PostgreSQL."""
