"""One SQL store for both databases: statements written once over a small ``Dialect``."""

__all__: list[str] = []  # its modules: store, dialect, and one per family of tables
