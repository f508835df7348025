"""The SQLite engine: the session (:mod:`.session`) and the statements each operation
runs on it, a module per concern as in :mod:`mnemex.engine.postgres`."""
