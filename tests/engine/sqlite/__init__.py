"""Tests of what only the SQLite engine has (its session, FTS5 statements and BM25, the
HNSW index); what holds on both engines is the shared suite, marked ``both_engines``."""
