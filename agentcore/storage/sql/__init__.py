"""One SQL store for both databases: statements written once over a small ``Dialect``."""
