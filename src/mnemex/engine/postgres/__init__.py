"""The PostgreSQL engine: PostgreSQL 16 with pgvector, for stores that many machines share.

The groundwork of the PostgreSQL session behind the storage seam: what the
engine does on its own, with a small public surface the session will call.

- :func:`connect` (and :func:`pool`): autocommit psycopg 3 connections;
  psycopg is imported only here (``pip install 'mnemex[postgres]'``, else
  :class:`mnemex.errors.MissingExtra`).
- :func:`migrate`: the schema, brought up to date once under an advisory lock
  (:mod:`.schema`).
- :func:`insert_rows`: memories in bulk, one statement, duplicates of an id
  or of a text in its namespace resolved to the row already there
  (:mod:`.write`); :func:`insert_vectors` for their vectors.
- :func:`lexical` ``(conn, query_terms, namespace, limit)``: BM25 with each
  namespace's own statistics, the terms being FTS5's own (:mod:`.tokens`),
  so scores and ranks match the SQLite engine's (:mod:`.bm25`);
  :func:`check` proves the statistics and postings equal a rebuild.
- :func:`vector` ``(conn, qvec, namespace, model, limit)``: cosine nearest
  neighbours, by HNSW or exactly (:mod:`.vectors`).
- :func:`start_server` (:mod:`.server`): a throwaway local server from the
  ``pgserver`` package, for tests and benchmarks.
"""

from mnemex.engine.postgres.bm25 import check, lexical, plan, search
from mnemex.engine.postgres.connect import connect, pool
from mnemex.engine.postgres.schema import LATEST, migrate, schema_version
from mnemex.engine.postgres.server import LocalServer
from mnemex.engine.postgres.server import start as start_server
from mnemex.engine.postgres.vectors import VectorHit, insert_vectors, vector
from mnemex.engine.postgres.write import Row, Written, insert_rows

__all__ = [
    "LATEST",
    "LocalServer",
    "Row",
    "VectorHit",
    "Written",
    "check",
    "connect",
    "insert_rows",
    "insert_vectors",
    "lexical",
    "migrate",
    "plan",
    "pool",
    "schema_version",
    "search",
    "start_server",
    "vector",
]
