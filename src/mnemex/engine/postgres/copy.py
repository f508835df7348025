"""Every row of a PostgreSQL store as records (see :mod:`mnemex.engine.copy`), with what
differs here.

- Ids are ordered by their code points (``COLLATE "C"``), as Python and SQLite
  order them, whatever the database's collation; long reads stream from a
  server-side cursor.
- Vectors are read and written in pgvector's binary form (float32, big-endian;
  written by ``COPY``); a record holds them at float16 precision, as every record
  does, so a copy from PostgreSQL rounds them to it; a model new to the
  store gets its HNSW index once the copy is done (:meth:`PgCopyTables.finish`),
  built once rather than grown a vector at a time.
- Memories go through :func:`mnemex.engine.postgres.write.insert_rows` (chunks of
  workspace files marked ``file_chunk``): one statement per batch, the BM25
  postings and statistics kept by its statement triggers. A memory whose text
  another memory of its namespace holds is not inserted (the schema keeps one
  memory per text): it is returned with the id that holds the text.
- Relations are inserted in one statement per batch, with their index terms.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mnemex.engine.copy import STREAM_BATCH, Conn, CopyTables, MemoryRecord, VectorRecord
from mnemex.engine.postgres.tokens import document_lex
from mnemex.engine.postgres.vectors import create_index, ensure_model
from mnemex.engine.postgres.workspaces import tables
from mnemex.engine.postgres.write import insert_rows, pg_row
from mnemex.errors import InvalidInput
from mnemex.storage.blobs import STORED
from mnemex.text import parse_stored_time

if TYPE_CHECKING:
    from mnemex.engine.copy import RowInserter

_RELATIONS = """INSERT INTO relations (id, namespace, subject, predicate, object, subject_key,
        object_key, confidence, source_memory, created_at, updated_at, lex, lex_len)
    SELECT r.id, r.namespace, r.subject, r.predicate, r.object, r.subject_key, r.object_key,
        r.confidence, r.source_memory, r.created_at, r.updated_at, r.lex::tsvector, r.lex_len
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                %s::text[], %s::float8[], %s::text[], %s::timestamptz[], %s::timestamptz[],
                %s::text[], %s::integer[]) WITH ORDINALITY
        AS r (id, namespace, subject, predicate, object, subject_key, object_key, confidence,
              source_memory, created_at, updated_at, lex, lex_len, n)
    ORDER BY r.n
    ON CONFLICT DO NOTHING
    RETURNING id"""
# In pgvector's binary form (dimension, a reserved int16, big-endian float32s): a
# row's vector passes through as bytes (written with bytea's dumper: length, payload).
_COPY_VECTORS = """COPY embeddings (seq, namespace, model, content_hash, window_no, vector)
    FROM STDIN (FORMAT BINARY)"""


class PgCopyTables(CopyTables):
    """Records of a PostgreSQL store, read and written."""

    by_id = 'm.id COLLATE "C"'
    engine = "PostgreSQL"
    max_dim = 2_000  # pgvector's limit for an indexed vector

    def vector_models(self, conn: Conn) -> dict[str, int]:
        rows = conn.execute("SELECT model, dim FROM vector_models").fetchall()
        return {str(m): int(d) for m, d in rows}

    def vectors_of(self, conn: Conn, seqs: Sequence[int]) -> dict[int, list[VectorRecord]]:
        found: dict[int, list[VectorRecord]] = {}
        with conn.cursor(binary=True) as cursor:
            rows = cursor.execute(
                "SELECT e.seq, e.model, e.window_no, v.dim, e.content_hash, e.vector "
                "FROM embeddings AS e JOIN vector_models AS v ON v.model = e.model "
                "WHERE e.seq = ANY(%s)",
                (list(seqs),),
            ).fetchall()
        for seq, model, window, dim, digest, vector in rows:
            values = np.frombuffer(vector, dtype=">f4", offset=4).astype(STORED)
            found.setdefault(int(seq), []).append(
                VectorRecord(model, int(window), int(dim), digest, values.tobytes())
            )
        return {seq: sorted(v, key=lambda r: (r.model, r.window)) for seq, v in found.items()}

    def many(self, conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(self.sql(sql), rows)

    def stream(self, conn: Conn, sql: str) -> Iterator[list[Any]]:
        """The rows of ``sql`` from a server-side cursor (call it inside a transaction)."""
        with conn.cursor(name=f"mnemex_{uuid.uuid4().hex[:12]}") as cursor:
            cursor.execute(sql.encode())
            while rows := cursor.fetchmany(STREAM_BATCH):
                yield rows

    def write_memories(
        self,
        session: RowInserter,
        conn: Conn,
        rows: list[tuple[Any, ...]],
        records: Sequence[MemoryRecord],
    ) -> dict[str, str]:
        written = insert_rows(
            conn,
            [pg_row(r, file_chunk=m.place is not None) for r, m in zip(rows, records, strict=True)],
        )
        kept = [(w.seq, m) for w, m in zip(written, records, strict=True) if w.inserted]
        seqs, stored = [seq for seq, _ in kept], [m for _, m in kept]
        self.write_places(conn, seqs, stored)
        self.write_vectors(conn, seqs, stored)
        return {m.id: w.id for w, m in zip(written, records, strict=True) if not w.inserted}

    def write_vectors(
        self, conn: Conn, seqs: Sequence[int], records: Sequence[MemoryRecord]
    ) -> None:
        by_model: dict[tuple[str, int], list[tuple[int, VectorRecord]]] = {}
        for seq, m in zip(seqs, records, strict=True):
            for v in m.vectors:
                by_model.setdefault((v.model, v.dim), []).append((seq, v))
        namespaces = {seq: m.namespace for seq, m in zip(seqs, records, strict=True)}
        for (model, dim), items in sorted(by_model.items()):
            ensure_model(conn, model, dim, index=False)
            head = struct.pack(">hh", dim, 0)
            with conn.cursor() as cursor, cursor.copy(_COPY_VECTORS) as copy:
                copy.set_types(["int8", "text", "text", "text", "int4", "bytea"])
                for seq, v in items:
                    if len(v.vector) != 2 * dim:
                        raise InvalidInput(f"a vector of {model} is not {dim}-dimensional")
                    values = np.frombuffer(v.vector, dtype=STORED)
                    if not np.isfinite(values).all():
                        raise InvalidInput("a vector holds NaN or infinite values")
                    vector = head + values.astype(">f4").tobytes()
                    copy.write_row((seq, namespaces[seq], model, v.content_hash, v.window, vector))

    def write_relations(self, conn: Conn, rows: Sequence[tuple[Any, ...]]) -> set[str]:
        if not rows:
            return set()
        lex = document_lex([(r[2], r[3].replace("_", " "), r[4]) for r in rows])
        columns: list[list[Any]] = [[r[i] for r in rows] for i in range(9)]
        columns += [
            [parse_stored_time(r[9]) for r in rows],
            [parse_stored_time(r[10]) for r in rows],
            [literal for literal, _ in lex],
            [length for _, length in lex],
        ]
        written = {str(r[0]) for r in conn.execute(_RELATIONS.encode(), columns).fetchall()}
        return {str(row[0]) for row in rows} - written

    def finish(self, conn: Conn) -> None:
        """Build the HNSW index of each model that lacks one, and refresh the planner's
        statistics of the tables a copy filled."""
        for model, dim in self.vector_models(conn).items():
            create_index(conn, model, dim)
        conn.execute("ANALYZE memories, postings, term_stats, embeddings, relations")


POSTGRES: PgCopyTables | None = None


def copy_tables() -> PgCopyTables:
    """The one :class:`PgCopyTables` (made on first use: it imports psycopg)."""
    global POSTGRES
    if POSTGRES is None:
        POSTGRES = PgCopyTables(tables())
    return POSTGRES
