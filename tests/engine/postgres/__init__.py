"""Tests of what only the PostgreSQL engine has (its schema, BM25 equal to SQLite's, the
store over a URL, writers in several processes), against a real server
(tests/pg_fixtures.py); what holds on both engines is the shared suite, marked
``both_engines``."""
