"""Storage engines: the session each store talks to (SQLite today)."""
