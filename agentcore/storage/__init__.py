"""Storage backends: the ``Store`` protocol and the embedded SQLite store."""
